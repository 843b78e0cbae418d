//! `sys/kernel/random/boot_id`: one line, a UUID that changes at every boot (pure parser).

use super::err;
use crate::error::Result;

pub fn parse(bytes: &[u8]) -> Result<String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| err("boot id", "not text"))?
        .trim();
    if text.is_empty()
        || text.len() > 64
        || !text.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
    {
        return Err(err("boot id", "not a UUID"));
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_ids() {
        assert_eq!(
            parse(b"0f6c2e0a-1111-2222-3333-444455556666\n").unwrap(),
            "0f6c2e0a-1111-2222-3333-444455556666"
        );
        assert!(parse(b"").is_err());
        assert!(parse(b"not a uuid!").is_err());
        assert!(parse(&[b'a'; 65]).is_err());
        assert!(parse(b"\xff").is_err());
    }
}
