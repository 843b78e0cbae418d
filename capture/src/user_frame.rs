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
    /// The file's GNU build id (hex), read with its symbols by a sacrificial helper (`crate::symbolize`), so
    /// the symbol can be re-resolved later; None when not read (or the file has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// The ELF symbol the pc is in, with the pc's offset in it (`ioctl+0x1b`), from the file's `.symtab` or
    /// `.dynsym`; None when not resolved (see `symbol_not_captured`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// Why `symbol` is absent (the file could not be read in time, no symbol covers the pc, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol_not_captured: Option<String>,
    /// A heuristic native call chain: values on the thread's stack just above sp that fall inside executable
    /// mappings (return addresses, but also stale or unrelated pointers), innermost first. Never proof.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<CandidateFrame>,
}

/// One value found on a blocked thread's stack that points into an executable mapping (heuristic).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CandidateFrame {
    /// Where on the stack it was read: bytes above sp.
    pub stack_offset: u64,
    /// The value (an address), hex.
    pub address: String,
    /// The mapped file it falls in.
    pub path: Option<String>,
    /// Offset of the address in the file.
    pub offset: Option<u64>,
    /// The ELF symbol it falls in (`cuMemcpyDtoH_v2+0x4f`), when resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// The file's GNU build id (hex), when read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

impl CandidateFrame {
    /// `libcuda.so.1 cuMemcpyDtoH_v2+0x4f` or `libcuda.so.1+0x2f3e1`.
    pub fn short(&self) -> String {
        let name = self
            .path
            .as_deref()
            .map(|p| p.rsplit('/').next().unwrap_or(p))
            .unwrap_or("?");
        match (&self.symbol, self.offset) {
            (Some(symbol), _) => format!("{name} {symbol}"),
            (None, Some(off)) => format!("{name}+{off:#x}"),
            (None, None) => name.to_string(),
        }
    }
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

/// Which file a mapping is: the device and inode number its maps line shows (`fd:01 1234`). The symbolizer
/// accepts an ELF file only when the file it opened by the mapping's path is this one (`st_dev`, `st_ino`):
/// a path that now names another file (replaced, deleted and re-created, a symlink planted at
/// `x.so (deleted)`) is not what the process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileId {
    /// The device's major and minor numbers (the kernel prints them in hex: `fd:01`, `00:1a2`).
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
}

impl std::fmt::Display for FileId {
    /// `fd:01 inode 1234`, as the maps line spells the device.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:02x}:{:02x} inode {}",
            self.major, self.minor, self.inode
        )
    }
}

/// `fd:01` → (0xfd, 0x01): the maps print `MAJOR(dev):MINOR(dev)` in hex, at least two digits each.
fn parse_dev(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once(':')?;
    let hex = |t: &str| {
        (!t.is_empty() && t.len() <= 8 && t.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(t, 16).ok())
            .flatten()
    };
    Some((hex(major)?, hex(minor)?))
}

/// One line of `/proc/<pid>/maps`, as far as the user frame needs it.
struct MapsLine<'a> {
    start: u64,
    end: u64,
    perms: &'a str,
    offset: u64,
    /// The mapped file's device and inode; None for an anonymous mapping (inode 0) or a malformed field.
    file: Option<FileId>,
    /// The mapped file (or `[stack]`, `[vdso]` …); None for an anonymous mapping.
    path: Option<&'a str>,
}

/// `start-end perms offset dev inode path`; None for a malformed line.
fn parse_maps_line(line: &str) -> Option<MapsLine<'_>> {
    let mut fields = line.splitn(6, ' ');
    let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
    let (dev, inode) = (fields.next(), fields.next());
    let path = fields.next().map(str::trim).filter(|p| !p.is_empty());
    let (start, end) = range.split_once('-')?;
    let file = match (dev.and_then(parse_dev), inode.map(str::parse::<u64>)) {
        (Some((major, minor)), Some(Ok(inode))) if inode != 0 => Some(FileId {
            major,
            minor,
            inode,
        }),
        _ => None,
    };
    Some(MapsLine {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset: u64::from_str_radix(offset, 16).ok()?,
        file,
        path,
    })
}

