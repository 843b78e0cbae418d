//! Who the writer is: pid, process start time, pid namespace, boot id; and the clocks.
//!
//! The breadcrumb crate is linked into foreign workers and must not pull in `capture` (and its
//! `ProcRoot`), so it reads its *own* identity through one documented constant, [`SELF_PROC`].
//! Nothing here is on the record path: it runs once when a ring is created or read.

use std::path::PathBuf;

/// The proc filesystem the writer reads its own identity from (`self/stat`, `self/ns/pid`,
/// `sys/kernel/random/boot_id`), and the reader its boot id. The only such path in this crate.
pub const SELF_PROC: &str = "/proc";

fn self_proc(rest: &str) -> PathBuf {
    PathBuf::from(SELF_PROC).join(rest)
}

/// The writer process's identity as stored in a ring header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// Field 22 of `stat`: start time in clock ticks since boot (0 if unreadable).
    pub start_time_ticks: u64,
    /// Inode of `self/ns/pid` (0 if unreadable).
    pub pidns_inode: u64,
    /// The 16 bytes of `sys/kernel/random/boot_id` (zero if unreadable).
    pub boot_id: [u8; 16],
    /// `sysconf(_SC_CLK_TCK)`.
    pub ticks_per_second: u32,
}

impl ProcessIdentity {
    /// Reads the current process's identity. Fields that cannot be read are zero: a ring without
    /// identity is still a useful ring.
    pub fn current() -> ProcessIdentity {
        let start_time_ticks = std::fs::read(self_proc("self/stat"))
            .ok()
            .and_then(|bytes| parse_stat_start_time(&bytes))
            .unwrap_or(0);
        let pidns_inode = std::fs::metadata(self_proc("self/ns/pid"))
            .map(|meta| std::os::unix::fs::MetadataExt::ino(&meta))
            .unwrap_or(0);
        // SAFETY: sysconf has no memory-safety preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        ProcessIdentity {
            pid: std::process::id(),
            start_time_ticks,
            pidns_inode,
            boot_id: current_boot_id().unwrap_or([0; 16]),
            ticks_per_second: u32::try_from(ticks).unwrap_or(0),
        }
    }
}

/// This machine's boot id, if readable.
pub fn current_boot_id() -> Option<[u8; 16]> {
    let text = std::fs::read(self_proc("sys/kernel/random/boot_id")).ok()?;
    parse_boot_id(&text)
}

/// Parses the text form `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (trailing newline allowed).
pub fn parse_boot_id(text: &[u8]) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut nibbles = 0usize;
    for &byte in text {
        let value = match byte {
            b'0'..=b'9' => byte - b'0',
            b'a'..=b'f' => byte - b'a' + 10,
            b'A'..=b'F' => byte - b'A' + 10,
            b'-' => continue,
            b'\n' | b' ' => break,
            _ => return None,
        };
        if nibbles >= 32 {
            return None;
        }
        out[nibbles / 2] |= if nibbles & 1 == 0 { value << 4 } else { value };
        nibbles += 1;
    }
    (nibbles == 32).then_some(out)
}

/// Formats 16 boot-id bytes in the kernel's text form.
pub fn format_boot_id(bytes: &[u8; 16]) -> String {
    let mut out = String::with_capacity(36);
    for (index, byte) in bytes.iter().enumerate() {
        if matches!(index, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// Field 22 (starttime) of a `stat` file. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted after the *last* `)`.
pub fn parse_stat_start_time(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    // After ')' the first field is field 3 (state); field 22 is the 20th.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// `CLOCK_MONOTONIC` now, in nanoseconds (vDSO: no system call on x86_64 and aarch64 glibc).
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` now, in nanoseconds since the epoch.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// A `CLOCK_*` clock now, in nanoseconds.
#[inline]
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_id_round_trips() {
        let text = b"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n";
        let bytes = parse_boot_id(text).unwrap();
        assert_eq!(bytes[0], 0x0f);
        assert_eq!(bytes[15], 0xf0);
        assert_eq!(
            format_boot_id(&bytes),
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
        );
        assert_eq!(parse_boot_id(b"abc"), None);
        assert_eq!(
            parse_boot_id(b"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0ff"),
            None
        );
        assert_eq!(parse_boot_id(b"zz"), None);
    }

    #[test]
    fn start_time_counts_fields_after_the_last_paren() {
        let stat = b"42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(parse_stat_start_time(stat), Some(123456));
        assert_eq!(parse_stat_start_time(b"garbage"), None);
        assert_eq!(parse_stat_start_time(b"1 (x) S 1"), None);
    }

    #[test]
    fn current_identity_is_readable_here() {
        let me = ProcessIdentity::current();
        assert_eq!(me.pid, std::process::id());
        assert!(me.start_time_ticks > 0);
        assert!(me.pidns_inode > 0);
        assert_ne!(me.boot_id, [0; 16]);
        assert!(me.ticks_per_second > 0);
    }
}
