//! `/proc/<pid>/fd/<n>` link targets and `/proc/<pid>/ns/<kind>` inodes (`pid:[4026531836]`).

use super::{err, parse_u64};
use crate::error::Result;

/// What an fd link points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FdTarget {
    /// A path: a device node (`/dev/nvidiactl`), a file, possibly with ` (deleted)`.
    Path { path: String, deleted: bool },
    /// `socket:[123]`, `pipe:[456]`, `anon_inode:[eventfd]`, `anon_inode:dmabuf` …
    Special { kind: String, detail: String },
}

impl FdTarget {
    pub fn path(&self) -> Option<&str> {
        match self {
            FdTarget::Path { path, .. } => Some(path),
            FdTarget::Special { .. } => None,
        }
    }
}

pub fn parse_link(b: &[u8]) -> Result<FdTarget> {
    if b.is_empty() || b.len() > 4096 {
        return Err(err("fd link", "empty or longer than PATH_MAX"));
    }
    let s = String::from_utf8_lossy(b).into_owned();
    if s.starts_with('/') {
        return Ok(match s.strip_suffix(" (deleted)") {
            Some(p) => FdTarget::Path {
                path: p.to_string(),
                deleted: true,
            },
            None => FdTarget::Path {
                path: s,
                deleted: false,
            },
        });
    }
    match s.split_once(':') {
        Some((kind, detail)) if !kind.is_empty() => Ok(FdTarget::Special {
            kind: kind.to_string(),
            detail: detail.to_string(),
        }),
        _ => Err(err("fd link", format!("unexpected target {s:?}"))),
    }
}

/// `pid:[4026531836]` → 4026531836 (the namespace inode; equal inodes mean the same namespace).
pub fn parse_ns_inode(b: &[u8]) -> Result<u64> {
    let open = b
        .iter()
        .position(|&c| c == b'[')
        .ok_or_else(|| err("ns link", "no '['"))?;
    let inner = b[open + 1..]
        .strip_suffix(b"]")
        .ok_or_else(|| err("ns link", "no trailing ']'"))?;
    parse_u64("ns inode", inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links() {
        assert_eq!(
            parse_link(b"/dev/nvidiactl").unwrap().path(),
            Some("/dev/nvidiactl")
        );
        assert_eq!(
            parse_link(b"/tmp/x (deleted)").unwrap(),
            FdTarget::Path {
                path: "/tmp/x".into(),
                deleted: true
            }
        );
        assert_eq!(
            parse_link(b"anon_inode:[eventfd]").unwrap(),
            FdTarget::Special {
                kind: "anon_inode".into(),
                detail: "[eventfd]".into()
            }
        );
        assert_eq!(parse_link(b"socket:[123]").unwrap().path(), None);
        assert!(parse_link(b"").is_err());
        assert!(parse_link(b"garbage").is_err());
    }

    #[test]
    fn ns_inodes() {
        assert_eq!(parse_ns_inode(b"pid:[4026531836]").unwrap(), 4026531836);
        assert!(parse_ns_inode(b"pid:4026531836").is_err());
        assert!(parse_ns_inode(b"pid:[x]").is_err());
        assert!(parse_ns_inode(b"pid:[1").is_err());
    }
}
