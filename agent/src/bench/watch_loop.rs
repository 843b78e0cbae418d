//! The watch-loop benchmark (`wedge-capture internal bench-watch`), figures in BENCHMARKS.md.
//!
//! 1. CPU of one watch tick over a process with N parked threads (getrusage of this process), as a share of
//!    one core at 1 Hz, against a baseline measured in the same run: reading every thread's stat with
//!    open/read/close (what `ps`-like tools do).
//! 2. Detection-to-durable latency (root): a thread blocked on a frozen filesystem; from the moment it is in D
//!    plus the threshold, to the minimal incident being durable. Goal ≤ 1 interval + 100 ms.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use capture::ProcRoot;

use crate::duration::parse_duration;
use crate::exit::{ExitCode, Failure};
use crate::watch::targets::{ChildTree, FixedPids};
use crate::watch::tracker::TrackerConfig;
use crate::watch::{CaptureEvent, CaptureSettings, Capturer, WatchConfig, Watcher};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Thread counts to measure the watch tick at.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    pub threads: Vec<usize>,
    /// Ticks measured per thread count.
    #[arg(long, default_value_t = 20)]
    pub ticks: u32,
    /// Latency runs (root only; 0 skips).
    #[arg(long, default_value_t = 3)]
    pub latency_runs: u32,
    #[arg(long, default_value = "250ms", value_parser = parse_duration)]
    pub interval: Duration,
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub threshold: Duration,
    /// Child mode: park this many threads and wait for stdin to close.
    #[arg(long, hide = true)]
    pub park_threads: Option<usize>,
}

fn cpu_time() -> Duration {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF);
    match usage {
        Ok(u) => {
            let user = u.user_time();
            let system = u.system_time();
            let micros = (user.tv_sec() + system.tv_sec()) as u64 * 1_000_000
                + (user.tv_usec() + system.tv_usec()) as u64;
            Duration::from_micros(micros)
        }
        Err(_) => Duration::ZERO,
    }
}

fn park(count: usize) -> anyhow::Result<ExitCode> {
    let mut handles = Vec::with_capacity(count);
    for _ in 0..count {
        let handle = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(|| loop {
                std::thread::park();
            })?;
        handles.push(handle);
    }
    println!("parked {count}");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    std::process::exit(0);
}

struct Parked {
    child: std::process::Child,
}

