//! ELF symbols for user-space frames: which function of `libc.so.6` or `libcuda.so.1` a wedged thread's pc (or a
//! candidate return address) lies in, and each file's GNU build id so the symbol can be re-resolved later.
//!
//! Every file read here is **named by the target** (an ELF file its maps show, a Python source file whose path
//! py-spy took out of its memory), and a target is an adversary: it chooses the paths. So:
//! - the helper process that runs this (`wedge-capture internal resolve-symbols`, a sacrificial child under the
//!   probe deadline) holds the target's own credentials and no capability (the agent switches them between fork
//!   and exec); this module adds the rules that do not depend on who reads;
//! - a path is opened inside the target's root (`/proc/<pid>/root`, `openat2` with `RESOLVE_IN_ROOT` and
//!   `RESOLVE_NO_MAGICLINKS`), non-blocking, and kept only when it is a regular file ([`open_named`]);
//! - paths under `/proc`, `/sys` and `/dev`, and files on a pseudo filesystem (procfs, sysfs, debugfs,
//!   tracefs, cgroupfs, securityfs, bpffs, …: checked on the opened file with `fstatfs`) are refused;
//! - an ELF file is accepted only when it is the file the process maps: the opened file's `st_dev`/`st_ino`
//!   must be the device and inode its maps line shows ([`FileId`]), and its last path component must not be
//!   a symlink (the maps show the file itself, never a link to it);
//! - an ELF file's cost is capped before it is parsed ([`elf_cost`]: the `.symtab`/`.dynsym` sizes from its
//!   section headers, and the file size), so that one huge file cannot starve the files after it.
//!
//! The helper prints a [`Resolution`] as JSON lines; the agent parses it with [`parse_resolution`] (it is the
//! target's word: the helper runs with its rights, so the target can trace it). Only the ELF symbol tables
//! (`.symtab`, `.dynsym`) are used: no DWARF, no debuginfod, nothing fetched, no debug link followed.

use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::user_frame::FileId;
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
    /// Why the file could not be read or parsed, or why it was refused.
    pub error: Option<String>,
    /// The bytes of symbol tables (`.symtab` + `.dynsym`) the file was accepted with (its cost, counted
    /// against the run's budget); None when it was not accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol_table_bytes: Option<u64>,
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

    /// The answer for line `line` of the source file `path`, if the helper gave one.
    pub fn source_line(&self, path: &str, line: u32) -> Option<&SourceLine> {
        self.sources
            .iter()
            .find(|s| s.path == path && s.line == line)
    }

    /// The text of line `line` of the source file `path`, if read.
    pub fn source(&self, path: &str, line: u32) -> Option<&str> {
        self.source_line(path, line)?.text.as_deref()
    }
}

/// Most bytes of a source file read to find one line, and the longest line text kept.
const MAX_SOURCE_BYTES: u64 = 16 << 20;
const MAX_SOURCE_LINE: usize = 200;

/// The cost caps of the ELF files of one helper run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfLimits {
    /// Largest ELF file accepted (the symbolizer maps it whole: address space, never memory read).
    pub max_file_bytes: u64,
    /// Most bytes of symbol tables (`.symtab` + `.dynsym`) accepted in one file: what the symbolizer reads
    /// and indexes (about a third of it again as memory), so what its time and memory grow with.
    pub max_symbol_table_bytes: u64,
    /// What is left of the run's budget of symbol-table bytes, all files together.
    pub budget_left: u64,
}

/// `1.5 MiB`, `64 MiB`, `812 KiB`, `300 bytes`: a size as the refusals say it.
pub fn human_bytes(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    let unit = |n: u64, u: u64, name: &str| {
        if n.is_multiple_of(u) {
            format!("{} {name}", n / u)
        } else {
            format!("{:.1} {name}", n as f64 / u as f64)
        }
    };
    match bytes {
        b if b >= GIB => unit(b, GIB, "GiB"),
        b if b >= MIB => unit(b, MIB, "MiB"),
        b if b >= KIB => unit(b, KIB, "KiB"),
        b => format!("{b} bytes"),
    }
}

/// Pseudo filesystems (`statfs.f_type`) whose files are the kernel's or another process's state, never a
/// program's source or code: a target naming one wants the agent to read it.
const PSEUDO_FILESYSTEMS: &[(i64, &str)] = &[
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x1cd1, "devpts"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpf"),
    (0x6265_6570, "configfs"),
    (0x6165_676c, "pstore"),
    (0xde5e_81e4, "efivarfs"),
    (0xf97c_ff8c, "selinuxfs"),
    (0x4341_5d53, "smackfs"),
    (0x6573_5543, "fusectl"),
    (0x1980_0202, "mqueue"),
    (0x4249_4e4d, "binfmt_misc"),
    (0x6e73_6673, "nsfs"),
    (0x0904_1934, "anon_inodefs"),
];

/// overlayfs's `statfs.f_type`.
const OVERLAYFS_MAGIC: i64 = 0x794c_7630;

