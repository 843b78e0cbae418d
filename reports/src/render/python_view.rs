//! The report's view of the Python stacks and the symbolized user frame (issue 29), in small functions that
//! take the incident (or one judged thread) and return text; `render` places them (the verdict's
//! "(from train.py:142 `optimizer.step()`)" is [`crate::verdict::python_clause`]): a judged thread's "Python" and "native candidates" rows, the
//! symbol after its user frame, and the "Python stacks" details section.

use capture::python_stack;

use crate::model::{Incident, UserFrame, WedgedThread};
use crate::text::code_cell;

/// Frames shown in a thread's row (the details section has them all).
const ROW_FRAMES: usize = 4;
/// Candidate frames shown in a thread's row.
const ROW_CANDIDATES: usize = 6;

/// ` = `ioctl+0x1b`` after a user frame whose symbol is known.
pub(super) fn symbol_suffix(frame: &UserFrame) -> String {
    match &frame.symbol {
        Some(symbol) => format!(" = {}", code_cell(symbol)),
        None => String::new(),
    }
}

/// Extra rows of a judged thread's table: its Python frames, the heuristic native candidates.
pub(super) fn thread_rows(w: &WedgedThread) -> Vec<String> {
    let mut rows = Vec::new();
    if let Some(frames) = w.python_stack.as_ref().filter(|f| !f.is_empty()) {
        rows.push(format!(
            "| Python | {} |",
            code_cell(&python_stack::one_line(frames, ROW_FRAMES))
        ));
    }
    if let Some(frame) = w.user_frame.as_ref().filter(|f| !f.candidates.is_empty()) {
        let mut text: Vec<String> = frame
            .candidates
            .iter()
            .take(ROW_CANDIDATES)
            .map(|c| code_cell(&c.short()))
            .collect();
        if frame.candidates.len() > ROW_CANDIDATES {
            text.push("…".to_string());
        }
        rows.push(format!(
            "| native candidates (heuristic: stack words in executable mappings) | {} |",
            text.join(" ← ")
        ));
    }
    rows
}

/// Appends `rows` to the table `out` ends with (a table followed by one blank line).
pub(super) fn append_rows(out: &mut String, rows: &[String]) {
    if rows.is_empty() {
        return;
    }
    if out.ends_with("\n\n") {
        out.pop();
    }
    for row in rows {
        out.push_str(row);
        out.push('\n');
    }
    out.push('\n');
}

/// The "Python stacks" details section: every Python thread of the sample that holds them, innermost frame first.
pub(super) fn python_stacks(incident: &Incident) -> (String, Vec<String>) {
    let Some(sample) = incident
        .samples
        .iter()
        .rev()
        .find(|s| !s.python_threads.is_empty())
    else {
        return ("Python stacks".to_string(), Vec::new());
    };
    let threads = &sample.python_threads;
    let title = format!("Python stacks ({} threads, py-spy)", threads.len());
    let mut lines = Vec::new();
    for t in threads {
        let state = t
            .tid
            .and_then(|tid| sample.snapshot.threads.iter().find(|s| s.tid == tid))
            .map(|s| format!(" state {}", s.state))
            .unwrap_or_default();
        lines.push(format!(
            "thread {} {}{}{}",
            t.tid
                .map(|tid| tid.to_string())
                .unwrap_or_else(|| "?".into()),
            t.name,
            state,
            if t.owns_gil { " (holds the GIL)" } else { "" }
        ));
        for f in &t.frames {
            lines.push(format!(
                "    {} ({}{})",
                f.function,
                f.file,
                f.line.map(|l| format!(":{l}")).unwrap_or_default()
            ));
        }
        if t.frames_left_out > 0 {
            lines.push(format!("    … {} outer frames not kept", t.frames_left_out));
        }
    }
    (title, lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CandidateFrame, PythonFrame, PythonThread, Sample};

    fn judged() -> WedgedThread {
        WedgedThread {
            tid: 7,
            python_stack: Some(vec![
                PythonFrame {
                    function: "step".into(),
                    file: "/w/train.py".into(),
                    line: Some(142),
                    code: Some("optimizer.step()".into()),
                    code_not_captured: None,
                },
                PythonFrame {
                    function: "main".into(),
                    file: "/w/train.py".into(),
                    line: Some(310),
                    code: None,
                    code_not_captured: None,
                },
            ]),
            user_frame: Some(UserFrame {
                pc: "0x7f00".into(),
                path: Some("/usr/lib/libc.so.6".into()),
                offset: Some(0x10),
                symbol: Some("ioctl+0x1b".into()),
                candidates: vec![CandidateFrame {
                    path: Some("/usr/lib/libcuda.so.1".into()),
                    symbol: Some("cuMemcpyDtoH_v2+0x4f".into()),
                    ..CandidateFrame::default()
                }],
                ..UserFrame::default()
            }),
            ..WedgedThread::default()
        }
    }

    #[test]
    fn the_verdict_and_rows_name_the_line_and_the_symbol() {
        let w = judged();
        assert_eq!(
            crate::verdict::python_clause(&w).unwrap(),
            " (from `train.py:142` `optimizer.step()`)"
        );
        assert_eq!(
            symbol_suffix(w.user_frame.as_ref().unwrap()),
            " = `ioctl+0x1b`"
        );
        let rows = thread_rows(&w);
        assert_eq!(
            rows[0],
            "| Python | `train.py:142 in step ← train.py:310 in main` |"
        );
        assert!(
            rows[1].contains("`libcuda.so.1 cuMemcpyDtoH_v2+0x4f`"),
            "{rows:?}"
        );
        let mut table = "| a | b |\n\n".to_string();
        append_rows(&mut table, &rows);
        assert!(table.starts_with("| a | b |\n| Python |") && table.ends_with("|\n\n"));
        let mut no_code = judged();
        no_code.python_stack.as_mut().unwrap()[0].code = None;
        assert_eq!(
            crate::verdict::python_clause(&no_code).unwrap(),
            " (from `train.py:142` in `step`)"
        );
        assert!(crate::verdict::python_clause(&WedgedThread::default()).is_none());
    }

    #[test]
    fn hostile_names_cannot_break_the_table_or_the_verdict() {
        let mut w = judged();
        w.python_stack.as_mut().unwrap()[0].function = "x|`y\n</details>".into();
        w.python_stack.as_mut().unwrap()[0].code = Some("a`b".into());
        let row = &thread_rows(&w)[0];
        let outside = capture::escape::outside_code_spans(row);
        assert!(
            !row.contains('\n') && !outside.contains("</details>") && row.contains("\\|"),
            "{row}"
        );
        assert_eq!(outside, "| Python |  |", "{row}");
        assert_eq!(
            crate::verdict::python_clause(&w).unwrap(),
            " (from `train.py:142` ``a`b``)"
        );
    }

    #[test]
    fn the_section_lists_every_python_thread() {
        let mut incident = Incident::default();
        assert!(python_stacks(&incident).1.is_empty());
        incident.samples.push(Sample {
            python_threads: vec![PythonThread {
                tid: Some(7),
                name: "MainThread".into(),
                owns_gil: true,
                frames: judged().python_stack.unwrap(),
                frames_left_out: 2,
            }],
            ..Sample::default()
        });
        let (title, lines) = python_stacks(&incident);
        assert_eq!(title, "Python stacks (1 threads, py-spy)");
        assert_eq!(lines[0], "thread 7 MainThread (holds the GIL)");
        assert_eq!(lines[1], "    step (/w/train.py:142)");
        assert_eq!(lines[3], "    … 2 outer frames not kept");
    }
}
