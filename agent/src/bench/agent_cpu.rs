//! `wedge-capture internal bench-agent`: the CPU of the real `agent` process per watched thread per scan,
//! measured from outside as a user would, against an xcapture-style scan of the same threads in the same
//! run (issue 16; figures in BENCHMARKS.md).
//!
//! For each thread count: a helper process parks N idle threads under a comm of its own; the `agent` binary
//! runs as a child (`--match-comm` on that comm, `--interval` as given) with everything else default. Once
//! it holds every thread (its fd count says so) and has settled, the agent's CPU is read from outside over
//! `--scans` intervals: the sum of `sum_exec_runtime` over its threads' `schedstat` (ns; the same CPU
//! time `utime+stime` reports, without its 10 ms ticks) and, as a cross-check, `utime+stime` from its
//! `stat`. The baseline, in this process: list `/proc/<helper>/task/` and open/read/close every `stat`
//! (what xcapture does every sample), the same number of times.
//!
//! The agent's cost per scan does not depend on the interval (it scans once per interval and sleeps in
//! between), so `--interval 200ms` gives the figure of the 1 s in a fifth of the time; the share of
//! a core at 1 Hz is the per-scan CPU itself. `--busy-host N` starts N `sleep` processes first, for the
//! discovery cost on a host with many processes.
//!
//! Each row also gives the spread (min / median / max) of the agent's CPU per interval and of the
//! baseline's per scan, so a wide ratio shows which side moved (issue 40); `--agent-exe A --agent-exe B`
//! measures several agent binaries in one run against one helper process per shape and size, the
//! baseline measured before the first agent and after each, each ratio against the two beside it.
//!
//! Two shapes of watched process (`--shapes`): `idle` (N parked threads: the quiet-process shortcut's
//! case) and `busy` (the same N plus `--busy-threads` threads that wake every millisecond, as a training
//! worker's progress or heartbeat threads do: its counters always move, so only per-thread change
//! detection, the BPF task iterator, spares the parked ones).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capture::ProcRoot;

use crate::duration::parse_duration;
use crate::exit::ExitCode;

/// The helper's comm: what the agent under test matches.
const HELPER_COMM: &str = "wcbench-idle";

#[derive(Debug, clap::Args)]
pub struct BenchAgentArgs {
    /// Idle thread counts of the watched process.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    pub threads: Vec<usize>,
    /// Shapes of the watched process: `idle` (parked threads only) and/or `busy` (plus threads waking
    /// every millisecond).
    #[arg(long, value_delimiter = ',', default_value = "idle,busy", value_parser = ["idle", "busy"])]
    pub shapes: Vec<String>,
    /// Threads waking every millisecond in the `busy` shape.
    #[arg(long, default_value_t = 2)]
    pub busy_threads: usize,
    /// Scans measured per thread count.
    #[arg(long, default_value_t = 30)]
    pub scans: u32,
    /// The agent's --interval.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub interval: Duration,
    /// Start this many `sleep` processes first (a busy host: discovery walks them all).
    #[arg(long, default_value_t = 0)]
    pub busy_host: usize,
    /// Extra arguments for the agent (e.g. `--agent-arg=--no-shortcut`), repeatable.
    #[arg(long = "agent-arg", allow_hyphen_values = true)]
    pub agent_args: Vec<String>,
    /// Agent binaries to measure, one after another against the same helper process (before/after
    /// comparisons in one run: the same threads, host and baseline code, the baseline measured
    /// between them); default: this binary.
    #[arg(long = "agent-exe", value_name = "PATH")]
    pub agent_exes: Vec<PathBuf>,
    /// One JSON object instead of the Markdown table.
    #[arg(long)]
    pub json: bool,
    /// Child mode: park this many threads under the helper comm and wait for stdin to close.
    #[arg(long, hide = true)]
    pub park_threads: Option<usize>,
    /// Child mode, with --park-threads: this many more threads wake every millisecond.
    #[arg(long, hide = true, default_value_t = 0)]
    pub park_busy: usize,
    /// Child mode, with --park-threads: one more thread appends to FILE when a line `wedge` arrives on
    /// stdin (a thread of a quiet process entering D on a frozen filesystem, for the tests).
    #[arg(long, hide = true, value_name = "FILE")]
    pub wedge_on: Option<PathBuf>,
}

fn own_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

