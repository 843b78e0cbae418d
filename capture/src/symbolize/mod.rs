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
//! - an ELF file's cost is capped before it is parsed ([`elf_cost()`]: the `.symtab`/`.dynsym` sizes from its
//!   section headers, and the file size), so that one huge file cannot starve the files after it.
//!
//! The helper prints a [`Resolution`] as JSON lines; the agent parses it with [`parse_resolution`] (it is the
//! target's word: the helper runs with its rights, so the target can trace it). Only the ELF symbol tables
//! (`.symtab`, `.dynsym`) are used: no DWARF, no debuginfod, nothing fetched, no debug link followed.

use std::os::unix::fs::FileExt;

use serde::{Deserialize, Serialize};

use crate::user_frame::FileId;
use crate::{Error, Result};
use elf_cost::elf_cost;
use named_file::{is_mapped_file, open_named, Named, Root};

pub mod elf_cost;
pub mod named_file;

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
mod tests;
