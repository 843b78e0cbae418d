//! The Markdown size budget's fit (the limits themselves are in [`crate::limits`]): [`fit`] shares what is left
//! between the `<details>` sections, cutting the longest first; [`enforce_cap`] is the last resort.

use super::section::{Measured, Section};
use crate::limits::MAX_MARKDOWN_CHARS;

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