fn park(count: usize, busy: usize, wedge_on: Option<&Path>) -> anyhow::Result<ExitCode> {
    // Threads inherit the comm of the thread that creates them.
    nix::sys::prctl::set_name(&std::ffi::CString::new(HELPER_COMM)?)?;
    for _ in 0..busy {
        std::thread::Builder::new()
            .name("wcbench-busy".into())
            .stack_size(64 * 1024)
            .spawn(|| loop {
                std::thread::sleep(Duration::from_millis(1));
            })?;
    }
    let (go, wait) = std::sync::mpsc::channel::<()>();
    if let Some(path) = wedge_on {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().append(true).open(path)?;
        std::thread::Builder::new()
            .name("wedge-writer".into())
            .spawn(move || {
                if wait.recv().is_ok() {
                    let _ = file.write_all(b"x");
                }
            })?;
    }
    let mut handles = Vec::with_capacity(count);
    for _ in 0..count {
        handles.push(
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(|| loop {
                    std::thread::park();
                })?,
        );
    }
    println!("parked {count} busy {busy}");
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
        if line.trim() == "wedge" {
            let _ = go.send(());
        }
        line.clear();
    }
    std::process::exit(0);
}

/// A child killed and reaped on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_helper(count: usize, busy: usize) -> anyhow::Result<Reaped> {
    let exe = crate::watch::launch::own_executable()?;
    let mut child = Reaped(
        Command::new(exe)
            .args([
                "internal",
                "bench-agent",
                "--park-threads",
                &count.to_string(),
                "--park-busy",
                &busy.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?,
    );
    let stdout = child
        .0
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    if !line.starts_with("parked") {
        anyhow::bail!("the idle-thread helper failed to start");
    }
    Ok(child)
}

/// CPU of a whole process, read from outside: (Σ schedstat sum_exec_runtime over its threads, utime+stime
/// from its stat in ticks).
fn process_cpu(root: &ProcRoot, pid: i32) -> anyhow::Result<(Duration, u64)> {
    let mut ns = 0u64;
    for tid in root.tasks(pid)? {
        let path = format!("/proc/{pid}/task/{tid}/schedstat");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // a thread that just exited
        };
        ns += text
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
    }
    let stat = root.read_stat(pid)?;
    Ok((Duration::from_nanos(ns), stat.utime + stat.stime))
}

fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// One xcapture-style sample of a process's threads: list task/, open/read/close every stat.
fn xcapture_scan(pid: i32, buf: &mut Vec<u8>) -> usize {
    use std::io::Read;
    let task = PathBuf::from(format!("/proc/{pid}/task"));
    let Ok(entries) = std::fs::read_dir(&task) else {
        return 0;
    };
    let mut read = 0;
    for entry in entries.flatten() {
        let mut path = entry.path();
        path.push("stat");
        if let Ok(mut f) = std::fs::File::open(&path) {
            buf.clear();
            if f.read_to_end(buf).is_ok() && !buf.is_empty() {
                read += 1;
            }
        }
    }
    read
}

#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    /// The agent binary measured.
    agent: String,
    shape: String,
    threads: usize,
    host_processes: usize,
    scans: u32,
    interval_ms: u64,
    agent_ns_per_thread_scan: f64,
    agent_ticks_ns_per_thread_scan: f64,
    agent_us_per_scan: f64,
    /// The mean of the baselines measured just before and just after this agent.
    baseline_ns_per_thread_scan: f64,
    /// Those two baselines (ns a thread a scan): how far the denominator moved around this row.
    baseline_before_after_ns_per_thread_scan: [f64; 2],
    baseline_us_per_scan: f64,
    ratio: f64,
    /// The agent's CPU per measured interval (≈ one scan each).
    agent_us_per_interval: Spread,
    baseline_us_per_scan_spread: Spread,
}

/// The agent's CPU over `--scans` intervals, measured from outside while it watches the helper.
struct AgentCpu {
    /// Mean CPU per scan (ns).
    per_scan_ns: f64,
    /// Mean CPU per scan from `utime+stime` ticks (ns).
    per_scan_ticks_ns: f64,
    per_interval: Spread,
}

