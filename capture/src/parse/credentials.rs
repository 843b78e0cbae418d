//! `/proc/<pid>/status`'s `Uid:`, `Gid:` and `Groups:` lines: the credentials with which a helper opens the
//! files a process names (its Python source files, the ELF files of its maps), so that it reads nothing the
//! process could not read itself.
//!
//! Which of the four ids (real, effective, saved, filesystem): the **filesystem** ones, the fourth field. They
//! are what the kernel checks when the process itself opens a file, and they follow the effective ids unless
//! the process called `setfsuid(2)`. Not the real ids: a setuid program's opens are checked against its
//! effective id, and a daemon that dropped its effective id to `nobody` (real id still 0) opens files as
//! `nobody`. Whatever the process can set its filesystem id to (its real, effective or saved id) it could read
//! through itself anyway, so no choice among them lends it a right it does not have.
//!
//! The ids are as the reader's user namespace sees them (the agent's: the initial one), which are the ids a
//! `setresuid(2)` there takes. An id of `u32::MAX` (-1) is refused: the set-id calls read it as "leave
//! unchanged", which would keep the helper's own (root's) id.

use super::Parse;
use super::{err, parse_u64, trim_ascii};
use crate::error::Result;

/// `NGROUPS_MAX` of Linux: the most supplementary groups a process can have.
pub const MAX_GROUPS: usize = 65536;

/// The ids a helper takes on before it opens a file the process named.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Credentials {
    /// The filesystem uid (the fourth field of `Uid:`).
    pub uid: u32,
    /// The filesystem gid (the fourth field of `Gid:`).
    pub gid: u32,
    /// The supplementary groups (`Groups:`, possibly empty).
    pub groups: Vec<u32>,
}

impl Credentials {
    /// `uid 65534 gid 65534 groups []` for the report.
    pub fn describe(&self) -> String {
        let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
        format!(
            "uid {} gid {} groups [{}]",
            self.uid,
            self.gid,
            groups.join(" ")
        )
    }
}

fn id(what: &'static str, field: &[u8]) -> Result<u32> {
    let value = u32::try_from(parse_u64(what, field)?).map_err(|_| err(what, "id out of range"))?;
    if value == u32::MAX {
        return Err(err(
            what,
            "id 4294967295 (-1) is no id: the set-id calls read it as \"unchanged\"",
        ));
    }
    Ok(value)
}

