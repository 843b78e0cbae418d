//! Every size limit of report.md and the verdict, in one place: the whole report's cap, and every per-line,
//! per-cell and per-list limit that keeps one hostile or huge field from eating it. A leaf: [`crate::text`] clips
//! with them, `render` lays out with them.

/// GitHub's limit for an issue comment, in characters.
pub const MAX_MARKDOWN_CHARS: usize = 65_536;
/// Longest line kept inside a section (longer ones are clipped with `…`).
pub(crate) const MAX_LINE: usize = 600;
/// At most this many per-thread tables; the rest are listed by tid.
pub(crate) const MAX_THREAD_TABLES: usize = 8;
/// At most this many timeline entries in the head.
pub(crate) const MAX_TIMELINE: usize = 40;
/// Room kept for the truncation note.
pub(crate) const NOTE_RESERVE: usize = 1_200;
/// Longest verdict shown (a stored verdict can be anything).
pub(crate) const MAX_VERDICT_CHARS: usize = 1_000;
/// Longest text inside a code span.
pub(crate) const MAX_CODE_CHARS: usize = 300;
/// Longest table cell.
pub(crate) const MAX_CELL_CHARS: usize = 400;
/// Longest kernel log line in the head's highlights.
pub(crate) const MAX_HIGHLIGHT_CHARS: usize = 300;
/// At most this many tids in one list (waiters, holders, the D threads of a sample).
pub(crate) const MAX_TIDS_LISTED: usize = 16;
/// At most this many tids named after the thread tables that were shown.
pub(crate) const MAX_MORE_TIDS: usize = 64;
/// Syscall arguments shown in a thread table.
pub(crate) const MAX_SYSCALL_ARGS_SHOWN: usize = 3;
/// NSpid levels shown.
pub(crate) const MAX_NSPID_SHOWN: usize = 8;
/// Flagged kernel log lines in the head (schema 1): the first and the last ones.
pub(crate) const HIGHLIGHTS_FIRST_LAST: (usize, usize) = (4, 4);
/// Kernel log lines in the head (schema 2) about the wedged process and the driver: the first and the last ones.
pub(crate) const OURS_FIRST_LAST: (usize, usize) = (4, 6);
/// Kernel log lines in the head (schema 2) about other processes: the first and the last ones.
pub(crate) const OTHERS_FIRST_LAST: (usize, usize) = (2, 4);
/// At most this many lines of one probe's output.
pub(crate) const MAX_PROBE_OUTPUT_LINES: usize = 200;