/// The pseudo filesystem a `statfs.f_type` names, if it is one.
pub fn pseudo_filesystem(f_type: i64) -> Option<&'static str> {
    PSEUDO_FILESYSTEMS
        .iter()
        .find(|(magic, _)| *magic == f_type)
        .map(|(_, name)| *name)
}

/// Top-level directories whose files are never a program's: `/proc`, `/sys`, `/dev` (after `.` and `..`
/// are taken lexically, as `RESOLVE_IN_ROOT` takes them at the root).
const REFUSED_TREES: &[&str] = &["proc", "sys", "dev"];

/// Why `path` (absolute, inside the process's root) is refused before it is opened, or None.
pub fn refused_path(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    let top = parts.first()?;
    REFUSED_TREES.contains(top).then(|| {
        format!(
            "refused: a path under /{top} (the kernel's and other processes' files, never a program's source \
             or code)"
        )
    })
}

/// What the process named: the rules differ in one point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// A Python source file (`co_filename`): a symlink is followed (inside the root), as the interpreter did.
    Source,
    /// A file of the maps: the maps show the file itself, so a symlink in its place is not it.
    MappedElf,
}

/// The process's root directory (`/proc/<pid>/root`), under which every file it names is opened: opened by
/// path, or handed to the helper as an open directory (the agent opens it before the helper takes the
/// target's credentials, which cannot always open it: a uid-0 target with capabilities is not traceable by a
/// uid-0 helper without any).
#[derive(Debug)]
pub struct Root(std::fs::File);

impl Root {
    pub fn open(path: &Path) -> std::result::Result<Root, String> {
        let dir = std::fs::File::open(path)
            .map_err(|err| format!("cannot open the process's root: {err}"))?;
        Root::checked(dir)
    }

    /// An open directory (an `O_PATH` one will do).
    pub fn from_fd(fd: std::os::fd::OwnedFd) -> std::result::Result<Root, String> {
        Root::checked(std::fs::File::from(fd))
    }

    fn checked(dir: std::fs::File) -> std::result::Result<Root, String> {
        let meta = dir
            .metadata()
            .map_err(|err| format!("cannot stat the process's root: {err}"))?;
        if !meta.is_dir() {
            return Err("the process's root is not a directory".to_string());
        }
        Ok(Root(dir))
    }
}

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
/// `RESOLVE_NO_MAGICLINKS`. Opened non-blocking (a FIFO or a device planted at a library's path never blocks
/// the open), with `O_NOFOLLOW` for a mapped file; kept only when it is a regular file on a filesystem that
/// is not a pseudo one, and its path is not under `/proc`, `/sys` or `/dev`. The error text says why.
pub fn open_named(
    root: &Root,
    path: &str,
    named: Named,
) -> std::result::Result<std::fs::File, String> {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd};

    let relative = path
        .strip_prefix('/')
        .ok_or("refused: not an absolute path inside the process's root")?;
    if let Some(why) = refused_path(path) {
        return Err(why);
    }
    let relative = CString::new(relative).map_err(|_| "refused: the path holds a NUL byte")?;
    let mut flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;
    if named == Named::MappedElf {
        flags |= libc::O_NOFOLLOW;
    }
    let how = OpenHow {
        flags: flags as u64,
        mode: 0,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2 with a directory fd we own, a NUL-terminated path and an `open_how` of the size we pass.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.0.as_raw_fd(),
            relative.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::ELOOP) if named == Named::MappedElf => {
                "refused: a symbolic link (the maps name the mapped file itself; a link at that path now \
                 is not it)"
                    .to_string()
            }
            Some(libc::EACCES) | Some(libc::EPERM) => {
                format!("not read: {err}, with the process's own rights")
            }
            _ => format!("cannot open: {err}"),
        });
    }
    let fd = i32::try_from(fd).map_err(|_| "openat2 returned an impossible fd")?;
    // SAFETY: the fd was just returned by openat2 and is owned by nobody else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let meta = file
        .metadata()
        .map_err(|err| format!("cannot stat the opened file: {err}"))?;
    if !meta.is_file() {
        return Err("refused: not a regular file".to_string());
    }
    if let Some(name) = pseudo_filesystem(filesystem_type(&file)?) {
        return Err(format!(
            "refused: a file of the {name} pseudo filesystem (the kernel's state, never a program's)"
        ));
    }
    Ok(file)
}

/// `fstatfs(2)`'s `f_type` of an open file.
fn filesystem_type(file: &std::fs::File) -> std::result::Result<i64, String> {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on an fd we own, writing into the struct we pass.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut stat) } != 0 {
        return Err(format!(
            "cannot tell the opened file's filesystem: {}",
            std::io::Error::last_os_error()
        ));
    }
    #[allow(clippy::unnecessary_cast)] // `f_type`'s C type differs between architectures
    Ok(stat.f_type as i64)
}