fn measure_agent(
    args: &BenchAgentArgs,
    root: &ProcRoot,
    threads: usize,
    out_dir: &Path,
    agent_exe: &Path,
) -> anyhow::Result<AgentCpu> {
    let interval_arg = format!("{}ms", args.interval.as_millis().max(1));
    let agent = Reaped(
        Command::new(agent_exe)
            .arg("agent")
            .args(["--match-comm", &format!("^{HELPER_COMM}$")])
            .args(["--interval", &interval_arg])
            .arg("--out")
            .arg(out_dir)
            .args(&args.agent_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let agent_pid = agent.0.id() as i32;
    // Settled: it keeps a stat fd per thread once it has scanned them.
    let deadline = Instant::now() + Duration::from_secs(60);
    while fd_count(agent_pid) < threads {
        if Instant::now() > deadline {
            anyhow::bail!("the agent never opened the helper's {threads} threads");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Past the start: pids listed at the first scan are re-read for a few scans (young processes),
    // and the BPF program's load (60-80 ms of CPU) may still run on a loaded host: at least 5 s, or a
    // small target (`--threads 1`, the fixed cost per scan) would count the start (issue 40).
    std::thread::sleep((args.interval * 8).max(Duration::from_secs(5)));

    let scans = args.scans.max(1);
    let (cpu0, ticks0) = process_cpu(root, agent_pid)?;
    let wall0 = Instant::now();
    // The agent's CPU interval by interval too (about one scan each, not aligned to its scans): the
    // spread says whether a mean comes from every scan or from a few costly ones (issue 40).
    let mut per_interval = Vec::with_capacity(scans as usize);
    let mut last = cpu0;
    for k in 1..=scans {
        let due = wall0 + args.interval * k;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let (cpu, _) = process_cpu(root, agent_pid)?;
        per_interval.push(cpu.saturating_sub(last).as_nanos() as f64);
        last = cpu;
    }
    let (cpu1, ticks1) = process_cpu(root, agent_pid)?;
    // The agent scans once per interval; wall time over interval is the number of scans it made.
    let scans_made = (wall0.elapsed().as_secs_f64() / args.interval.as_secs_f64()).max(1.0);
    let tick_ns =
        1e9 / nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?.unwrap_or(100) as f64;
    drop(agent);
    Ok(AgentCpu {
        per_scan_ns: (cpu1 - cpu0).as_nanos() as f64 / scans_made,
        per_scan_ticks_ns: ticks1.saturating_sub(ticks0) as f64 * tick_ns / scans_made,
        per_interval: Spread::of(&per_interval),
    })
}

/// One helper process (a shape and a thread count), every agent binary measured against it in turn,
/// with the baseline measured before the first agent and after each (B A₁ B A₂ B …): each agent's
/// ratio is against the mean of the two baselines beside it, so two binaries compared in one run
/// share a denominator measured on the same threads at the same time, not one drawn after each on a
/// fresh helper (issue 40: the baseline moved 4.5–6.9 µs a thread between such draws).
fn measure_helper(
    args: &BenchAgentArgs,
    root: &ProcRoot,
    threads: usize,
    shape: &str,
    out_dir: &Path,
    agent_exes: &[PathBuf],
) -> anyhow::Result<Vec<Row>> {
    let busy = if shape == "busy" {
        args.busy_threads
    } else {
        0
    };
    let helper = start_helper(threads, busy)?;
    let helper_pid = helper.0.id() as i32;
    let host_processes = root.pids().map(|p| p.len()).unwrap_or(0);
    let scans = args.scans.max(1);
    let watched = threads + 1 + busy;
    let mut before = baseline_scans(helper_pid, scans, watched)?;
    let mut rows = Vec::with_capacity(agent_exes.len());
    for exe in agent_exes {
        eprintln!(
            "bench-agent: {shape} process, {threads} parked threads, agent {}…",
            exe.display()
        );
        let agent = measure_agent(args, root, threads, out_dir, exe)?;
        let after = baseline_scans(helper_pid, scans, watched)?;
        let baseline_ns = (before.total + after.total).as_nanos() as f64 / f64::from(2 * scans);
        let per_thread =
            |b: &Baseline| b.total.as_nanos() as f64 / f64::from(scans) / watched as f64;
        let both: Vec<f64> = before.scans.iter().chain(&after.scans).copied().collect();
        rows.push(Row {
            agent: exe.display().to_string(),
            shape: shape.to_string(),
            threads: watched,
            host_processes,
            scans,
            interval_ms: args.interval.as_millis() as u64,
            agent_ns_per_thread_scan: agent.per_scan_ns / watched as f64,
            agent_ticks_ns_per_thread_scan: agent.per_scan_ticks_ns / watched as f64,
            agent_us_per_scan: agent.per_scan_ns / 1e3,
            baseline_ns_per_thread_scan: baseline_ns / watched as f64,
            baseline_before_after_ns_per_thread_scan: [per_thread(&before), per_thread(&after)],
            baseline_us_per_scan: baseline_ns / 1e3,
            ratio: agent.per_scan_ns / baseline_ns.max(1.0),
            agent_us_per_interval: agent.per_interval,
            baseline_us_per_scan_spread: Spread::of(&both),
        });
        before = after;
    }
    drop(helper);
    Ok(rows)
}

/// One baseline measurement: its total CPU and each scan's (ns).
struct Baseline {
    total: Duration,
    scans: Vec<f64>,
}

/// The xcapture-style baseline over the same threads, `scans` times: its total CPU and each scan's (ns).
fn baseline_scans(helper_pid: i32, scans: u32, watched: usize) -> anyhow::Result<Baseline> {
    let mut buf = Vec::with_capacity(1024);
    xcapture_scan(helper_pid, &mut buf); // warm the dentries, as the agent had them warm
    let before = own_cpu();
    let mut read = 0;
    let mut baseline_scans = Vec::with_capacity(scans as usize);
    for _ in 0..scans {
        let scan_start = own_cpu();
        read += xcapture_scan(helper_pid, &mut buf);
        baseline_scans.push((own_cpu() - scan_start).as_nanos() as f64);
    }
    let baseline = own_cpu() - before;
    if read < watched * scans as usize {
        anyhow::bail!(
            "the baseline read {read} stat files, expected {}",
            watched * scans as usize
        );
    }
    Ok(Baseline {
        total: baseline,
        scans: baseline_scans,
    })
}

/// Minimum, median and maximum of per-scan (or per-interval) CPU samples, in µs.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Spread {
    min: f64,
    median: f64,
    max: f64,
}

impl Spread {
    fn of(ns: &[f64]) -> Spread {
        let mut v: Vec<f64> = ns.iter().map(|n| n / 1e3).collect();
        v.sort_by(f64::total_cmp);
        Spread {
            min: v.first().copied().unwrap_or(0.0),
            median: v.get(v.len() / 2).copied().unwrap_or(0.0),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

pub fn run(args: BenchAgentArgs) -> anyhow::Result<ExitCode> {
    if let Some(count) = args.park_threads {
        return park(count, args.park_busy, args.wedge_on.as_deref());
    }
    capture::scan::raise_nofile_limit();
    let root = ProcRoot::default();
    let mut sleepers = Vec::new();
    for _ in 0..args.busy_host {
        sleepers.push(Reaped(
            Command::new("sleep")
                .arg("600")
                .stdin(Stdio::null())
                .spawn()?,
        ));
    }
    let out_dir =
        std::env::temp_dir().join(format!("wedge-capture-bench-agent-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir)?;
    let agent_exes = if args.agent_exes.is_empty() {
        vec![crate::watch::launch::own_executable()?]
    } else {
        args.agent_exes.clone()
    };
    let mut rows = Vec::new();
    for shape in &args.shapes {
        for &threads in &args.threads {
            match measure_helper(&args, &root, threads, shape, &out_dir, &agent_exes) {
                Ok(measured) => rows.extend(measured),
                Err(err) => {
                    let _ = std::fs::remove_dir_all(&out_dir);
                    return Err(err);
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    drop(sleepers);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::OK);
    }
    let switches: Vec<String> = [
        crate::settings::ENV_TASKSTATS,
        crate::settings::ENV_TASK_ITER,
        crate::settings::ENV_PROC_EVENTS,
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v}")))
    .collect();
    println!(
        "## agent CPU per watched thread per scan (from outside), {} scans at {} ms; agent args: {}; {}",
        args.scans,
        args.interval.as_millis(),
        if args.agent_args.is_empty() {
            "(none)".to_string()
        } else {
            args.agent_args.join(" ")
        },
        if switches.is_empty() {
            "shortcuts on".to_string()
        } else {
            switches.join(" ")
        }
    );
    println!("| shape | threads | host processes | agent CPU / thread / scan (schedstat; stat ticks) | agent per scan | xcapture-style / thread / scan (before; after) | ratio | agent per interval min / median / max | xcapture-style per scan min / median / max |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let (a, b) = (r.agent_us_per_interval, r.baseline_us_per_scan_spread);
        let shape = if args.agent_exes.is_empty() {
            r.shape.clone()
        } else {
            format!("{} ({})", r.shape, r.agent)
        };
        println!(
            "| {} | {} | {} | {:.2} µs ({:.2} µs) | {:.0} µs | {:.2} µs ({:.2}; {:.2}) | {:.3} | {:.0} / {:.0} / {:.0} µs | {:.0} / {:.0} / {:.0} µs |",
            shape,
            r.threads,
            r.host_processes,
            r.agent_ns_per_thread_scan / 1e3,
            r.agent_ticks_ns_per_thread_scan / 1e3,
            r.agent_us_per_scan,
            r.baseline_ns_per_thread_scan / 1e3,
            r.baseline_before_after_ns_per_thread_scan[0] / 1e3,
            r.baseline_before_after_ns_per_thread_scan[1] / 1e3,
            r.ratio,
            a.min,
            a.median,
            a.max,
            b.min,
            b.median,
            b.max
        );
    }
    Ok(ExitCode::OK)
}