impl Parked {
    fn start(count: usize) -> anyhow::Result<Parked> {
        use std::io::BufRead;
        let exe = crate::watch::launch::own_executable()?;
        let mut child = std::process::Command::new(exe)
            .args([
                "internal",
                "bench-watch",
                "--park-threads",
                &count.to_string(),
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        if !line.starts_with("parked") {
            anyhow::bail!("parked-thread helper failed to start");
        }
        Ok(Parked { child })
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir(name: &str) -> anyhow::Result<PathBuf> {
    let dir =
        std::env::temp_dir().join(format!("wedge-capture-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(count) = args.park_threads {
        return park(count);
    }
    capture::scan::raise_nofile_limit();
    let proc_root = ProcRoot::default();
    let store_dir = temp_dir("store")?;
    println!(
        "## watch tick CPU (getrusage self), {} ticks each",
        args.ticks
    );
    println!("| threads | watch tick CPU | share of a core at 1 Hz | baseline (open/read/close stat) | ratio |");
    println!("|---:|---:|---:|---:|---:|");
    for &count in &args.threads {
        let parked = Parked::start(count)?;
        let pid = parked.child.id() as i32;
        let me = std::process::id() as i32;
        let mut measured = Vec::new();
        for source in ["fixed pid", "run (child tree)"] {
            let store =
                reports::store::Store::open(&store_dir, reports::retention::Retention::DEFAULT)?;
            let capturer = Capturer::new(CaptureSettings::new(proc_root.clone()), store);
            let targets: Box<dyn crate::watch::targets::TargetSource + Send> =
                if source == "fixed pid" {
                    Box::new(FixedPids(vec![pid]))
                } else {
                    Box::new(ChildTree::new(me))
                };
            let mut watcher =
                Watcher::new(WatchConfig::default(), targets, capturer, proc_root.clone());
            watcher.tick(); // warm: opens every stat file once
            let seen = watcher.last_stats().threads;
            let before = cpu_time();
            for _ in 0..args.ticks {
                watcher.tick();
            }
            measured.push((source, seen, (cpu_time() - before) / args.ticks.max(1)));
        }

        let before = cpu_time();
        for _ in 0..args.ticks {
            for tid in proc_root.tasks(pid).unwrap_or_default() {
                let _ = proc_root.read_task_stat(pid, tid);
            }
        }
        let baseline = (cpu_time() - before) / args.ticks.max(1);
        for (source, seen, per_tick) in measured {
            println!(
                "| {seen} ({source}) | {:.2} ms | {:.3} % | {:.2} ms | {:.2}× |",
                per_tick.as_secs_f64() * 1e3,
                per_tick.as_secs_f64() * 100.0,
                baseline.as_secs_f64() * 1e3,
                per_tick.as_secs_f64() / baseline.as_secs_f64().max(1e-9)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&store_dir);

    if args.latency_runs == 0 {
        return Ok(ExitCode::OK);
    }
    if let Some(reason) = capture::frozen_fs::FrozenFs::unavailable_reason() {
        println!("\nlatency: skipped ({reason})");
        return Ok(ExitCode::OK);
    }
    println!(
        "\n## detection latency beyond the threshold (threshold {} ms, interval {} ms; goal ≤ interval + 100 ms)",
        args.threshold.as_millis(),
        args.interval.as_millis()
    );
    println!(
        "| run | scan phase | in D → durable, minus threshold | detection → durable | goal | ratio to goal |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for run in 1..=args.latency_runs {
        let (beyond, durable, phase) = latency_run(&args, &proc_root)?;
        let goal = args.interval + Duration::from_millis(100);
        println!(
            "| {run} | {:.0} ms | {:.0} ms | {:.1} ms | {:.0} ms | {:.2} |",
            phase.as_secs_f64() * 1e3,
            beyond.as_secs_f64() * 1e3,
            durable.as_secs_f64() * 1e3,
            goal.as_secs_f64() * 1e3,
            beyond.as_secs_f64() / goal.as_secs_f64()
        );
    }
    Ok(ExitCode::OK)
}

fn latency_run(
    args: &BenchArgs,
    proc_root: &ProcRoot,
) -> anyhow::Result<(Duration, Duration, Duration)> {
    use capture::frozen_fs::{wait_for_state, FrozenFs};
    let mut fs = FrozenFs::new().map_err(|e| Failure::new(ExitCode::ERROR, e.to_string()))?;
    let file = fs
        .create_file("bench", b"x")
        .map_err(|e| Failure::new(ExitCode::ERROR, e.to_string()))?;
    fs.freeze()
        .map_err(|e| Failure::new(ExitCode::ERROR, e.to_string()))?;
    // The blocked thread lives in a helper process so the watch sees a separate target.
    let exe = crate::watch::launch::own_executable()?;
    let mut child = std::process::Command::new(exe)
        .args([
            OsString::from("internal"),
            OsString::from("wedge-helper"),
            OsString::from("--path"),
            file.into_os_string(),
        ])
        .spawn()?;
    let pid = child.id() as i32;
    // Find the worker thread and the moment it is in D.
    let started = Instant::now();
    let in_d_at = loop {
        let tids = proc_root.tasks(pid).unwrap_or_default();
        if let Some(&tid) = tids.iter().find(|&&t| t != pid) {
            if wait_for_state(proc_root, pid, tid, 'D', Duration::from_secs(10)).is_ok() {
                break Instant::now();
            }
        }
        if started.elapsed() > Duration::from_secs(10) {
            anyhow::bail!("the helper's thread never entered D");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let store_dir = temp_dir("latency")?;
    let store = reports::store::Store::open(&store_dir, reports::retention::Retention::DEFAULT)?;
    let mut settings = CaptureSettings::new(proc_root.clone());
    settings.watch.nvidia_smi = false;
    let capturer = Capturer::new(settings, store);
    let mut watcher = Watcher::new(
        WatchConfig {
            interval: args.interval,
            tracker: TrackerConfig {
                threshold: args.threshold,
                samples: 2,
            },
            ..WatchConfig::default()
        },
        Box::new(FixedPids(vec![pid])),
        capturer,
        proc_root.clone(),
    );
    // Start scanning at a random phase relative to the D start, as in production.
    let phase_ns = (crate::watch::capture_clock_ns()
        ^ u64::from(std::process::id()).wrapping_mul(0x9e37_79b9))
        % (args.interval.as_nanos().max(1) as u64);
    std::thread::sleep(Duration::from_nanos(phase_ns));
    let mut result = None;
    let deadline = Instant::now() + args.threshold + Duration::from_secs(10);
    while result.is_none() && Instant::now() < deadline {
        let tick_at = Instant::now();
        for event in watcher.tick() {
            if let CaptureEvent::Opened { durable_after, .. } = event {
                let durable_at = tick_at + durable_after;
                let beyond = durable_at.saturating_duration_since(in_d_at + args.threshold);
                result = Some((beyond, durable_after, Duration::from_nanos(phase_ns)));
            }
        }
        std::thread::sleep(args.interval.saturating_sub(tick_at.elapsed()));
    }
    fs.thaw()
        .map_err(|e| Failure::new(ExitCode::ERROR, e.to_string()))?;
    let _ = child.wait();
    drop(watcher);
    let _ = std::fs::remove_dir_all(&store_dir);
    result.ok_or_else(|| anyhow::anyhow!("no incident within the deadline"))
}
