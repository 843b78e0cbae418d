//! Which machine, which boot, which kernel: enough to tell incidents of different hosts and boots apart.
//!
//! The host name is `NODE_NAME` when that is set (the DaemonSet sets it from the downward API's
//! `spec.nodeName`: inside a pod `uname` names the pod, not the node), else the UTS node name. It names the
//! incident (`<time>-<host>-<pid>`), so a name that is not a plausible host name is ignored.

use capture::ProcRoot;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostIdentity {
    pub hostname: String,
    /// `<proc root>/sys/kernel/random/boot_id`; changes at every boot.
    pub boot_id: Option<String>,
    /// `uname -r`.
    pub kernel: String,
    /// `uname -m` (x86_64, aarch64).
    pub arch: String,
}

impl HostIdentity {
    /// Read the identity of this host. Never fails: unreadable parts stay empty.
    pub fn read(proc_root: &ProcRoot) -> HostIdentity {
        let uts = nix::sys::utsname::uname().ok();
        let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
            uts.as_ref()
                .map(|u| f(u).to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let node_name =
            std::env::var_os(NODE_NAME_ENV).and_then(|v| node_name(v.as_encoded_bytes()));
        HostIdentity {
            hostname: node_name.unwrap_or_else(|| field(|u| u.nodename())),
            boot_id: proc_root.boot_id().ok(),
            kernel: field(|u| u.release()),
            arch: field(|u| u.machine()),
        }
    }
}

/// The environment variable naming the node (Kubernetes: `valueFrom.fieldRef.fieldPath: spec.nodeName`).
pub const NODE_NAME_ENV: &str = "NODE_NAME";

/// A node name as Kubernetes allows it (a DNS subdomain: at most 253 characters of `[A-Za-z0-9.-]`,
/// starting and ending alphanumeric; upper case is tolerated for hand-set values), or None.
pub fn node_name(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?.trim();
    let ok = !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric());
    ok.then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_kubernetes_accepts_and_nothing_else() {
        assert_eq!(node_name(b"gpu-node-7").as_deref(), Some("gpu-node-7"));
        assert_eq!(
            node_name(b"ip-10-0-1-2.ec2.internal\n").as_deref(),
            Some("ip-10-0-1-2.ec2.internal")
        );
        for bad in [
            &b""[..],
            b"  ",
            b"-x",
            b"x-",
            b"a/b",
            b"a b",
            b"\xff",
            &[b'a'; 254],
        ] {
            assert_eq!(node_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_this_host() {
        let id = HostIdentity::read(&ProcRoot::new("/nonexistent-proc-root"));
        assert!(!id.kernel.is_empty());
        assert_eq!(id.arch, std::env::consts::ARCH);
        assert_eq!(id.boot_id, None);
    }
}
