//! Pressure stall information (`pressure/{cpu,memory,io,irq}`): pure parser.

use serde::{Deserialize, Serialize};

use super::err;
use super::Parse;
use crate::error::Result;

/// The resources the kernel reports pressure for (`irq` since 6.1, only with a `full` line).
pub const RESOURCES: [&str; 4] = ["cpu", "memory", "io", "irq"];

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

impl Parse for Psi {
    /// Parse a PSI file: `some avg10=0.00 avg60=0.00 avg300=0.00 total=0` and an optional `full` line.
    fn parse(bytes: &[u8]) -> Result<Psi> {
        let text = std::str::from_utf8(bytes).map_err(|_| err("pressure", "not text"))?;
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
                    .ok_or_else(|| err("pressure", format!("`{word}` is not key=value")))?;
                let bad = || err("pressure", format!("bad value in `{word}`"));
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
                return Err(err("pressure", format!("incomplete line `{line}`")));
            }
            match kind {
                "some" => psi.some = Some(parsed),
                "full" => psi.full = Some(parsed),
                other => return Err(err("pressure", format!("unknown line kind `{other}`"))),
            }
        }
        if psi.some.is_none() && psi.full.is_none() {
            return Err(err("pressure", "empty file"));
        }
        Ok(psi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_psi_with_and_without_full() {
        let psi = Psi::parse(
            b"some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
        )
        .unwrap();
        let some = psi.some.unwrap();
        assert_eq!(some.avg10, 1.5);
        assert_eq!(some.avg60, 0.25);
        assert_eq!(some.total_us, 123_456);
        assert_eq!(psi.full.unwrap().total_us, 7);
        let cpu = Psi::parse(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
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
            assert!(Psi::parse(bad).is_err(), "{bad:?}");
        }
    }
}
