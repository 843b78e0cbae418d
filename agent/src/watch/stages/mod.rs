//! The capture as an ordered table of stages: what an incident holds, gathered in a fixed order.
//!
//! Map:
//! - [`context`]: what every stage works on ([`context::Capture`]: one incident of one process) and its
//!   deadline ([`context::Deadline`]), a leaf below the table and the stages.
//! - [`STAGES`]: the table, in the order the stages run; each names what it fills, its deadline and the
//!   `not_captured` entry written when it fails or runs past its deadline.
//! - [`process`]: NSpid, comm, cgroup, container. [`threads`]: a snapshot of every thread.
//! - [`rings`]: the breadcrumb rings the process holds open (copied beside incident.json).
//! - [`kernel_log`]: /dev/kmsg around the wedge. [`host`]: PSI, meminfo, loadavg, the D-state census.
//! - [`wait_graph`]: who holds what the threads in D wait for (the kernel's blocker records through a BPF
//!   task iterator read at capture time only; running holders sampled).
//! - [`probes`]: the risky reads, in sacrificial children under the probe runner's deadline.
//! - [`python`]: every Python thread's stack (`py-spy dump --nonblocking`, a sacrificial child) of a CPython target.
//! - [`user_symbols`]: stages `stack_scan` and `user_symbols`: the wedged threads' user pc symbolized (ELF symbols, by path, in a helper process) and
//!   the heuristic return-address scan at sp (`mem`, in a sacrificial child).
//! - [`ioctl_argument`]: the struct at a wedged NVIDIA ioctl's pointer (`mem`, in a sacrificial child), decoded.
//! - [`kill`]: the optional SIGKILL (`--kill-on-wedge`), never for an on-demand capture.
//!
//! Cheap and safe first, risky last. The table is split into [`Phase`]s by the writes the lifecycle
//! ([`super::incident`]) makes between them: [`Phase::Minimal`] stages fill the minimal incident made
//! durable before anything slower runs; [`Phase::Safe`] stages are followed by an update; [`Phase::Risky`]
//! stages by the final write. A wedge capture and an on-demand one (SIGUSR1) run the same table.
//!
//! Deadlines: the in-process stages are bounded reads that cannot hang, so their deadline is checked
//! between their steps and after them; the probe stage's deadline is the probe runner's own (plus a
//! margin), which stops its children. A stage that fails or runs late leaves its `not_captured` entry and
//! the next stage runs: a partial incident says what it is missing.

pub mod context;
pub mod host;
pub mod ioctl_argument;
pub mod kernel_log;
pub mod kill;
pub mod probes;
pub mod process;
pub mod python;
pub mod rings;
pub mod threads;
pub mod user_symbols;
pub mod wait_graph;

use std::time::{Duration, Instant};

use reports::store::write::IncidentFiles;

use super::capture_settings::CaptureSettings;
use context::{Capture, Deadline, SkippedStage};

/// Where a stage sits relative to the incident's durable writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Fills the minimal incident, made durable before any later stage runs.
    Minimal,
    /// Safe reads after the first write; the incident is updated once they are done.
    Safe,
    /// Sacrificial children and the optional kill; the incident is finished after them.
    Risky,
}

/// How long a stage may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageDeadline {
    Fixed(Duration),
    /// The probe runner's deadline (`--probe-timeout`) and this margin for starting and reaping children.
    ProbeTimeoutPlus(Duration),
}

impl StageDeadline {
    pub fn limit(self, settings: &CaptureSettings) -> Duration {
        match self {
            StageDeadline::Fixed(limit) => limit,
            StageDeadline::ProbeTimeoutPlus(margin) => settings.watch.probe_timeout + margin,
        }
    }
}

