//! Stages `stack_scan` and `user_symbols`: what native code a wedged thread was in when it entered the kernel.
//!
//! - `stack_scan`: a bounded read of the thread's stack at its user sp (`<pid>/mem`, in a sacrificial child with
//!   the probe deadline: it takes the mmap lock); each word that falls inside an executable file mapping (from
//!   the maps text the probes stage read) is a *candidate* return address: `user_frame.candidates[]`, a
//!   heuristic (stale frames and function pointers pass the same test).
//! - `user_symbols`: the pc and the candidates symbolized from the mapped files' ELF symbol tables, with the
//!   files' build ids, and the source line of each wedged thread's innermost Python frame. The files are read
//!   by path under `<pid>/root`, never through the process's memory, and by a helper process
//!   (`wedge-capture internal resolve-symbols`) under the probe deadline: a library may sit on a hung
//!   filesystem.
//!
//! Every one of those paths is the target's choice (its maps, its `co_filename`), so the helper holds the
//! target's credentials, never root's: its uid, gid and groups from `<pid>/status`, no capability
//! ([`crate::probe::Confinement`]); when they cannot be read, nothing is read. It is also bounded in memory
//! (`RLIMIT_AS`, `RLIMIT_DATA`) and in cost per file and per run (`capture::symbolize::ElfLimits`), and an ELF
//! file is read only when it is the very file the maps show (device and inode).

use capture::decode::hex;
use capture::parse::credentials::Credentials;
use capture::parse::Parse;
use capture::proc_root::TaskFile;
use capture::symbolize::named_file::Root;
use capture::symbolize::{self, Answer, ElfLimits, Resolution};
use capture::user_frame::{executable_mappings, file_ids, scan_candidates, FileId};
use capture::{RiskyFile, SyscallInfo};
use serde::{Deserialize, Serialize};

use super::context::{Capture, Deadline};
use crate::defaults;
use crate::probe::{Confinement, Probe, ProbeKind, ProbeStatus, ROOT_FD};

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

/// What the helper is asked: files under the process's root and the file offsets to name in each, the most
/// important first (the pcs' files, then the candidates'), and Python source lines.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ResolveRequest {
    /// The process's root by path (`<pid>/root`): opened by the helper unless `root_fd` is given.
    pub root: String,
    /// The process's root as an open directory the agent handed over (the helper cannot always open it with
    /// the target's credentials).
    #[serde(default)]
    pub root_fd: Option<i32>,
    pub files: Vec<FileRequest>,
    /// Python source files and the line to read in each (the innermost frame of each wedged thread).
    #[serde(default)]
    pub sources: Vec<(String, u32)>,
}

/// One ELF file to resolve.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FileRequest {
    /// The path as the maps show it.
    pub path: String,
    pub offsets: Vec<u64>,
    /// The device and inode the maps show for it: the file opened must be one of them.
    #[serde(default)]
    pub mapped: Vec<FileId>,
}

/// The cost caps of one helper run ([`defaults`]).
fn elf_limits(budget_left: u64) -> ElfLimits {
    ElfLimits {
        max_file_bytes: defaults::SYMBOLIZER_MAX_ELF_FILE_BYTES,
        max_symbol_table_bytes: defaults::SYMBOLIZER_MAX_SYMBOL_TABLE_BYTES,
        budget_left,
    }
}

