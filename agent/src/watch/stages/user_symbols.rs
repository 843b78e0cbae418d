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

use std::collections::BTreeMap;

use capture::decode::hex;
use capture::symbolize::{self, Resolution};
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

/// What the helper is asked: files under `root` and the file offsets to name in each.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ResolveRequest {
    pub root: String,
    pub files: BTreeMap<String, Vec<u64>>,
    /// Python source files and the line to read in each (the innermost frame of each wedged thread).
    #[serde(default)]
    pub sources: BTreeMap<String, Vec<u32>>,
}

/// The helper's body (`wedge-capture internal resolve-symbols REQUEST`): resolve and print JSON.
pub fn resolve_request(request: &str) -> anyhow::Result<String> {
    let request: ResolveRequest = serde_json::from_str(request)
        .map_err(|err| anyhow::anyhow!("the request is not a symbol request: {err}"))?;
    let root = std::path::Path::new(&request.root);
    let resolution = Resolution {
        files: request
            .files
            .iter()
            .take(symbolize::MAX_FILES)
            .map(|(path, offsets)| symbolize::resolve(root, path, offsets))
            .collect(),
        sources: request
            .sources
            .iter()
            .take(symbolize::MAX_FILES)
            .flat_map(|(path, lines)| {
                lines
                    .iter()
                    .take(4)
                    .map(|&line| symbolize::read_source_line(root, path, line))
            })
            .collect(),
    };
    Ok(serde_json::to_string(&resolution)?)
}

/// The files and offsets to resolve: every judged thread's pc and candidates.
fn request_of(capture: &Capture<'_>) -> ResolveRequest {
    let mut files: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for frame in capture
        .incident
        .wedged_threads
        .iter()
        .filter_map(|w| w.user_frame.as_ref())
    {
        let located = std::iter::once((frame.path.as_ref(), frame.offset))
            .chain(frame.candidates.iter().map(|c| (c.path.as_ref(), c.offset)));
        for (path, offset) in located {
            let (Some(path), Some(offset)) = (path, offset) else {
                continue;
            };
            if !path.starts_with('/')
                || files.len() >= symbolize::MAX_FILES && !files.contains_key(path)
            {
                continue;
            }
            let offsets = files.entry(path.clone()).or_default();
            if !offsets.contains(&offset) && offsets.len() < symbolize::MAX_OFFSETS_PER_FILE {
                offsets.push(offset);
            }
        }
    }
    let mut sources: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for frame in capture
        .incident
        .wedged_threads
        .iter()
        .filter_map(|w| w.python_stack.as_ref()?.first())
    {
        if let Some(line) = frame.line.filter(|_| frame.file.starts_with('/')) {
            if sources.len() < symbolize::MAX_FILES || sources.contains_key(&frame.file) {
                let lines = sources.entry(frame.file.clone()).or_default();
                if !lines.contains(&line) {
                    lines.push(line);
                }
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
    let outcome = capture
        .probes
        .run_all(std::slice::from_ref(&probe))
        .remove(0);
    let resolution = match outcome.status {
        ProbeStatus::Ok => symbolize::parse_resolution(outcome.output.as_bytes())
            .map_err(|err| format!("the symbolizer's answer: {err}")),
        _ => Err(format!(
            "the symbolizer {}{}",
            outcome.detail,
            outcome
                .output
                .lines()
                .next()
                .map(|l| format!(": {}", l.chars().take(300).collect::<String>()))
                .unwrap_or_default()
        )),
    };
    apply(capture.incident, resolution.as_ref().map_err(String::clone));
    resolution.map(|_| ())
}

fn apply(incident: &mut reports::model::Incident, resolution: Result<&Resolution, String>) {
    if let Ok(resolution) = &resolution {
        for frame in incident
            .wedged_threads
            .iter_mut()
            .filter_map(|w| w.python_stack.as_mut()?.first_mut())
        {
            if let Some(line) = frame.line {
                frame.code = resolution.source(&frame.file, line).map(str::to_string);
            }
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
        let resolution = match &resolution {
            Ok(r) => *r,
            Err(why) => {
                frame.symbol_not_captured = Some(why.clone());
                continue;
            }
        };
        let file = resolution.file(&path);
        frame.build_id = file.and_then(|f| f.build_id.clone());
        frame.symbol = resolution.symbol(&path, offset).map(str::to_string);
        if frame.symbol.is_none() {
            frame.symbol_not_captured = Some(match file.and_then(|f| f.error.clone()) {
                Some(error) => error,
                None if file.is_some() => {
                    "no ELF symbol covers the pc (stripped file?)".to_string()
                }
                None => "the file was not resolved".to_string(),
            });
        }
        for candidate in &mut frame.candidates {
            if let (Some(path), Some(offset)) = (&candidate.path, candidate.offset) {
                candidate.symbol = resolution.symbol(path, offset).map(str::to_string);
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
                        symbol: None,
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
                    build_id: None,
                    symbols: vec![(0x6000, Some("cuMemcpyDtoH_v2+0x4f".into()))],
                    error: None,
                },
            ],
        };
        apply(&mut incident, Ok(&resolution));
        let frame = incident.wedged_threads[0].user_frame.as_ref().unwrap();
        assert_eq!(frame.symbol.as_deref(), Some("ioctl+0x1b"));
        assert_eq!(frame.build_id.as_deref(), Some("abcd"));
        assert_eq!(
            frame.candidates[0].short(),
            "libcuda.so.1 cuMemcpyDtoH_v2+0x4f"
        );

        let mut incident = judged();
        apply(
            &mut incident,
            Err("the symbolizer timed out after 2 s: …".into()),
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
    fn the_helper_refuses_a_bad_request_and_answers_a_good_one() {
        assert!(resolve_request("not json").is_err());
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let request = ResolveRequest {
            root: "/".into(),
            files: BTreeMap::from([(exe.display().to_string(), vec![0x10])]),
            sources: BTreeMap::new(),
        };
        let answer = resolve_request(&serde_json::to_string(&request).unwrap()).unwrap();
        let resolution = symbolize::parse_resolution(answer.as_bytes()).unwrap();
        assert!(resolution.files[0].build_id.is_some(), "{answer}");
    }
}
