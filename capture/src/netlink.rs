//! What [`crate::taskstats`] and [`crate::proc_events`] share: a netlink socket, bounded little readers of
//! native-endian fields, and the walk over the messages of one datagram. Crate-private.

use std::os::fd::{FromRawFd, OwnedFd};

use crate::error::{Error, Result};

pub(crate) const NLMSG_HDR: usize = 16;
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLMSG_OVERRUN: u16 = 4;

pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at.checked_add(2)?)
        .map(|s| u16::from_ne_bytes([s[0], s[1]]))
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at.checked_add(4)?)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

pub(crate) fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    u32_at(b, at).map(|v| v as i32)
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_ne_bytes(a))
}

/// `len` rounded up to netlink's 4-byte alignment, never past `available`.
pub(crate) fn aligned(len: usize, available: usize) -> usize {
    len.checked_add(3)
        .map(|l| l & !3)
        .unwrap_or(len)
        .min(available)
}

pub(crate) fn parse_error(what: &'static str, why: impl Into<String>) -> Error {
    Error::Parse {
        what,
        why: why.into(),
    }
}

pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) fn netlink_error(what: &'static str, errno: i32) -> Error {
    Error::Netlink {
        what,
        source: std::io::Error::from_raw_os_error(errno),
    }
}

/// A close-on-exec `AF_NETLINK` socket of `kind` (`SOCK_RAW`, `SOCK_DGRAM | SOCK_NONBLOCK`, …).
pub(crate) fn socket(
    kind: libc::c_int,
    protocol: libc::c_int,
    what: &'static str,
) -> Result<OwnedFd> {
    // SAFETY: socket(2) with plain integer arguments; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_NETLINK, kind | libc::SOCK_CLOEXEC, protocol) };
    if raw < 0 {
        return Err(netlink_error(what, last_errno()));
    }
    // SAFETY: `raw` is a socket we just created and own alone.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The messages of one datagram: (type, seq, payload after the netlink header). A malformed header
/// ends the walk with an error naming `what`.
pub(crate) fn messages<'a>(
    mut b: &'a [u8],
    what: &'static str,
) -> impl Iterator<Item = Result<(u16, u32, &'a [u8])>> {
    std::iter::from_fn(move || {
        if b.is_empty() {
            return None;
        }
        let header = (u32_at(b, 0), u16_at(b, 4), u32_at(b, 8));
        let (Some(len), Some(kind), Some(seq)) = header else {
            b = &[];
            return Some(Err(parse_error(what, "truncated netlink header")));
        };
        let len = len as usize;
        if len < NLMSG_HDR || len > b.len() {
            b = &[];
            return Some(Err(parse_error(
                what,
                format!("message length {len} out of bounds"),
            )));
        }
        let payload = &b[NLMSG_HDR..len];
        b = &b[aligned(len, b.len())..];
        Some(Ok((kind, seq, payload)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_walk_aligned_and_stop_at_a_bad_header() {
        let mut d = Vec::new();
        for (kind, seq, body) in [(7u16, 1u32, &b"abcde"[..]), (9, 2, &b""[..])] {
            d.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
            d.extend_from_slice(&kind.to_ne_bytes());
            d.extend_from_slice(&0u16.to_ne_bytes());
            d.extend_from_slice(&seq.to_ne_bytes());
            d.extend_from_slice(&0u32.to_ne_bytes());
            d.extend_from_slice(body);
            while d.len() % 4 != 0 {
                d.push(0);
            }
        }
        let got: Vec<_> = messages(&d, "test").map(|m| m.unwrap()).collect();
        assert_eq!(got, [(7, 1, &b"abcde"[..]), (9, 2, &b""[..])]);
        d.extend_from_slice(&[1, 2, 3]);
        let last = messages(&d, "test").last().unwrap();
        assert!(last.is_err());
        assert_eq!(u64_at(&[0; 7], 0), None);
        assert_eq!(aligned(5, 100), 8);
        assert_eq!(aligned(5, 6), 6);
    }
}
