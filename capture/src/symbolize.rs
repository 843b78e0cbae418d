//! ELF symbols for user-space frames: which function of `libc.so.6` or `libcuda.so.1` a wedged thread's pc (or a
//! candidate return address) lies in, and each file's GNU build id so the symbol can be re-resolved later.
//!
//! The file is read by path under the target's root (`/proc/<pid>/root/usr/lib/…/libc.so.6`), never through
//! the process's memory. Even so, the file may sit on a hung filesystem (NFS, a frozen disk): [`resolve`] runs
//! in a sacrificial helper process (`wedge-capture internal resolve-symbols`) under the probe deadline, which
//! prints a [`Resolution`] as JSON; the agent parses it with [`parse_resolution`]. Only the ELF symbol tables
//! (`.symtab`, `.dynsym`) are used: no DWARF, no debuginfod, nothing fetched. The same helper reads the source
//! line of a wedged thread's innermost Python frame ([`read_source_line`]), by path under the same root.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Most files one helper run resolves, and most offsets per file (the pc and the scan's candidates).
pub const MAX_FILES: usize = 32;
pub const MAX_OFFSETS_PER_FILE: usize = 64;
/// Longest symbol name kept (mangled C++ names can be long).
const MAX_SYMBOL: usize = 256;

/// One file's answers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ResolvedFile {
    /// The path as the maps show it (inside the target's root).
    pub path: String,
    /// The GNU build id, hex; None when the file has none or could not be read.
    pub build_id: Option<String>,
    /// `(file offset, symbol+offset)` for each offset asked, in order; None where no symbol covers it.
    pub symbols: Vec<(u64, Option<String>)>,
    /// Why the file could not be read or parsed.
    pub error: Option<String>,
}

/// One line of a Python source file (the innermost frame of a wedged thread), read the same way.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SourceLine {
    pub path: String,
    pub line: u32,
    /// The line's text, trimmed (`optimizer.step()`).
    pub text: Option<String>,
    pub error: Option<String>,
}

/// What the helper prints.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Resolution {
    pub files: Vec<ResolvedFile>,
    pub sources: Vec<SourceLine>,
}

impl Resolution {
    /// The symbol (`ioctl+0x1b`) at `offset` of `path`, if resolved.
    pub fn symbol(&self, path: &str, offset: u64) -> Option<&str> {
        self.file(path)?
            .symbols
            .iter()
            .find(|(o, _)| *o == offset)
            .and_then(|(_, s)| s.as_deref())
    }

    pub fn file(&self, path: &str) -> Option<&ResolvedFile> {
        self.files.iter().find(|f| f.path == path)
    }

    /// The text of line `line` of the source file `path`, if read.
    pub fn source(&self, path: &str, line: u32) -> Option<&str> {
        self.sources
            .iter()
            .find(|s| s.path == path && s.line == line)
            .and_then(|s| s.text.as_deref())
    }
}

/// Most bytes of a source file read to find one line, and the longest line text kept.
const MAX_SOURCE_BYTES: u64 = 16 << 20;
const MAX_SOURCE_LINE: usize = 200;

/// `root` + an absolute `path` that must not climb out of it.
fn under_root(root: &Path, path: &str) -> Option<std::path::PathBuf> {
    let relative = path.strip_prefix('/')?;
    (!relative.split('/').any(|part| part == "..")).then(|| root.join(relative))
}

