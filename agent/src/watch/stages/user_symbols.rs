//! Stages `stack_scan` and `user_symbols`: what native code a wedged thread was in when it entered the kernel.
//!
//! - `stack_scan`: a bounded read of the thread's stack at its user sp (`<pid>/mem`, in a sacrificial child with
//!   the probe deadline: it takes the mmap lock); each word that falls inside an executable file mapping (from
//!   the maps text the probes stage read) is a *candidate* return address: `user_frame.candidates[]`, a
//!   heuristic (stale frames and function pointers pass the same test).
//! - `user_symbols`: the pc and the candidates symbolized from the mapped files' ELF symbol tables, with the
//!   files' build ids. The files are read by path under `<pid>/root`, never through the process's memory,
//!   and by a helper process (`wedge-capture internal resolve-symbols`) under the probe deadline: a library may
//!   sit on a hung filesystem.

use capture::decode::hex;
use capture::symbolize::{self, Answer, Resolution};
use capture::user_frame::{executable_mappings, scan_candidates};
use capture::{RiskyFile, SyscallInfo};
use serde::{Deserialize, Serialize};

use super::{Capture, Deadline};
use crate::defaults;
use crate::probe::{Probe, ProbeKind, ProbeStatus};

pub fn scan(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    let Some(maps) = capture.maps.as_deref() else {
        return Ok(()); // no frame was located: each says why already
    };
    let mappings = executable_mappings(maps);
    let mem = capture
        .settings
        .proc_root
        .risky_path(RiskyFile::Mem(capture.pid));
    let mut wanted: Vec<(usize, u64)> = Vec::new();
    for (i, w) in capture.incident.wedged_threads.iter().enumerate() {
        let sp = match w.at_detection.as_ref().and_then(|t| t.syscall.as_ref()) {
            Some(SyscallInfo::Blocked { sp, .. }) => capture::user_frame::parse_pc(sp),
            _ => None,
        };
        if let (Some(_), Some(sp)) = (&w.user_frame, sp.filter(|&sp| sp != 0)) {
            wanted.push((i, sp));
        }
    }
    let probes: Vec<Probe> = wanted
        .iter()
        .map(|&(i, sp)| Probe {
            name: format!("stack-scan-{}", capture.incident.wedged_threads[i].tid),
            kind: ProbeKind::ReadMem {
                path: mem.clone(),
                offset: sp,
                len: defaults::STACK_SCAN_BYTES,
                follow_xfer: false,
            },
            timeout_meaning:
                "the process's mmap lock is probably held for writing (or a writer is queued)"
                    .into(),
        })
        .collect();
    let outcomes = capture.probes.run_all(&probes);
    let mut failures = Vec::new();
    for ((i, _), outcome) in wanted.iter().zip(&outcomes) {
        let judged = &mut capture.incident.wedged_threads[*i];
        let bytes = outcome.output.lines().next().and_then(hex::bytes);
        match (&outcome.status, bytes) {
            (ProbeStatus::Ok, Some(bytes)) => {
                if let Some(frame) = judged.user_frame.as_mut() {
                    frame.candidates =
                        scan_candidates(&bytes, &mappings, defaults::MAX_STACK_CANDIDATES);
                }
            }
            _ => failures.push(format!(
                "thread {}: reading {} {}",
                judged.tid, outcome.target, outcome.detail
            )),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// What the helper is asked: files under `root` and the file offsets to name in each, the most important first
/// (the pcs' files, then the candidates'), and Python source lines.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ResolveRequest {
    pub root: String,
    pub files: Vec<(String, Vec<u64>)>,
    /// Python source files and the line to read in each (the innermost frame of each wedged thread).
    #[serde(default)]
    pub sources: Vec<(String, u32)>,
}

/// The helper's body (`wedge-capture internal resolve-symbols REQUEST`): each answer printed as one JSON line as
/// soon as it is known (the source lines first: cheap), so a deadline cuts only what was not reached.
pub fn resolve_request(request: &str, out: &mut impl std::io::Write) -> anyhow::Result<()> {
    let request: ResolveRequest = serde_json::from_str(request)
        .map_err(|err| anyhow::anyhow!("the request is not a symbol request: {err}"))?;
    let root = std::path::Path::new(&request.root);
    for (path, line) in request.sources.iter().take(symbolize::MAX_FILES) {
        let answer = Answer::Source(symbolize::read_source_line(root, path, *line));
        writeln!(out, "{}", serde_json::to_string(&answer)?)?;
        out.flush()?;
    }
    for (path, offsets) in request.files.iter().take(symbolize::MAX_FILES) {
        let answer = Answer::File(symbolize::resolve(root, path, offsets));
        writeln!(out, "{}", serde_json::to_string(&answer)?)?;
        out.flush()?;
    }
    Ok(())
}

/// Adds `offset` of `path` to the request's files (bounded: [`symbolize::MAX_FILES`] files, each at most
/// [`symbolize::MAX_OFFSETS_PER_FILE`] offsets).
fn want(files: &mut Vec<(String, Vec<u64>)>, path: Option<&String>, offset: Option<u64>) {
    let (Some(path), Some(offset)) = (path, offset) else {
        return;
    };
    if !path.starts_with('/') {
        return; // [vdso], [stack]: no file
    }
    let at = match files.iter().position(|(p, _)| p == path) {
        Some(at) => at,
        None if files.len() < symbolize::MAX_FILES => {
            files.push((path.clone(), Vec::new()));
            files.len() - 1
        }
        None => return,
    };
    let offsets = &mut files[at].1;
    if !offsets.contains(&offset) && offsets.len() < symbolize::MAX_OFFSETS_PER_FILE {
        offsets.push(offset);
    }
}

/// The files and offsets to resolve: every judged thread's pc first, then the candidates; and each judged
/// thread's innermost Python frame's source line.
fn request_of(capture: &Capture<'_>) -> ResolveRequest {
    let frames: Vec<&capture::user_frame::UserFrame> = capture
        .incident
        .wedged_threads
        .iter()
        .filter_map(|w| w.user_frame.as_ref())
        .collect();
    let mut files = Vec::new();
    for frame in &frames {
        want(&mut files, frame.path.as_ref(), frame.offset);
    }
    for candidate in frames.iter().flat_map(|f| &f.candidates) {
        want(&mut files, candidate.path.as_ref(), candidate.offset);
    }
    let mut sources: Vec<(String, u32)> = Vec::new();
    for frame in capture
        .incident
        .wedged_threads
        .iter()
        .filter_map(|w| w.python_stack.as_ref()?.first())
    {
        if let Some(line) = frame.line.filter(|_| frame.file.starts_with('/')) {
            let wanted = (frame.file.clone(), line);
            if !sources.contains(&wanted) && sources.len() < symbolize::MAX_FILES {
                sources.push(wanted);
            }
        }
    }
    ResolveRequest {
        sources,
        root: capture
            .settings
            .proc_root
            .risky_path(RiskyFile::Root(capture.pid))
            .display()
            .to_string(),
        files,
    }
}

pub fn resolve(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    let request = request_of(capture);
    if request.files.is_empty() && request.sources.is_empty() {
        return Ok(()); // nothing located in a file (each frame says why), no Python frame
    }
    let program = std::env::current_exe().map_err(|err| {
        format!("cannot find wedge-capture's own binary to run the symbolizer: {err}")
    })?;
    let text = serde_json::to_string(&request).map_err(|err| err.to_string())?;
    let probe = Probe {
        name: "resolve-symbols".into(),
        kind: ProbeKind::Command {
            program: program.display().to_string(),
            args: vec!["internal".into(), "resolve-symbols".into(), text],
        },
        timeout_meaning:
            "a mapped library's file could not be read in time (its filesystem may hang)".into(),
    };
    let started_at = reports::model::Timestamp::now();
    let mut outcome = capture
        .probes
        .run_all(std::slice::from_ref(&probe))
        .remove(0);
    let asked = (request.files.len(), request.sources.len());

    let parsed = symbolize::parse_resolution(outcome.output.as_bytes());
    // What the helper printed before a deadline cut it short is kept; the rest says why it is missing.
    let (resolution, failure) = match (outcome.status.clone(), parsed) {
        (ProbeStatus::Ok, Ok(resolution)) => (resolution, None),
        (ProbeStatus::Ok, Err(err)) => (
            Resolution::default(),
            Some(format!("the symbolizer's answer: {err}")),
        ),
        (_, Ok(partial)) => (partial, Some(format!("the symbolizer {}", outcome.detail))),
        (_, Err(_)) => (
            Resolution::default(),
            Some(format!(
                "the symbolizer {}{}",
                outcome.detail,
                outcome
                    .output
                    .lines()
                    .next()
                    .map(|l| format!(": {}", l.chars().take(300).collect::<String>()))
                    .unwrap_or_default()
            )),
        ),
    };
    apply(capture.incident, &resolution, failure.as_deref());
    // The request (paths of the process's files) is in the frames already: the entry names only its size.
    outcome.target = format!(
        "wedge-capture internal resolve-symbols ({} files, {} source lines)",
        asked.0, asked.1
    );
    super::probes::record_probe(capture.incident, &outcome, started_at, String::new());
    failure.map_or(Ok(()), Err)
}

/// Symbols, build ids and source lines into the judged threads' frames; a file with no answer says `failure`
/// (the helper's deadline) or that it was not resolved.
fn apply(incident: &mut reports::model::Incident, resolution: &Resolution, failure: Option<&str>) {
    for frame in incident
        .wedged_threads
        .iter_mut()
        .filter_map(|w| w.python_stack.as_mut()?.first_mut())
    {
        if let Some(line) = frame.line {
            frame.code = resolution.source(&frame.file, line).map(str::to_string);
        }
    }
    for frame in incident
        .wedged_threads
        .iter_mut()
        .filter_map(|w| w.user_frame.as_mut())
    {
        let (Some(path), Some(offset)) = (frame.path.clone(), frame.offset) else {
            continue;
        };
        let file = resolution.file(&path);
        frame.build_id = file.and_then(|f| f.build_id.clone());
        frame.symbol = resolution.symbol(&path, offset).map(str::to_string);
        if frame.symbol.is_none() {
            frame.symbol_not_captured = Some(match (file, failure) {
                (Some(f), _) => f.error.clone().unwrap_or_else(|| {
                    "no ELF symbol covers the pc (a stripped file?)".to_string()
                }),
                (None, Some(why)) => why.to_string(),
                (None, None) => "the file was not resolved".to_string(),
            });
        }
        for candidate in &mut frame.candidates {
            if let (Some(path), Some(offset)) = (&candidate.path, candidate.offset) {
                candidate.symbol = resolution.symbol(path, offset).map(str::to_string);
                candidate.build_id = resolution.file(path).and_then(|f| f.build_id.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capture::symbolize::ResolvedFile;
    use capture::user_frame::{CandidateFrame, UserFrame};
    use reports::model::{Incident, WedgedThread};

    fn judged() -> Incident {
        Incident {
            wedged_threads: vec![WedgedThread {
                tid: 7,
                user_frame: Some(UserFrame {
                    pc: "0x7f0000001234".into(),
                    path: Some("/usr/lib/libc.so.6".into()),
                    offset: Some(0x2234),
                    candidates: vec![CandidateFrame {
                        stack_offset: 8,
                        address: "0x7f0000005000".into(),
                        path: Some("/usr/lib/libcuda.so.1".into()),
                        offset: Some(0x6000),
                        ..CandidateFrame::default()
                    }],
                    ..UserFrame::default()
                }),
                ..WedgedThread::default()
            }],
            ..Incident::default()
        }
    }

    #[test]
    fn resolved_symbols_and_build_ids_land_on_the_frame_and_its_candidates() {
        let mut incident = judged();
        let resolution = Resolution {
            sources: Vec::new(),
            files: vec![
                ResolvedFile {
                    path: "/usr/lib/libc.so.6".into(),
                    build_id: Some("abcd".into()),
                    symbols: vec![(0x2234, Some("ioctl+0x1b".into()))],
                    error: None,
                },
                ResolvedFile {
                    path: "/usr/lib/libcuda.so.1".into(),
                    build_id: Some("ef01".into()),
                    symbols: vec![(0x6000, Some("cuMemcpyDtoH_v2+0x4f".into()))],
                    error: None,
                },
            ],
        };
        apply(&mut incident, &resolution, None);
        let frame = incident.wedged_threads[0].user_frame.as_ref().unwrap();
        assert_eq!(frame.symbol.as_deref(), Some("ioctl+0x1b"));
        assert_eq!(frame.build_id.as_deref(), Some("abcd"));
        assert_eq!(
            frame.candidates[0].short(),
            "libcuda.so.1 cuMemcpyDtoH_v2+0x4f"
        );
        assert_eq!(frame.candidates[0].build_id.as_deref(), Some("ef01"));

        let mut incident = judged();
        apply(
            &mut incident,
            &Resolution::default(),
            Some("the symbolizer timed out after 2 s: …"),
        );
        let frame = incident.wedged_threads[0].user_frame.as_ref().unwrap();
        assert!(frame.symbol.is_none());
        assert!(frame
            .symbol_not_captured
            .as_deref()
            .unwrap()
            .contains("timed out"));
    }

    #[test]
    fn the_helper_refuses_a_bad_request_and_answers_a_good_one_line_by_line() {
        assert!(resolve_request("not json", &mut Vec::new()).is_err());
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let request = ResolveRequest {
            root: "/".into(),
            files: vec![
                (exe.display().to_string(), vec![0x10]),
                ("/nonexistent/lib.so".into(), vec![0x20]),
            ],
            sources: vec![("/nonexistent/train.py".into(), 3)],
        };
        let mut out = Vec::new();
        resolve_request(&serde_json::to_string(&request).unwrap(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        let resolution = symbolize::parse_resolution(text.as_bytes()).unwrap();
        assert!(resolution.files[0].build_id.is_some(), "{text}");
        assert!(resolution.files[1].error.is_some(), "{text}");
        assert!(resolution.sources[0].error.is_some(), "{text}");
    }

    #[test]
    fn the_pcs_files_are_asked_first_and_the_request_is_bounded() {
        let mut files = Vec::new();
        let libc = Some("/usr/lib/libc.so.6".to_string());
        want(&mut files, libc.as_ref(), Some(1));
        want(&mut files, libc.as_ref(), Some(1));
        want(&mut files, Some(&"[vdso]".to_string()), Some(2));
        want(&mut files, None, Some(3));
        assert_eq!(files, [("/usr/lib/libc.so.6".to_string(), vec![1])]);
        for i in 0..100 {
            want(&mut files, Some(&format!("/lib{i}.so")), Some(i));
            want(&mut files, libc.as_ref(), Some(i + 10));
        }
        assert_eq!(files.len(), symbolize::MAX_FILES);
        assert_eq!(files[0].1.len(), symbolize::MAX_OFFSETS_PER_FILE);
    }
}