/// Every identity (device, inode) the maps show for the file `path`, in order, without repeats: usually one;
/// more when the process mapped two files that had the same path at the time (one replaced after the other).
pub fn file_ids(maps: &str, path: &str) -> Vec<FileId> {
    let mut ids = Vec::new();
    for line in maps.lines().filter_map(parse_maps_line) {
        if let (Some(id), Some(p)) = (line.file, line.path) {
            if p == path && !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// The executable file mappings of `maps`: `(start, end, file offset, path)`. Malformed lines are skipped.
pub fn executable_mappings(maps: &str) -> Vec<(u64, u64, u64, String)> {
    maps.lines()
        .filter_map(parse_maps_line)
        .filter(|m| m.perms.as_bytes().get(2) == Some(&b'x') && m.start < m.end)
        .filter_map(|m| {
            let path = m.path.filter(|p| p.starts_with('/'))?;
            Some((m.start, m.end, m.offset, path.to_string()))
        })
        .collect()
}

/// The bounded return-address scan: each 8-byte little-endian word of `stack` (read at sp) that falls inside an
/// executable file mapping, at most `max`, innermost first. A heuristic: stale frames and function pointers
/// pass the test too.
pub fn scan_candidates(
    stack: &[u8],
    mappings: &[(u64, u64, u64, String)],
    max: usize,
) -> Vec<CandidateFrame> {
    let mut out = Vec::new();
    for (i, word) in stack.chunks_exact(8).enumerate() {
        if out.len() >= max {
            break;
        }
        let value = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
        if let Some((start, _, offset, path)) = mappings
            .iter()
            .find(|(start, end, _, _)| (*start..*end).contains(&value))
        {
            out.push(CandidateFrame {
                stack_offset: (i * 8) as u64,
                address: format!("{value:#x}"),
                path: Some(path.clone()),
                offset: Some(value - start + offset),
                ..CandidateFrame::default()
            });
        }
    }
    out
}

/// Parse a hex pc (`0x7f…` or bare hex).
pub fn parse_pc(text: &str) -> Option<u64> {
    u64::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
}

/// The mapping of `maps` (the text of `/proc/<pid>/maps`) that holds `pc`, or None when no line does. Malformed
/// lines are skipped.
pub fn locate(maps: &str, pc: u64) -> Option<UserFrame> {
    let m = maps
        .lines()
        .filter_map(parse_maps_line)
        .find(|m| (m.start..m.end).contains(&pc))?;
    Some(UserFrame {
        pc: format!("{pc:#x}"),
        path: m.path.map(str::to_string),
        offset: m.path.map(|_| pc - m.start + m.offset),
        ..UserFrame::default()
    })
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

    #[test]
    fn the_maps_name_each_files_device_and_inode() {
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let id = FileId {
            major: 8,
            minor: 1,
            inode: 99,
        };
        assert_eq!(file_ids(MAPS, libc), [id]);
        assert_eq!(id.to_string(), "08:01 inode 99");
        // Anonymous mappings (inode 0) and pseudo-mappings name no file.
        assert!(file_ids(MAPS, "[stack]").is_empty());
        assert!(file_ids(MAPS, "/nonexistent").is_empty());
        // Majors and minors are hex, and may be wider than two digits (`MINOR` has 20 bits).
        let wide = "7f0000000000-7f0000001000 r-xp 00000000 103:1a2 7 /opt/lib/x.so\n\
7f0000001000-7f0000002000 r-xp 00001000 fd:00 8 /opt/lib/x.so (deleted)\n\
7f0000002000-7f0000003000 r-xp 00000000 103:1a2 9 /opt/lib/x.so\n\
7f0000003000-7f0000004000 r-xp 00000000 zz:01 9 /opt/lib/y.so\n\
7f0000004000-7f0000005000 r-xp 00000000 01:01 -3 /opt/lib/y.so\n";
        let ids = file_ids(wide, "/opt/lib/x.so");
        assert_eq!(
            ids,
            [
                FileId {
                    major: 0x103,
                    minor: 0x1a2,
                    inode: 7
                },
                FileId {
                    major: 0x103,
                    minor: 0x1a2,
                    inode: 9
                }
            ]
        );
        assert_eq!(
            file_ids(wide, "/opt/lib/x.so (deleted)"),
            [FileId {
                major: 0xfd,
                minor: 0,
                inode: 8
            }]
        );
        // A malformed device or inode gives no identity (and so no file the symbolizer accepts).
        assert!(file_ids(wide, "/opt/lib/y.so").is_empty());
        assert_eq!(parse_dev("fd:01"), Some((0xfd, 1)));
        for bad in ["fd", ":01", "fd:", "fd:0x1", "+1:1", "123456789:1"] {
            assert_eq!(parse_dev(bad), None, "{bad}");
        }
    }

    /// The live maps of this process show each mapped file's `st_dev`/`st_ino` as `stat` gives them.
    #[test]
    fn the_maps_identity_is_what_stat_says() {
        use std::os::unix::fs::MetadataExt;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let ids = file_ids(&maps, exe.to_str().unwrap());
        let meta = std::fs::metadata(&exe).unwrap();
        let stat = FileId {
            major: libc::major(meta.dev()),
            minor: libc::minor(meta.dev()),
            inode: meta.ino(),
        };
        assert_eq!(ids, [stat], "{maps}");
    }

    #[test]
    fn the_stack_scan_keeps_words_inside_executable_file_mappings_only() {
        let mappings = executable_mappings(MAPS);
        assert_eq!(mappings.len(), 1, "{mappings:?}");
        let mut stack = Vec::new();
        for word in [
            0u64,
            0x7f3a1c91a94b,
            0x7f3a1d000010,
            0x5581d2a00010,
            0x7f3a1c828000,
            7,
        ] {
            stack.extend_from_slice(&word.to_le_bytes());
        }
        stack.extend_from_slice(&[1, 2, 3]);
        let found = scan_candidates(&stack, &mappings, 8);
        let addresses: Vec<&str> = found.iter().map(|c| c.address.as_str()).collect();
        assert_eq!(addresses, ["0x7f3a1c91a94b", "0x7f3a1c828000"]);
        assert_eq!(found[0].stack_offset, 8);
        assert_eq!(found[0].offset, Some(0x11a94b));
        assert_eq!(found[0].short(), "libc.so.6+0x11a94b");
        assert_eq!(scan_candidates(&stack, &mappings, 1).len(), 1);
        assert!(scan_candidates(b"", &mappings, 8).is_empty());
    }
}
