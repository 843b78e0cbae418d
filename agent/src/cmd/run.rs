//! `wedge-capture run -- CMD ARGS…`: run a command, watch every thread of it and its descendants, capture any
//! wedge out of band. The supervision loop ([`supervise`]) is shared with `selftest`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use capture::ProcRoot;
use reports::retention::Retention;
use reports::store::Store;

use crate::cli::{self, OutputFormat};
use crate::defaults;
use crate::duration::parse_duration;
use crate::exit::{ExitCode, Failure};
use crate::preflight;
use crate::settings::{WatchOptions, WatchSettings};
use crate::watch::launch::{self, LaunchError, SignalChannel};
use crate::watch::targets::ChildTree;
use crate::watch::{CaptureEvent, CaptureSettings, Capturer, WatchConfig, Watcher};

/// How long `run` waits for a capture in flight when a signal ends it (SIGINT/SIGTERM exit at once: a
/// second is what a stop may take).
const SIGNAL_EXIT_CAPTURE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// Run a command and watch it for wedges.
///
/// CMD runs in its own process group with WEDGE_CAPTURE_RING_DIR set, so instrumented workers write their
/// breadcrumb rings where wedge-capture reads them. wedge-capture becomes a child subreaper: every
/// descendant stays watched, even one whose parent exits. Every --interval, each thread of each descendant is
/// sampled; a thread in D whose wchan, kernel stack and context switches do not change for --threshold (and
/// --samples samples) is wedged, and an incident is written under --out: first a minimal incident.json, then
/// the ring, kernel log, host context and risky probes (in sacrificial children with --probe-timeout).
/// An incident that cannot be written (full filesystem) is retried every interval until exit.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
SIGINT, SIGTERM and SIGHUP are forwarded to CMD's process group. After a wedge was captured, the
first SIGINT/SIGTERM makes wedge-capture exit with status 3 at once (the wedged command cannot be
reaped). With --format text, the incident's path is printed on stdout when a wedge was captured.

Examples:
  wedge-capture run -- python train.py
  wedge-capture run --threshold 60s --exit-after 10s --out /srv/incidents -- ./train
  wedge-capture run --inject --format json -- python train.py")]
pub struct Args {
    #[command(flatten)]
    pub watch: WatchOptions,
    /// Where workers write breadcrumb rings (exported as WEDGE_CAPTURE_RING_DIR). Default: a per-run
    /// directory `.rings/<run-id>` inside --out, removed at exit unless a wedge was captured.
    #[arg(long, value_name = "DIR")]
    pub ring_dir: Option<PathBuf>,
    /// After a captured wedge, exit with status 3 if CMD is still alive this long after the capture
    /// (default: stay until CMD exits or a signal arrives).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub exit_after: Option<Duration>,
    /// Send SIGKILL to the wedged process after the capture, and record whether it died.
    #[arg(long)]
    pub kill_on_wedge: bool,
    /// Output format on stdout at exit: text (the incident's path, when a wedge was captured), or json (a
    /// summary: incidents, verdicts, exit status).
    #[arg(long, value_name = "FORMAT", default_value = "text",
          value_parser = cli::formats(&[OutputFormat::Text, OutputFormat::Json]))]
    pub format: OutputFormat,
    /// Old spelling of `--format json`.
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
    /// Give CMD breadcrumbs without changing it: every CUDA driver API call of every program CMD starts gets
    /// an enter/exit record in a ring the incident includes. `--inject` (= `driver`): libwedge_inject.so in
    /// LD_PRELOAD wraps the driver functions (the default; measured not to stall other processes).
    /// `--inject=cupti`: CUPTI callbacks through CUDA_INJECTION64_PATH instead: breadcrumbs by CUPTI: NVML
    /// clients may stall during long UVM operations (measured on an H100: `nvidia-smi -q` 7.9-10.6 s instead
    /// of 0.11 s while the program migrated 48 GiB of managed memory; docs/inject.md).
    #[arg(
        long,
        value_enum,
        value_name = "KIND",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "driver"
    )]
    pub inject: Option<crate::inject_env::InjectMode>,
    /// libcupti to use with --inject=cupti (default: CUDA_HOME, common toolkit paths, the nvidia-cuda-cupti
    /// Python package). Selects the CUPTI path (--inject=cupti) whatever --inject says.
    #[arg(long, value_name = "PATH")]
    pub cupti: Option<PathBuf>,
    /// The command and its arguments.
    // No allow_hyphen_values: a flag before CMD is ours, so an unknown one is a usage error (exit 2) rather
    // than a command named `--bogus`; everything from CMD's name on (or after `--`) is CMD's.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

