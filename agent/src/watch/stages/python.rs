//! Stage `python`: the Python stack of every thread of a CPython target, from `py-spy dump --nonblocking --json`.
//!
//! py-spy reads the target's memory with `process_vm_readv`, which takes the target's mmap lock and can sleep
//! **unkillably** behind a wedged writer; so it runs only as a sacrificial child under the probe runner's
//! deadline, and a timeout is evidence ("timed out after 2 s: …"). Never `--native` (ptrace: it waits for a stop
//! a thread in D never delivers) and never without `--nonblocking` (py-spy would pause the process the same way).
//! A py-spy child stuck in the kernel after SIGKILL is left to the runner (reaped later, never waited for); at
//! most [`defaults::MAX_STUCK_PY_SPY_PER_TARGET`] may be stuck per target: beyond it py-spy is not started for
//! that process again until one of them went away (and the runner's own bound on all stuck children holds).
//!
//! py-spy runs with an address-space limit ([`defaults::PY_SPY_ADDRESS_SPACE_LIMIT`]): a target that maps a
//! huge fake `libpython*.so` makes it fail at the limit, never grow. It keeps root's rights (reading another
//! process's memory needs ptrace rights); the paths it reads are its own business, and no text of the
//! target's files comes back through it (the source lines are read by the symbolizer, with the target's rights).
//!
//! No py-spy call at all for a process that is not CPython, judged without reading its memory
//! ([`capture::python_stack::looks_like_cpython`]: the exe link, the comm, the maps text the probes stage read).

use std::path::Path;

use capture::python_stack::{self, PythonThread};
use reports::model::{Incident, Timestamp};

use super::context::{Capture, Deadline};
use crate::defaults;
use crate::probe::{self, Probe, ProbeKind, ProbeOutcome, ProbeStatus};

/// What a py-spy timeout means, for the report.
const TIMEOUT_MEANING: &str = "py-spy's reads of the process's memory wait for its mmap lock \
     (a thread holds it, or waits to write it, behind the wedge)";

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    let settings = capture.settings;
    let root = &settings.proc_root;
    let pid = capture.pid;
    if !root.is_live() {
        // py-spy reads the live /proc itself: a recorded or fake tree has no process behind it.
        return Ok(());
    }
    let exe = root.exe_link(pid).ok().map(|p| p.display().to_string());
    if !python_stack::looks_like_cpython(
        exe.as_deref(),
        &capture.incident.process.comm,
        capture.maps.as_deref(),
    ) {
        return Ok(());
    }
    let program = crate::tools::py_spy(&settings.watch.py_spy).ok_or_else(|| {
        format!(
            "py-spy is not installed ({} not found): install it with `pip install py-spy` \
             (or give its path with --py-spy PATH) to get the Python stacks",
            settings.watch.py_spy.display()
        )
    })?;
    capture.probes.reap_stuck();
    let stuck = stuck_py_spy(
        &capture.probes.stuck_names(),
        &capture.probes.stuck_pids(),
        pid,
    );
    if let Some(why) = over_bound(&stuck) {
        return Err(why);
    }
    let probe = py_spy_probe(&program, pid);
    let started_at = Timestamp::now();
    let outcome = capture
        .probes
        .run_all(std::slice::from_ref(&probe))
        .remove(0);
    // The stacks go into `samples[].python_threads`; file paths are not repeated as an excerpt.
    super::probes::record_probe(capture.incident, &outcome, started_at, String::new());
    let threads = threads_of(&outcome)?;
    fill(capture.incident, threads);
    Ok(())
}

/// Pids of the stuck probe children (`names` and `pids` in the runner's order) that are py-spy runs for `pid`.
fn stuck_py_spy(names: &[String], pids: &[i32], pid: i32) -> Vec<i32> {
    let name = probe_name(pid);
    names
        .iter()
        .zip(pids)
        .filter(|(n, _)| **n == name)
        .map(|(_, &child)| child)
        .collect()
}

/// Why py-spy is not started for a target whose stuck py-spy children are `stuck`; None while under the bound.
fn over_bound(stuck: &[i32]) -> Option<String> {
    (stuck.len() >= defaults::MAX_STUCK_PY_SPY_PER_TARGET).then(|| {
        format!(
            "py-spy not started: {} earlier py-spy child of this process (pid {}) is still stuck in the kernel \
             after SIGKILL (at most {} per process; it goes when the wedge clears)",
            stuck.len(),
            stuck.iter().map(i32::to_string).collect::<Vec<_>>().join(", "),
            defaults::MAX_STUCK_PY_SPY_PER_TARGET
        )
    })
}

/// The runner's name for a py-spy child of `pid` (how its stuck children are counted per process).
fn probe_name(pid: i32) -> String {
    format!("py-spy-{pid}")
}

fn py_spy_probe(program: &Path, pid: i32) -> Probe {
    Probe {
        name: probe_name(pid),
        kind: ProbeKind::Command {
            program: program.display().to_string(),
            args: vec![
                "dump".into(),
                "--pid".into(),
                pid.to_string(),
                "--nonblocking".into(),
                "--json".into(),
            ],
            // py-spy keeps root's rights (reading the target's memory needs them) but not unbounded memory.
            confinement: probe::Confinement {
                address_space_limit: Some(defaults::PY_SPY_ADDRESS_SPACE_LIMIT),
                ..probe::Confinement::default()
            },
        },
        timeout_meaning: TIMEOUT_MEANING.into(),
    }
}

