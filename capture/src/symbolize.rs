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

/// The kernel's `struct open_how` (openat2's ABI, 24 bytes; libc's is non-exhaustive, so not buildable here).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Opens the absolute `path` as the process whose root is `root` (`/proc/<pid>/root`) sees it: `openat2` with
/// `RESOLVE_IN_ROOT`, so a symlink inside a container (`libfoo.so -> /etc/shadow`) resolves inside the
/// container's root, never the host's (a kernel without `openat2`, < 5.6, gets no read at all), and
/// `RESOLVE_NO_MAGICLINKS`. Opened non-blocking and kept only when it is a regular file (a FIFO or a device
/// planted at a library's path is refused, never read).
pub fn open_in_root(root: &Path, path: &str) -> std::io::Result<std::fs::File> {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd};

    let refuse = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string());
    let relative = path
        .strip_prefix('/')
        .ok_or_else(|| refuse("not an absolute path inside the process's root"))?;
    let relative = CString::new(relative).map_err(|_| refuse("the path holds a NUL byte"))?;
    let root = std::fs::File::open(root)?;
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) as u64,
        mode: 0,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2 with a directory fd we own, a NUL-terminated path and an `open_how` of the size we pass.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            relative.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| refuse("openat2 returned an impossible fd"))?;
    // SAFETY: the fd was just returned by openat2 and is owned by nobody else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    if !file.metadata()?.is_file() {
        return Err(refuse("not a regular file"));
    }
    Ok(file)
}

/// Line `line` (1-based) of the text file `path` under `root`, trimmed and bounded. Runs in the helper only.
pub fn read_source_line(root: &Path, path: &str, line: u32) -> SourceLine {
    use std::io::{BufRead, Read};
    let mut out = SourceLine {
        path: path.to_string(),
        line,
        ..SourceLine::default()
    };
    let file = match open_in_root(root, path) {
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
    use std::os::fd::AsRawFd;

    use blazesym::symbolize::source::{Elf, Source};
    use blazesym::symbolize::{Input, Symbolized, Symbolizer};

    let mut file = ResolvedFile {
        path: path.to_string(),
        ..ResolvedFile::default()
    };
    let opened = match open_in_root(root, path) {
        Ok(opened) => opened,
        Err(err) => {
            file.error = Some(format!("cannot open the ELF file: {err}"));
            return file;
        }
    };
    // The file just opened inside the process's root, by its fd: no second path walk.
    let full = std::path::PathBuf::from(format!("/proc/self/fd/{}", opened.as_raw_fd()));
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

/// One line of the helper's output: a file's symbols or a source line. The helper prints each as soon as it has
/// it (JSON lines), so a run cut short by the deadline (one huge library) still gives what it resolved first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    File(ResolvedFile),
    Source(SourceLine),
}

/// Parse the helper's stdout (bounded by the probe runner's pipe read): JSON lines of [`Answer`]s. A line that
/// does not parse (the last one of a run killed at its deadline) is skipped; an output with text but not one
/// answer is an error.
pub fn parse_resolution(bytes: &[u8]) -> Result<Resolution> {
    let mut resolution = Resolution::default();
    let mut first_error = None;
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<Answer>(line) {
            Ok(Answer::File(mut file)) if resolution.files.len() < MAX_FILES => {
                file.symbols.truncate(MAX_OFFSETS_PER_FILE);
                resolution.files.push(file);
            }
            Ok(Answer::Source(source)) if resolution.sources.len() < MAX_FILES => {
                resolution.sources.push(source);
            }
            Ok(_) => {}
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    match first_error {
        Some(err) if resolution.files.is_empty() && resolution.sources.is_empty() => {
            Err(Error::Parse {
                what: "symbol resolution",
                why: err.to_string(),
            })
        }
        _ => Ok(resolution),
    }
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
        // Demangled, as people read it: `capture::symbolize::tests::…`, not `_ZN7capture…E`.
        assert!(
            symbol.contains("symbolize::tests::") && !symbol.starts_with("_ZN"),
            "{symbol}"
        );
        assert!(file.build_id.as_deref().is_some_and(|id| id.len() >= 16));
        let resolution = Resolution {
            files: vec![file.clone()],
            sources: Vec::new(),
        };
        let mut text = serde_json::to_vec(&Answer::File(file)).unwrap();
        text.push(b'\n');
        let back = parse_resolution(&text).unwrap();
        assert_eq!(back, resolution);
        // A run cut at its deadline: the answers before the cut line are kept.
        let mut cut = text.clone();
        cut.extend_from_slice(br#"{"file": {"path": "/usr/lib/libtorch_cu"#);
        assert_eq!(parse_resolution(&cut).unwrap(), resolution);
        assert!(back.symbol(exe, frame.offset.unwrap()).is_some());
    }

    #[test]
    fn unreadable_or_escaping_paths_say_why() {
        let missing = resolve(Path::new("/"), "/nonexistent/libfoo.so", &[0x10]);
        assert!(missing.error.unwrap().contains("cannot open"));
        // `..` cannot climb out of the root: `/../../etc/passwd` is the root's own /etc/passwd (not an ELF file).
        let climbing = resolve(Path::new("/"), "/../../etc/passwd", &[0]);
        assert!(climbing.error.unwrap().contains("cannot read the ELF file"));
        let relative = resolve(Path::new("/"), "lib/libfoo.so", &[0]);
        assert!(relative
            .error
            .unwrap()
            .contains("inside the process's root"));
        let relative = resolve(Path::new("/"), "[vdso]", &[0]);
        assert!(relative.error.is_some());
        assert!(parse_resolution(b"garbage").is_err());
    }

    /// A container's symlink to an absolute path, or `..` climbing out, stays inside the container's root.
    #[test]
    fn symlinks_and_dot_dots_resolve_inside_the_process_root_never_the_hosts() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "host secret\n").unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("w")).unwrap();
        let secret = outside.path().join("secret");
        std::os::unix::fs::symlink(&secret, root.path().join("w/train.py")).unwrap();
        // Inside the root, the symlink's target path does not exist: nothing is read.
        let line = read_source_line(root.path(), "/w/train.py", 1);
        assert_eq!(line.text, None, "{line:?}");
        let climbing = format!("/../../../../../..{}", secret.display());
        assert_eq!(read_source_line(root.path(), &climbing, 1).text, None);
        // The same file inside the root is read: the refusal above is the root, not the file.
        let inside = root.path().join(secret.strip_prefix("/").unwrap());
        std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
        std::fs::write(&inside, "container text\n").unwrap();
        let line = read_source_line(root.path(), "/w/train.py", 1);
        assert_eq!(line.text.as_deref(), Some("container text"));
        // A FIFO at a library's path is refused without blocking.
        let fifo = root.path().join("w/lib.so");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let refused = resolve(root.path(), "/w/lib.so", &[0]);
        assert!(refused.error.unwrap().contains("not a regular file"));
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
        assert!(read_source_line(dir.path(), "train.py", 1).error.is_some());
        // `..` stays inside the root: the root's own /train.py.
        assert_eq!(
            read_source_line(dir.path(), "/../../train.py", 1)
                .text
                .as_deref(),
            Some("import x")
        );
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