/// Whether `file` (opened by `path`) is one the maps show for it: same device and inode, or, on an overlay
/// filesystem, the same inode number. This kernel (6.18, verified) prints an overlayfs file's own device and
/// inode in the maps, which is what `fstat` on it gives; older kernels print the underlying layer's device,
/// while overlayfs reports the layer's inode number under its own device when the layers share one
/// filesystem: the inode alone then says it. Files are read with the process's rights anyway; this only
/// makes sure the file is the one it runs.
fn is_mapped_file(file: &std::fs::File, mapped: &[FileId]) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = file
        .metadata()
        .map_err(|err| format!("cannot stat the opened file: {err}"))?;
    let opened = FileId {
        major: libc::major(meta.dev()),
        minor: libc::minor(meta.dev()),
        inode: meta.ino(),
    };
    if mapped.contains(&opened) {
        return Ok(());
    }
    if mapped.iter().any(|m| m.inode == opened.inode) && filesystem_type(file)? == OVERLAYFS_MAGIC {
        return Ok(());
    }
    let shown: Vec<String> = mapped.iter().map(FileId::to_string).collect();
    Err(if shown.is_empty() {
        "refused: the maps show no device and inode for this path, so the file cannot be checked to be \
         the one the process maps"
            .to_string()
    } else {
        format!(
            "refused: not the file the process maps (the maps show {}; the path now names {opened})",
            shown.join(", ")
        )
    })
}

