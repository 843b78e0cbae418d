//! Pressure stall information (`<proc root>/pressure/{cpu,memory,io,irq}`) and `meminfo`: pure parsers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One PSI line: the share of time some (or all) runnable tasks were stalled.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PsiLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    /// Total stall time, µs.
    pub total_us: u64,
}

/// A whole pressure file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Psi {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub some: Option<PsiLine>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<PsiLine>,
}

/// A file that does not have the expected shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

/// Parse a PSI file: `some avg10=0.00 avg60=0.00 avg300=0.00 total=0` and an optional `full` line.
pub fn parse_psi(bytes: &[u8]) -> Result<Psi, ParseError> {
    let text =
        std::str::from_utf8(bytes).map_err(|_| ParseError("pressure file is not text".into()))?;
    let mut psi = Psi::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap_or_default();
        let mut parsed = PsiLine {
            avg10: f64::NAN,
            avg60: f64::NAN,
            avg300: f64::NAN,
            total_us: 0,
        };
        let mut seen = 0;
        for word in words {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| ParseError(format!("pressure: `{word}` is not key=value")))?;
            let bad = || ParseError(format!("pressure: bad value in `{word}`"));
            match key {
                "avg10" => parsed.avg10 = value.parse().map_err(|_| bad())?,
                "avg60" => parsed.avg60 = value.parse().map_err(|_| bad())?,
                "avg300" => parsed.avg300 = value.parse().map_err(|_| bad())?,
                "total" => parsed.total_us = value.parse().map_err(|_| bad())?,
                _ => continue,
            }
            seen += 1;
        }
        if seen < 4 {
            return Err(ParseError(format!("pressure: incomplete line `{line}`")));
        }
        match kind {
            "some" => psi.some = Some(parsed),
            "full" => psi.full = Some(parsed),
            other => return Err(ParseError(format!("pressure: unknown line kind `{other}`"))),
        }
    }
    if psi.some.is_none() && psi.full.is_none() {
        return Err(ParseError("pressure: empty file".into()));
    }
    Ok(psi)
}

/// `meminfo` as name → value. Values carry the file's unit: kB for most, a plain count for `HugePages_*`.
pub fn parse_meminfo(bytes: &[u8]) -> Result<BTreeMap<String, u64>, ParseError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ParseError("meminfo is not text".into()))?;
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (name, rest) = line
            .split_once(':')
            .ok_or_else(|| ParseError(format!("meminfo: no ':' in `{line}`")))?;
        let value = rest
            .split_whitespace()
            .next()
            .ok_or_else(|| ParseError(format!("meminfo: no value for `{name}`")))?;
        let value: u64 = value
            .parse()
            .map_err(|_| ParseError(format!("meminfo: bad value for `{name}`")))?;
        out.insert(name.trim().to_string(), value);
    }
    if out.is_empty() {
        return Err(ParseError("meminfo: empty file".into()));
    }
    Ok(out)
}

/// The meminfo fields worth showing next to a wedge (memory pressure, pinned and unevictable memory).
pub const MEMINFO_HIGHLIGHTS: &[&str] = &[
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
    fn parses_psi_with_and_without_full() {
        let psi = parse_psi(
            b"some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
        )
        .unwrap();
        let some = psi.some.unwrap();
        assert_eq!(some.avg10, 1.5);
        assert_eq!(some.avg60, 0.25);
        assert_eq!(some.total_us, 123_456);
        assert_eq!(psi.full.unwrap().total_us, 7);
        let cpu = parse_psi(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert!(cpu.full.is_none());
    }

    #[test]
    fn rejects_bad_psi() {
        for bad in [
            &b""[..],
            b"some avg10=x avg60=0 avg300=0 total=0",
            b"some avg10=0",
            b"weird avg10=0 avg60=0 avg300=0 total=0",
            b"some avg10 avg60=0 avg300=0 total=0",
            b"\xff",
        ] {
            assert!(parse_psi(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn parses_meminfo() {
        let m = parse_meminfo(
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
            assert!(parse_meminfo(bad).is_err(), "{bad:?}");
        }
    }
}