impl Args {
    /// The flags given, over the defaults (`run` has no config file). Between captures of one open
    /// episode, `run` re-samples every --threshold, but not more often than every 10 s.
    pub fn watch_settings(&self) -> Result<WatchSettings, Failure> {
        let mut settings = self.watch.clone().resolve();
        if self.watch.resample_every.is_none() {
            settings.resample_every = settings.threshold.max(defaults::MIN_RUN_RESAMPLE_EVERY);
        }
        settings
            .validate()
            .map_err(|why| Failure::new(ExitCode::USAGE, format!("--{why}")))?;
        Ok(settings)
    }
}

/// The per-run ring directory inside the incident directory: the store skips dot names, so it is
/// never taken for an incident, bundled or removed by retention.
pub fn run_ring_dir(out: &Path, run_id: &str) -> PathBuf {
    out.join(defaults::RINGS_SUBDIR).join(run_id)
}

/// Everything `supervise` needs.
pub struct Supervise {
    pub command: Vec<OsString>,
    pub watch: WatchConfig,
    pub capture: CaptureSettings,
    pub out: PathBuf,
    pub ring_dir: PathBuf,
    pub remove_ring_dir: bool,
    pub exit_after: Option<Duration>,
    /// Variables exported to CMD besides WEDGE_CAPTURE_RING_DIR (e.g. the injection library's).
    pub extra_env: Vec<(String, OsString)>,
    /// Print progress lines on stderr.
    pub verbose: bool,
}

/// What happened.
#[derive(Debug, Default)]
pub struct Outcome {
    pub exit: u8,
    /// CMD's status, when it exited (shell convention).
    pub child_status: Option<u8>,
    pub child_pid: i32,
    /// Incident directories written, in order.
    pub incidents: Vec<PathBuf>,
    /// A wedge was captured and the wedged process was still alive at exit.
    pub wedged: bool,
    pub verdicts: Vec<String>,
    pub killed: Option<bool>,
    /// Detection to durable minimal incident, per incident.
    pub durable_after: Vec<Duration>,
    /// Signal that ended the supervision, if any.
    pub signal: Option<i32>,
    /// Thread observations in D over the whole run (most are short waits that never become incidents).
    pub d_state_samples: u64,
    /// Scans done.
    pub scans: u64,
    /// Wedges detected whose incident could never be written (what was lost, one line each).
    pub lost: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let watch_settings = args.watch_settings()?;
    let run_id = format!(
        "{}-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
        std::process::id()
    );
    let (ring_dir, remove_ring_dir) = match &args.ring_dir {
        Some(dir) => (dir.clone(), false),
        None => (run_ring_dir(&watch_settings.out, &run_id), true),
    };
    // --cupti names a libcupti: it selects the CUPTI path whatever --inject says.
    let inject = match (args.inject, &args.cupti) {
        (_, Some(_)) => Some(crate::inject_env::InjectMode::Cupti),
        (mode, None) => mode,
    };
    let extra_env = match inject {
        Some(mode) => {
            let env = crate::inject_env::injection_env(mode, args.cupti.as_deref())
                .map_err(|err| Failure::new(ExitCode::ERROR, format!("--inject: {err}")))?;
            say(true, format!("--inject: {}", mode.describe()));
            env
        }
        None => Vec::new(),
    };
    let outcome = supervise(Supervise {
        command: args.command,
        watch: watch_settings.watch_config(),
        capture: CaptureSettings {
            kill_on_wedge: args.kill_on_wedge,
            ..watch_settings.capture_settings(ProcRoot::default(), std::slice::from_ref(&ring_dir))
        },
        out: watch_settings.out,
        ring_dir,
        remove_ring_dir,
        exit_after: args.exit_after,
        extra_env,
        verbose: true,
    })?;
    if cli::chosen(args.format, args.json) == OutputFormat::Json {
        let summary = serde_json::json!({
            "exit_code": outcome.exit,
            "child_pid": outcome.child_pid,
            "child_status": outcome.child_status,
            "wedged": outcome.wedged,
            "incidents": outcome.incidents,
            "verdicts": outcome.verdicts,
            "killed": outcome.killed,
            "signal": outcome.signal.map(launch::signal_name),
            "d_state_samples": outcome.d_state_samples,
            "scans": outcome.scans,
            "durable_after_ms": outcome.durable_after.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>(),
            "lost": outcome.lost,
        });
        println!("{summary}");
    } else if outcome.wedged {
        if let Some(path) = outcome.incidents.last() {
            println!("{}", path.display());
        }
    }
    Ok(ExitCode(outcome.exit))
}