/// One stage of the capture.
pub struct Stage {
    /// Read by the table's test (a stage is known by its `not_captured` label elsewhere).
    #[cfg_attr(not(test), allow(dead_code))]
    pub name: &'static str,
    pub phase: Phase,
    /// The incident fields it fills (documentation, checked against the incident by the table's test).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fills: &'static str,
    /// The `not_captured` entry's `what` when the stage fails or runs past its deadline.
    pub not_captured: &'static str,
    pub deadline: StageDeadline,
    /// Whether it still runs for an episode that ended before its first write landed (later evidence would
    /// describe the process after its wedge).
    pub after_episode_end: bool,
    /// Fills the incident; `Err(why)` means the stage's evidence is missing (or partly missing) for `why`.
    pub run: fn(&mut Capture<'_>, &Deadline) -> Result<(), String>,
}

/// The capture, in the order it runs. Cheap and safe first, then the risky probes, then the kill.
pub const STAGES: &[Stage] = &[
    Stage {
        name: "process",
        phase: Phase::Minimal,
        fills: "process.nspid, process.comm, process.cgroup, process.container_id",
        not_captured: "process info",
        deadline: StageDeadline::Fixed(Duration::from_secs(1)),
        after_episode_end: true,
        run: process::run,
    },
    Stage {
        name: "threads",
        phase: Phase::Minimal,
        fills: "samples (every thread: state, wchan, stack, syscall, fds of interest)",
        not_captured: "thread snapshot",
        deadline: StageDeadline::Fixed(Duration::from_secs(2)),
        after_episode_end: true,
        run: threads::run,
    },
    Stage {
        name: "rings",
        phase: Phase::Safe,
        fills: "ring, extra_rings, ring.bin and ring-N.bin beside incident.json",
        not_captured: "breadcrumb ring",
        deadline: StageDeadline::Fixed(Duration::from_secs(2)),
        after_episode_end: true,
        run: rings::run,
    },
    Stage {
        name: "kernel_log",
        phase: Phase::Safe,
        fills: "kernel_log",
        not_captured: "kernel log",
        deadline: StageDeadline::Fixed(Duration::from_secs(2)),
        after_episode_end: true,
        run: kernel_log::run,
    },
    Stage {
        name: "host",
        phase: Phase::Safe,
        fills: "host_context (PSI, meminfo, loadavg, D-state census)",
        not_captured: "host context",
        deadline: StageDeadline::Fixed(Duration::from_secs(5)),
        after_episode_end: false,
        run: host::run,
    },
    Stage {
        name: "wait_graph",
        phase: Phase::Safe,
        fills: "wait_graph (every lock waited for, its holder and waiters: kernel blocker records, sampled running holders)",
        not_captured: "wait graph",
        deadline: StageDeadline::Fixed(wait_graph::DEADLINE),
        after_episode_end: false,
        run: wait_graph::run,
    },
    Stage {
        name: "probes",
        phase: Phase::Risky,
        fills: "probes, process.cmdline, host.nvidia_driver_version",
        not_captured: "probes",
        deadline: StageDeadline::ProbeTimeoutPlus(Duration::from_secs(1)),
        after_episode_end: false,
        run: probes::run,
    },
    Stage {
        name: "python",
        phase: Phase::Risky,
        fills: "samples[last].python_threads, wedged_threads[].python_stack (py-spy, CPython targets only)",
        not_captured: "python stacks",
        deadline: StageDeadline::ProbeTimeoutPlus(Duration::from_secs(1)),
        after_episode_end: false,
        run: python::run,
    },
    Stage {
        name: "stack_scan",
        phase: Phase::Risky,
        fills: "wedged_threads[].user_frame.candidates (heuristic: words at sp inside executable mappings)",
        not_captured: "stack scan",
        deadline: StageDeadline::ProbeTimeoutPlus(Duration::from_secs(1)),
        after_episode_end: false,
        run: user_symbols::scan,
    },
    Stage {
        name: "user_symbols",
        phase: Phase::Risky,
        fills: "wedged_threads[].user_frame.symbol, .build_id, .candidates[].symbol (ELF symbols, by path)",
        not_captured: "user frame symbols",
        deadline: StageDeadline::ProbeTimeoutPlus(Duration::from_secs(1)),
        after_episode_end: false,
        run: user_symbols::resolve,
    },
    Stage {
        name: "ioctl_argument",
        phase: Phase::Risky,
        fills: "samples[last].threads[].ioctl.argument (NVIDIA RM/UVM struct at the pointer, D threads)",
        not_captured: "ioctl argument",
        deadline: StageDeadline::ProbeTimeoutPlus(Duration::from_secs(1)),
        after_episode_end: false,
        run: ioctl_argument::run,
    },
    Stage {
        name: "kill",
        phase: Phase::Risky,
        fills: "whether the process died of SIGKILL (--kill-on-wedge)",
        not_captured: "kill on wedge",
        deadline: StageDeadline::Fixed(Duration::from_secs(2)),
        after_episode_end: false,
        run: kill::run,
    },
];

/// Written beside incident.json before each stage of a capture (by the capture worker): the stage in
/// progress. An agent that dies during a stage (killed for memory, say) leaves it, and the next agent that
/// takes the episode up does not run that stage again: it records it as not captured, "the previous agent
/// died during it", instead of dying the same way in a loop.
pub const STAGE_MARKER_FILE: &str = "capture-stage.json";

/// What [`STAGE_MARKER_FILE`] holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StageMarker {
    /// The stage's name ([`Stage::name`]); "done" once every stage ran.
    pub stage: String,
    /// Its `not_captured` label.
    pub label: String,
}

