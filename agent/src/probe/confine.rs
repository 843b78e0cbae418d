//! What a command probe's child takes on between fork and exec: the target's credentials with no
//! capability, its root directory, memory limits. Prepared in the parent, applied with raw system calls.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// What a [`ProbeKind::Command`](super::ProbeKind::Command) child takes on between fork and exec. The default confines nothing.
///
/// - `credentials`: the child runs with these ids (a target's, from its `/proc/<pid>/status`) and **no
///   capability**: supplementary groups, gid and uid set with raw `setgroups`/`setresgid`/`setresuid`; every
///   capability set emptied (`capset`), the bounding and ambient sets cleared, `PR_SET_NO_NEW_PRIVS` (no
///   setuid bit or file capability can lend any back at exec), and for uid 0 the `SECBIT_NOROOT` securebits
///   (exec as root grants nothing). A uid-0 target's helper is therefore root **as a file owner only**: it
///   reads what root's permission bits allow inside the target's root, never past a mode (no
///   `CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`) — no more than any uid-0 process with no capability, which the
///   target at least is. The ids are checked after the switch (`getresuid`, `getresgid`, `capget`); anything
///   off ends the child before exec. It is then executed from a file descriptor opened before the switch
///   (`execveat(AT_EMPTY_PATH)`): the program's directory need not be searchable by the target's user. Its
///   environment is empty: nothing of the agent's (upload credentials) reaches a process the target's user
///   may trace.
/// - `root_dir` (with `credentials` only): a directory opened (`O_PATH`) by the child before the switch and
///   passed to the program as its standard input ([`ROOT_FD`]): the target's root (`/proc/<pid>/root`), which
///   its own credentials cannot always open (a uid-0 target with capabilities is not traceable by a uid-0
///   helper with none).
///   Opened in the child, never in the agent: the root may sit on a hung filesystem.
/// - `address_space_limit` (`RLIMIT_AS`) and `data_limit` (`RLIMIT_DATA`: heap and private writable
///   mappings; a read-only file mapping is not counted): an allocation past them fails in the child, never
///   in the agent. A confined child also gets `RLIMIT_CORE` 0 (no core dump of it, ever).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Confinement {
    pub credentials: Option<capture::parse::credentials::Credentials>,
    pub root_dir: Option<PathBuf>,
    pub address_space_limit: Option<u64>,
    pub data_limit: Option<u64>,
}

/// The fd a confined child finds its [`Confinement::root_dir`] at: its standard input (`/dev/null`
/// otherwise), the one low fd that can never be the spawn's own error pipe.
pub const ROOT_FD: RawFd = libc::STDIN_FILENO;

/// Everything the child needs to confine itself, prepared in the parent: the child of a multi-threaded process
/// may not allocate or take a lock between fork and exec.
pub(super) struct ConfinedExec {
    limits: Vec<(libc::c_int, u64)>,
    switch: Option<CredentialSwitch>,
}

struct CredentialSwitch {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
    /// `root_dir`, NUL-terminated.
    root_dir: Option<CString>,
    /// The program, opened (read-only, close-on-exec) by the parent as the agent.
    program: OwnedFd,
    /// argv: the strings, and their addresses (as integers: the closure must be `Send + Sync`), null-ended.
    _argv_strings: Vec<CString>,
    argv: Vec<usize>,
}

