//! `/proc/<tid>/stack`: up to 64 lines `[<0>] symbol+0xoff/0xsize [module]` (`%pB`; the address is
//! printed as 0 on current kernels). Empty for a running task.

use super::{err, parse_hex, trim_ascii};
use crate::error::Result;
use crate::snapshot::StackFrame;

/// More frames than the kernel ever prints (MAX_STACK_TRACE_DEPTH = 64) means hostile input.
const MAX_FRAMES: usize = 256;

fn frame(line: &[u8]) -> Result<StackFrame> {
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
            let m = &rest[open + 1..rest.len() - 1];
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

pub fn parse(b: &[u8]) -> Result<Vec<StackFrame>> {
    let mut frames = Vec::new();
    for line in b.split(|&c| c == b'\n') {
        if trim_ascii(line).is_empty() {
            continue;
        }
        if frames.len() == MAX_FRAMES {
            return Err(err("stack", format!("more than {MAX_FRAMES} frames")));
        }
        frames.push(frame(line)?);
    }
    Ok(frames)
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
}