fn say(verbose: bool, text: impl AsRef<str>) {
    if verbose {
        eprintln!("wedge-capture: {}", text.as_ref());
    }
}

/// Launch the command, watch it and its descendants until it exits (or `exit_after` after a captured wedge,
/// or a signal), capturing every wedge. Shared by `run` and `selftest`.
pub fn supervise(options: Supervise) -> anyhow::Result<Outcome> {
    let mut supervision = Supervision::start(options)?;
    let exit = supervision.watch_until_done();
    Ok(supervision.finish(exit))
}

/// One launched command under watch: its watcher, the signals forwarded to it, what happened so far.
struct Supervision {
    watcher: Watcher,
    signals: SignalChannel,
    child: launch::Launched,
    me: i32,
    interval: Duration,
    exit_after: Option<Duration>,
    verbose: bool,
    out: PathBuf,
    ring_dir: PathBuf,
    remove_ring_dir: bool,
    outcome: Outcome,
    /// When the wedge was captured, or detected while its incident cannot be written yet: --exit-after and
    /// SIGTERM apply the same either way (the wedged command cannot be reaped).
    captured_at: Option<Instant>,
    forwarded: Option<i32>,
    next_tick: Instant,
}

impl Supervision {
    /// Open the store, prepare the ring directory, catch signals, launch the command.
    fn start(options: Supervise) -> anyhow::Result<Supervision> {
        let Supervise {
            command,
            watch,
            capture,
            out,
            ring_dir,
            remove_ring_dir,
            exit_after,
            extra_env,
            verbose,
        } = options;
        let (program, args) = command
            .split_first()
            .ok_or_else(|| Failure::new(ExitCode::USAGE, "no command given"))?;
        let store = open_store(&out)?;
        std::fs::create_dir_all(&ring_dir).map_err(|err| {
            Failure::new(
                ExitCode::ERROR,
                format!(
                    "ring directory {} cannot be created: {err}",
                    ring_dir.display()
                ),
            )
        })?;
        for (cap, cost) in preflight::missing_capabilities(&capture.proc_root) {
            say(verbose, format!("warning: missing {cap}: {cost}"));
        }
        let proc_root = capture.proc_root.clone();
        // Catch signals before the child exists, so none is lost.
        let signals = SignalChannel::new(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
            .context("cannot install signal handlers")?;
        if let Err(err) = launch::become_subreaper() {
            say(
                verbose,
                format!("warning: cannot become a child subreaper ({err}): orphaned descendants will not be watched"),
            );
        }
        let mut env = vec![(
            crate::rings::ENV_RING_DIR.to_string(),
            ring_dir.clone().into_os_string(),
        )];
        env.extend(extra_env);
        let child = launch::launch(program, args, &env).map_err(|err| {
            let code = match err {
                LaunchError::NotFound(_) => ExitCode::NOT_FOUND,
                LaunchError::NotExecutable(..) => ExitCode::NOT_EXECUTABLE,
                LaunchError::Other(..) => ExitCode::ERROR,
            };
            Failure::new(code, err.to_string())
        })?;
        let me = std::process::id() as i32;
        let capturer = Capturer::new(capture, store);
        // After the launch, and reset on fork anyway: the command never runs real-time.
        say(
            verbose,
            format!(
                "watch loop scheduling: {}",
                crate::watch::raise_watch_priority()
            ),
        );
        let watcher = Watcher::new(watch, Box::new(ChildTree::new(me)), capturer, proc_root);
        Ok(Supervision {
            watcher,
            signals,
            me,
            interval: watch.interval,
            exit_after,
            verbose,
            out,
            ring_dir,
            remove_ring_dir,
            outcome: Outcome {
                child_pid: child.pid,
                ..Outcome::default()
            },
            child,
            captured_at: None,
            forwarded: None,
            next_tick: Instant::now(),
        })
    }

    /// Scan every interval until the command exits, `--exit-after` passes after a capture, or a signal
    /// ends the run; the exit code.
    fn watch_until_done(&mut self) -> u8 {
        loop {
            if let Some(code) = self.reap_command() {
                return code;
            }
            self.reap_orphans();
            if Instant::now() >= self.next_tick {
                self.scan();
            }
            if let Some(code) = self.exit_after_due() {
                return code;
            }
            if let Some(code) = self.wait_for_signal() {
                return code;
            }
        }
    }

    /// The command's status once it exited, after one last scan (its wedged threads are gone now, which
    /// closes their episodes).
    fn reap_command(&mut self) -> Option<u8> {
        let status = launch::try_wait(self.child.pid)?;
        let code = launch::shell_status(status);
        self.outcome.child_status = Some(code);
        say(self.verbose, format!("command exited with status {code}"));
        for event in self.watcher.tick() {
            report_event(self.verbose, &event, &mut self.outcome);
        }
        self.outcome.wedged = false;
        Some(code)
    }

    /// Orphans reparented to us (never probe children: they reap themselves).
    fn reap_orphans(&mut self) {
        let probe_children = self.watcher.capturer().probe_children();
        for target in self.watcher.targets() {
            if target.parent == self.me
                && target.pid != self.child.pid
                && !probe_children.contains(&target.pid)
            {
                launch::try_wait(target.pid);
            }
        }
    }

    fn scan(&mut self) {
        let events = self.watcher.tick();
        self.outcome.scans += 1;
        self.outcome.d_state_samples += self.watcher.last_stats().in_d as u64;
        for event in events {
            report_event(self.verbose, &event, &mut self.outcome);
            match event {
                // An episode adopted from an earlier watcher is not this command's wedge.
                CaptureEvent::Completed { pid, .. }
                    if self.watcher.adopted_pids().contains(&pid) => {}
                CaptureEvent::Completed { .. } => {
                    self.captured_at = Some(Instant::now());
                    self.outcome.wedged = true;
                }
                CaptureEvent::WritePending { .. } => {
                    self.captured_at.get_or_insert_with(Instant::now);
                    self.outcome.wedged = true;
                }
                // The wedge ended while the command lives on: back to watching, no exit 3.
                // (Episodes adopted from an earlier watcher are not this command's.)
                CaptureEvent::Resolved { .. } if only_adopted_open(&mut self.watcher) => {
                    self.captured_at = None;
                    self.outcome.wedged = false;
                }
                _ => {}
            }
        }
        self.next_tick += self.interval;
        if self.next_tick < Instant::now() {
            // A capture took longer than an interval: don't burst scans to catch up.
            self.next_tick = Instant::now() + self.interval;
        }
    }

    /// Exit 3 once the wedged command outlived `--exit-after` since its capture.
    fn exit_after_due(&self) -> Option<u8> {
        let (at, limit) = (self.captured_at?, self.exit_after?);
        (at.elapsed() >= limit).then(|| {
            say(
                self.verbose,
                format!(
                    "the wedged command is still alive {:.1} s after the capture: exiting without it",
                    at.elapsed().as_secs_f64()
                ),
            );
            ExitCode::WEDGED.0
        })
    }

    /// Wait for a signal until the next scan (at most 50 ms, to notice the command's exit promptly) and
    /// forward it to the command's process group; the exit code when it ends the run.
    fn wait_for_signal(&mut self) -> Option<u8> {
        let mut wait = self.next_tick.saturating_duration_since(Instant::now());
        if let (Some(at), Some(limit)) = (self.captured_at, self.exit_after) {
            wait = wait.min(limit.saturating_sub(at.elapsed()));
        }
        let signal = self.signals.wait(wait.min(Duration::from_millis(50)))?;
        self.outcome.signal = Some(signal);
        let name = launch::signal_name(signal);
        if self.forwarded.is_some() && signal != libc::SIGHUP {
            say(
                self.verbose,
                format!("second {name}: sending SIGKILL to the command's process group"),
            );
            launch::signal_group(self.child.pgid, libc::SIGKILL);
            std::thread::sleep(Duration::from_millis(100));
            if let Some(status) = launch::try_wait(self.child.pid) {
                self.outcome.child_status = Some(launch::shell_status(status));
                return Some(launch::shell_status(status));
            }
            return Some(if self.outcome.wedged {
                ExitCode::WEDGED.0
            } else {
                128 + signal as u8
            });
        }
        say(
            self.verbose,
            format!("{name}: forwarding to the command's process group"),
        );
        launch::signal_group(self.child.pgid, signal);
        if signal != libc::SIGHUP {
            self.forwarded = Some(signal);
            if self.outcome.wedged {
                // The wedged command cannot be reaped: don't wait for it.
                return Some(ExitCode::WEDGED.0);
            }
        }
        None
    }

    /// Last writes, what was lost, the ring directory's cleanup.
    fn finish(mut self, exit: u8) -> Outcome {
        let verbose = self.verbose;
        let mut outcome = std::mem::take(&mut self.outcome);
        outcome.exit = exit;
        if outcome.exit != ExitCode::WEDGED.0 {
            outcome.wedged = false;
        }
        // A last try for writes still failing (the output filesystem may have room now), then name what is lost.
        let mut last = Vec::new();
        self.watcher.capturer().tick(&mut last);
        // Captures in flight are waited for (the command ended on its own: its wedge's evidence is worth
        // the capture's deadline), except after a signal, which must exit at once. Then episodes still open
        // (exit 3, a signal): their final write says nobody watches them any more.
        let wait = if self.forwarded.is_some() || exit >= 128 {
            SIGNAL_EXIT_CAPTURE_WAIT
        } else {
            crate::defaults::CAPTURE_DEADLINE + crate::defaults::CAPTURE_GIVE_UP_AFTER
        };
        self.watcher.capturer().shutdown(wait, &mut last);
        for event in &last {
            report_event(verbose, event, &mut outcome);
        }
        for (pid, tid, detected, why) in self.watcher.capturer().unwritten() {
            let line = format!(
                "LOST: the wedge of thread {tid} of pid {pid}, detected {:.1} s ago, was never written under {} ({why})",
                detected.elapsed().as_secs_f64(),
                self.out.display()
            );
            say(verbose, &line);
            outcome.lost.push(line);
        }
        if !outcome.lost.is_empty() {
            outcome.exit = ExitCode::ERROR.0;
        }
        if self.remove_ring_dir
            && !outcome.wedged
            && outcome.incidents.is_empty()
            && outcome.lost.is_empty()
        {
            let _ = std::fs::remove_dir_all(&self.ring_dir);
            // The `.rings` folder too, when this run was its only user (never a folder that still holds rings).
            if let Some(parent) = self.ring_dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
        if outcome.wedged {
            if let Some(path) = outcome.incidents.last() {
                say(verbose, format!("incident: {}", path.display()));
            }
        }
        outcome
    }
}

/// The incident store at `out`, created with its own restrictive mode, and proven writable.
fn open_store(out: &Path) -> anyhow::Result<Store> {
    let store = Store::open(out, Retention::DEFAULT)
        .map_err(|err| {
            Failure::new(
                ExitCode::ERROR,
                format!("output directory {} cannot be used: {err}", out.display()),
            )
        })?
        .log_removals(|removal| eprintln!("wedge-capture: {removal}"));
    preflight::check_writable(out)?;
    Ok(store)
}

/// No episode of the command is open (only episodes adopted from an earlier watcher, if any).
fn only_adopted_open(watcher: &mut Watcher) -> bool {
    let open = watcher.capturer().open_incidents();
    open.iter()
        .all(|(pid, _)| watcher.adopted_pids().contains(pid))
}

/// Count the event in the outcome and say it (in the words the daemon logs it with).
fn report_event(verbose: bool, event: &CaptureEvent, outcome: &mut Outcome) {
    match event {
        CaptureEvent::Opened {
            path,
            durable_after,
            ..
        } => {
            outcome.incidents.push(path.clone());
            outcome.durable_after.push(*durable_after);
        }
        CaptureEvent::Completed {
            verdict, killed, ..
        } => {
            outcome.verdicts.push(verdict.clone());
            if killed.is_some() {
                outcome.killed = *killed;
            }
        }
        _ => {}
    }
    if event.is_said() {
        say(verbose, event.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn args(argv: &[&str]) -> Args {
        let mut full = vec!["wedge-capture", "run"];
        full.extend_from_slice(argv);
        full.extend_from_slice(&["--", "true"]);
        match Cli::try_parse_from(full).unwrap().command {
            Command::Run(args) => args,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn flags_left_out_take_the_shared_defaults() {
        let settings = args(&[]).watch_settings().unwrap();
        assert_eq!(settings.threshold, defaults::THRESHOLD);
        assert_eq!(settings.interval, defaults::INTERVAL);
        assert_eq!(settings.samples, defaults::SAMPLES);
        assert_eq!(settings.probe_timeout, defaults::PROBE_TIMEOUT);
        assert_eq!(settings.out, PathBuf::from(defaults::INCIDENT_DIR));
        assert!(settings.nvidia_smi && !args(&[]).kill_on_wedge);
        assert_eq!(settings.resample_every, defaults::THRESHOLD);
    }

    #[test]
    fn flags_given_win_and_bad_ones_are_usage_errors() {
        let given = args(&[
            "--threshold",
            "2s",
            "--interval",
            "250ms",
            "--samples",
            "5",
            "--out",
            "/srv/x",
            "--kill-on-wedge",
            "--no-nvidia-smi",
        ]);
        let settings = given.watch_settings().unwrap();
        assert_eq!(settings.threshold, Duration::from_secs(2));
        assert_eq!(settings.interval, Duration::from_millis(250));
        assert_eq!(settings.samples, 5);
        assert_eq!(settings.out, PathBuf::from("/srv/x"));
        assert!(given.kill_on_wedge && !settings.nvidia_smi);
        // A short threshold does not make `run` re-sample more often than the floor.
        assert_eq!(settings.resample_every, defaults::MIN_RUN_RESAMPLE_EVERY);
        for (flag, value) in [("--interval", "0"), ("--samples", "0")] {
            let err = args(&[flag, value]).watch_settings().unwrap_err();
            assert_eq!(err.code, ExitCode::USAGE, "{flag}");
            assert!(err.message.starts_with(flag), "{flag}: {}", err.message);
        }
    }

    #[test]
    fn the_per_run_ring_directory_is_inside_out_under_a_name_the_store_skips() {
        let out = Path::new("/srv/incidents");
        let dir = run_ring_dir(out, "20260101T000000Z-1");
        assert!(dir.starts_with(out));
        let first = dir.strip_prefix(out).unwrap().components().next().unwrap();
        assert!(first.as_os_str().to_str().unwrap().starts_with('.'));
    }
}