/// The helper's body (`wedge-capture internal resolve-symbols REQUEST`): each answer printed as one JSON line as
/// soon as it is known (the source lines first: cheap), so a deadline cuts only what was not reached. A file
/// that fails or is refused never stops the next one; the files' symbol tables share one budget
/// ([`defaults::SYMBOLIZER_SYMBOL_TABLE_BUDGET`]), spent in the request's order.
pub fn resolve_request(request: &str, out: &mut impl std::io::Write) -> anyhow::Result<()> {
    let request: ResolveRequest = serde_json::from_str(request)
        .map_err(|err| anyhow::anyhow!("the request is not a symbol request: {err}"))?;
    let root = match request.root_fd {
        Some(fd) => {
            anyhow::ensure!(
                fd != libc::STDOUT_FILENO && fd != libc::STDERR_FILENO,
                "the root fd {fd} is an output stream"
            );
            // SAFETY: the agent handed this fd over for this purpose (`Confinement::root_dir`); nothing else
            // in this process owns it, and `Root::from_fd` checks it is a directory.
            let owned =
                unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            Root::from_fd(owned)
        }
        None => Root::open(std::path::Path::new(&request.root)),
    };
    let root = match root {
        Ok(root) => Some(root),
        Err(why) => {
            // Every answer says why: the agent reads it as the reason for each file.
            for (path, line) in request.sources.iter().take(symbolize::MAX_FILES) {
                let answer = Answer::Source(symbolize::SourceLine {
                    path: path.clone(),
                    line: *line,
                    error: Some(why.clone()),
                    ..Default::default()
                });
                writeln!(out, "{}", serde_json::to_string(&answer)?)?;
            }
            for file in request.files.iter().take(symbolize::MAX_FILES) {
                let answer = Answer::File(symbolize::ResolvedFile {
                    path: file.path.clone(),
                    error: Some(why.clone()),
                    ..Default::default()
                });
                writeln!(out, "{}", serde_json::to_string(&answer)?)?;
            }
            out.flush()?;
            None
        }
    };
    let Some(root) = root else {
        return Ok(());
    };
    for (path, line) in request.sources.iter().take(symbolize::MAX_FILES) {
        let answer = Answer::Source(symbolize::read_source_line(&root, path, *line));
        writeln!(out, "{}", serde_json::to_string(&answer)?)?;
        out.flush()?;
    }
    let mut budget_left = defaults::SYMBOLIZER_SYMBOL_TABLE_BUDGET;
    for file in request.files.iter().take(symbolize::MAX_FILES) {
        let resolved = symbolize::resolve(
            &root,
            &file.path,
            &file.mapped,
            &file.offsets,
            &elf_limits(budget_left),
        );
        budget_left = budget_left.saturating_sub(resolved.symbol_table_bytes.unwrap_or(0));
        writeln!(out, "{}", serde_json::to_string(&Answer::File(resolved))?)?;
        out.flush()?;
    }
    Ok(())
}

/// Adds `offset` of `path` to the request's files (bounded: [`symbolize::MAX_FILES`] files, each at most
/// [`symbolize::MAX_OFFSETS_PER_FILE`] offsets).
fn want(files: &mut Vec<FileRequest>, path: Option<&String>, offset: Option<u64>) {
    let (Some(path), Some(offset)) = (path, offset) else {
        return;
    };
    if !path.starts_with('/') {
        return; // [vdso], [stack]: no file
    }
    let at = match files.iter().position(|f| f.path == *path) {
        Some(at) => at,
        None if files.len() < symbolize::MAX_FILES => {
            files.push(FileRequest {
                path: path.clone(),
                ..FileRequest::default()
            });
            files.len() - 1
        }
        None => return,
    };
    let offsets = &mut files[at].offsets;
    if !offsets.contains(&offset) && offsets.len() < symbolize::MAX_OFFSETS_PER_FILE {
        offsets.push(offset);
    }
}

/// The files and offsets to resolve: every judged thread's pc first, then the candidates, each with the
/// device and inode the maps show for it; and each judged thread's innermost Python frame's source line.
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
    if let Some(maps) = capture.maps.as_deref() {
        for file in &mut files {
            file.mapped = file_ids(maps, &file.path);
        }
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
        root_fd: None,
        files,
    }
}

