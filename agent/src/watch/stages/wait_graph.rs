//! Stage `wait_graph`: who holds what the process's threads in D wait for (`capture::wait_graph`): the
//! kernel's blocker records of every task, read once here through a BPF task iterator of its own
//! (`capture::blockers`, loaded on the first capture and kept), never by the watch loop's scan; then the
//! candidate holders sampled for about a second when no record names one.
//!
//! A safe stage: every read is one that cannot hang (the BPF read, stat, syscall, stack, sched, fdinfo, fd
//! links, kallsyms). Without the program (no BTF, no privilege, an old kernel) the graph is built from the
//! stacks and samples alone, and says why.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use capture::blockers::BlockerIter;
use capture::wait_graph::live;

use super::context::{Capture, Deadline};

/// Samples of the candidate holders, and their spacing: about a second, well inside the deadline.
const SAMPLES: usize = 6;
const SAMPLE_INTERVAL: Duration = Duration::from_millis(200);
/// Left of the stage's deadline when sampling stops.
const MARGIN: Duration = Duration::from_millis(800);

/// The stage's deadline (a second of samples, the BPF load on the first capture, the reads).
pub const DEADLINE: Duration = Duration::from_secs(5);

/// The blocker iterator, loaded once per agent (about 0.1 s and a moment of 35 MB for the BTF), or why
/// it could not be.
/// `refuse`: the test hook (`refuse_blocker_field`), as the first caller says.
fn loaded(refuse: bool) -> &'static Mutex<Result<BlockerIter, String>> {
    static LOADED: OnceLock<Mutex<Result<BlockerIter, String>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(BlockerIter::load(refuse).map_err(|e| e.to_string())))
}

/// The records of every task now, or why there are none (and whether the test hook refused the field).
pub fn read_records(refuse: bool) -> (Result<Vec<capture::blockers::BlockerRecord>, String>, bool) {
    let guard = match loaded(refuse).lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    match &*guard {
        Ok(iter) => (
            iter.read()
                .map_err(|e| format!("the blocker iterator's read failed: {e}")),
            iter.refused_for_test(),
        ),
        Err(why) => (
            Err(format!("the blocker iterator is unavailable: {why}")),
            false,
        ),
    }
}

/// The wait graph of `pid` on the live tree: records, snapshot, samples until `until`.
pub fn graph_of(
    root: &capture::ProcRoot,
    pid: i32,
    until: Option<Instant>,
    refuse_blocker_field: bool,
) -> Result<capture::wait_graph::WaitGraph, String> {
    let (records, refused) = if root.is_live() {
        read_records(refuse_blocker_field)
    } else {
        (
            Err("a recorded proc tree: no kernel records".to_string()),
            false,
        )
    };
    let opts = live::Options {
        samples: SAMPLES,
        interval: SAMPLE_INTERVAL,
        until,
        ..live::Options::default()
    };
    let mut graph = match &records {
        Ok(r) => live::capture(root, pid, Ok(r), &opts),
        Err(why) => live::capture(root, pid, Err(why), &opts),
    }
    .map_err(|e| e.to_string())?;
    if refused {
        graph.records.push_str(&format!(
            " (refused by the test hook {})",
            capture::blockers::REFUSE_ENV
        ));
    }
    Ok(graph)
}

pub fn run(capture: &mut Capture<'_>, deadline: &Deadline) -> Result<(), String> {
    let until = Instant::now() + DEADLINE.saturating_sub(MARGIN);
    let _ = deadline;
    let settings = capture.settings;
    let graph = graph_of(
        &settings.proc_root,
        capture.pid,
        Some(until),
        settings.watch.refuse_blocker_field,
    )?;
    let locks = graph.locks.len();
    let named = graph.locks.iter().filter(|l| !l.holders.is_empty()).count();
    capture.incident.push_timeline(format!(
        "wait graph: {locks} lock{} waited for, {named} with a holder named ({})",
        if locks == 1 { "" } else { "s" },
        graph.records
    ));
    // Issue 38: the kernel's record names the lock a site's stack could not.
    if let Some(sample) = capture.incident.samples.last_mut() {
        capture::wait_graph::refine_with_graph(&mut sample.snapshot.threads, &graph);
    }
    capture.incident.wait_graph = Some(graph);
    Ok(())
}
