//! `/proc/<tid>/stack`: up to 64 lines `[<0>] symbol+0xoff/0xsize [module]` (`%pB`; the address is
//! printed as 0 on current kernels). Empty for a running task.

use super::{err, parse_hex, trim_ascii};
use crate::error::Result;
use crate::snapshot::StackFrame;

/// More frames than the kernel ever prints (MAX_STACK_TRACE_DEPTH = 64) means hostile input.
const MAX_FRAMES: usize = 256;

/// One frame line (`[<0>] symbol+0xoff/0xsize [module]`, the address prefix optional).
pub fn frame(line: &[u8]) -> Result<StackFrame> {
    let mut rest = trim_ascii(line);
    // `[<address>] ` prefix.
    if rest.first() == Some(&b'[') {
        let end = rest
            .iter()
            .position(|&c| c == b']')
            .ok_or_else(|| err("stack", "unterminated [<address>]"))?;
        rest = trim_ascii(&rest[end + 1..]);
    }
    // Optional ` [module]` suffix.
    let mut module = None;
    if rest.last() == Some(&b']') {
        if let Some(open) = rest.iter().rposition(|&c| c == b'[') {
            let mut m = &rest[open + 1..rest.len() - 1];
            // Kernels built with CONFIG_STACKTRACE_BUILD_ID print `[module buildid]`.
            if let Some(space) = m.iter().position(|&c| c == b' ') {
                m = &m[..space];
            }
            if m.is_empty() || !m.iter().all(|c| c.is_ascii_graphic()) {
                return Err(err("stack", "bad module name"));
            }
            module = Some(String::from_utf8_lossy(m).into_owned());
            rest = trim_ascii(&rest[..open]);
        }
    }
    if rest.is_empty() || !rest.iter().all(|c| c.is_ascii_graphic()) {
        return Err(err(
            "stack",
            format!("bad frame {:?}", String::from_utf8_lossy(line)),
        ));
    }
    // `symbol+0xoff/0xsize`; a bare symbol or address has no offset.
    let (function, offset, size) = match rest.iter().rposition(|&c| c == b'+') {
        Some(plus) if plus > 0 => {
            let tail = &rest[plus + 1..];
            let (off, size) = match tail.iter().position(|&c| c == b'/') {
                Some(slash) => (&tail[..slash], Some(&tail[slash + 1..])),
                None => (tail, None),
            };
            let offset = parse_hex("stack offset", off)?;
            let size = match size {
                Some(s) => parse_hex("stack size", s)?,
                None => 0,
            };
            (&rest[..plus], offset, size)
        }
        _ => (rest, 0, 0),
    };
    Ok(StackFrame {
        function: String::from_utf8_lossy(function).into_owned(),
        offset,
        size,
        module,
    })
}

/// A stack with the lines that were not frames: a demangled C++ name with spaces and parentheses, a line
/// cut short. One such line does not discard the rest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub frames: Vec<StackFrame>,
    /// The first few skipped lines, shortened, for a note.
    pub skipped: Vec<String>,
    /// How many lines were skipped in all.
    pub skipped_count: usize,
}