impl ConfinedExec {
    pub(super) fn prepare(
        program: &str,
        args: &[String],
        confinement: &Confinement,
    ) -> Result<ConfinedExec, String> {
        let mut limits = vec![(libc::RLIMIT_CORE as libc::c_int, 0)];
        if let Some(bytes) = confinement.address_space_limit {
            limits.push((libc::RLIMIT_AS as libc::c_int, bytes));
        }
        if let Some(bytes) = confinement.data_limit {
            limits.push((libc::RLIMIT_DATA as libc::c_int, bytes));
        }
        let switch = match &confinement.credentials {
            None if confinement.root_dir.is_some() => {
                return Err("a root directory is handed over only with credentials".to_string());
            }
            None => None,
            Some(creds) => {
                // Executed from an fd: a bare name is looked up on PATH here, as `Command` would.
                let found = match program.contains('/') {
                    true => PathBuf::from(program),
                    false => crate::tools::find_in_path(program)
                        .ok_or_else(|| format!("cannot start {program}: not found on PATH"))?,
                };
                let program_c = CString::new(found.as_os_str().as_bytes())
                    .map_err(|_| "the program path holds a NUL byte".to_string())?;
                // SAFETY: open with a NUL-terminated path; the fd is owned below.
                let fd = unsafe {
                    libc::open(
                        program_c.as_ptr(),
                        libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY,
                    )
                };
                if fd < 0 {
                    return Err(format!(
                        "cannot open {program}: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                // SAFETY: the fd was just returned by open and is owned by nobody else.
                let opened = unsafe { OwnedFd::from_raw_fd(fd) };
                // Above the standard streams, so that handing the root directory over never closes it.
                // SAFETY: fcntl F_DUPFD_CLOEXEC on an fd we own; the new fd is owned below.
                let high = unsafe { libc::fcntl(opened.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
                if high < 0 {
                    return Err(format!(
                        "cannot duplicate an fd: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                // SAFETY: the fd was just returned by fcntl and is owned by nobody else.
                let program_fd = unsafe { OwnedFd::from_raw_fd(high) };
                let mut strings = Vec::with_capacity(args.len() + 1);
                strings.push(program_c);
                for arg in args {
                    strings.push(
                        CString::new(arg.as_str())
                            .map_err(|_| "an argument holds a NUL byte".to_string())?,
                    );
                }
                let mut argv: Vec<usize> = strings.iter().map(|s| s.as_ptr() as usize).collect();
                argv.push(0);
                let root_dir = match &confinement.root_dir {
                    Some(dir) => Some(
                        CString::new(dir.as_os_str().as_bytes())
                            .map_err(|_| "the root path holds a NUL byte".to_string())?,
                    ),
                    None => None,
                };
                Some(CredentialSwitch {
                    uid: creds.uid,
                    gid: creds.gid,
                    groups: creds.groups.clone(),
                    root_dir,
                    program: program_fd,
                    _argv_strings: strings,
                    argv,
                })
            }
        };
        Ok(ConfinedExec { limits, switch })
    }

    /// Child side, between fork and exec: raw system calls only. With credentials it never returns on
    /// success (it executes the program itself); an error ends the child before exec (`spawn` reports it).
    pub(super) fn apply(&self) -> std::io::Result<()> {
        for &(resource, bytes) in &self.limits {
            let limit = libc::rlimit64 {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            // SAFETY: prlimit64 on this process (pid 0) with a valid new limit and no old-limit pointer.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_prlimit64,
                    0,
                    resource,
                    &limit as *const libc::rlimit64,
                    std::ptr::null_mut::<libc::rlimit64>(),
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        match &self.switch {
            Some(switch) => switch.apply(),
            None => Ok(()),
        }
    }
}

/// `SECBIT_NOROOT | SECBIT_NOROOT_LOCKED`: exec as uid 0 grants no capability, for good.
const SECBIT_NOROOT_AND_LOCKED: libc::c_ulong = 0x3;
/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `Err(last errno)` when a raw system call returned < 0.
fn check(rc: libc::c_long) -> std::io::Result<libc::c_long> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Ends the child's setup: the switch did not leave what it should have.
fn switch_failed() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EPERM)
}

impl CredentialSwitch {
    /// The switch, step by step. Every step: raw system calls of this child on its own credentials, fds and
    /// memory prepared by the parent (NUL-terminated strings, the group list, the null-ended argv), no
    /// allocation.
    fn apply(&self) -> std::io::Result<()> {
        self.hand_over_root_dir()?;
        self.give_up_privilege_at_exec()?;
        self.switch_ids()?;
        self.check_switched()?;
        self.exec()
    }

    /// Open the target's root directory (before the switch: its own ids cannot always open it) as [`ROOT_FD`].
    fn hand_over_root_dir(&self) -> std::io::Result<()> {
        let Some(dir) = &self.root_dir else {
            return Ok(());
        };
        // SAFETY: openat with a NUL-terminated path; the fd is this child's.
        let fd = check(unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                dir.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY,
            )
        })? as libc::c_int;
        if fd != ROOT_FD {
            // SAFETY: dup3 between fds of this child (ROOT_FD held /dev/null); dup3, not dup2: aarch64
            // has no dup2 system call.
            check(unsafe { libc::syscall(libc::SYS_dup3, fd, ROOT_FD, 0) })?;
            // SAFETY: closing the fd this child just opened.
            unsafe { libc::syscall(libc::SYS_close, fd) };
        }
        Ok(())
    }

    /// No privilege is gained at exec from here on: no new privileges, no root securebits (uid 0), the
    /// bounding and ambient capability sets emptied.
    fn give_up_privilege_at_exec(&self) -> std::io::Result<()> {
        // Not through a setuid bit, not through file capabilities.
        // SAFETY: prctl on this child, integer arguments only.
        check(unsafe { libc::syscall(libc::SYS_prctl, libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        if self.uid == 0 {
            // Exec as root grants no capability (best effort: without CAP_SETPCAP the empty sets below and
            // no_new_privs already keep exec from granting any).
            // SAFETY: as above.
            unsafe {
                libc::syscall(
                    libc::SYS_prctl,
                    libc::PR_SET_SECUREBITS,
                    SECBIT_NOROOT_AND_LOCKED,
                    0,
                    0,
                    0,
                )
            };
        }
        // The bounding set, capability by capability until the kernel's last (EINVAL); best effort for the
        // same reason.
        for cap in 0..64 {
            // SAFETY: as above.
            let rc = unsafe { libc::syscall(libc::SYS_prctl, libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
            if rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                break;
            }
        }
        // SAFETY: as above.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_prctl,
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            )
        };
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Groups, gid and uid to the target's, then every capability set emptied.
    fn switch_ids(&self) -> std::io::Result<()> {
        // Groups, then gid, then uid: each needs the privilege the next one drops.
        // SAFETY: setgroups with the parent's list and its length.
        check(unsafe {
            libc::syscall(libc::SYS_setgroups, self.groups.len(), self.groups.as_ptr())
        })?;
        // SAFETY: integer arguments only.
        check(unsafe { libc::syscall(libc::SYS_setresgid, self.gid, self.gid, self.gid) })?;
        // SAFETY: integer arguments only.
        check(unsafe { libc::syscall(libc::SYS_setresuid, self.uid, self.uid, self.uid) })?;
        // Every capability set empty (setresuid to a non-zero uid emptied them already; uid 0 keeps them).
        let mut header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        // SAFETY: capset with a v3 header and the two data words it reads.
        check(unsafe {
            libc::syscall(
                libc::SYS_capset,
                &mut header as *mut CapHeader,
                data.as_ptr(),
            )
        })?;
        Ok(())
    }

    /// Check what the kernel now holds, rather than trust each call did what it says.
    fn check_switched(&self) -> std::io::Result<()> {
        let (mut r, mut e, mut s) = (0 as libc::uid_t, 0 as libc::uid_t, 0 as libc::uid_t);
        // SAFETY: getresuid writes the three ids we point at.
        check(unsafe {
            libc::syscall(
                libc::SYS_getresuid,
                &mut r as *mut libc::uid_t,
                &mut e as *mut libc::uid_t,
                &mut s as *mut libc::uid_t,
            )
        })?;
        if (r, e, s) != (self.uid, self.uid, self.uid) {
            return Err(switch_failed());
        }
        let (mut r, mut e, mut s) = (0 as libc::gid_t, 0 as libc::gid_t, 0 as libc::gid_t);
        // SAFETY: getresgid writes the three ids we point at.
        check(unsafe {
            libc::syscall(
                libc::SYS_getresgid,
                &mut r as *mut libc::gid_t,
                &mut e as *mut libc::gid_t,
                &mut s as *mut libc::gid_t,
            )
        })?;
        if (r, e, s) != (self.gid, self.gid, self.gid) {
            return Err(switch_failed());
        }
        // SAFETY: getgroups with size 0 only counts, writing nothing.
        let count = check(unsafe {
            libc::syscall(libc::SYS_getgroups, 0, std::ptr::null_mut::<libc::gid_t>())
        })?;
        if count as usize != self.groups.len() {
            return Err(switch_failed());
        }
        let mut header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        // SAFETY: capget with a v3 header writes the two data words we pass.
        check(unsafe {
            libc::syscall(
                libc::SYS_capget,
                &mut header as *mut CapHeader,
                data.as_mut_ptr(),
            )
        })?;
        if data
            .iter()
            .any(|d| d.effective != 0 || d.permitted != 0 || d.inheritable != 0)
        {
            return Err(switch_failed());
        }
        Ok(())
    }

    /// Execute the program from its fd, with an empty environment; returns only on failure.
    fn exec(&self) -> std::io::Result<()> {
        let empty: [usize; 1] = [0];
        // SAFETY: execveat of the program's fd with AT_EMPTY_PATH, a null-ended argv of NUL-terminated strings
        // and an empty environment.
        check(unsafe {
            libc::syscall(
                libc::SYS_execveat,
                self.program.as_raw_fd(),
                c"".as_ptr(),
                self.argv.as_ptr(),
                empty.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        })?;
        // execveat returns only on failure.
        Err(std::io::Error::last_os_error())
    }
}
