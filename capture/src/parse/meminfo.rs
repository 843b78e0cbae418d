//! `meminfo`: pure parser, name → value.

use std::collections::BTreeMap;

use super::err;
use crate::error::Result;

/// `meminfo` as name → value. Values carry the file's unit: kB for most, a plain count for `HugePages_*`.
pub fn parse(bytes: &[u8]) -> Result<BTreeMap<String, u64>> {
    let text = std::str::from_utf8(bytes).map_err(|_| err("meminfo", "not text"))?;
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (name, rest) = line
            .split_once(':')
            .ok_or_else(|| err("meminfo", format!("no ':' in `{line}`")))?;
        let value = rest
            .split_whitespace()
            .next()
            .ok_or_else(|| err("meminfo", format!("no value for `{name}`")))?;
        let value: u64 = value
            .parse()
            .map_err(|_| err("meminfo", format!("bad value for `{name}`")))?;
        out.insert(name.trim().to_string(), value);
    }
    if out.is_empty() {
        return Err(err("meminfo", "empty file"));
    }
    Ok(out)
}

/// The meminfo fields worth showing next to a wedge (memory pressure, pinned and unevictable memory).
pub const HIGHLIGHTS: &[&str] = &[
    "MemTotal",
    "MemAvailable",
    "Dirty",
    "Writeback",
    "Mlocked",
    "Unevictable",
    "AnonHugePages",
    "HugePages_Total",
    "HugePages_Free",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo() {
        let m = parse(
            b"MemTotal:       24576000 kB\nMemAvailable:   20000000 kB\nHugePages_Total:       0\nDirty:  12 kB\n",
        )
        .unwrap();
        assert_eq!(m["MemTotal"], 24_576_000);
        assert_eq!(m["HugePages_Total"], 0);
        assert_eq!(m["Dirty"], 12);
    }

    #[test]
    fn rejects_bad_meminfo() {
        for bad in [
            &b""[..],
            b"MemTotal 12 kB",
            b"MemTotal: lots kB",
            b"MemTotal:",
            b"\xff:1",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
