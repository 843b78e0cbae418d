//! Markdown for a GitHub bug thread, and the one-line verdict.
//!
//! Layout: the verdict first, then a short table per wedged thread, the process, the timeline, and `<details>`
//! blocks (stacks, samples, breadcrumbs, kernel log, host context, probes, not captured). The whole is never longer
//! than [`MAX_MARKDOWN_CHARS`] (a GitHub comment's limit): the longest `<details>` sections are cut first, each cut
//! says how many lines it dropped, and a note under the verdict lists them. Rendering is a pure function of the
//! incident (no clock read), so the output is reproducible.
//!
//! Map:
//! - the verdict is its own module, [`crate::verdict`] (one function per clause); text primitives and units are
//!   [`crate::text`], every size limit is in [`crate::limits`] (both leaves, read by the verdict too).
//! - `head.rs`: the head's parts as a table of functions (verdict line, facts, thread tables in `threads.rs`,
//!   process, timeline, kernel log highlights).
//! - `sections.rs`: the `<details>` sections as a table of functions; `section.rs` renders one block.
//! - `wait_graph.rs`: the "Wait graph" table in the head and its `<details>` section of every waiter.
//! - `section.rs`: one `<details>` block and its measure; `budget.rs`: the fit of the sections into
//!   [`MAX_MARKDOWN_CHARS`] and the last-resort cap.
//! - `python_view.rs`: the Python stacks and the symbolized user frame in the thread tables and their section.

mod budget;
mod head;
pub(crate) mod python_view;
mod section;
mod sections;
mod threads;
mod wait_graph;

#[cfg(test)]
mod tests;

use budget::{enforce_cap, fit};
use section::Section;

use crate::limits::{MAX_MARKDOWN_CHARS, NOTE_RESERVE};

use crate::model::Incident;
use crate::text::{cell, clip};

/// Render the incident as Markdown, at most [`MAX_MARKDOWN_CHARS`] characters.
pub fn markdown(incident: &Incident) -> String {
    let mut head = String::new();
    for part in head::HEAD {
        part(incident, &mut head);
    }
    let sections: Vec<Section> = sections::SECTIONS
        .iter()
        .map(|section| section(incident))
        .filter(|s| !s.lines.is_empty())
        .collect();
    let footer = format!(
        "<sub>wedge-capture incident schema {} v{}; times are UTC wall clock unless marked.</sub>\n",
        cell(&incident.schema),
        incident.schema_version
    );

    let budget = MAX_MARKDOWN_CHARS.saturating_sub(head.len() + footer.len() + NOTE_RESERVE);
    let shown = fit(&sections, budget);

    let cut: Vec<String> = sections
        .iter()
        .zip(&shown)
        .filter(|(s, n)| **n < s.lines.len())
        .map(|(s, n)| format!("{} ({} of {} lines shown)", s.title, n, s.lines.len()))
        .collect();

    let mut out = String::with_capacity(MAX_MARKDOWN_CHARS);
    out.push_str(&head);
    if !cut.is_empty() {
        let note = format!(
            "> **Note:** this report was truncated to fit GitHub's {MAX_MARKDOWN_CHARS}-character limit: {}. \
             The full data is in incident.json.\n\n",
            cut.join("; ")
        );
        out.push_str(&clip(&note, NOTE_RESERVE - 20));
        if !out.ends_with('\n') {
            out.push_str("\n\n");
        }
    }
    for (section, n) in sections.iter().zip(&shown) {
        section.render(*n, &mut out);
    }
    out.push_str(&footer);
    enforce_cap(out)
}
