//! `wedge-capture selftest`: a real wedge, captured end to end, on a frozen loop-mounted ext4.
//!
//! Also the hidden `wedge-capture internal …` helpers the selftest and the integration tests run as workers:
//! `wedge-helper` (breadcrumb, then a non-main thread blocked in `ioctl(FS_IOC_SETFLAGS)` on a file of a
//! frozen filesystem), `io-load` (a thread doing heavy write+fsync: many short D states), `churn` (a
//! fork/exit storm of short-lived multi-threaded processes: tids reused, processes gone mid-capture) and
//! `bench-watch` (the watch-loop benchmark).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capture::frozen_fs::FrozenFs;
use capture::ProcRoot;

use crate::cli::{self, OutputFormat};
use crate::defaults;
use crate::exit::{ExitCode, Failure};
use crate::preflight;
use crate::settings::WatchSettings;

/// Demonstrate a real capture end to end (the README's main command).
///
/// As root: make a 16 MiB ext4 image, loop-mount and freeze it, run a worker (this binary) that writes a
/// breadcrumb and then blocks a non-main thread in ioctl(FS_IOC_SETFLAGS) on it, watch the worker with the
/// same loop as `run` (threshold 2 s, interval 250 ms), write the incident, thaw, clean up, and print the
/// Markdown report and, when the incident is kept (--out or --keep), its path. Without root, say what was
/// skipped.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  sudo wedge-capture selftest
  sudo wedge-capture selftest --keep --format json
  sudo wedge-capture selftest --out /var/lib/wedge-capture/incidents")]
pub struct Args {
    /// Incident store (default: a temporary directory, removed at the end unless --keep). The
    /// worker's rings go inside it (`.rings/`), as with `run`.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Keep the temporary incident store (an --out directory is always kept).
    #[arg(long, conflicts_with = "out")]
    pub keep: bool,
    /// Output format: markdown (the incident's report), or json (a summary: passed, failures, incident,
    /// verdict).
    #[arg(long, value_name = "FORMAT", default_value = "markdown",
          value_parser = cli::formats(&[OutputFormat::Markdown, OutputFormat::Json]))]
    pub format: OutputFormat,
    /// Old spelling of `--format json`.
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
}

impl Args {
    /// Whether the incident store outlives the selftest (else its paths must not be printed).
    fn kept(&self) -> bool {
        self.out.is_some() || self.keep
    }
}

