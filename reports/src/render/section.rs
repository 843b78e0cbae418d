//! A `<details>` block of fenced text lines, rendered with as many lines as the budget gives it.

use crate::text::fenced_line;

/// Which end of a section to keep when it is cut.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    Head,
    /// The most recent lines (logs, breadcrumbs).
    Tail,
}

/// A `<details>` block of fenced text lines.
pub(super) struct Section {
    pub(super) title: String,
    pub(super) lines: Vec<String>,
    pub(super) keep: Keep,
}

impl Section {
    pub(super) fn new(title: impl Into<String>, keep: Keep) -> Section {
        Section {
            title: title.into(),
            lines: Vec::new(),
            keep,
        }
    }

    pub(super) fn push(&mut self, line: impl AsRef<str>) {
        self.lines.push(fenced_line(line.as_ref()));
    }

    /// The block's first lines. Inside `<summary>` (an HTML block) Markdown is not read: the title is HTML-escaped.
    pub(super) fn open(&self) -> String {
        format!(
            "<details><summary>{}</summary>\n\n```text\n",
            capture::escape::html(&capture::escape::one_line(&self.title))
        )
    }

    const CLOSE: &'static str = "```\n\n</details>\n\n";

    pub(super) fn cut_note(dropped: usize, keep: Keep) -> String {
        match keep {
            Keep::Head => {
                format!("… {dropped} more lines cut to fit the size limit (all in incident.json)\n")
            }
            Keep::Tail => format!(
                "… {dropped} earlier lines cut to fit the size limit (all in incident.json)\n"
            ),
        }
    }

    /// Byte sizes for every possible number of shown lines, computed once.
    pub(super) fn measure(&self) -> Measured {
        let ordered: Box<dyn Iterator<Item = &String>> = match self.keep {
            Keep::Head => Box::new(self.lines.iter()),
            Keep::Tail => Box::new(self.lines.iter().rev()),
        };
        let mut prefix = Vec::with_capacity(self.lines.len() + 1);
        let mut sum = 0;
        prefix.push(0);
        for line in ordered {
            sum += line.len() + 1;
            prefix.push(sum);
        }
        Measured {
            fixed: self.open().len() + Self::CLOSE.len(),
            prefix,
            keep: self.keep,
        }
    }
    pub(super) fn render(&self, shown: usize, out: &mut String) {
        out.push_str(&self.open());
        let dropped = self.lines.len() - shown;
        let range = match self.keep {
            Keep::Head => 0..shown,
            Keep::Tail => self.lines.len() - shown..self.lines.len(),
        };
        if dropped > 0 && self.keep == Keep::Tail {
            out.push_str(&Self::cut_note(dropped, self.keep));
        }
        for line in &self.lines[range] {
            out.push_str(line);
            out.push('\n');
        }
        if dropped > 0 && self.keep == Keep::Head {
            out.push_str(&Self::cut_note(dropped, self.keep));
        }
        out.push_str(Self::CLOSE);
    }
}

/// Sizes of one section for each number of shown lines.
pub(super) struct Measured {
    pub(super) fixed: usize,
    /// `prefix[n]`: bytes of the first n lines in keep order, newlines included.
    pub(super) prefix: Vec<usize>,
    pub(super) keep: Keep,
}

impl Measured {
    pub(super) fn lines(&self) -> usize {
        self.prefix.len() - 1
    }

    /// Rendered bytes with `n` lines shown (the cut note included when n is short of all).
    pub(super) fn size(&self, n: usize) -> usize {
        let note = if n < self.lines() {
            Section::cut_note(self.lines() - n, self.keep).len()
        } else {
            0
        };
        self.fixed + self.prefix[n] + note
    }

    /// The most lines whose rendering fits in `cap` bytes (0 if even the bare section does not fit).
    pub(super) fn lines_within(&self, cap: usize) -> usize {
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