impl StageMarker {
    /// The stage to skip, from a marker an earlier agent left (None: none, unreadable, or the capture had
    /// finished its stages).
    pub fn skipped(bytes: &[u8]) -> Option<SkippedStage> {
        let marker: StageMarker = serde_json::from_slice(bytes).ok()?;
        let stage = STAGES.iter().find(|s| s.name == marker.stage)?;
        Some(SkippedStage {
            stage: stage.name.to_string(),
            why:
                "not captured: the previous agent died during it (not run again, so that it cannot \
                  kill this one too)"
                    .to_string(),
        })
    }
}

/// Run the stages of `phase` from `table`, in table order. Each failure or overrun leaves its entry in
/// `not_captured`; the next stage runs regardless.
pub fn run_phase(table: &[Stage], phase: Phase, capture: &mut Capture<'_>) {
    for stage in table.iter().filter(|s| s.phase == phase) {
        if capture.episode_ended && !stage.after_episode_end {
            continue;
        }
        if let Some(skip) = capture.skip.iter().find(|s| s.stage == stage.name) {
            capture
                .incident
                .push_not_captured(stage.not_captured, skip.why.clone());
            continue;
        }
        if let Some(total) = capture.capture_deadline {
            if Instant::now() >= total.at {
                capture.incident.push_not_captured(
                    stage.not_captured,
                    format!(
                        "not run: the capture's total deadline of {} s had passed",
                        total.limit.as_secs()
                    ),
                );
                continue;
            }
        }
        if phase != Phase::Minimal {
            mark_stage(capture, stage);
        }
        let deadline = Deadline::start(stage.deadline.limit(capture.settings));
        let result = (stage.run)(capture, &deadline);
        match result {
            Err(why) => capture.incident.push_not_captured(stage.not_captured, why),
            Ok(()) if deadline.passed() => capture
                .incident
                .push_not_captured(stage.not_captured, deadline.overdue()),
            Ok(()) => {}
        }
    }
}

/// Leave [`STAGE_MARKER_FILE`] naming `stage` (best effort: a marker that cannot be written only means an
/// agent dying during this stage would run it again).
fn mark_stage(capture: &Capture<'_>, stage: &Stage) {
    if let Some(files) = capture.handle {
        let marker = StageMarker {
            stage: stage.name.to_string(),
            label: stage.not_captured.to_string(),
        };
        if let Ok(bytes) = serde_json::to_vec(&marker) {
            let _ = files.write_file(STAGE_MARKER_FILE, &bytes);
        }
    }
}

