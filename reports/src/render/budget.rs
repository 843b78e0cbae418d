//! The Markdown size budget, in one place: the whole report's cap, and every per-line, per-cell and per-list
//! limit that keeps one hostile or huge field from eating it; [`fit`] shares what is left between the
//! `<details>` sections, cutting the longest first; [`enforce_cap`] is the last resort.

use super::section::{Keep, Section};

/// GitHub's limit for an issue comment, in characters.
pub const MAX_MARKDOWN_CHARS: usize = 65_536;
/// Longest line kept inside a section (longer ones are clipped with `…`).
pub(super) const MAX_LINE: usize = 600;
/// At most this many per-thread tables; the rest are listed by tid.
pub(super) const MAX_THREAD_TABLES: usize = 8;
/// At most this many timeline entries in the head.
pub(super) const MAX_TIMELINE: usize = 40;
/// Room kept for the truncation note.
pub(super) const NOTE_RESERVE: usize = 1_200;
/// Longest verdict shown (a stored verdict can be anything).
pub(super) const MAX_VERDICT_CHARS: usize = 1_000;
/// Longest text inside a code span.
pub(super) const MAX_CODE_CHARS: usize = 300;
/// Longest table cell.
pub(super) const MAX_CELL_CHARS: usize = 400;
/// Longest kernel log line in the head's highlights.
pub(super) const MAX_HIGHLIGHT_CHARS: usize = 300;
/// At most this many tids in one list (waiters, holders, the D threads of a sample).
pub(super) const MAX_TIDS_LISTED: usize = 16;
/// At most this many tids named after the thread tables that were shown.
pub(super) const MAX_MORE_TIDS: usize = 64;
/// Syscall arguments shown in a thread table.
pub(super) const MAX_SYSCALL_ARGS_SHOWN: usize = 3;
/// NSpid levels shown.
pub(super) const MAX_NSPID_SHOWN: usize = 8;
/// Flagged kernel log lines in the head (schema 1): the first and the last ones.
pub(super) const HIGHLIGHTS_FIRST_LAST: (usize, usize) = (4, 4);
/// Kernel log lines in the head (schema 2) about the wedged process and the driver: the first and the last ones.
pub(super) const OURS_FIRST_LAST: (usize, usize) = (4, 6);
/// Kernel log lines in the head (schema 2) about other processes: the first and the last ones.
pub(super) const OTHERS_FIRST_LAST: (usize, usize) = (2, 4);
/// At most this many lines of one probe's output.
pub(super) const MAX_PROBE_OUTPUT_LINES: usize = 200;

/// `s` cut to `max_chars` characters, with `…` when cut.
pub(super) fn clip(s: &str, max_chars: usize) -> String {
    if s.len() <= max_chars {
        // Fast path: no more bytes than allowed characters.
        return s.to_string();
    }
    match s.char_indices().nth(max_chars) {
        None => s.to_string(),
        Some((idx, _)) => format!("{}…", &s[..idx]),
    }
}

/// Lines to show per section so that the sections together take at most `budget` bytes: every section gets up to a
/// common cap, found by bisection, so the longest sections are cut first.
pub(super) fn fit(sections: &[Section], budget: usize) -> Vec<usize> {
    let measured: Vec<Measured> = sections.iter().map(Section::measure).collect();
    let total =
        |cap: usize| -> usize { measured.iter().map(|m| m.size(m.lines_within(cap))).sum() };
    let max_cap = measured
        .iter()
        .map(|m| m.size(m.lines()))
        .max()
        .unwrap_or(0);
    let (mut lo, mut hi) = (0usize, max_cap);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if total(mid) <= budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    measured.iter().map(|m| m.lines_within(lo)).collect()
}

/// Sizes of one section for each number of shown lines.
pub(super) struct Measured {
    pub(super) fixed: usize,
    /// `prefix[n]`: bytes of the first n lines in keep order, newlines included.
    pub(super) prefix: Vec<usize>,
    pub(super) keep: Keep,
}

impl Measured {
    fn lines(&self) -> usize {
        self.prefix.len() - 1
    }

    /// Rendered bytes with `n` lines shown (the cut note included when n is short of all).
    fn size(&self, n: usize) -> usize {
        let note = if n < self.lines() {
            Section::cut_note(self.lines() - n, self.keep).len()
        } else {
            0
        };
        self.fixed + self.prefix[n] + note
    }

    /// The most lines whose rendering fits in `cap` bytes (0 if even the bare section does not fit).
    fn lines_within(&self, cap: usize) -> usize {
        if self.size(self.lines()) <= cap {
            return self.lines();
        }
        // size(n) grows with n (the note's length changes by a few bytes at most, less than a line).
        let (mut lo, mut hi) = (0usize, self.lines());
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.size(mid) <= cap {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }
}

/// Last resort, should the head alone be huge: cut at a character boundary and say so.
pub(super) fn enforce_cap(out: String) -> String {
    if out.chars().count() <= MAX_MARKDOWN_CHARS {
        return out;
    }
    let marker =
        "\n\n… report cut at the size limit (truncated); the full data is in incident.json.\n";
    let keep = MAX_MARKDOWN_CHARS - marker.chars().count();
    let end = out
        .char_indices()
        .nth(keep)
        .map(|(i, _)| i)
        .unwrap_or(out.len());
    let mut cut = out[..end].to_string();
    cut.push_str(marker);
    cut
}
