//! `/proc/<pid>/task/<tid>/stat`: one line, `pid (comm) state ppid pgrp …` (proc(5)).
//!
//! comm may hold spaces and parentheses (`a) (b`), so it runs from the first `(` to the LAST `)`.
//! This parser is on the watch loop's hot path: no allocation except the comm string.

use super::Parse;
use super::{err, parse_i64, parse_u64};
use crate::error::Result;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stat {
    pub pid: i32,
    pub comm: String,
    /// One letter: R S D T t Z X I P …
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    /// `PF_*` task flags; [`PF_KTHREAD`] marks a kernel thread.
    pub flags: u32,
    pub minflt: u64,
    pub majflt: u64,
    /// User and system CPU time in clock ticks (sysconf(_SC_CLK_TCK)).
    pub utime: u64,
    pub stime: u64,
    pub num_threads: i64,
    /// Clock ticks after boot when the task started.
    pub starttime: u64,
    /// CPU the task last ran on; None on kernels that print fewer fields.
    pub processor: Option<i32>,
}

/// `PF_KTHREAD` (include/linux/sched.h): the task is a kernel thread.
pub const PF_KTHREAD: u32 = 0x0020_0000;

impl Stat {
    /// A kernel thread: `PF_KTHREAD` is set. (A ppid of 2 alone is not proof: in a pid namespace pid 2 is
    /// any process; the snapshot also requires a stack that starts in `kthread` then.)
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    pub fn cpu_ticks(&self) -> u64 {
        self.utime.saturating_add(self.stime)
    }
}

/// The fields the hot scan needs, borrowed from the buffer (no allocation). Parsing stops at `stime`
/// (field 15): the rest of the line is never scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatLite<'a> {
    pub pid: i32,
    pub comm: &'a [u8],
    pub state: u8,
    pub cpu_ticks: u64,
}

/// Splits `pid (comm) rest` and returns (pid, comm, fields after the comm).
fn split(b: &[u8]) -> Result<(i32, &[u8], &[u8])> {
    let open = b
        .iter()
        .position(|&c| c == b'(')
        .ok_or_else(|| err("stat", "no '(' before comm"))?;
    let close = b
        .iter()
        .rposition(|&c| c == b')')
        .ok_or_else(|| err("stat", "no ')' after comm"))?;
    if close < open {
        return Err(err("stat", "')' before '('"));
    }
    let pid = parse_i64("stat pid", super::trim_ascii(&b[..open]))?;
    let pid = i32::try_from(pid).map_err(|_| err("stat", "pid out of range"))?;
    Ok((pid, &b[open + 1..close], &b[close + 1..]))
}

fn field<'a>(fields: &[&'a [u8]], i: usize, name: &'static str) -> Result<&'a [u8]> {
    fields
        .get(i)
        .copied()
        .ok_or_else(|| err("stat", format!("missing field {name}")))
}

/// Indexes (0-based, after the comm) of the fields we use; see proc(5): state is field 3.
const STATE: usize = 0;
const PPID: usize = 1;
const PGRP: usize = 2;
const SESSION: usize = 3;
const FLAGS: usize = 6;
const MINFLT: usize = 7;
const MAJFLT: usize = 9;
const UTIME: usize = 11;
const STIME: usize = 12;
const NUM_THREADS: usize = 17;
const STARTTIME: usize = 19;
const PROCESSOR: usize = 36;

fn state_of(b: &[u8]) -> Result<u8> {
    match b {
        [c] if c.is_ascii_alphabetic() => Ok(*c),
        _ => Err(err(
            "stat",
            format!("bad state {:?}", String::from_utf8_lossy(b)),
        )),
    }
}

fn small_int(what: &'static str, b: &[u8]) -> Result<i32> {
    i32::try_from(parse_i64(what, b)?).map_err(|_| err(what, "out of range"))
}

