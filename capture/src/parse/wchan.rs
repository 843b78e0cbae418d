//! `/proc/<tid>/wchan`: the bare symbol the task sleeps in, or `0` (running, unknown symbol, or no
//! ptrace read access — the kernel does not say which).

use super::{err, trim_ascii};
use crate::error::Result;

/// None for `0` or an empty file; otherwise the symbol.
pub fn parse(b: &[u8]) -> Result<Option<String>> {
    let v = trim_ascii(b);
    if v.is_empty() || v == b"0" {
        return Ok(None);
    }
    if v.len() > 512 || !v.iter().all(|c| c.is_ascii_graphic()) {
        return Err(err(
            "wchan",
            format!("not a symbol: {:?}", String::from_utf8_lossy(v)),
        ));
    }
    Ok(Some(String::from_utf8_lossy(v).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_and_zero() {
        assert_eq!(
            parse(b"percpu_rwsem_wait").unwrap().as_deref(),
            Some("percpu_rwsem_wait")
        );
        assert_eq!(
            parse(b"do_mprotect_pkey\n").unwrap().as_deref(),
            Some("do_mprotect_pkey")
        );
        assert_eq!(parse(b"0").unwrap(), None);
        assert_eq!(parse(b"").unwrap(), None);
        assert!(parse(b"two words").is_err());
        assert!(parse(b"\x00\x01").is_err());
    }
}
