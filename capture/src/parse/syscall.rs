//! `/proc/<tid>/syscall`, three forms (fs/proc/base.c `proc_pid_syscall`):
//! `running`; `-1 0x<sp> 0x<pc>` (blocked outside a syscall: fault, interrupt, exiting);
//! `<nr> 0x<a0> … 0x<a5> 0x<sp> 0x<pc>`.

use super::Parse;
use super::{err, parse_hex, parse_i64, trim_ascii};
use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syscall {
    /// The task was on a CPU (or switching) when sampled.
    Running,
    /// Entered the kernel other than through a syscall (nr is negative, normally -1).
    NotInSyscall { nr: i64, sp: u64, pc: u64 },
    /// Blocked in syscall `nr` with its six argument registers.
    InSyscall {
        nr: i64,
        args: [u64; 6],
        sp: u64,
        pc: u64,
    },
}

impl Syscall {
    pub fn nr(&self) -> Option<i64> {
        match *self {
            Syscall::Running => None,
            Syscall::NotInSyscall { nr, .. } | Syscall::InSyscall { nr, .. } => Some(nr),
        }
    }
}

impl Parse for Syscall {
    fn parse(b: &[u8]) -> Result<Syscall> {
        let line = trim_ascii(b);
        if line == b"running" {
            return Ok(Syscall::Running);
        }
        let mut fields: [&[u8]; 9] = [&[]; 9];
        let mut n = 0;
        for f in line
            .split(|c| c.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
        {
            if n == fields.len() {
                return Err(err("syscall", "more than 9 fields"));
            }
            fields[n] = f;
            n += 1;
        }
        match n {
            3 => Ok(Syscall::NotInSyscall {
                nr: parse_i64("syscall nr", fields[0])?,
                sp: parse_hex("syscall sp", fields[1])?,
                pc: parse_hex("syscall pc", fields[2])?,
            }),
            9 => {
                let mut args = [0u64; 6];
                for (i, a) in args.iter_mut().enumerate() {
                    *a = parse_hex("syscall arg", fields[1 + i])?;
                }
                Ok(Syscall::InSyscall {
                    nr: parse_i64("syscall nr", fields[0])?,
                    args,
                    sp: parse_hex("syscall sp", fields[7])?,
                    pc: parse_hex("syscall pc", fields[8])?,
                })
            }
            _ => Err(err(
                "syscall",
                format!(
                    "expected `running`, 3 or 9 fields, got {n}: {:?}",
                    String::from_utf8_lossy(line)
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_forms() {
        assert_eq!(Syscall::parse(b"running\n").unwrap(), Syscall::Running);
        // A SIGSTOPped busy loop on this machine (procfs-facts.md).
        assert_eq!(
            Syscall::parse(b"-1 0x7ffc99f42580 0x7efc510fcc8e\n").unwrap(),
            Syscall::NotInSyscall {
                nr: -1,
                sp: 0x7ffc99f42580,
                pc: 0x7efc510fcc8e
            }
        );
        // x86_64 `sleep 30`: clock_nanosleep (230).
        let x86 = Syscall::parse(
            b"230 0x0 0x0 0x7ffd81448330 0x7ffd81448370 0x0 0x0 0x7ffd81448318 0x7f64bba49503\n",
        )
        .unwrap();
        assert_eq!(
            x86,
            Syscall::InSyscall {
                nr: 230,
                args: [0, 0, 0x7ffd81448330, 0x7ffd81448370, 0, 0],
                sp: 0x7ffd81448318,
                pc: 0x7f64bba49503
            }
        );
        // aarch64: ioctl (29) on fd 5 with NV_ESC_RM_CONTROL.
        let arm = Syscall::parse(
            b"29 0x5 0xc020462a 0xffffd1e0c0a8 0x0 0x0 0x0 0xffffd1e0c050 0xffff8a3e1c2c",
        )
        .unwrap();
        assert_eq!(arm.nr(), Some(29));
        if let Syscall::InSyscall { args, .. } = arm {
            assert_eq!(args[1], 0xc020462a);
        } else {
            panic!("wrong form");
        }
        // Upper register bits set (sign-extended int request) survive parsing.
        let sext = Syscall::parse(b"16 0x3 0xffffffffc020462a 0x0 0x0 0x0 0x0 0x1 0x2").unwrap();
        if let Syscall::InSyscall { args, .. } = sext {
            assert_eq!(args[1] & 0xffff_ffff, 0xc020462a);
        }
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            &b""[..],
            b"runnin",
            b"16 0x1",
            b"16 0x1 0x2 0x3 0x4 0x5 0x6 0x7",
            b"16 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8 0x9",
            b"16 1 2 3 4 5 6 7 8",
            b"abc 0x1 0x2",
            b"-1 0xzz 0x1",
        ] {
            assert!(
                Syscall::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
