//! Which machine, which boot, which kernel: enough to tell incidents of different hosts and boots apart.

use std::path::Path;

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
    pub fn read(proc_root: &Path) -> HostIdentity {
        let uts = nix::sys::utsname::uname().ok();
        let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
            uts.as_ref()
                .map(|u| f(u).to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        HostIdentity {
            hostname: field(|u| u.nodename()),
            boot_id: std::fs::read(proc_root.join("sys/kernel/random/boot_id"))
                .ok()
                .and_then(|bytes| parse_boot_id(&bytes)),
            kernel: field(|u| u.release()),
            arch: field(|u| u.machine()),
        }
    }
}

/// A boot id is one line of text (a UUID).
pub fn parse_boot_id(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?.trim();
    (!text.is_empty()
        && text.len() <= 64
        && text.chars().all(|c| c.is_ascii_hexdigit() || c == '-'))
    .then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_ids() {
        assert_eq!(
            parse_boot_id(b"0f6c2e0a-1111-2222-3333-444455556666\n").as_deref(),
            Some("0f6c2e0a-1111-2222-3333-444455556666")
        );
        assert_eq!(parse_boot_id(b""), None);
        assert_eq!(parse_boot_id(b"not a uuid!"), None);
    }

    #[test]
    fn reads_this_host() {
        let id = HostIdentity::read(Path::new("/nonexistent-proc-root"));
        assert!(!id.kernel.is_empty());
        assert_eq!(id.arch, std::env::consts::ARCH);
        assert_eq!(id.boot_id, None);
    }
}