/// Hidden helpers (not part of the documented interface).
#[derive(Debug, clap::Subcommand)]
pub enum InternalCommand {
    /// Write a breadcrumb, then block a non-main thread in ioctl(FS_IOC_SETFLAGS) on PATH.
    WedgeHelper {
        #[arg(long)]
        path: PathBuf,
        /// Breadcrumb label of the blocking call.
        #[arg(long, default_value = "selftest ioctl FS_IOC_SETFLAGS")]
        label: String,
        /// Also hold a second ring open here, with one completed call (like a CUPTI injection ring beside
        /// the worker's own), made before the ring with the call in flight.
        #[arg(long)]
        second_ring: Option<PathBuf>,
    },
    /// A thread writing and fsyncing files in DIR for SECONDS (many short D states).
    IoLoad {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
    /// A fork/exit storm for SECONDS: PROCESSES short-lived processes at a time, each starting THREADS
    /// threads that fault in and unmap memory (short D waits on the mmap lock) and exit.
    Churn {
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        #[arg(long, default_value_t = 200)]
        processes: usize,
        #[arg(long, default_value_t = 20)]
        threads: usize,
        /// How long each thread keeps mapping, faulting in and unmapping memory before it exits.
        #[arg(long, default_value_t = 20)]
        work_ms: u64,
        /// Be one process of the storm (started by the storm itself).
        #[arg(long, hide = true)]
        child: bool,
    },
    /// Symbolize file offsets in ELF files under a process's root and print JSON (the capture's sacrificial
    /// symbolizer: a library may sit on a hung filesystem). REQUEST: `{"root": DIR, "files": [[PATH, [OFFSET]]],
    /// "sources": [[PATH, LINE]]}`; one JSON line per answer.
    ResolveSymbols { request: String },
    /// Benchmark the watch loop (see BENCHMARKS.md).
    BenchWatch(crate::bench::watch_loop::BenchArgs),
    /// Benchmark the agent process's CPU per watched thread (see BENCHMARKS.md).
    BenchAgent(crate::bench::agent_cpu::BenchAgentArgs),
}

nix::ioctl_read!(fs_ioc_getflags, b'f', 1, libc::c_long);
nix::ioctl_write_ptr!(fs_ioc_setflags, b'f', 2, libc::c_long);

pub fn run_internal(command: InternalCommand) -> anyhow::Result<ExitCode> {
    match command {
        InternalCommand::WedgeHelper {
            path,
            label,
            second_ring,
        } => wedge_helper(&path, &label, second_ring.as_deref()),
        InternalCommand::IoLoad { dir, seconds } => {
            io_load(&dir, Duration::from_secs_f64(seconds.clamp(0.0, 3600.0)))
        }
        InternalCommand::Churn {
            seconds,
            processes,
            threads,
            work_ms,
            child,
        } => {
            let threads = threads.clamp(1, 1000);
            let work = Duration::from_millis(work_ms.min(60_000));
            if child {
                churn_child(threads, work)
            } else {
                churn(
                    Duration::from_secs_f64(seconds.clamp(0.0, 3600.0)),
                    processes.clamp(1, 5000),
                    threads,
                    work,
                )
            }
        }
        InternalCommand::ResolveSymbols { request } => {
            crate::watch::stages::user_symbols::resolve_request(&request, &mut std::io::stdout())?;
            Ok(ExitCode::OK)
        }
        InternalCommand::BenchWatch(args) => crate::bench::watch_loop::run(args),
        InternalCommand::BenchAgent(args) => crate::bench::agent_cpu::run(args),
    }
}

/// Keep `processes` storm children alive for `duration`, starting a new one as each exits.
fn churn(
    duration: Duration,
    processes: usize,
    threads: usize,
    work: Duration,
) -> anyhow::Result<ExitCode> {
    // argv[0], not /proc/self/exe: started through a symlink, the children keep the storm's comm.
    let program = std::env::args_os()
        .next()
        .ok_or_else(|| Failure::new(ExitCode::ERROR, "churn: no argv[0]"))?;
    let spawn = || {
        std::process::Command::new(&program)
            .args(["internal", "churn", "--child", "--threads"])
            .arg(threads.to_string())
            .arg("--work-ms")
            .arg(work.as_millis().to_string())
            .stdin(std::process::Stdio::null())
            .spawn()
    };
    let until = Instant::now() + duration;
    let mut children = Vec::with_capacity(processes);
    let mut started = 0u64;
    while Instant::now() < until {
        children
            .retain_mut(|child: &mut std::process::Child| !matches!(child.try_wait(), Ok(Some(_))));
        while children.len() < processes && Instant::now() < until {
            match spawn() {
                Ok(child) => {
                    children.push(child);
                    started += 1;
                }
                // Out of pids or memory for a moment: let some exit first.
                Err(_) => break,
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for mut child in children {
        let _ = child.wait();
    }
    eprintln!("churn: {started} processes of {threads} threads");
    Ok(ExitCode::OK)
}

/// One storm process: `threads` threads that map, fault in and unmap 1 MiB for `work` (each unmap takes
/// the process's mmap lock for writing: the others wait for it in D), then exit.
fn churn_child(threads: usize, work: Duration) -> anyhow::Result<ExitCode> {
    let until = Instant::now() + work;
    let workers: Vec<_> = (0..threads)
        .filter_map(|_| {
            std::thread::Builder::new()
                .spawn(move || loop {
                    // 1 MiB is above malloc's mmap threshold: a fresh mapping each time.
                    let mut block = vec![0u8; 1 << 20];
                    for page in block.iter_mut().step_by(4096) {
                        *page = 1;
                    }
                    std::hint::black_box(&block);
                    drop(block);
                    if Instant::now() >= until {
                        break;
                    }
                })
                .ok()
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
    Ok(ExitCode::OK)
}

fn wedge_helper(path: &Path, label: &str, second_ring: Option<&Path>) -> anyhow::Result<ExitCode> {
    // Kept alive (and its fd open) until the helper exits, so the watchdog finds it through fd links.
    let _second = match second_ring {
        Some(ring) => {
            let writer = breadcrumb::Writer::create(ring, 64).map_err(|err| {
                Failure::new(ExitCode::ERROR, format!("{}: {err}", ring.display()))
            })?;
            let token = writer.enter(
                breadcrumb::Call::CuCtxSynchronize,
                &breadcrumb::Args::default(),
                "second ring: completed",
            );
            writer.exit(token, 0);
            Some(writer)
        }
        None => None,
    };
    let writer = match breadcrumb::Writer::from_env() {
        Ok(writer) => writer.map(std::sync::Arc::new),
        Err(err) => {
            eprintln!("wedge-helper: no breadcrumb ring: {err}");
            None
        }
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|err| Failure::new(ExitCode::ERROR, format!("{}: {err}", path.display())))?;
    let label = label.to_string();
    let worker_writer = writer.clone();
    let worker = std::thread::Builder::new()
        .name("wedge-worker".into())
        .spawn(move || -> std::io::Result<()> {
            let token = worker_writer.as_ref().map(|w| {
                w.enter(
                    breadcrumb::Call::Custom,
                    &breadcrumb::Args::default(),
                    &label,
                )
            });
            let mut flags: libc::c_long = 0;
            let fd = file.as_raw_fd();
            // SAFETY: `fd` stays open (owned by `file`) for the whole call and `flags` is a valid c_long,
            // which is what FS_IOC_GETFLAGS writes and FS_IOC_SETFLAGS reads.
            let result = unsafe {
                fs_ioc_getflags(fd, &mut flags).and_then(|_| fs_ioc_setflags(fd, &flags))
            };
            if let (Some(w), Some(token)) = (worker_writer.as_ref(), token) {
                w.exit(token, result.map(i64::from).unwrap_or_else(|e| -(e as i64)));
            }
            result.map(|_| ()).map_err(std::io::Error::from)
        })?;
    match worker.join() {
        Ok(Ok(())) => Ok(ExitCode::OK),
        Ok(Err(err)) => {
            Err(Failure::new(ExitCode::ERROR, format!("ioctl FS_IOC_SETFLAGS: {err}")).into())
        }
        Err(_) => Err(Failure::new(ExitCode::ERROR, "worker thread panicked").into()),
    }
}

fn io_load(dir: &Path, duration: Duration) -> anyhow::Result<ExitCode> {
    let dir = dir.to_path_buf();
    let worker = std::thread::Builder::new().name("io-load".into()).spawn(
        move || -> std::io::Result<u64> {
            let path = dir.join(format!("io-load-{}", std::process::id()));
            let block = vec![0x5au8; 1 << 20];
            let until = Instant::now() + duration;
            let mut rounds = 0u64;
            while Instant::now() < until {
                let mut file = std::fs::File::create(&path)?;
                for _ in 0..4 {
                    file.write_all(&block)?;
                }
                file.sync_all()?;
                rounds += 1;
            }
            let _ = std::fs::remove_file(&path);
            Ok(rounds)
        },
    )?;
    match worker.join() {
        Ok(Ok(rounds)) => {
            eprintln!("io-load: {rounds} rounds of 4 MiB + fsync");
            Ok(ExitCode::OK)
        }
        Ok(Err(err)) => Err(Failure::new(ExitCode::ERROR, format!("io-load: {err}")).into()),
        Err(_) => Err(Failure::new(ExitCode::ERROR, "io-load thread panicked").into()),
    }
}

fn temp_out_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "wedge-capture-selftest-{}-{}",
        std::process::id(),
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let temporary = args.out.is_none();
    let base = match &args.out {
        Some(dir) => dir.clone(),
        None => temp_out_dir()?,
    };
    let result = selftest(&base, &args);
    if temporary && !args.keep {
        let _ = std::fs::remove_dir_all(&base);
        eprintln!(
            "selftest: removed the temporary directory {} (use --keep or --out to keep it)",
            base.display()
        );
    }
    result
}

fn selftest(base: &Path, args: &Args) -> anyhow::Result<ExitCode> {
    let proc_root = ProcRoot::default();
    if let Some(reason) = FrozenFs::unavailable_reason() {
        return selftest_unprivileged(base, &reason);
    }
    let (mut fs, file) = frozen_target()?;
    let supervision = wedge_helper_supervision(base, proc_root, &file)?;
    let started = Instant::now();
    let outcome = crate::cmd::run::supervise(supervision);
    // Thaw whatever happened, then let the worker finish and reap it.
    let thawed = fs.thaw();
    let outcome = outcome?;
    thawed.map_err(|err| Failure::new(ExitCode::ERROR, format!("cannot thaw: {err}")))?;
    let worker_status = reap_within(outcome.child_pid, Duration::from_secs(10));
    drop(fs);

    let Some(incident_dir) = outcome.incidents.last().cloned() else {
        return Err(Failure::new(
            ExitCode::ERROR,
            format!(
                "selftest FAILED: no incident was written within {:.1} s (worker exit status {:?})",
                started.elapsed().as_secs_f64(),
                outcome.child_status
            ),
        )
        .into());
    };
    let incident =
        reports::store::read::read_incident(&incident_dir.join(reports::layout::INCIDENT_FILE))?;
    let markdown = std::fs::read_to_string(incident_dir.join(reports::layout::REPORT_FILE))
        .unwrap_or_default();
    let failures = selftest_failures(&incident, &outcome, worker_status);
    // A path that is removed before anyone can open it is not printed.
    let shown_dir = args.kept().then_some(&incident_dir);
    if cli::chosen(args.format, args.json) == OutputFormat::Json {
        println!(
            "{}",
            serde_json::json!({
                "passed": failures.is_empty(),
                "failures": failures,
                "incident": shown_dir,
                "incident_kept": args.kept(),
                "verdict": incident.verdict,
                "durable_after_ms": outcome.durable_after.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>(),
                "worker_exit_after_thaw": worker_status,
                "elapsed_s": started.elapsed().as_secs_f64(),
            })
        );
    } else {
        println!("{markdown}");
        match shown_dir {
            Some(dir) => println!("Incident: {}", dir.display()),
            None => println!(
                "Incident: removed with the temporary directory (keep it with --keep or --out DIR)"
            ),
        }
    }
    if failures.is_empty() {
        eprintln!(
            "selftest: PASSED in {:.1} s: wedge detected, incident written and complete, worker exited after the thaw",
            started.elapsed().as_secs_f64()
        );
        Ok(ExitCode::OK)
    } else {
        Err(Failure::new(
            ExitCode::ERROR,
            format!("selftest FAILED: {}", failures.join("; ")),
        )
        .into())
    }
}

/// A frozen 16 MiB ext4 loop mount holding the file the worker will block on, and that file.
fn frozen_target() -> anyhow::Result<(FrozenFs, PathBuf)> {
    eprintln!("selftest: creating a 16 MiB ext4 image, loop-mounting it and freezing it");
    let mut fs = FrozenFs::new().map_err(|err| {
        Failure::new(
            ExitCode::ERROR,
            format!("cannot set up the frozen filesystem: {err}"),
        )
    })?;
    let file = fs
        .create_file("wedge-target", b"selftest\n")
        .map_err(|err| {
            Failure::new(
                ExitCode::ERROR,
                format!("cannot create the target file: {err}"),
            )
        })?;
    fs.freeze().map_err(|err| {
        Failure::new(
            ExitCode::ERROR,
            format!("cannot freeze {}: {err}", fs.mountpoint().display()),
        )
    })?;
    Ok((fs, file))
}

/// `run`'s supervision of a worker (this binary's `internal wedge-helper`) that blocks on
/// `file`, with the selftest's short interval and threshold, writing under `base`.
fn wedge_helper_supervision(
    base: &Path,
    proc_root: ProcRoot,
    file: &Path,
) -> anyhow::Result<crate::cmd::run::Supervise> {
    let exe = crate::watch::launch::own_executable()?;
    let ring_dir = crate::cmd::run::run_ring_dir(base, &format!("selftest-{}", std::process::id()));
    let watch = WatchSettings {
        out: base.to_path_buf(),
        interval: defaults::SELFTEST_INTERVAL,
        threshold: defaults::SELFTEST_THRESHOLD,
        nvidia_smi: false,
        ..WatchSettings::default()
    };
    eprintln!(
        "selftest: running a worker that blocks a non-main thread in ioctl(FS_IOC_SETFLAGS) on {}",
        file.display()
    );
    Ok(crate::cmd::run::Supervise {
        command: vec![
            exe.into_os_string(),
            OsString::from("internal"),
            OsString::from("wedge-helper"),
            OsString::from("--path"),
            file.to_path_buf().into_os_string(),
        ],
        watch: watch.watch_config(),
        capture: watch.capture_settings(proc_root, std::slice::from_ref(&ring_dir)),
        out: watch.out.clone(),
        ring_dir,
        remove_ring_dir: false,
        exit_after: Some(Duration::from_millis(200)),
        extra_env: Vec::new(),
        verbose: true,
    })
}

/// The worker's exit status (shell convention) once it ended, polling for at most `limit`;
/// `None` if it is still running.
fn reap_within(pid: i32, limit: Duration) -> Option<u8> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(status) = crate::watch::launch::try_wait(pid) {
            return Some(crate::watch::launch::shell_status(status));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// What the selftest's capture got wrong (empty when it passed).
fn selftest_failures(
    incident: &reports::Incident,
    outcome: &crate::cmd::run::Outcome,
    worker_status: Option<u8>,
) -> Vec<String> {
    let mut failures = Vec::new();
    if !incident.complete {
        failures.push("the incident is not complete".to_string());
    }
    if !incident.verdict.contains("FS_IOC_SETFLAGS") {
        failures.push(format!(
            "the verdict does not name the ioctl: {}",
            incident.verdict
        ));
    }
    let in_flight = incident.ring.as_ref().is_some_and(|r| {
        r.in_flight
            .iter()
            .any(|f| f.label.contains("FS_IOC_SETFLAGS"))
    });
    if !in_flight {
        failures.push("the ring's in-flight breadcrumb was not captured".to_string());
    }
    if outcome.exit != ExitCode::WEDGED.0 {
        failures.push(format!(
            "the watch exited with {} instead of 3",
            outcome.exit
        ));
    }
    if worker_status != Some(0) {
        failures.push(format!(
            "after the thaw the worker ended with {worker_status:?}, not 0"
        ));
    }
    failures
}

/// Without root: run the parts that need no privilege, say what was skipped.
fn selftest_unprivileged(base: &Path, reason: &str) -> anyhow::Result<ExitCode> {
    eprintln!("selftest: SKIPPED the frozen-filesystem wedge: {reason}");
    let proc_root = ProcRoot::default();
    preflight::check_writable(base)?;
    eprintln!("selftest: output directory {} is writable", base.display());
    for (cap, cost) in preflight::missing_capabilities(&proc_root) {
        eprintln!("selftest: missing {cap}: {cost}");
    }
    let mut runner = crate::probe::ProbeRunner::default();
    let probes = crate::probe::standard_probes(&proc_root, std::process::id() as i32, false);
    for outcome in runner.run_all(&probes) {
        eprintln!(
            "selftest: probe {} ({}): {}",
            outcome.name, outcome.target, outcome.detail
        );
    }
    Err(Failure::new(
        ExitCode::NO_PRIVILEGE,
        "selftest incomplete: the wedge capture itself needs root (run `sudo wedge-capture selftest`)",
    )
    .into())
}