/// Line `line` (1-based) of the text file `path` under `root`, trimmed and bounded. Runs in the helper only.
pub fn read_source_line(root: &Path, path: &str, line: u32) -> SourceLine {
    use std::io::{BufRead, Read};
    let mut out = SourceLine {
        path: path.to_string(),
        line,
        ..SourceLine::default()
    };
    let Some(full) = under_root(root, path) else {
        out.error = Some("not an absolute path inside the process's root".to_string());
        return out;
    };
    let file = match std::fs::File::open(&full) {
        Ok(file) => file,
        Err(err) => {
            out.error = Some(format!("cannot open: {err}"));
            return out;
        }
    };
    let mut reader = std::io::BufReader::new(file.take(MAX_SOURCE_BYTES));
    let mut buf = Vec::new();
    for _ in 0..line {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => {
                out.error =
                    Some("the file has fewer lines (changed since it was loaded?)".to_string());
                return out;
            }
            Ok(_) => {}
            Err(err) => {
                out.error = Some(format!("cannot read: {err}"));
                return out;
            }
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let text: String = text.trim().chars().take(MAX_SOURCE_LINE).collect();
    out.text = Some(text);
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn cut(mut name: String) -> String {
    if name.len() > MAX_SYMBOL {
        let mut end = MAX_SYMBOL;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
        name.push('…');
    }
    name
}

/// Resolve `offsets` (file offsets, as `pc - start + offset` from the maps) in the ELF file `path` found under
/// `root`. Runs in the helper process only: it opens and maps the file.
pub fn resolve(root: &Path, path: &str, offsets: &[u64]) -> ResolvedFile {
    use blazesym::symbolize::source::{Elf, Source};
    use blazesym::symbolize::{Input, Symbolized, Symbolizer};

    let mut file = ResolvedFile {
        path: path.to_string(),
        ..ResolvedFile::default()
    };
    let Some(full) = under_root(root, path) else {
        file.error = Some("not an absolute path inside the process's root".to_string());
        return file;
    };
    match blazesym::helper::read_elf_build_id(&full) {
        Ok(id) => file.build_id = id.map(|id| hex(&id)),
        Err(err) => {
            file.error = Some(format!("cannot read the ELF file: {err}"));
            return file;
        }
    }
    let offsets = &offsets[..offsets.len().min(MAX_OFFSETS_PER_FILE)];
    let mut elf = Elf::new(&full);
    elf.debug_syms = false;
    let source = Source::Elf(elf);
    let symbolizer = Symbolizer::new();
    match symbolizer.symbolize(&source, Input::FileOffset(offsets)) {
        Ok(found) => {
            file.symbols = offsets
                .iter()
                .zip(found)
                .map(|(&offset, sym)| {
                    let name = match sym {
                        Symbolized::Sym(sym) => {
                            Some(cut(format!("{}+{:#x}", sym.name, sym.offset)))
                        }
                        Symbolized::Unknown(_) => None,
                    };
                    (offset, name)
                })
                .collect();
        }
        Err(err) => file.error = Some(format!("cannot symbolize: {err}")),
    }
    file
}

/// Parse the helper's stdout (bounded by the probe runner's pipe read): a [`Resolution`].
pub fn parse_resolution(bytes: &[u8]) -> Result<Resolution> {
    let mut resolution: Resolution = serde_json::from_slice(bytes).map_err(|err| Error::Parse {
        what: "symbol resolution",
        why: err.to_string(),
    })?;
    resolution.files.truncate(MAX_FILES);
    resolution.sources.truncate(MAX_FILES);
    for file in &mut resolution.files {
        file.symbols.truncate(MAX_OFFSETS_PER_FILE);
    }
    Ok(resolution)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary itself: an ELF file with symbols, found through `/` as the root.
    #[test]
    fn a_function_of_our_own_binary_is_named_with_its_offset() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let pc = a_function_of_our_own_binary_is_named_with_its_offset as *const () as usize as u64;
        let frame = crate::user_frame::locate(&maps, pc).unwrap();
        assert_eq!(frame.path.as_deref(), Some(exe));
        let file = resolve(Path::new("/"), exe, &[frame.offset.unwrap()]);
        assert_eq!(file.error, None);
        let symbol = file.symbols[0].1.as_deref().unwrap();
        assert!(
            symbol.contains("a_function_of_our_own_binary_is_named_with_its_offset"),
            "{symbol}"
        );
        assert!(file.build_id.as_deref().is_some_and(|id| id.len() >= 16));
        let resolution = Resolution {
            files: vec![file],
            sources: Vec::new(),
        };
        let text = serde_json::to_vec(&resolution).unwrap();
        let back = parse_resolution(&text).unwrap();
        assert_eq!(back, resolution);
        assert!(back.symbol(exe, frame.offset.unwrap()).is_some());
    }

    #[test]
    fn unreadable_or_escaping_paths_say_why() {
        let missing = resolve(Path::new("/"), "/nonexistent/libfoo.so", &[0x10]);
        assert!(missing.error.unwrap().contains("cannot read"));
        let escaping = resolve(Path::new("/proc/1/root"), "/../../etc/passwd", &[0]);
        assert!(escaping
            .error
            .unwrap()
            .contains("inside the process's root"));
        let relative = resolve(Path::new("/"), "[vdso]", &[0]);
        assert!(relative.error.is_some());
        assert!(parse_resolution(b"garbage").is_err());
    }

    #[test]
    fn a_source_line_is_read_trimmed_or_says_why() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("train.py"),
            "import x\n    optimizer.step()  \n",
        )
        .unwrap();
        let line = read_source_line(dir.path(), "/train.py", 2);
        assert_eq!(line.text.as_deref(), Some("optimizer.step()"));
        let past = read_source_line(dir.path(), "/train.py", 9);
        assert!(past.text.is_none() && past.error.unwrap().contains("fewer lines"));
        assert!(read_source_line(dir.path(), "/../train.py", 1)
            .error
            .is_some());
        assert!(read_source_line(dir.path(), "/missing.py", 1)
            .error
            .is_some());
        let resolution = Resolution {
            sources: vec![line],
            ..Resolution::default()
        };
        assert_eq!(resolution.source("/train.py", 2), Some("optimizer.step()"));
    }
}