/// Leave [`STAGE_MARKER_FILE`] saying every stage ran.
pub fn mark_done(files: &IncidentFiles) {
    let marker = StageMarker {
        stage: "done".to_string(),
        label: String::new(),
    };
    if let Ok(bytes) = serde_json::to_vec(&marker) {
        let _ = files.write_file(STAGE_MARKER_FILE, &bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ProbeRunner;
    use capture::ProcRoot;
    use reports::model::Incident;

    #[test]
    fn the_table_runs_in_the_documented_order() {
        let names: Vec<&str> = STAGES.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "process",
                "threads",
                "rings",
                "kernel_log",
                "host",
                "wait_graph",
                "probes",
                "python",
                "stack_scan",
                "user_symbols",
                "ioctl_argument",
                "kill"
            ]
        );
        // Phases never go back: every minimal stage before every safe one before every risky one.
        assert!(STAGES.windows(2).all(|w| w[0].phase <= w[1].phase));
        assert_eq!(
            STAGES
                .iter()
                .filter(|s| s.phase == Phase::Minimal)
                .map(|s| s.name)
                .collect::<Vec<_>>(),
            ["process", "threads"]
        );
        // Each stage names its own not_captured entry.
        let mut labels: Vec<&str> = STAGES.iter().map(|s| s.not_captured).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), STAGES.len());
        // Only the probe stage waits out the probe runner's deadline; kill is the very last stage.
        let settings = CaptureSettings::new(ProcRoot::default());
        let probes = STAGES.iter().find(|s| s.name == "probes").unwrap();
        assert!(probes.deadline.limit(&settings) > settings.watch.probe_timeout);
        assert_eq!(STAGES.last().unwrap().name, "kill");
        // What a stage says it fills starts with a real field of the incident (kill fills none: it decides).
        let incident = serde_json::to_value(reports::Incident::default()).unwrap();
        for stage in STAGES.iter().filter(|s| s.name != "kill") {
            let field = stage.fills.split([' ', ',', '.', '[', '(']).next().unwrap();
            assert!(incident.get(field).is_some(), "{}: {field}", stage.name);
        }
    }

    fn failing(_: &mut Capture<'_>, _: &Deadline) -> Result<(), String> {
        Err("no such file".to_string())
    }

    fn slow(capture: &mut Capture<'_>, deadline: &Deadline) -> Result<(), String> {
        let until = Instant::now() + Duration::from_millis(50);
        while !deadline.passed() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        capture.incident.push_timeline("slow ran");
        Ok(())
    }

    fn stopping(_: &mut Capture<'_>, deadline: &Deadline) -> Result<(), String> {
        std::thread::sleep(Duration::from_millis(2));
        if deadline.passed() {
            return Err(deadline.stopped("the second step"));
        }
        Ok(())
    }

    fn last(capture: &mut Capture<'_>, _: &Deadline) -> Result<(), String> {
        capture.incident.push_timeline("last ran");
        Ok(())
    }

    fn risky(capture: &mut Capture<'_>, _: &Deadline) -> Result<(), String> {
        capture.incident.push_timeline("risky ran");
        Ok(())
    }

    const fn stage(
        name: &'static str,
        phase: Phase,
        deadline: Duration,
        after_episode_end: bool,
        run: fn(&mut Capture<'_>, &Deadline) -> Result<(), String>,
    ) -> Stage {
        Stage {
            name,
            phase,
            fills: "",
            not_captured: name,
            deadline: StageDeadline::Fixed(deadline),
            after_episode_end,
            run,
        }
    }

    const TEST_TABLE: &[Stage] = &[
        stage(
            "failing",
            Phase::Safe,
            Duration::from_secs(60),
            true,
            failing,
        ),
        stage("overdue", Phase::Safe, Duration::from_nanos(1), true, slow),
        stage(
            "stopping",
            Phase::Safe,
            Duration::from_nanos(1),
            true,
            stopping,
        ),
        stage("last", Phase::Safe, Duration::from_secs(60), true, last),
        stage("risky", Phase::Risky, Duration::from_secs(60), false, risky),
    ];

    fn run_test_table(phase: Phase, episode_ended: bool) -> Incident {
        let settings = CaptureSettings::new(ProcRoot::default());
        let mut incident = Incident::new(1);
        let mut runner = ProbeRunner::new(Duration::from_millis(100), 1);
        let mut capture = Capture {
            settings: &settings,
            pid: 1,
            incident: &mut incident,
            handle: None,
            probes: &mut runner,
            since_ns: 0,
            wedge: true,
            episode_ended,
            killed: None,
            maps: None,
            capture_deadline: None,
            skip: &[],
        };
        run_phase(TEST_TABLE, phase, &mut capture);
        incident
    }

    #[test]
    fn a_failing_or_overdue_stage_leaves_its_entry_and_later_stages_still_run() {
        let incident = run_test_table(Phase::Safe, false);
        let entries: Vec<(&str, &str)> = incident
            .not_captured
            .iter()
            .map(|n| (n.what.as_str(), n.why.as_str()))
            .collect();
        assert_eq!(entries.len(), 3, "{entries:?}");
        assert_eq!(entries[0], ("failing", "no such file"));
        assert_eq!(entries[1].0, "overdue");
        assert!(
            entries[1].1.contains("past its deadline of 0 ms"),
            "{entries:?}"
        );
        assert_eq!(entries[2].0, "stopping");
        assert!(
            entries[2].1.contains("the second step not read"),
            "{entries:?}"
        );
        let ran: Vec<&str> = incident.timeline.iter().map(|t| t.event.as_str()).collect();
        // The overdue stage kept what it did; the stage after the failures ran; another phase did not.
        assert_eq!(ran, ["slow ran", "last ran"]);
    }

    #[test]
    fn an_ended_episode_runs_only_the_stages_marked_for_it() {
        assert!(run_test_table(Phase::Risky, true).timeline.is_empty());
        let risky = run_test_table(Phase::Risky, false);
        assert_eq!(risky.timeline[0].event, "risky ran");
        assert!(risky.not_captured.is_empty());
    }
}