/// The target's credentials (its `status`), or why they cannot be had.
fn target_credentials(capture: &Capture<'_>) -> Result<Credentials, String> {
    let status = capture
        .settings
        .proc_root
        .read_task_file(capture.pid, capture.pid, TaskFile::Status)
        .map_err(|err| err.to_string())?;
    Credentials::parse(&status).map_err(|err| err.to_string())
}

/// Whether this process already holds exactly `target`'s rights: the same ids and groups, and no capability
/// (an agent run by the target's own user). Then there is nothing to switch, and nothing could be: changing
/// groups needs a capability.
fn already_has(target: &Credentials) -> bool {
    let Ok(status) = std::fs::read("/proc/self/status") else {
        return false;
    };
    let (Ok(own), Ok(parsed)) = (
        Credentials::parse(&status),
        capture::parse::status::Status::parse(&status),
    ) else {
        return false;
    };
    let sorted = |groups: &[u32]| {
        let mut groups = groups.to_vec();
        groups.sort_unstable();
        groups.dedup();
        groups
    };
    own.uid == target.uid
        && own.gid == target.gid
        && sorted(&own.groups) == sorted(&target.groups)
        && parsed.cap_eff == Some(0)
}

/// The helper's confinement for a target whose credentials are `creds`, and the request's root accordingly.
fn confine(
    request: &mut ResolveRequest,
    creds: &Credentials,
    root_dir: std::path::PathBuf,
) -> Confinement {
    let mut confinement = Confinement {
        address_space_limit: Some(defaults::SYMBOLIZER_ADDRESS_SPACE_LIMIT),
        data_limit: Some(defaults::SYMBOLIZER_DATA_LIMIT),
        ..Confinement::default()
    };
    if !already_has(creds) {
        confinement.credentials = Some(creds.clone());
        confinement.root_dir = Some(root_dir);
        request.root_fd = Some(ROOT_FD);
    }
    confinement
}