/// The threads py-spy printed, or why there are none.
fn threads_of(outcome: &ProbeOutcome) -> Result<Vec<PythonThread>, String> {
    match outcome.status {
        ProbeStatus::Ok => python_stack::parse_py_spy_dump(outcome.output.as_bytes())
            .map_err(|err| format!("py-spy printed no stacks: {err}")),
        ProbeStatus::TimedOut => Err(format!("py-spy {}", outcome.detail)),
        ProbeStatus::Failed | ProbeStatus::Skipped => {
            // py-spy says why on stderr (no Python found, permission): its first line is the reason.
            let said = outcome
                .output
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(|l| format!(": {}", l.chars().take(300).collect::<String>()))
                .unwrap_or_default();
            Err(format!("py-spy {}{said}", outcome.detail))
        }
    }
}

/// Every thread into the latest sample; each judged thread's own frames into its `python_stack`.
fn fill(incident: &mut Incident, threads: Vec<PythonThread>) {
    for judged in &mut incident.wedged_threads {
        judged.python_stack = threads
            .iter()
            .find(|t| t.tid == Some(judged.tid))
            .filter(|t| !t.frames.is_empty())
            .map(|t| t.frames.clone());
    }
    if let Some(sample) = incident.samples.last_mut() {
        sample.python_threads = threads;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reports::model::{Sample, WedgedThread};

    fn outcome(status: ProbeStatus, output: &str, detail: &str) -> ProbeOutcome {
        ProbeOutcome {
            name: "py-spy-42".into(),
            target: "py-spy dump --pid 42 --nonblocking --json".into(),
            status,
            detail: detail.into(),
            output: output.into(),
            output_truncated: false,
            elapsed_ms: 3,
            killed: None,
        }
    }

    #[test]
    fn the_probe_never_pauses_or_ptraces_the_target() {
        let probe = py_spy_probe(Path::new("/usr/bin/py-spy"), 42);
        let ProbeKind::Command { args, .. } = &probe.kind else {
            panic!("{probe:?}");
        };
        assert!(args.contains(&"--nonblocking".to_string()));
        assert!(!args.iter().any(|a| a == "--native" || a == "-n"));
        let ProbeKind::Command { confinement, .. } = &probe.kind else {
            panic!("{probe:?}");
        };
        assert_eq!(
            confinement.address_space_limit,
            Some(defaults::PY_SPY_ADDRESS_SPACE_LIMIT)
        );
        assert_eq!(confinement.credentials, None);
    }

    #[test]
    fn stacks_go_to_their_threads_and_failures_say_why() {
        let mut incident = Incident {
            wedged_threads: vec![
                WedgedThread {
                    tid: 43,
                    ..WedgedThread::default()
                },
                WedgedThread {
                    tid: 44,
                    ..WedgedThread::default()
                },
            ],
            samples: vec![Sample::default()],
            ..Incident::default()
        };
        let dump = r#"[{"os_thread_id": 43, "thread_name": "w", "frames": [
            {"name": "step", "filename": "/w/train.py", "line": 142}]},
            {"os_thread_id": 42, "thread_name": "MainThread", "frames": []}]"#;
        let threads = threads_of(&outcome(ProbeStatus::Ok, dump, "ok")).unwrap();
        fill(&mut incident, threads);
        let stack = incident.wedged_threads[0].python_stack.as_ref().unwrap();
        assert_eq!(stack[0].short(), "train.py:142 in step");
        assert!(incident.wedged_threads[1].python_stack.is_none());
        assert_eq!(incident.samples[0].python_threads.len(), 2);

        let timed_out = threads_of(&outcome(
            ProbeStatus::TimedOut,
            "",
            "timed out after 2 s: py-spy's reads …",
        ))
        .unwrap_err();
        assert!(
            timed_out.starts_with("py-spy timed out after 2 s"),
            "{timed_out}"
        );
        let failed = threads_of(&outcome(
            ProbeStatus::Failed,
            "\nError: Failed to find python version from target process\n",
            "exited with status 1",
        ))
        .unwrap_err();
        assert_eq!(
            failed,
            "py-spy exited with status 1: Error: Failed to find python version from target process"
        );
        assert!(threads_of(&outcome(ProbeStatus::Ok, "not json", "ok")).is_err());
    }

    #[test]
    fn stuck_py_spy_children_are_bounded_per_target() {
        let names: Vec<String> = ["cmdline", "py-spy-42", "py-spy-7", "py-spy-420"]
            .map(String::from)
            .to_vec();
        let pids = [100, 101, 102, 103];
        assert_eq!(stuck_py_spy(&names, &pids, 42), [101]);
        assert_eq!(stuck_py_spy(&names, &pids, 9), Vec::<i32>::new());
        assert!(over_bound(&[]).is_none());
        let why = over_bound(&[101]).unwrap();
        assert!(
            why.starts_with("py-spy not started: 1 earlier py-spy child of this process (pid 101)"),
            "{why}"
        );
    }
}