/// The filesystem id: the fourth of the four fields (real, effective, saved, filesystem).
fn filesystem_id(what: &'static str, value: &[u8]) -> Result<u32> {
    let fields: Vec<&[u8]> = value
        .split(|c| c.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .collect();
    if fields.len() != 4 {
        return Err(err(what, format!("expected 4 ids, found {}", fields.len())));
    }
    // Every field must be an id, not only the one kept: a malformed line is not trusted in part.
    let mut ids = [0u32; 4];
    for (slot, field) in ids.iter_mut().zip(&fields) {
        *slot = id(what, field)?;
    }
    Ok(ids[3])
}

impl Parse for Credentials {
    /// Parse the credentials out of a `/proc/<pid>/status` text. `Uid:` and `Gid:` must be there (a status
    /// without them is not one to take rights from); `Groups:` may be empty or, on very old kernels, absent.
    fn parse(b: &[u8]) -> Result<Credentials> {
        let (mut uid, mut gid, mut groups) = (None, None, None);
        for line in b.split(|&c| c == b'\n') {
            let Some(colon) = line.iter().position(|&c| c == b':') else {
                continue;
            };
            let value = trim_ascii(&line[colon + 1..]);
            match &line[..colon] {
                b"Uid" if uid.is_none() => uid = Some(filesystem_id("status Uid", value)?),
                b"Gid" if gid.is_none() => gid = Some(filesystem_id("status Gid", value)?),
                b"Groups" if groups.is_none() => {
                    let mut list = Vec::new();
                    for field in value
                        .split(|c| c.is_ascii_whitespace())
                        .filter(|f| !f.is_empty())
                    {
                        if list.len() == MAX_GROUPS {
                            return Err(err("status Groups", "more groups than NGROUPS_MAX"));
                        }
                        list.push(id("status Groups", field)?);
                    }
                    groups = Some(list);
                }
                b"Uid" | b"Gid" | b"Groups" => {
                    return Err(err("status", "a credentials line appears twice"));
                }
                _ => {}
            }
        }
        Ok(Credentials {
            uid: uid.ok_or_else(|| err("status", "no Uid line"))?,
            gid: gid.ok_or_else(|| err("status", "no Gid line"))?,
            groups: groups.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORKER: &[u8] =
        b"Name:\tpython3\nUmask:\t0022\nState:\tD (disk sleep)\nTgid:\t4242\nPid:\t4242\n\
Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t4 24 27 1000 \n\
CapEff:\t0000000000000000\n";

    #[test]
    fn a_workers_ids_and_groups() {
        let creds = Credentials::parse(WORKER).unwrap();
        assert_eq!(
            creds,
            Credentials {
                uid: 1000,
                gid: 1000,
                groups: vec![4, 24, 27, 1000],
            }
        );
        assert_eq!(creds.describe(), "uid 1000 gid 1000 groups [4 24 27 1000]");
    }

    #[test]
    fn the_filesystem_ids_are_taken_not_the_real_ones() {
        // A daemon that dropped its effective (and so filesystem) ids to nobody, its real and saved ids root.
        let dropped = b"Uid:\t0\t65534\t0\t65534\nGid:\t0\t65534\t0\t65534\nGroups:\t\n";
        let creds = Credentials::parse(dropped).unwrap();
        assert_eq!((creds.uid, creds.gid), (65534, 65534));
        assert!(creds.groups.is_empty());
        // A setuid-root program run by a user: its opens are root's, and so are its filesystem ids.
        let setuid = b"Uid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\nGroups:\t1000\n";
        assert_eq!(Credentials::parse(setuid).unwrap().uid, 0);
        // setfsuid(2) apart from the effective id: the filesystem id is what its opens use.
        let fs = b"Uid:\t0\t0\t0\t1000\nGid:\t0\t0\t0\t1000\n";
        let creds = Credentials::parse(fs).unwrap();
        assert_eq!((creds.uid, creds.gid), (1000, 1000));
    }

    #[test]
    fn anything_malformed_is_refused_never_read_in_part() {
        for bad in [
            &b""[..],
            b"Name:\tx\n",
            b"Uid:\t1000\t1000\t1000\t1000\n",
            b"Gid:\t1000\t1000\t1000\t1000\n",
            b"Uid:\t1000\t1000\t1000\nGid:\t1\t1\t1\t1\n",
            b"Uid:\t1000\t1000\t1000\t1000\t1000\nGid:\t1\t1\t1\t1\n",
            b"Uid:\t1000\t1000\t1000\tx\nGid:\t1\t1\t1\t1\n",
            b"Uid:\t-1\t1000\t1000\t1000\nGid:\t1\t1\t1\t1\n",
            b"Uid:\t1000\t1000\t1000\t4294967296\nGid:\t1\t1\t1\t1\n",
            // -1 means "unchanged" to setresuid: the helper would stay root.
            b"Uid:\t4294967295\t4294967295\t4294967295\t4294967295\nGid:\t1\t1\t1\t1\n",
            b"Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t4294967295\n",
            b"Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nGroups:\t4294967295\n",
            b"Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nGroups:\t1 x\n",
            // A second Uid line (a forged status) is not resolved by picking one.
            b"Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nUid:\t0\t0\t0\t0\n",
        ] {
            assert!(
                Credentials::parse(bad).is_err(),
                "accepted {:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut many = b"Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nGroups:\t".to_vec();
        for g in 0..=MAX_GROUPS {
            many.extend_from_slice(format!("{g} ").as_bytes());
        }
        assert!(Credentials::parse(&many).is_err());
    }

    #[test]
    fn the_live_status_of_this_process_parses() {
        let status = std::fs::read("/proc/self/status").unwrap();
        let creds = Credentials::parse(&status).unwrap();
        // SAFETY: getegid has no arguments and cannot fail.
        let egid = unsafe { libc::getegid() };
        // SAFETY: as above.
        let euid = unsafe { libc::geteuid() };
        assert_eq!((creds.uid, creds.gid), (euid, egid));
    }
}