pub fn resolve(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    let mut request = request_of(capture);
    if request.files.is_empty() && request.sources.is_empty() {
        return Ok(()); // nothing located in a file (each frame says why), no Python frame
    }
    // The files are the target's choice: read with its rights or not at all, never with root's.
    let creds = match target_credentials(capture) {
        Ok(creds) => creds,
        Err(why) => {
            let why = format!(
                "not read: the process's credentials could not be read ({why}); the files it names are read \
                 only with its own rights, never root's"
            );
            apply(capture.incident, &Resolution::default(), Some(&why));
            return Err(why);
        }
    };
    let program = std::env::current_exe().map_err(|err| {
        format!("cannot find wedge-capture's own binary to run the symbolizer: {err}")
    })?;
    let root_dir = capture
        .settings
        .proc_root
        .risky_path(RiskyFile::Root(capture.pid));
    let confinement = confine(&mut request, &creds, root_dir);
    let rights = match &confinement.credentials {
        Some(creds) => format!("as {}, no capabilities", creds.describe()),
        None => "as the agent's own user, which is the process's".to_string(),
    };
    let text = serde_json::to_string(&request).map_err(|err| err.to_string())?;
    let probe = Probe {
        name: "resolve-symbols".into(),
        kind: ProbeKind::Command {
            program: program.display().to_string(),
            args: vec!["internal".into(), "resolve-symbols".into(), text],
            confinement,
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
    // The request (paths of the process's files) is in the frames already: the entry names only its size and
    // the rights it ran with.
    outcome.target = format!(
        "wedge-capture internal resolve-symbols ({} files, {} source lines; {rights}; RLIMIT_AS {}, \
         RLIMIT_DATA {})",
        asked.0,
        asked.1,
        symbolize::human_bytes(defaults::SYMBOLIZER_ADDRESS_SPACE_LIMIT),
        symbolize::human_bytes(defaults::SYMBOLIZER_DATA_LIMIT),
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
        let Some(line) = frame.line.filter(|_| frame.file.starts_with('/')) else {
            continue;
        };
        let answer = resolution.source_line(&frame.file, line);
        frame.code = answer.and_then(|a| a.text.clone());
        frame.code_not_captured = match (frame.code.is_some(), answer, failure) {
            (true, _, _) => None,
            (false, Some(a), _) => Some(
                a.error
                    .clone()
                    .unwrap_or_else(|| "the helper gave no text".to_string()),
            ),
            (false, None, Some(why)) => Some(why.to_string()),
            (false, None, None) => Some("the source file was not read".to_string()),
        };
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
                    ..ResolvedFile::default()
                },
                ResolvedFile {
                    path: "/usr/lib/libcuda.so.1".into(),
                    build_id: Some("ef01".into()),
                    symbols: vec![(0x6000, Some("cuMemcpyDtoH_v2+0x4f".into()))],
                    ..ResolvedFile::default()
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
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = exe.display().to_string();
        let request = ResolveRequest {
            root: "/".into(),
            root_fd: None,
            files: vec![
                FileRequest {
                    mapped: file_ids(&maps, &exe),
                    path: exe,
                    offsets: vec![0x10],
                },
                FileRequest {
                    path: "/nonexistent/lib.so".into(),
                    offsets: vec![0x20],
                    mapped: Vec::new(),
                },
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
        // A root that cannot be opened: every file and line answered with why.
        let request = ResolveRequest {
            root: "/nonexistent-root".into(),
            ..request
        };
        let mut out = Vec::new();
        resolve_request(&serde_json::to_string(&request).unwrap(), &mut out).unwrap();
        let resolution = symbolize::parse_resolution(&out).unwrap();
        assert_eq!((resolution.files.len(), resolution.sources.len()), (2, 1));
        assert!(resolution.files[0]
            .error
            .as_deref()
            .unwrap()
            .contains("cannot open the process's root"));
    }

    /// The files of one run share a budget of symbol-table bytes, spent in the request's order: a file past
    /// it is refused, and the next ones are still tried.
    #[test]
    fn a_refused_file_never_stops_the_next_ones() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = exe.display().to_string();
        let libc_path = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
            .expect("libc in our maps")
            .to_string();
        let file = |path: &str| FileRequest {
            path: path.to_string(),
            offsets: vec![0x10],
            mapped: file_ids(&maps, path),
        };
        let request = ResolveRequest {
            root: "/".into(),
            root_fd: None,
            files: vec![
                // Not the mapped file: refused, and the next one is still read.
                FileRequest {
                    mapped: file_ids(&maps, &libc_path),
                    ..file(&exe)
                },
                file(&libc_path),
                file(&exe),
            ],
            sources: Vec::new(),
        };
        let mut out = Vec::new();
        resolve_request(&serde_json::to_string(&request).unwrap(), &mut out).unwrap();
        let resolution = symbolize::parse_resolution(&out).unwrap();
        let errors: Vec<Option<&str>> = resolution
            .files
            .iter()
            .map(|f| f.error.as_deref())
            .collect();
        assert!(
            errors[0].unwrap().contains("not the file the process maps"),
            "{errors:?}"
        );
        assert_eq!(&errors[1..], [None, None], "{errors:?}");
        assert!(resolution.files[1].build_id.is_some());
    }

    #[test]
    fn python_source_lines_say_why_they_were_not_read() {
        let mut incident = judged();
        let frame = |file: &str| capture::python_stack::PythonFrame {
            function: "step".into(),
            file: file.into(),
            line: Some(1),
            ..Default::default()
        };
        incident.wedged_threads[0].python_stack = Some(vec![frame("/etc/shadow")]);
        incident.wedged_threads.push(WedgedThread {
            tid: 8,
            python_stack: Some(vec![frame("/w/train.py")]),
            ..WedgedThread::default()
        });
        let resolution = Resolution {
            sources: vec![
                symbolize::SourceLine {
                    path: "/etc/shadow".into(),
                    line: 1,
                    text: None,
                    error: Some(
                        "not read: Permission denied (os error 13), with the process's own rights"
                            .into(),
                    ),
                },
                symbolize::SourceLine {
                    path: "/w/train.py".into(),
                    line: 1,
                    text: Some("optimizer.step()".into()),
                    error: None,
                },
            ],
            ..Resolution::default()
        };
        apply(&mut incident, &resolution, None);
        let first = &incident.wedged_threads[0].python_stack.as_ref().unwrap()[0];
        assert_eq!(first.code, None);
        assert!(first
            .code_not_captured
            .as_deref()
            .unwrap()
            .contains("with the process's own rights"));
        let second = &incident.wedged_threads[1].python_stack.as_ref().unwrap()[0];
        assert_eq!(second.code.as_deref(), Some("optimizer.step()"));
        assert_eq!(second.code_not_captured, None);
        // No answer at all: the run's failure is the reason.
        let mut incident = judged();
        incident.wedged_threads[0].python_stack = Some(vec![frame("/w/train.py")]);
        apply(
            &mut incident,
            &Resolution::default(),
            Some("not read: the process's credentials …"),
        );
        let first = &incident.wedged_threads[0].python_stack.as_ref().unwrap()[0];
        assert!(first
            .code_not_captured
            .as_deref()
            .unwrap()
            .contains("credentials"));
    }

    /// Running as the target's own user with no capability, there is nothing to switch; otherwise the
    /// helper takes the target's ids and gets the root as an fd.
    #[test]
    fn the_helper_takes_the_targets_rights_unless_it_has_them_already() {
        let status = std::fs::read("/proc/self/status").unwrap();
        let own = Credentials::parse(&status).unwrap();
        let caps = capture::parse::status::Status::parse(&status)
            .unwrap()
            .cap_eff;
        let mut request = ResolveRequest::default();
        let confinement = confine(&mut request, &own, "/proc/1/root".into());
        assert_eq!(
            confinement.address_space_limit,
            Some(defaults::SYMBOLIZER_ADDRESS_SPACE_LIMIT)
        );
        assert_eq!(
            confinement.data_limit,
            Some(defaults::SYMBOLIZER_DATA_LIMIT)
        );
        if caps == Some(0) {
            assert_eq!(confinement.credentials, None);
            assert_eq!(request.root_fd, None);
        } else {
            assert_eq!(confinement.credentials.as_ref(), Some(&own));
        }
        let nobody = Credentials {
            uid: 65534,
            gid: 65534,
            groups: Vec::new(),
        };
        let mut request = ResolveRequest::default();
        let confinement = confine(&mut request, &nobody, "/proc/1/root".into());
        assert_eq!(confinement.credentials, Some(nobody));
        assert_eq!(
            confinement.root_dir.as_deref(),
            Some(std::path::Path::new("/proc/1/root"))
        );
        assert_eq!(request.root_fd, Some(ROOT_FD));
    }

    #[test]
    fn the_pcs_files_are_asked_first_and_the_request_is_bounded() {
        let mut files = Vec::new();
        let libc = Some("/usr/lib/libc.so.6".to_string());
        want(&mut files, libc.as_ref(), Some(1));
        want(&mut files, libc.as_ref(), Some(1));
        want(&mut files, Some(&"[vdso]".to_string()), Some(2));
        want(&mut files, None, Some(3));
        assert_eq!(
            files,
            [FileRequest {
                path: "/usr/lib/libc.so.6".to_string(),
                offsets: vec![1],
                mapped: Vec::new(),
            }]
        );
        for i in 0..100 {
            want(&mut files, Some(&format!("/lib{i}.so")), Some(i));
            want(&mut files, libc.as_ref(), Some(i + 10));
        }
        assert_eq!(files.len(), symbolize::MAX_FILES);
        assert_eq!(files[0].offsets.len(), symbolize::MAX_OFFSETS_PER_FILE);
    }
}
