//! `/proc/<pid>/task/<tid>/status`: `Key:\tvalue` lines. We keep the fields the watchdog and the
//! report need; unknown keys are ignored (the file grows with every kernel).

use super::Parse;
use super::{err, parse_i64, parse_u64, trim_ascii};
use crate::error::Result;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    pub name: Option<String>,
    /// Single state letter from `State:\tD (disk sleep)`.
    pub state: Option<char>,
    pub tgid: Option<i32>,
    pub pid: Option<i32>,
    pub ppid: Option<i32>,
    /// Ids in each nested pid namespace, outermost first (the last one is what the container sees).
    pub nspid: Vec<i32>,
    pub nstgid: Vec<i32>,
    pub voluntary_ctxt_switches: Option<u64>,
    pub nonvoluntary_ctxt_switches: Option<u64>,
    pub cpus_allowed_list: Option<String>,
    pub cap_inh: Option<u64>,
    pub cap_prm: Option<u64>,
    pub cap_eff: Option<u64>,
    pub cap_bnd: Option<u64>,
    pub cap_amb: Option<u64>,
    /// Uid line: real, effective, saved, fs.
    pub uid: Vec<u32>,
    pub threads: Option<i64>,
}

impl Status {
    /// voluntary + nonvoluntary: when this stays unchanged, the thread has not run at all.
    pub fn ctxt_switches(&self) -> Option<u64> {
        Some(
            self.voluntary_ctxt_switches?
                .saturating_add(self.nonvoluntary_ctxt_switches?),
        )
    }
}

fn ids(what: &'static str, v: &[u8]) -> Result<Vec<i32>> {
    v.split(|c| c.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .take(64)
        .map(|f| i32::try_from(parse_i64(what, f)?).map_err(|_| err(what, "id out of range")))
        .collect()
}

fn one_id(what: &'static str, v: &[u8]) -> Result<i32> {
    i32::try_from(parse_i64(what, v)?).map_err(|_| err(what, "id out of range"))
}

fn caps(what: &'static str, v: &[u8]) -> Result<u64> {
    if v.is_empty() || v.len() > 16 {
        return Err(err(what, "bad capability mask"));
    }
    let s = std::str::from_utf8(v).map_err(|_| err(what, "not ASCII"))?;
    u64::from_str_radix(s, 16).map_err(|e| err(what, e.to_string()))
}

impl Parse for Status {
    fn parse(b: &[u8]) -> Result<Status> {
        let mut s = Status::default();
        for line in b.split(|&c| c == b'\n') {
            let Some(colon) = line.iter().position(|&c| c == b':') else {
                continue;
            };
            let key = &line[..colon];
            let v = trim_ascii(&line[colon + 1..]);
            match key {
                b"Name" => s.name = Some(String::from_utf8_lossy(v).into_owned()),
                b"State" => s.state = v.first().map(|&c| char::from(c)),
                b"Tgid" => s.tgid = Some(one_id("status Tgid", v)?),
                b"Pid" => s.pid = Some(one_id("status Pid", v)?),
                b"PPid" => s.ppid = Some(one_id("status PPid", v)?),
                b"NSpid" => s.nspid = ids("status NSpid", v)?,
                b"NStgid" => s.nstgid = ids("status NStgid", v)?,
                b"Threads" => s.threads = Some(parse_i64("status Threads", v)?),
                b"voluntary_ctxt_switches" => {
                    s.voluntary_ctxt_switches =
                        Some(parse_u64("status voluntary_ctxt_switches", v)?)
                }
                b"nonvoluntary_ctxt_switches" => {
                    s.nonvoluntary_ctxt_switches =
                        Some(parse_u64("status nonvoluntary_ctxt_switches", v)?)
                }
                b"Cpus_allowed_list" => {
                    s.cpus_allowed_list = Some(String::from_utf8_lossy(v).into_owned())
                }
                b"CapInh" => s.cap_inh = Some(caps("status CapInh", v)?),
                b"CapPrm" => s.cap_prm = Some(caps("status CapPrm", v)?),
                b"CapEff" => s.cap_eff = Some(caps("status CapEff", v)?),
                b"CapBnd" => s.cap_bnd = Some(caps("status CapBnd", v)?),
                b"CapAmb" => s.cap_amb = Some(caps("status CapAmb", v)?),
                b"Uid" => {
                    s.uid = v
                        .split(|c| c.is_ascii_whitespace())
                        .filter(|f| !f.is_empty())
                        .take(4)
                        .map(|f| {
                            u32::try_from(parse_u64("status Uid", f)?)
                                .map_err(|_| err("status Uid", "uid out of range"))
                        })
                        .collect::<Result<_>>()?
                }
                _ => {}
            }
        }
        if s.name.is_none() && s.state.is_none() && s.pid.is_none() {
            return Err(err("status", "no Name/State/Pid line"));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTAINER_THREAD: &[u8] = b"Name:\tpt_autograd_0\nUmask:\t0022\nState:\tD (disk sleep)\nTgid:\t81234\nNgid:\t0\nPid:\t81240\nPPid:\t81200\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t256\nNStgid:\t81234\t1\nNSpid:\t81240\t7\nNSpgid:\t81234\t1\nNSsid:\t81200\t0\nThreads:\t57\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nCpus_allowed:\tffff\nCpus_allowed_list:\t0-15\nvoluntary_ctxt_switches:\t1520\nnonvoluntary_ctxt_switches:\t33\n";

    #[test]
    fn parses_a_container_thread() {
        let s = Status::parse(CONTAINER_THREAD).unwrap();
        assert_eq!(s.name.as_deref(), Some("pt_autograd_0"));
        assert_eq!(s.state, Some('D'));
        assert_eq!(
            (s.tgid, s.pid, s.ppid),
            (Some(81234), Some(81240), Some(81200))
        );
        assert_eq!(s.nspid, vec![81240, 7]);
        assert_eq!(s.nstgid, vec![81234, 1]);
        assert_eq!(s.ctxt_switches(), Some(1553));
        assert_eq!(s.cpus_allowed_list.as_deref(), Some("0-15"));
        assert_eq!(s.cap_eff, Some(0x1ff_ffff_ffff));
        assert_eq!(s.cap_inh, Some(0));
        assert_eq!(s.uid, vec![0, 0, 0, 0]);
        assert_eq!(s.threads, Some(57));
        // uids above i32::MAX (user namespaces) are fine.
        let s = Status::parse(b"Name:\tx\nUid:\t4294967294\t4294967294\t0\t0\n").unwrap();
        assert_eq!(s.uid[0], 4294967294);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Status::parse(b"").is_err());
        assert!(Status::parse(b"hello world").is_err());
        assert!(Status::parse(b"Name:\tx\nvoluntary_ctxt_switches:\t-1\n").is_err());
        assert!(Status::parse(b"Name:\tx\nCapEff:\tzz\n").is_err());
        assert!(Status::parse(b"Name:\tx\nNSpid:\t1\t99999999999\n").is_err());
        // Missing counters are None, not an error.
        let s = Status::parse(b"Name:\tx\nState:\tR (running)\n").unwrap();
        assert_eq!(s.ctxt_switches(), None);
    }
}
