//! Python stacks of a CPython process, as `py-spy dump --json` prints them, and the cheap test of whether a
//! process is CPython at all. Pure: py-spy runs as a sacrificial child with a deadline (it reads the target's
//! memory with `process_vm_readv`, which takes the mmap lock and can sleep unkillably); its stdout comes here.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Most threads kept from one dump; the rest are counted out (a process with more is not a training script).
pub const MAX_THREADS: usize = 1024;
/// Most frames kept per thread, innermost first (deep recursion is cut, the line that matters is kept).
pub const MAX_FRAMES: usize = 64;
/// Longest function or file name kept (bytes); longer ones are cut at a character boundary.
const MAX_NAME: usize = 512;

/// One Python frame.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PythonFrame {
    /// The function (`step`, `Trainer.train`, `<module>`).
    pub function: String,
    /// The source file as the interpreter knows it (`/workspace/train.py`).
    pub file: String,
    /// The line being run in it; None when py-spy could not tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// That line's source text (`optimizer.step()`), read from the file under the process's root by the
    /// capture's helper with the process's own rights (the innermost frame of a wedged thread only); None when
    /// not read. Never in a `--public` bundle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why `code` is absent where it was asked for (the file was refused, or not readable with the process's
    /// own rights, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_not_captured: Option<String>,
}

impl PythonFrame {
    /// `train.py:142 in step`.
    pub fn short(&self) -> String {
        let name = self.file.rsplit('/').next().unwrap_or(&self.file);
        match self.line {
            Some(line) => format!("{name}:{line} in {}", self.function),
            None => format!("{name} in {}", self.function),
        }
    }
}

/// One thread's Python stack, innermost frame first.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PythonThread {
    /// The native thread id (what /proc/<pid>/task lists); None when py-spy did not say.
    pub tid: Option<i32>,
    /// The Python thread's name (`MainThread`, `wedge-worker`).
    pub name: String,
    /// Whether it held the GIL when read.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub owns_gil: bool,
    pub frames: Vec<PythonFrame>,
    /// Frames beyond [`MAX_FRAMES`] that were not kept.
    #[serde(skip_serializing_if = "is_zero")]
    pub frames_left_out: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `train.py:142 in step ← train.py:310 in main ← …` (at most `max` frames, innermost first).
pub fn one_line(frames: &[PythonFrame], max: usize) -> String {
    let mut parts: Vec<String> = frames.iter().take(max).map(PythonFrame::short).collect();
    if frames.len() > max {
        parts.push("…".to_string());
    }
    parts.join(" ← ")
}

#[derive(Deserialize)]
struct DumpThread {
    #[serde(default)]
    os_thread_id: Option<i64>,
    #[serde(default)]
    thread_name: Option<String>,
    #[serde(default)]
    owns_gil: bool,
    #[serde(default)]
    frames: Vec<DumpFrame>,
}

#[derive(Deserialize)]
struct DumpFrame {
    #[serde(default)]
    name: String,
    #[serde(default)]
    filename: String,
    #[serde(default)]
    line: Option<i64>,
}

