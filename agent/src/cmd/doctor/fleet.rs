//! `doctor`'s fleet checks: what a DaemonSet or a systemd unit must allow for the agent to see the host's
//! processes and publish what it finds. Each is tried for real where that is harmless (a bind, a file created and
//! removed), because a sandbox refuses operations that permission bits would allow.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::check::{check, Check, Status};
use crate::host::sandbox::{bind_hint, write_hint};

/// What the fleet checks look at (from `doctor`'s flags, or the agent's config file).
#[derive(Debug, Clone, Default)]
pub struct FleetTargets {
    pub metrics_listen: Option<SocketAddr>,
    pub textfile_dir: Option<PathBuf>,
    pub ring_dirs: Vec<PathBuf>,
}

/// The inode of the initial pid namespace (`PROC_PID_INIT_INO`): every host process is in it.
const INIT_PID_NS_INODE: u64 = 0xEFFF_FFFC;

pub fn checks(targets: &FleetTargets) -> Vec<Check> {
    let mut out = vec![host_pid_namespace(Path::new("/proc/self/ns/pid"))];
    out.push(match targets.metrics_listen {
        Some(addr) => metrics_port(addr),
        None => check(
            "metrics-port",
            Status::Info,
            "metrics_listen is not set: no /metrics to check",
            "",
        ),
    });
    out.push(match &targets.textfile_dir {
        Some(dir) => textfile_dir(dir),
        None => check(
            "textfile-dir",
            Status::Info,
            "textfile_dir is not set: no node_exporter textfile to check",
            "",
        ),
    });
    out.extend(targets.ring_dirs.iter().map(|d| ring_dir(d)));
    out
}

/// The agent must share the host's pid namespace, or it sees only its own container's processes.
fn host_pid_namespace(ns_link: &Path) -> Check {
    let name = "host-pid-namespace";
    let fix = "Kubernetes: hostPID: true (deploy/kubernetes/base/daemonset.yaml); a container: --pid=host";
    let inode = std::fs::metadata(ns_link).map(|m| m.ino());
    match inode {
        Ok(INIT_PID_NS_INODE) => check(
            name,
            Status::Ok,
            "in the host's (initial) pid namespace: every process of the host is visible",
            "",
        ),
        Ok(other) => check(
            name,
            Status::Fail,
            format!(
                "in pid namespace {other}, not the host's ({INIT_PID_NS_INODE}): only this container's processes \
                 are visible, so GPU workers of other pods are never watched"
            ),
            fix,
        ),
        Err(err) => check(name, Status::Warn, format!("cannot read self/ns/pid: {err}"), fix),
    }
}

/// Bind `addr` and let go at once: a sandbox that refuses the address family or the port shows here.
fn metrics_port(addr: SocketAddr) -> Check {
    let name = "metrics-port";
    match TcpListener::bind(addr) {
        Ok(listener) => {
            drop(listener);
            check(name, Status::Ok, format!("{addr} can be bound"), "")
        }
        Err(err) if err.kind() == ErrorKind::AddrInUse => check(
            name,
            Status::Warn,
            format!("{addr} is in use: by the running agent (fine) or by another exporter"),
            "if no agent runs, choose another port for metrics_listen (--metrics-listen)",
        ),
        Err(err) => check(
            name,
            Status::Fail,
            format!("cannot bind {addr}: {err}{}", bind_hint(&err)),
            "allow the address family and port, or change metrics_listen",
        ),
    }
}

/// Create and remove a file in `dir`: a read-only mount or a sandbox refuses it even where the mode allows it.
pub(super) fn write_probe(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".wedge-capture-doctor-{}.tmp", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)?;
    drop(file);
    std::fs::remove_file(&probe)
}

