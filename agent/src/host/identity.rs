//! Which machine, which boot, which kernel: enough to tell incidents of different hosts and boots apart.

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
        HostIdentity {
            hostname: field(|u| u.nodename()),
            boot_id: proc_root.boot_id().ok(),
            kernel: field(|u| u.release()),
            arch: field(|u| u.machine()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_host() {
        let id = HostIdentity::read(&ProcRoot::new("/nonexistent-proc-root"));
        assert!(!id.kernel.is_empty());
        assert_eq!(id.arch, std::env::consts::ARCH);
        assert_eq!(id.boot_id, None);
    }
}