impl Parse for Stat {
    fn parse(b: &[u8]) -> Result<Stat> {
        let (pid, comm, rest) = split(b)?;
        let mut fields: [&[u8]; 40] = [&[]; 40];
        let mut n = 0;
        for f in rest
            .split(|c| c.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
        {
            if n == fields.len() {
                break;
            }
            fields[n] = f;
            n += 1;
        }
        let fields = &fields[..n];
        let state = state_of(field(fields, STATE, "state")?)?;
        Ok(Stat {
            pid,
            comm: String::from_utf8_lossy(comm).into_owned(),
            state: char::from(state),
            ppid: small_int("stat ppid", field(fields, PPID, "ppid")?)?,
            pgrp: small_int("stat pgrp", field(fields, PGRP, "pgrp")?)?,
            session: small_int("stat session", field(fields, SESSION, "session")?)?,
            flags: u32::try_from(parse_u64("stat flags", field(fields, FLAGS, "flags")?)?)
                .map_err(|_| err("stat", "flags out of range"))?,
            minflt: parse_u64("stat minflt", field(fields, MINFLT, "minflt")?)?,
            majflt: parse_u64("stat majflt", field(fields, MAJFLT, "majflt")?)?,
            utime: parse_u64("stat utime", field(fields, UTIME, "utime")?)?,
            stime: parse_u64("stat stime", field(fields, STIME, "stime")?)?,
            num_threads: parse_i64(
                "stat num_threads",
                field(fields, NUM_THREADS, "num_threads")?,
            )?,
            starttime: parse_u64("stat starttime", field(fields, STARTTIME, "starttime")?)?,
            processor: match fields.get(PROCESSOR) {
                Some(f) => Some(small_int("stat processor", f)?),
                None => None,
            },
        })
    }
}

/// The hot-path subset: state, comm, utime+stime. Borrowed, no allocation, stops after stime.
pub fn parse_lite(b: &[u8]) -> Result<StatLite<'_>> {
    let (pid, comm, rest) = split(b)?;
    let mut state = None;
    let mut utime = None;
    let mut i = 0;
    let mut field = 0;
    while i < rest.len() {
        if rest[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        while i < rest.len() && !rest[i].is_ascii_whitespace() {
            i += 1;
        }
        let f = &rest[start..i];
        match field {
            STATE => state = Some(state_of(f)?),
            UTIME => utime = Some(parse_u64("stat utime", f)?),
            STIME => {
                let stime = parse_u64("stat stime", f)?;
                return match (state, utime) {
                    (Some(state), Some(u)) => Ok(StatLite {
                        pid,
                        comm,
                        state,
                        cpu_ticks: u.saturating_add(stime),
                    }),
                    _ => Err(err("stat", "truncated line")),
                };
            }
            _ => {}
        }
        field += 1;
    }
    Err(err("stat", "truncated line"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real line from this machine (6.18, `sleep 30`), processor field 39 = 1.
    const SLEEP: &[u8] = b"4242 (sleep) S 4200 4242 4200 34816 4242 4194304 95 0 0 0 0 0 0 0 20 0 1 0 1234567 5668864 224 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn parses_a_real_line() {
        let s = Stat::parse(SLEEP).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "sleep");
        assert_eq!(s.state, 'S');
        assert_eq!((s.ppid, s.pgrp, s.session), (4200, 4242, 4200));
        assert_eq!(s.flags, 4194304);
        assert_eq!(s.starttime, 1234567);
        assert_eq!(s.processor, Some(1));
        let l = parse_lite(SLEEP).unwrap();
        assert_eq!((l.pid, l.comm, l.state), (4242, &b"sleep"[..], b'S'));
    }

    #[test]
    fn odd_comm_names() {
        let line = b"7 (a) (b) D 1 7 7 0 -1 4194560 0 0 0 0 12 34 0 0 20 0 3 0 99 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0";
        let s = Stat::parse(line).unwrap();
        assert_eq!(s.comm, "a) (b");
        assert_eq!(s.state, 'D');
        assert_eq!(s.cpu_ticks(), 46);
        assert_eq!(s.processor, Some(0));
        let sp = b"8 (  spaced  name ) R 1 8 8 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0";
        let s = Stat::parse(sp).unwrap();
        assert_eq!(s.comm, "  spaced  name ");
        assert_eq!(s.processor, None);
        let empty = b"9 () S 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0";
        assert_eq!(Stat::parse(empty).unwrap().comm, "");
        let utf = "10 (python3 ✓) S 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0".as_bytes();
        assert_eq!(Stat::parse(utf).unwrap().comm, "python3 ✓");
        let lite = parse_lite(line).unwrap();
        assert_eq!(lite.comm, b"a) (b");
        assert_eq!(lite.cpu_ticks, 46);
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            &b""[..],
            b"1 comm S",
            b"1 (comm S 1",
            b"1 )comm( S 1 2",
            b"x (c) S 1 2 3 4 5 6 7 8 9 10 11 12",
            b"1 (c) SS 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0",
            b"1 (c) S 1 1",
            b"1 (c) S 1 1 1 0 -1 0 0 0 0 0 99999999999999999999999 0 0 0 20 0 1 0 5 0",
            b"\xff\xfe (\x00) \x01",
        ] {
            assert!(
                Stat::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
            assert!(
                parse_lite(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