fn textfile_dir(dir: &Path) -> Check {
    let name = "textfile-dir";
    match std::fs::metadata(dir) {
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return check(
                name,
                Status::Fail,
                format!(
                    "{} does not exist: the agent does not create it, so no textfile is written",
                    dir.display()
                ),
                "install node_exporter's textfile collector directory, or unset textfile_dir",
            )
        }
        Err(err) => {
            return check(
                name,
                Status::Fail,
                format!("{}: {err}", dir.display()),
                "fix the path or unset textfile_dir",
            )
        }
        Ok(meta) if !meta.is_dir() => {
            return check(
                name,
                Status::Fail,
                format!("{} is not a directory", dir.display()),
                "point textfile_dir at node_exporter's --collector.textfile.directory",
            )
        }
        Ok(_) => {}
    }
    match write_probe(dir) {
        Ok(()) => check(
            name,
            Status::Ok,
            format!(
                "{} is writable (a file was created and removed)",
                dir.display()
            ),
            "",
        ),
        Err(err) => check(
            name,
            Status::Fail,
            format!(
                "cannot write into {}: {err}{}",
                dir.display(),
                write_hint(&err)
            ),
            "make the directory writable for the agent",
        ),
    }
}

/// Workers create their rings here, often as non-root users: the directory must be world-writable and sticky
/// (like /tmp), and every parent traversable.
fn ring_dir(dir: &Path) -> Check {
    let name = "ring-dir";
    let meta = match std::fs::metadata(dir) {
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return check(
                name,
                Status::Info,
                format!(
                    "{} does not exist yet: the agent creates it at start",
                    dir.display()
                ),
                "",
            )
        }
        Err(err) => {
            return check(
                name,
                Status::Warn,
                format!("{}: {err}", dir.display()),
                "fix ring_dir",
            )
        }
        Ok(meta) => meta,
    };
    let mode = meta.permissions().mode() & 0o7777;
    let closed_parent = dir
        .ancestors()
        .skip(1)
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 == 0));
    if let Some(parent) = closed_parent {
        return check(
            name,
            Status::Warn,
            format!(
                "{} (mode {mode:04o}) cannot be reached by non-root workers: {} is not searchable by others",
                dir.display(),
                parent.display()
            ),
            format!("chmod o+x {} (0711: reachable, not listable)", parent.display()),
        );
    }
    if mode & 0o1777 == 0o1777 {
        check(
            name,
            Status::Ok,
            format!(
                "{} is {mode:04o} (sticky, world-writable): any worker can create its own ring",
                dir.display()
            ),
            "",
        )
    } else {
        check(
            name,
            Status::Warn,
            format!("{} is {mode:04o}: workers that are not root (or its owner) cannot create rings", dir.display()),
            format!(
                "chmod 1777 {} (like /tmp), or give it to the workers' group (docs/agent.md, \"Containers: rings \
                 from inside\")",
                dir.display()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_of(c: &Check) -> Status {
        c.status
    }

    #[test]
    fn a_missing_textfile_dir_fails_and_a_real_one_passes() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(
            status_of(&textfile_dir(&tmp.path().join("nope"))),
            Status::Fail
        );
        assert_eq!(status_of(&textfile_dir(tmp.path())), Status::Ok);
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            0,
            "the probe file is removed"
        );
    }

    #[test]
    fn ring_dir_modes() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let rings = tmp.path().join("rings");
        assert_eq!(status_of(&ring_dir(&rings)), Status::Info);
        std::fs::create_dir(&rings).unwrap();
        std::fs::set_permissions(&rings, std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = ring_dir(&rings);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.fix.contains("chmod 1777"));
        std::fs::set_permissions(&rings, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(status_of(&ring_dir(&rings)), Status::Ok);
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let c = ring_dir(&rings);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.fix.contains("o+x"));
    }

    #[test]
    fn a_port_in_use_warns_and_a_free_one_passes() {
        let busy = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = busy.local_addr().unwrap();
        assert_eq!(status_of(&metrics_port(addr)), Status::Warn);
        drop(busy);
        assert_eq!(
            status_of(&metrics_port("127.0.0.1:0".parse().unwrap())),
            Status::Ok
        );
    }
}
