//! The one hex parser of the decode code: table cells (`0x2a`), request words typed by people
//! (`0xc020462a`, `0XC020462A`, decimal, sign-extended), and byte strings (`01 00 d0 c1`, `0100d0c1`,
//! `0x01:0x00`, what the mem probe prints).

/// A hex number with or without `0x`/`0X`; None for anything else (empty, non-hex, over 32 bits).
pub fn u32_hex(s: &str) -> Option<u32> {
    let s = s.trim();
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u32::from_str_radix(digits, 16).ok()
}

/// A 64-bit hex number with or without `0x`/`0X`.
pub fn u64_hex(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u64::from_str_radix(digits, 16).ok()
}

/// A request word as people write it: `0x…` hex or decimal; the low 32 bits are kept, as the kernel's
/// `unsigned int cmd` does (a sign-extended `0xffffffffc020462a` is the same word).
pub fn request_word(s: &str) -> Option<u32> {
    let s = s.trim();
    let v = if s.starts_with("0x") || s.starts_with("0X") {
        u64_hex(s)?
    } else {
        s.parse::<u64>().ok()?
    };
    Some(v as u32)
}

/// Bytes as hex: whitespace, `:`, `,` and `0x` prefixes allowed between them; None on an odd number of
/// digits or a non-hex character.
pub fn bytes(text: &str) -> Option<Vec<u8>> {
    let mut digits = String::new();
    for token in text.split(|c: char| c.is_whitespace() || c == ':' || c == ',') {
        let token = token
            .strip_prefix("0x")
            .or_else(|| token.strip_prefix("0X"))
            .unwrap_or(token);
        digits.push_str(token);
    }
    if !digits.len().is_multiple_of(2) || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(u32_hex("0x2a"), Some(0x2a));
        assert_eq!(u32_hex(" c020462a "), Some(0xc020462a));
        assert_eq!(u32_hex("0X1F"), Some(0x1f));
        assert_eq!(u32_hex("0x"), None);
        assert_eq!(u32_hex("0x1_0000_0000"), None);
        assert_eq!(u32_hex("-"), None);
        assert_eq!(u64_hex("0x7ffd12345000"), Some(0x7ffd_1234_5000));
    }

    #[test]
    fn request_forms() {
        assert_eq!(request_word("0xc020462a"), Some(0xc020462a));
        assert_eq!(request_word("0XC020462A"), Some(0xc020462a));
        assert_eq!(request_word("0xffffffffc020462a"), Some(0xc020462a));
        assert_eq!(request_word("21505"), Some(0x5401));
        assert_eq!(request_word("nope"), None);
        assert_eq!(request_word("0x"), None);
    }

    #[test]
    fn byte_forms() {
        assert_eq!(bytes("01 00 d0 c1"), Some(vec![1, 0, 0xd0, 0xc1]));
        assert_eq!(bytes("0100d0c1"), Some(vec![1, 0, 0xd0, 0xc1]));
        assert_eq!(bytes("0x01:0x00"), Some(vec![1, 0]));
        assert_eq!(bytes("0100d0c1\n"), Some(vec![1, 0, 0xd0, 0xc1]));
        assert_eq!(bytes(""), Some(vec![]));
        assert_eq!(bytes("010"), None);
        assert_eq!(bytes("zz"), None);
        assert_eq!(bytes("é0"), None);
    }
}
