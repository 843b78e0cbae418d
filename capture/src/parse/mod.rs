//! Pure parsers: `fn(&[u8]) -> Result<T>`, one module per /proc file. No I/O here: [`crate::ProcRoot`]
//! decides which files are read, these only decode bytes (from a live /proc, a fake tree or a recording).
//! Hostile input gives an error, never a panic.
//!
//! A module that decodes its file into one type implements [`Parse`] for it (procfs-core's `FromRead`
//! without the reader): `Stat::parse`, `Status::parse`, `Credentials::parse` (the status file's ids and
//! capabilities), `Psi::parse`, `Syscall::parse`. The others keep a function named for what they return:
//! `stat::parse_lite` (a view borrowing the bytes, the scanner's hot path), `stack::parse` (frames),
//! `cgroup::parse` (lines), `wchan::parse`, `boot_id::parse`, `meminfo::parse`, `children::parse`,
//! `fd::parse_link`, `kmsg::parse_record`.

pub mod boot_id;
pub mod cgroup;
pub mod children;
pub mod credentials;
pub mod fd;
pub mod kmsg;
pub mod meminfo;
pub mod pressure;
pub mod stack;
pub mod stat;
pub mod status;
pub mod syscall;
pub mod wchan;

use crate::error::{Error, Result};

/// A value decoded from the whole of one file's bytes. Pure: the bytes come from [`crate::ProcRoot`] (a live
/// /proc, a fake tree or a recording); hostile bytes give an error, never a panic.
pub trait Parse: Sized {
    fn parse(bytes: &[u8]) -> Result<Self>;
}

pub(crate) fn err(what: &'static str, why: impl Into<String>) -> Error {
    Error::Parse {
        what,
        why: why.into(),
    }
}

/// Decimal, no sign, no allocation (hot path).
pub(crate) fn parse_u64(what: &'static str, b: &[u8]) -> Result<u64, Error> {
    if b.is_empty() || b.len() > 20 {
        return Err(err(
            what,
            format!("bad number {:?}", String::from_utf8_lossy(b)),
        ));
    }
    let mut v: u64 = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return Err(err(
                what,
                format!("bad number {:?}", String::from_utf8_lossy(b)),
            ));
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .ok_or_else(|| err(what, "number overflows u64"))?;
    }
    Ok(v)
}

pub(crate) fn parse_i64(what: &'static str, b: &[u8]) -> Result<i64, Error> {
    match b.split_first() {
        Some((b'-', rest)) => {
            let v = parse_u64(what, rest)?;
            if v > i64::MAX as u64 + 1 {
                return Err(err(what, "number overflows i64"));
            }
            Ok((v as i128).wrapping_neg() as i64)
        }
        _ => {
            let v = parse_u64(what, b)?;
            i64::try_from(v).map_err(|_| err(what, "number overflows i64"))
        }
    }
}

/// `0x`-prefixed lowercase hex as /proc/<tid>/syscall prints it.
pub(crate) fn parse_hex(what: &'static str, b: &[u8]) -> Result<u64, Error> {
    let digits = b.strip_prefix(b"0x").ok_or_else(|| {
        err(
            what,
            format!("expected 0x…, got {:?}", String::from_utf8_lossy(b)),
        )
    })?;
    if digits.is_empty() || digits.len() > 16 {
        return Err(err(
            what,
            format!("bad hex {:?}", String::from_utf8_lossy(b)),
        ));
    }
    let mut v: u64 = 0;
    for &c in digits {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => {
                return Err(err(
                    what,
                    format!("bad hex {:?}", String::from_utf8_lossy(b)),
                ))
            }
        };
        v = (v << 4) | u64::from(d);
    }
    Ok(v)
}

pub(crate) fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_u64("n", b"18446744073709551615").unwrap(), u64::MAX);
        assert!(parse_u64("n", b"18446744073709551616").is_err());
        assert!(parse_u64("n", b"").is_err());
        assert!(parse_u64("n", b"1a").is_err());
        assert_eq!(parse_i64("n", b"-1").unwrap(), -1);
        assert_eq!(parse_i64("n", b"-9223372036854775808").unwrap(), i64::MIN);
        assert!(parse_i64("n", b"-9223372036854775809").is_err());
        assert_eq!(parse_hex("h", b"0xc020462a").unwrap(), 0xc020462a);
        assert!(parse_hex("h", b"c020462a").is_err());
        assert!(parse_hex("h", b"0x").is_err());
        assert!(parse_hex("h", b"0x11111111111111111").is_err());
        assert_eq!(trim_ascii(b"  a b \n"), b"a b");
        assert_eq!(trim_ascii(b" \n"), b"");
    }
}
