//! User-space pc → mapping: which file (`libcuda.so.1`, `libc.so.6`) and where in it a wedged thread entered the
//! kernel. Pure: the `/proc/<pid>/maps` text is read by a sacrificial child with a deadline (listing the
//! mappings can take the target's mmap lock), never here.

use serde::{Deserialize, Serialize};

/// Where a user-space pc lies.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct UserFrame {
    /// The pc as `/proc/<tid>/syscall` printed it (`0x7f3a1c91a94b`).
    pub pc: String,
    /// The mapped file (`/usr/lib/x86_64-linux-gnu/libc.so.6`), or a pseudo-mapping (`[vdso]`); None when anonymous.
    pub path: Option<String>,
    /// Offset of the pc in the file: pc - mapping start + mapping file offset.
    pub offset: Option<u64>,
    /// The file's GNU build id: not read (it needs the file, which may sit on the frozen filesystem).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

impl UserFrame {
    /// `libc.so.6+0x11c8fb`.
    pub fn short(&self) -> String {
        let name = self
            .path
            .as_deref()
            .map(|p| p.rsplit('/').next().unwrap_or(p))
            .unwrap_or("anonymous memory");
        match self.offset {
            Some(off) => format!("{name}+{off:#x}"),
            None => name.to_string(),
        }
    }
}

/// Parse a hex pc (`0x7f…` or bare hex).
pub fn parse_pc(text: &str) -> Option<u64> {
    u64::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
}

/// The mapping of `maps` (the text of `/proc/<pid>/maps`) that holds `pc`, or None when no line does. Malformed
/// lines are skipped.
pub fn locate(maps: &str, pc: u64) -> Option<UserFrame> {
    for line in maps.lines() {
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(_perms), Some(offset)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (_dev, _inode) = (fields.next(), fields.next());
        let path = fields.next().map(str::trim).filter(|p| !p.is_empty());
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset)) = (
            u64::from_str_radix(start, 16),
            u64::from_str_radix(end, 16),
            u64::from_str_radix(offset, 16),
        ) else {
            continue;
        };
        if (start..end).contains(&pc) {
            return Some(UserFrame {
                pc: format!("{pc:#x}"),
                path: path.map(str::to_string),
                offset: path.map(|_| pc - start + offset),
                build_id: None,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "5581d2a00000-5581d2a01000 r--p 00000000 08:01 1234 /usr/bin/python3.11
7f3a1c800000-7f3a1c828000 r--p 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7f3a1c828000-7f3a1c9bd000 r-xp 00028000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7f3a1d000000-7f3a1d100000 rw-p 00000000 00:00 0
garbage line
7ffd6c1c3000-7ffd6c1e4000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn a_pc_in_libc_is_named_with_its_file_offset() {
        let frame = locate(MAPS, parse_pc("0x7f3a1c91a94b").unwrap()).unwrap();
        assert_eq!(
            frame.path.as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libc.so.6")
        );
        assert_eq!(
            frame.offset,
            Some(0x7f3a1c91a94b - 0x7f3a1c828000 + 0x28000)
        );
        assert_eq!(frame.short(), "libc.so.6+0x11a94b");
        let anon = locate(MAPS, 0x7f3a1d000010).unwrap();
        assert_eq!((anon.path, anon.offset), (None, None));
        assert_eq!(
            locate(MAPS, 0x7ffd6c1c3008).unwrap().path.as_deref(),
            Some("[stack]")
        );
        assert_eq!(locate(MAPS, 0x10), None);
        assert_eq!(locate("\u{0}\u{ff}-x", 0x10), None);
    }
}
