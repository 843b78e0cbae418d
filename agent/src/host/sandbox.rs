//! Which setting of the sandbox the agent runs in (the shipped systemd unit, a container) refused an
//! operation: appended to the error so that the message names the line to change, not only the errno.
//!
//! systemd's `RestrictAddressFamilies=` makes `socket(2)` fail with `EAFNOSUPPORT`; `ProtectSystem=strict`
//! makes every path outside `ReadWritePaths=` read-only (`EROFS`); a container's read-only root filesystem
//! or a directory owned by another user gives `EACCES`/`EPERM`.

use std::io;

/// The unit's writable paths, for the hints (systemd/wedge-capture.service).
const UNIT_WRITABLE: &str = "/var/lib/wedge-capture and /var/lib/node_exporter/textfile_collector";

/// A hint for an error of binding the metrics listener; empty when there is nothing to add.
pub fn bind_hint(err: &io::Error) -> &'static str {
    match err.raw_os_error() {
        Some(libc::EAFNOSUPPORT) => {
            " (the address family is refused by the sandbox: under systemd, allow it with \
             RestrictAddressFamilies=AF_UNIX AF_NETLINK AF_INET AF_INET6 as the shipped unit does)"
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            " (a port below 1024 needs CAP_NET_BIND_SERVICE; a sandbox may also refuse it: check the unit's \
             SocketBindDeny=/IPAddressDeny= or the pod's security context)"
        }
        Some(libc::EADDRINUSE) => " (another process listens there: choose another port)",
        Some(libc::EADDRNOTAVAIL) => " (no interface of this host or network namespace has that address)",
        _ => "",
    }
}

/// A hint for an error of writing into `dir` (textfile, incident directory); empty when there is nothing to add.
pub fn write_hint(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::EROFS) => format!(
            " (read-only filesystem: under systemd's ProtectSystem=strict only ReadWritePaths= are writable \
             (the shipped unit: {UNIT_WRITABLE}); add the directory in a drop-in, `systemctl edit \
             wedge-capture`; in a container, mount it writable)"
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            " (permission denied: run as root or give the directory to the agent's user; under systemd check \
             ReadWritePaths= and ProtectSystem= (the shipped unit: {UNIT_WRITABLE} writable) and \
             ProtectHome=)"
        ),
        Some(libc::ENOENT) => " (the directory does not exist: create it first)".to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_the_unit_setting() {
        let af = io::Error::from_raw_os_error(libc::EAFNOSUPPORT);
        assert!(bind_hint(&af).contains("RestrictAddressFamilies="));
        let rofs = io::Error::from_raw_os_error(libc::EROFS);
        assert!(write_hint(&rofs).contains("ReadWritePaths="));
        assert!(write_hint(&rofs).contains("ProtectSystem=strict"));
        let denied = io::Error::from_raw_os_error(libc::EACCES);
        assert!(write_hint(&denied).contains("ReadWritePaths="));
        assert_eq!(bind_hint(&io::Error::from_raw_os_error(libc::EINTR)), "");
        assert_eq!(write_hint(&io::Error::other("x")), "");
    }
}