/// Line `line` (1-based) of the text file `path` under `root`, trimmed and bounded. Runs in the helper only.
pub fn read_source_line(root: &Root, path: &str, line: u32) -> SourceLine {
    use std::io::{BufRead, Read};
    let mut out = SourceLine {
        path: path.to_string(),
        line,
        ..SourceLine::default()
    };
    let file = match open_named(root, path, Named::Source) {
        Ok(file) => file,
        Err(why) => {
            out.error = Some(why);
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

/// What an ELF file will cost the symbolizer, from its headers alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfCost {
    /// Bytes of `.symtab` and `.dynsym` (by name, as the symbolizer finds them, or by type).
    pub symbol_table_bytes: u64,
    pub sections: u64,
}

/// Most section headers read (`SHN_LORESERVE`: beyond it the count lives elsewhere, and no real file has
/// that many); most bytes of the section-name table read.
const MAX_SECTIONS: u64 = 0xff00;
const MAX_SECTION_NAMES: u64 = 1 << 20;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;

/// The cost of the ELF file behind `read_at` (reads `buf.len()` bytes at an offset, failing short of it),
/// read cheaply: the ELF header, the section headers and the section names, never a table. 32- and 64-bit,
/// either byte order. An error says why the file is not one to parse.
pub fn elf_cost(
    read_at: &mut dyn FnMut(u64, &mut [u8]) -> std::io::Result<()>,
) -> std::result::Result<ElfCost, String> {
    let mut ident = [0u8; 64];
    read_at(0, &mut ident[..16]).map_err(|err| format!("not an ELF file: {err}"))?;
    if &ident[..4] != b"\x7fELF" {
        return Err("not an ELF file".to_string());
    }
    let wide = match ident[4] {
        1 => false,
        2 => true,
        _ => return Err("not an ELF file (bad class)".to_string()),
    };
    let big = match ident[5] {
        1 => false,
        2 => true,
        _ => return Err("not an ELF file (bad byte order)".to_string()),
    };
    let u16_at = |b: &[u8], at: usize| {
        let v = [b[at], b[at + 1]];
        u64::from(if big {
            u16::from_be_bytes(v)
        } else {
            u16::from_le_bytes(v)
        })
    };
    let u32_at = |b: &[u8], at: usize| {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        u64::from(if big {
            u32::from_be_bytes(v)
        } else {
            u32::from_le_bytes(v)
        })
    };
    let u64_at = |b: &[u8], at: usize| {
        let v: [u8; 8] = b[at..at + 8].try_into().unwrap_or([0; 8]);
        if big {
            u64::from_be_bytes(v)
        } else {
            u64::from_le_bytes(v)
        }
    };
    let header_len = if wide { 64 } else { 52 };
    read_at(0, &mut ident[..header_len]).map_err(|err| format!("a cut ELF header: {err}"))?;
    let ehdr = &ident[..header_len];
    // (e_shoff, e_shentsize, e_shnum, e_shstrndx) and the section header's layout for the class.
    let (shoff, shentsize, mut shnum, mut shstrndx) = if wide {
        (
            u64_at(ehdr, 40),
            u16_at(ehdr, 58),
            u16_at(ehdr, 60),
            u16_at(ehdr, 62),
        )
    } else {
        (
            u32_at(ehdr, 32),
            u16_at(ehdr, 46),
            u16_at(ehdr, 48),
            u16_at(ehdr, 50),
        )
    };
    let entry = if wide { 64 } else { 40 };
    if shoff == 0 {
        return Ok(ElfCost {
            symbol_table_bytes: 0,
            sections: 0,
        });
    }
    if shentsize < entry {
        return Err(format!(
            "section headers of {shentsize} bytes (at least {entry})"
        ));
    }
    // (sh_name, sh_type, sh_offset, sh_size, sh_link) of one section header.
    let section = |read_at: &mut dyn FnMut(u64, &mut [u8]) -> std::io::Result<()>, index: u64| {
        let mut raw = [0u8; 64];
        let at = shoff
            .checked_add(index.saturating_mul(shentsize))
            .ok_or("section headers past the end of any file")?;
        read_at(at, &mut raw[..entry as usize])
            .map_err(|err| format!("a cut section header table: {err}"))?;
        let b = &raw[..entry as usize];
        Ok::<_, String>(if wide {
            (
                u32_at(b, 0),
                u32_at(b, 4) as u32,
                u64_at(b, 24),
                u64_at(b, 32),
                u32_at(b, 40),
            )
        } else {
            (
                u32_at(b, 0),
                u32_at(b, 4) as u32,
                u32_at(b, 16),
                u32_at(b, 20),
                u32_at(b, 24),
            )
        })
    };
    // Extended numbering: the real count and name-table index sit in section 0.
    if shnum == 0 || shstrndx == 0xffff {
        let (_, _, _, size, link) = section(read_at, 0)?;
        if shnum == 0 {
            shnum = size;
        }
        if shstrndx == 0xffff {
            shstrndx = link;
        }
    }
    if shnum > MAX_SECTIONS {
        return Err(format!("{shnum} sections (at most {MAX_SECTIONS})"));
    }
    let names = if shstrndx < shnum && shstrndx != 0 {
        let (_, _, offset, size, _) = section(read_at, shstrndx)?;
        Some((offset, size.min(MAX_SECTION_NAMES)))
    } else {
        None
    };
    let mut total = 0u64;
    for index in 1..shnum {
        let (name, kind, _, size, _) = section(read_at, index)?;
        let mut named_table = false;
        if let Some((offset, len)) = names.filter(|(_, len)| name < *len) {
            let mut text = [0u8; 8];
            let want = (len - name).min(8) as usize;
            if read_at(offset.saturating_add(name), &mut text[..want]).is_ok() {
                named_table = text[..want].starts_with(b".symtab\0")
                    || text[..want].starts_with(b".dynsym\0")
                    || (want == 7 && (&text[..7] == b".symtab" || &text[..7] == b".dynsym"));
            }
        }
        if named_table || kind == SHT_SYMTAB || kind == SHT_DYNSYM {
            total = total.saturating_add(size);
        }
    }
    Ok(ElfCost {
        symbol_table_bytes: total,
        sections: shnum,
    })
}

/// Resolve `offsets` (file offsets, as `pc - start + offset` from the maps) in the ELF file `path` found under
/// `root`, which the maps show as `mapped` (device, inode). Runs in the helper process only: it opens and maps
/// the file. Refused with a reason (never parsed) when it is not the mapped file or costs more than `limits`.
pub fn resolve(
    root: &Root,
    path: &str,
    mapped: &[FileId],
    offsets: &[u64],
    limits: &ElfLimits,
) -> ResolvedFile {
    use std::os::fd::AsRawFd;

    use blazesym::symbolize::source::{Elf, Source};
    use blazesym::symbolize::{Input, Symbolized, Symbolizer};

    let mut file = ResolvedFile {
        path: path.to_string(),
        ..ResolvedFile::default()
    };
    let opened = match open_named(root, path, Named::MappedElf) {
        Ok(opened) => opened,
        Err(why) => {
            file.error = Some(format!("the ELF file: {why}"));
            return file;
        }
    };
    if let Err(why) = is_mapped_file(&opened, mapped) {
        let deleted = if path.ends_with(" (deleted)") {
            " (the mapped file was deleted; its path names another file now)"
        } else {
            ""
        };
        file.error = Some(format!("the ELF file: {why}{deleted}"));
        return file;
    }
    match within_limits(&opened, limits) {
        Ok(bytes) => file.symbol_table_bytes = Some(bytes),
        Err(why) => {
            file.error = Some(format!("the ELF file: {why}"));
            return file;
        }
    }
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

/// The file's symbol-table bytes when it is within `limits`, or why it is refused (naming the sizes).
fn within_limits(opened: &std::fs::File, limits: &ElfLimits) -> std::result::Result<u64, String> {
    let size = opened
        .metadata()
        .map_err(|err| format!("cannot stat the opened file: {err}"))?
        .len();
    if size > limits.max_file_bytes {
        return Err(format!(
            "refused: {} ({size} bytes), over the cap of {} per file",
            human_bytes(size),
            human_bytes(limits.max_file_bytes)
        ));
    }
    let cost = elf_cost(&mut |offset, buf| opened.read_exact_at(buf, offset))
        .map_err(|why| format!("cannot read the ELF headers: {why}"))?;
    let tables = cost.symbol_table_bytes;
    if tables > limits.max_symbol_table_bytes {
        return Err(format!(
            "refused: {} of symbol tables (.symtab, .dynsym), over the cap of {} per file",
            human_bytes(tables),
            human_bytes(limits.max_symbol_table_bytes)
        ));
    }
    if tables > limits.budget_left {
        return Err(format!(
            "refused: {} of symbol tables, over the {} left of this capture's symbolizer budget (the files \
             before it spent the rest)",
            human_bytes(tables),
            human_bytes(limits.budget_left)
        ));
    }
    Ok(tables)
}

/// One line of the helper's output: a file's symbols or a source line. The helper prints each as soon as it has
/// it (JSON lines), so a run cut short by the deadline (one huge library) still gives what it resolved first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    File(ResolvedFile),
    Source(SourceLine),
}

/// Longest error text and build id (hex; a GNU build id is 20 bytes, a few tools write 32) kept from an answer.
const MAX_ANSWER_ERROR: usize = 512;
const MAX_BUILD_ID_HEX: usize = 128;

/// Cut `text` to `max` characters: the helper runs with the target's rights, so the target can write its
/// answer; what comes back is bounded like any of its words.
fn bound(text: &mut Option<String>, max: usize) {
    if let Some(t) = text.as_mut() {
        if let Some((cut, _)) = t.char_indices().nth(max) {
            t.truncate(cut);
        }
    }
}

/// Parse the helper's stdout (bounded by the probe runner's pipe read): JSON lines of [`Answer`]s. A line that
/// does not parse (the last one of a run killed at its deadline) is skipped; an output with text but not one
/// answer is an error. Every text is bounded (the answer is the target's word: the helper holds its rights).
pub fn parse_resolution(bytes: &[u8]) -> Result<Resolution> {
    let mut resolution = Resolution::default();
    let mut first_error = None;
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<Answer>(line) {
            Ok(Answer::File(mut file)) if resolution.files.len() < MAX_FILES => {
                file.symbols.truncate(MAX_OFFSETS_PER_FILE);
                for (_, symbol) in &mut file.symbols {
                    bound(symbol, MAX_SYMBOL + 4);
                }
                bound(&mut file.build_id, MAX_BUILD_ID_HEX);
                bound(&mut file.error, MAX_ANSWER_ERROR);
                resolution.files.push(file);
            }
            Ok(Answer::Source(mut source)) if resolution.sources.len() < MAX_FILES => {
                bound(&mut source.text, MAX_SOURCE_LINE);
                bound(&mut source.error, MAX_ANSWER_ERROR);
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
    use std::os::unix::fs::MetadataExt;

    const LIMITS: ElfLimits = ElfLimits {
        max_file_bytes: 1 << 40,
        max_symbol_table_bytes: 1 << 40,
        budget_left: 1 << 40,
    };

    fn root(path: &Path) -> Root {
        Root::open(path).unwrap()
    }

    fn id_of(path: &Path) -> FileId {
        let meta = std::fs::metadata(path).unwrap();
        FileId {
            major: libc::major(meta.dev()),
            minor: libc::minor(meta.dev()),
            inode: meta.ino(),
        }
    }

    /// The test binary itself: an ELF file with symbols, found through `/` as the root.
    #[test]
    fn a_function_of_our_own_binary_is_named_with_its_offset() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let pc = a_function_of_our_own_binary_is_named_with_its_offset as *const () as usize as u64;
        let frame = crate::user_frame::locate(&maps, pc).unwrap();
        assert_eq!(frame.path.as_deref(), Some(exe));
        let mapped = crate::user_frame::file_ids(&maps, exe);
        let file = resolve(
            &root(Path::new("/")),
            exe,
            &mapped,
            &[frame.offset.unwrap()],
            &LIMITS,
        );
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
        assert!(file.symbol_table_bytes.is_some_and(|b| b > 0));
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
        let any = [FileId {
            major: 0,
            minor: 0,
            inode: 1,
        }];
        let missing = resolve(
            &root(Path::new("/")),
            "/nonexistent/libfoo.so",
            &any,
            &[0x10],
            &LIMITS,
        );
        assert!(missing.error.unwrap().contains("cannot open"));
        // `..` cannot climb out of the root: `/../../etc/passwd` is the root's own /etc/passwd, and the maps
        // did not show it.
        let passwd = Path::new("/etc/passwd");
        let climbing = resolve(
            &root(Path::new("/")),
            "/../../etc/passwd",
            &any,
            &[0],
            &LIMITS,
        );
        assert!(
            climbing
                .error
                .unwrap()
                .contains("not the file the process maps"),
            "{passwd:?}"
        );
        let not_elf = resolve(
            &root(Path::new("/")),
            "/../etc/passwd",
            &[id_of(passwd)],
            &[0],
            &LIMITS,
        );
        assert!(not_elf.error.unwrap().contains("not an ELF file"));
        let relative = resolve(&root(Path::new("/")), "lib/libfoo.so", &any, &[0], &LIMITS);
        assert!(relative
            .error
            .unwrap()
            .contains("inside the process's root"));
        let relative = resolve(&root(Path::new("/")), "[vdso]", &any, &[0], &LIMITS);
        assert!(relative.error.is_some());
        assert!(parse_resolution(b"garbage").is_err());
    }

    /// A container's symlink to an absolute path, or `..` climbing out, stays inside the container's root.
    #[test]
    fn symlinks_and_dot_dots_resolve_inside_the_process_root_never_the_hosts() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "host secret\n").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("w")).unwrap();
        let secret = outside.path().join("secret");
        std::os::unix::fs::symlink(&secret, dir.path().join("w/train.py")).unwrap();
        // Inside the root, the symlink's target path does not exist: nothing is read.
        let line = read_source_line(&root(dir.path()), "/w/train.py", 1);
        assert_eq!(line.text, None, "{line:?}");
        let climbing = format!("/../../../../../..{}", secret.display());
        assert_eq!(read_source_line(&root(dir.path()), &climbing, 1).text, None);
        // The same file inside the root is read: the refusal above is the root, not the file.
        let inside = dir.path().join(secret.strip_prefix("/").unwrap());
        std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
        std::fs::write(&inside, "container text\n").unwrap();
        let line = read_source_line(&root(dir.path()), "/w/train.py", 1);
        assert_eq!(line.text.as_deref(), Some("container text"));
        // A FIFO at a library's path is refused without blocking.
        let fifo = dir.path().join("w/lib.so");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let refused = resolve(
            &root(dir.path()),
            "/w/lib.so",
            &[id_of(&fifo)],
            &[0],
            &LIMITS,
        );
        assert!(refused.error.unwrap().contains("not a regular file"));
    }

    /// A mapped file's path that now names another file (a symlink planted at `x.so (deleted)`, a file put
    /// in its place) is refused before any byte of it is read.
    #[test]
    fn a_path_that_is_not_the_mapped_file_is_refused() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mapped = id_of(&exe);
        let dir = tempfile::tempdir().unwrap();
        // A symlink to the very file the maps show: still refused (the maps name files, never links).
        std::os::unix::fs::symlink(&exe, dir.path().join("x.so (deleted)")).unwrap();
        let linked = resolve(
            &root(dir.path()),
            "/x.so (deleted)",
            &[mapped],
            &[0],
            &LIMITS,
        );
        let why = linked.error.unwrap();
        assert!(why.contains("refused: a symbolic link"), "{why}");
        assert_eq!((linked.build_id, linked.symbols.len()), (None, 0));
        // A copy (another inode) of the mapped file at its path: not the file the process maps.
        std::fs::copy(&exe, dir.path().join("lib.so (deleted)")).unwrap();
        let copy = resolve(
            &root(dir.path()),
            "/lib.so (deleted)",
            &[mapped],
            &[0],
            &LIMITS,
        );
        let why = copy.error.unwrap();
        assert!(
            why.contains("refused: not the file the process maps")
                && why.contains(&mapped.to_string())
                && why.contains("the mapped file was deleted"),
            "{why}"
        );
        assert_eq!((copy.build_id, copy.symbols.len()), (None, 0));
        // No identity at all: nothing to check against, so nothing is read.
        let unknown = resolve(
            &root(Path::new("/")),
            exe.to_str().unwrap(),
            &[],
            &[0],
            &LIMITS,
        );
        assert!(unknown.error.unwrap().contains("no device and inode"));
        // The right identity: read.
        let read = resolve(
            &root(Path::new("/")),
            exe.to_str().unwrap(),
            &[mapped],
            &[0],
            &LIMITS,
        );
        assert_eq!(read.error, None);
    }

    #[test]
    fn proc_sys_and_dev_are_refused_by_path_and_pseudo_filesystems_by_their_type() {
        for path in [
            "/proc/1/environ",
            "/proc/self/status",
            "/sys/kernel/notes",
            "/dev/null",
            "//proc/1/environ",
            "/./sys/x",
            "/usr/../proc/1/environ",
            "/../../../dev/shm/x",
        ] {
            let why = refused_path(path).unwrap_or_else(|| panic!("{path} accepted"));
            assert!(why.starts_with("refused: a path under /"), "{why}");
            let line = read_source_line(&root(Path::new("/")), path, 1);
            assert_eq!(line.text, None, "{path}");
            assert!(line.error.unwrap().starts_with("refused"), "{path}");
        }
        for path in [
            "/usr/lib/libc.so.6",
            "/w/proc/x",
            "/procfs/x",
            "/devices.py",
            "/",
        ] {
            assert_eq!(refused_path(path), None, "{path}");
        }
        // A symlink inside the root to /proc is followed for a source file (as the interpreter would), and
        // the opened file is refused for its filesystem.
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/proc/self/status", dir.path().join("train.py")).unwrap();
        let line = read_source_line(
            &root(Path::new("/")),
            &format!("{}/train.py", dir.path().display()),
            1,
        );
        let why = line.error.unwrap();
        assert!(why.contains("the proc pseudo filesystem"), "{why}");
        assert_eq!(line.text, None);
        assert_eq!(pseudo_filesystem(0x9fa0), Some("proc"));
        assert_eq!(pseudo_filesystem(0x6265_6572), Some("sysfs"));
        assert_eq!(pseudo_filesystem(0xef53), None); // ext4
        assert_eq!(pseudo_filesystem(0x0102_1994), None); // tmpfs (/tmp, /dev/shm: /dev goes by its path)
    }

    #[test]
    fn a_source_line_is_read_trimmed_or_says_why() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("train.py"),
            "import x\n    optimizer.step()  \n",
        )
        .unwrap();
        let line = read_source_line(&root(dir.path()), "/train.py", 2);
        assert_eq!(line.text.as_deref(), Some("optimizer.step()"));
        let past = read_source_line(&root(dir.path()), "/train.py", 9);
        assert!(past.text.is_none() && past.error.unwrap().contains("fewer lines"));
        assert!(read_source_line(&root(dir.path()), "train.py", 1)
            .error
            .is_some());
        // `..` stays inside the root: the root's own /train.py.
        assert_eq!(
            read_source_line(&root(dir.path()), "/../../train.py", 1)
                .text
                .as_deref(),
            Some("import x")
        );
        assert!(read_source_line(&root(dir.path()), "/missing.py", 1)
            .error
            .is_some());
        let resolution = Resolution {
            sources: vec![line],
            ..Resolution::default()
        };
        assert_eq!(resolution.source("/train.py", 2), Some("optimizer.step()"));
    }

    /// A minimal ELF image: header, `sections` (name, type, size) after a name table, 64- or 32-bit.
    fn elf_image(wide: bool, big: bool, sections: &[(&str, u32, u64)]) -> Vec<u8> {
        let mut names = vec![0u8];
        let mut name_at = Vec::new();
        for (name, _, _) in sections {
            name_at.push(names.len() as u64);
            names.extend_from_slice(name.as_bytes());
            names.push(0);
        }
        let shstr_name = names.len() as u64;
        names.extend_from_slice(b".shstrtab\0");
        let (ehsize, entry) = if wide { (64usize, 64usize) } else { (52, 40) };
        let names_at = ehsize as u64;
        let shoff = (names_at + names.len() as u64 + 7) & !7;
        let shnum = sections.len() + 2;
        let mut out = vec![0u8; shoff as usize + shnum * entry];
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = if wide { 2 } else { 1 };
        out[5] = if big { 2 } else { 1 };
        let put = |out: &mut Vec<u8>, at: usize, value: u64, len: usize| {
            let bytes = value.to_le_bytes();
            for i in 0..len {
                out[at + i] = if big { bytes[len - 1 - i] } else { bytes[i] };
            }
        };
        if wide {
            put(&mut out, 40, shoff, 8);
            put(&mut out, 58, entry as u64, 2);
            put(&mut out, 60, shnum as u64, 2);
            put(&mut out, 62, (shnum - 1) as u64, 2);
        } else {
            put(&mut out, 32, shoff, 4);
            put(&mut out, 46, entry as u64, 2);
            put(&mut out, 48, shnum as u64, 2);
            put(&mut out, 50, (shnum - 1) as u64, 2);
        }
        out[names_at as usize..names_at as usize + names.len()].copy_from_slice(&names);
        let mut headers: Vec<(u64, u32, u64, u64)> = sections
            .iter()
            .zip(&name_at)
            .map(|((_, kind, size), name)| (*name, *kind, 0x10_0000u64, *size))
            .collect();
        headers.push((shstr_name, 3, names_at, names.len() as u64));
        for (i, (name, kind, offset, size)) in headers.into_iter().enumerate() {
            let at = shoff as usize + (i + 1) * entry;
            put(&mut out, at, name, 4);
            put(&mut out, at + 4, u64::from(kind), 4);
            if wide {
                put(&mut out, at + 24, offset, 8);
                put(&mut out, at + 32, size, 8);
            } else {
                put(&mut out, at + 16, offset, 4);
                put(&mut out, at + 20, size, 4);
            }
        }
        out
    }

    fn cost_of(image: &[u8]) -> std::result::Result<ElfCost, String> {
        elf_cost(&mut |offset, buf| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            let end = start.checked_add(buf.len()).filter(|&e| e <= image.len());
            match end {
                Some(end) => {
                    buf.copy_from_slice(&image[start..end]);
                    Ok(())
                }
                None => Err(std::io::ErrorKind::UnexpectedEof.into()),
            }
        })
    }

    #[test]
    fn the_cost_of_an_elf_file_is_its_symbol_tables_read_from_the_section_headers() {
        for (wide, big) in [(true, false), (false, false), (true, true), (false, true)] {
            let image = elf_image(
                wide,
                big,
                &[
                    (".text", 1, 0x5000),
                    (".dynsym", SHT_DYNSYM, 0x1800),
                    (".dynstr", 3, 0x900),
                    (".symtab", SHT_SYMTAB, 0x30_0000),
                    (".strtab", 3, 0x90_0000),
                ],
            );
            let cost = cost_of(&image).unwrap();
            assert_eq!(cost.symbol_table_bytes, 0x30_1800, "wide {wide} big {big}");
            assert_eq!(cost.sections, 7);
        }
        // The symbolizer finds `.symtab` by its name: a table typed PROGBITS under that name still counts, and
        // a table of type SYMTAB under another name too.
        let disguised = elf_image(
            true,
            false,
            &[(".symtab", 1, 48 << 20), (".x", SHT_SYMTAB, 1 << 20)],
        );
        assert_eq!(cost_of(&disguised).unwrap().symbol_table_bytes, 49 << 20);
        // Not ELF files, or cut ones, say so.
        assert!(cost_of(b"#!/bin/sh\n")
            .unwrap_err()
            .contains("not an ELF file"));
        assert!(cost_of(b"\x7fELF\x03\x01").is_err());
        let image = elf_image(true, false, &[(".symtab", SHT_SYMTAB, 24)]);
        assert!(cost_of(&image[..image.len() - 10]).is_err());
        // Extended numbering claiming more sections than any real file: refused, never walked.
        let mut huge = elf_image(true, false, &[(".symtab", SHT_SYMTAB, 24)]);
        huge[60..62].copy_from_slice(&[0, 0]);
        let shoff = u64::from_le_bytes(huge[40..48].try_into().unwrap()) as usize;
        huge[shoff + 32..shoff + 40].copy_from_slice(&(1u64 << 32).to_le_bytes());
        assert!(cost_of(&huge).unwrap_err().contains("sections"));
        // Nothing but a header: no section headers, no tables.
        let mut bare = elf_image(true, false, &[]);
        bare[40..48].copy_from_slice(&[0; 8]);
        assert_eq!(cost_of(&bare).unwrap().symbol_table_bytes, 0);
    }

    #[test]
    fn an_elf_file_over_a_cap_is_refused_naming_its_size() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mapped = [id_of(&exe)];
        let path = exe.to_str().unwrap();
        let size = std::fs::metadata(&exe).unwrap().len();
        let small_file = ElfLimits {
            max_file_bytes: size - 1,
            ..LIMITS
        };
        let why = resolve(&root(Path::new("/")), path, &mapped, &[0], &small_file)
            .error
            .unwrap();
        assert!(
            why.contains("over the cap of") && why.contains(&format!("({size} bytes)")),
            "{why}"
        );
        let small_tables = ElfLimits {
            max_symbol_table_bytes: 1024,
            ..LIMITS
        };
        let why = resolve(&root(Path::new("/")), path, &mapped, &[0], &small_tables)
            .error
            .unwrap();
        assert!(
            why.contains("of symbol tables (.symtab, .dynsym), over the cap of 1 KiB"),
            "{why}"
        );
        let spent = ElfLimits {
            budget_left: 1024,
            ..LIMITS
        };
        let file = resolve(&root(Path::new("/")), path, &mapped, &[0], &spent);
        assert!(file.error.unwrap().contains("symbolizer budget"));
        assert_eq!((file.build_id, file.symbol_table_bytes), (None, None));
        assert_eq!(human_bytes(64 << 20), "64 MiB");
        assert_eq!(human_bytes(1536 << 20), "1.5 GiB");
        assert_eq!(human_bytes(300), "300 bytes");
    }

    #[test]
    fn an_answer_is_bounded_like_any_word_of_the_target() {
        let long = "x".repeat(100_000);
        let answer = Answer::Source(SourceLine {
            path: "/w/train.py".into(),
            line: 1,
            text: Some(long.clone()),
            error: Some(long.clone()),
        });
        let file = Answer::File(ResolvedFile {
            path: "/lib.so".into(),
            build_id: Some(long.clone()),
            symbols: vec![(1, Some(long.clone()))],
            error: Some(long),
            symbol_table_bytes: None,
        });
        let mut text = serde_json::to_vec(&answer).unwrap();
        text.push(b'\n');
        text.extend(serde_json::to_vec(&file).unwrap());
        let parsed = parse_resolution(&text).unwrap();
        assert_eq!(
            parsed.sources[0].text.as_ref().unwrap().len(),
            MAX_SOURCE_LINE
        );
        assert_eq!(
            parsed.sources[0].error.as_ref().unwrap().len(),
            MAX_ANSWER_ERROR
        );
        assert_eq!(
            parsed.files[0].build_id.as_ref().unwrap().len(),
            MAX_BUILD_ID_HEX
        );
        assert!(parsed.files[0].symbols[0].1.as_ref().unwrap().len() <= MAX_SYMBOL + 4);
    }
}