fn cut(mut text: String) -> String {
    if text.len() > MAX_NAME {
        let mut end = MAX_NAME;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Parse `py-spy dump --json` output: a JSON array of threads, each with `os_thread_id`, `thread_name`,
/// `owns_gil` and `frames` (`name`, `filename`, `line`), innermost first. Unknown fields are ignored; the
/// result is bounded ([`MAX_THREADS`], [`MAX_FRAMES`]). The output is the caller's (bounded) pipe read.
pub fn parse_py_spy_dump(bytes: &[u8]) -> Result<Vec<PythonThread>> {
    let threads: Vec<DumpThread> = serde_json::from_slice(bytes).map_err(|err| Error::Parse {
        what: "py-spy dump --json output",
        why: err.to_string(),
    })?;
    Ok(threads
        .into_iter()
        .take(MAX_THREADS)
        .map(|t| PythonThread {
            tid: t
                .os_thread_id
                .and_then(|id| i32::try_from(id).ok())
                .filter(|&id| id > 0),
            name: cut(t.thread_name.unwrap_or_default()),
            owns_gil: t.owns_gil,
            frames_left_out: t.frames.len().saturating_sub(MAX_FRAMES),
            frames: t
                .frames
                .into_iter()
                .take(MAX_FRAMES)
                .map(|f| PythonFrame {
                    function: cut(f.name),
                    file: cut(f.filename),
                    line: f
                        .line
                        .and_then(|l| u32::try_from(l).ok())
                        .filter(|&l| l > 0),
                    code: None,
                    code_not_captured: None,
                })
                .collect(),
        })
        .collect())
}

/// Whether a process looks like a CPython interpreter (or a program embedding libpython), judged without
/// reading its memory: its executable's name (`python3.11`, `python`), its comm, and when a sacrificial child
/// could list them, its mappings (`libpython3.11.so.1.0`).
pub fn looks_like_cpython(exe: Option<&str>, comm: &str, maps: Option<&str>) -> bool {
    let python_name = |name: &str| {
        let name = name.rsplit('/').next().unwrap_or(name);
        let name = name.strip_suffix(" (deleted)").unwrap_or(name);
        name.starts_with("python") && !name.contains("-config")
    };
    if exe.is_some_and(python_name) || python_name(comm) {
        return true;
    }
    maps.is_some_and(|maps| {
        maps.lines().any(|line| {
            line.rsplit('/')
                .next()
                .is_some_and(|file| file.starts_with("libpython"))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // The shape py-spy 0.4 prints (fields it adds are ignored).
    const DUMP: &str = r#"[
  {"pid": 29594, "thread_id": 140061232146112, "thread_name": "wedge-worker", "os_thread_id": 29644,
   "active": false, "owns_gil": false,
   "frames": [
     {"name": "step", "filename": "/tmp/train.py", "module": null, "short_filename": "train.py", "line": 142,
      "locals": null, "is_entry": true, "is_shim_entry": false},
     {"name": "Thread.run", "filename": "/usr/lib/python3.11/threading.py", "line": 982}
   ],
   "process_info": null},
  {"thread_name": "MainThread", "os_thread_id": 29594, "owns_gil": true, "frames": [], "extra": [1, 2]}
]"#;

    #[test]
    fn a_dump_gives_each_native_thread_its_frames_innermost_first() {
        let threads = parse_py_spy_dump(DUMP.as_bytes()).unwrap();
        assert_eq!(threads.len(), 2);
        assert_eq!(threads[0].tid, Some(29644));
        assert_eq!(threads[0].name, "wedge-worker");
        assert_eq!(threads[0].frames[0].short(), "train.py:142 in step");
        assert_eq!(one_line(&threads[0].frames, 1), "train.py:142 in step ← …");
        assert_eq!(
            one_line(&threads[0].frames, 5),
            "train.py:142 in step ← threading.py:982 in Thread.run"
        );
        assert!(threads[1].owns_gil && threads[1].frames.is_empty());
    }

    #[test]
    fn hostile_dumps_are_errors_or_bounded() {
        assert!(parse_py_spy_dump(b"").is_err());
        assert!(parse_py_spy_dump(b"Error: Failed to find python version").is_err());
        assert!(parse_py_spy_dump(b"{\"not\": \"a list\"}").is_err());
        let frames: Vec<String> = (0..100)
            .map(|i| {
                format!(
                    r#"{{"name": "f{i}", "filename": "{}", "line": -3}}"#,
                    "x".repeat(600)
                )
            })
            .collect();
        let dump = format!(
            r#"[{{"os_thread_id": -1, "frames": [{}]}}]"#,
            frames.join(",")
        );
        let threads = parse_py_spy_dump(dump.as_bytes()).unwrap();
        assert_eq!(threads[0].tid, None);
        assert_eq!(threads[0].frames.len(), MAX_FRAMES);
        assert_eq!(threads[0].frames_left_out, 100 - MAX_FRAMES);
        assert_eq!(threads[0].frames[0].line, None);
        assert!(threads[0].frames[0].file.len() <= MAX_NAME + '…'.len_utf8());
    }

    #[test]
    fn cpython_is_told_by_exe_comm_or_libpython_mapping() {
        assert!(looks_like_cpython(
            Some("/usr/bin/python3.11"),
            "pt_main_thread",
            None
        ));
        assert!(looks_like_cpython(None, "python3", None));
        let maps =
            "7f0000000000-7f0000100000 r-xp 00001000 08:01 9 /opt/lib/libpython3.10.so.1.0\n";
        assert!(looks_like_cpython(
            Some("/opt/app/server"),
            "server",
            Some(maps)
        ));
        assert!(!looks_like_cpython(
            Some("/usr/bin/sleep"),
            "sleep",
            Some("7f0000000000-7f0000100000 r-xp 00001000 08:01 9 /usr/lib/libc.so.6\n")
        ));
        assert!(!looks_like_cpython(
            Some("/usr/bin/python3-config"),
            "sh",
            None
        ));
    }
}