impl Parsed {
    /// "1 unparseable stack frame skipped: `…`", or None when every line parsed.
    pub fn note(&self) -> Option<String> {
        (self.skipped_count > 0).then(|| {
            format!(
                "{} unparseable stack frame{} skipped: {}",
                self.skipped_count,
                if self.skipped_count == 1 { "" } else { "s" },
                self.skipped
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }
}

const SKIPPED_KEPT: usize = 4;
const SKIPPED_CHARS: usize = 120;

/// Skips a line that is not a frame (and remembers it); fails only when no line is a frame or there are more
/// lines than any kernel prints.
pub fn parse_noting(b: &[u8]) -> Result<Parsed> {
    let mut parsed = Parsed::default();
    let mut first_error = None;
    for line in b.split(|&c| c == b'\n') {
        if trim_ascii(line).is_empty() {
            continue;
        }
        if parsed.frames.len() + parsed.skipped_count == MAX_FRAMES {
            return Err(err("stack", format!("more than {MAX_FRAMES} frames")));
        }
        match frame(line) {
            Ok(f) => parsed.frames.push(f),
            Err(e) => {
                parsed.skipped_count += 1;
                if parsed.skipped.len() < SKIPPED_KEPT {
                    let text: String = String::from_utf8_lossy(trim_ascii(line))
                        .chars()
                        .map(|c| if c.is_control() || c == '`' { '?' } else { c })
                        .take(SKIPPED_CHARS)
                        .collect();
                    parsed.skipped.push(text);
                }
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if parsed.frames.is_empty() => Err(e),
        _ => Ok(parsed),
    }
}

/// The frames of a stack; unparseable lines are skipped ([`parse_noting`] says which).
pub fn parse(b: &[u8]) -> Result<Vec<StackFrame>> {
    parse_noting(b).map(|p| p.frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_and_module_frames() {
        let b = b"[<0>] nv_kthread_q_flush+0x83/0x140 [nvidia_uvm]\n[<0>] uvm_release.isra.0+0x84/0x190 [nvidia_uvm]\n[<0>] __fput+0xed/0x2c0\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n";
        let f = parse(b).unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(f[0].function, "nv_kthread_q_flush");
        assert_eq!((f[0].offset, f[0].size), (0x83, 0x140));
        assert_eq!(f[0].module.as_deref(), Some("nvidia_uvm"));
        assert_eq!(f[1].function, "uvm_release.isra.0");
        assert_eq!(f[2].module, None);
        assert_eq!(f[3].function, "entry_SYSCALL_64_after_hwframe");
    }

    #[test]
    fn empty_and_old_formats() {
        assert!(parse(b"").unwrap().is_empty());
        assert!(parse(b"\n\n").unwrap().is_empty());
        // Pre-4.x kernels printed the address.
        let f = parse(b"[<ffffffff8110e1b5>] futex_wait_queue_me+0xc5/0x120\n").unwrap();
        assert_eq!(f[0].function, "futex_wait_queue_me");
        // A bare address (no symbol) keeps offset 0.
        let f = parse(b"[<0>] 0xffffffffc0a1b2c3\n").unwrap();
        assert_eq!(
            (f[0].function.as_str(), f[0].offset),
            ("0xffffffffc0a1b2c3", 0)
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse(b"[<0 broken").is_err());
        assert!(parse(b"[<0>] f+0xzz/0x10").is_err());
        assert!(parse(b"[<0>] f+0x1/0x10 []").is_err());
        assert!(parse(b"[<0>] \x01\x02").is_err());
        let many = "[<0>] f+0x1/0x2\n".repeat(MAX_FRAMES + 1);
        assert!(parse(many.as_bytes()).is_err());
    }

    /// Family 7 of issue 28: a demangled C++ frame with spaces does not discard the stack.
    #[test]
    fn one_unparseable_frame_is_skipped_and_noted() {
        let b = b"[<0>] down+0x36/0x80\n[<0>] DisplayPort::EvoMainLink::train(DisplayPort::LinkTrainParameters const&)+0x330/0x9c0 [nvidia_modeset]\n[<0>] nvkms_ioctl_from_kapi_try_pmlock+0x4e/0x80 [nvidia_modeset]\n";
        let p = parse_noting(b).unwrap();
        assert_eq!(p.frames.len(), 2);
        assert_eq!(p.frames[1].function, "nvkms_ioctl_from_kapi_try_pmlock");
        assert_eq!(p.skipped_count, 1);
        let note = p.note().unwrap();
        assert!(
            note.starts_with("1 unparseable stack frame skipped: `[<0>] DisplayPort::"),
            "{note}"
        );
        assert_eq!(parse(b).unwrap().len(), 2);
    }
}
