//! `wedge-capture doctor`: what on this host limits what a capture can see, and how to fix it.
//!
//! Nothing here may hang: the NVIDIA driver file is read through the probe runner (a sacrificial child with a
//! deadline), everything else is a sysctl, a capability mask or a statfs.

use std::path::{Path, PathBuf};

use capture::{ProcRoot, RiskyFile};

use crate::cli::{self, OutputFormat};
use crate::exit::{ExitCode, Failure};
use crate::probe::{self, Probe, ProbeRunner, ProbeStatus};
use crate::tools;

mod check;
mod fleet;
mod privileges;

use check::check;
pub use check::{Check, Status};
pub use fleet::FleetTargets;

/// Check privileges, kernel settings and drivers that limit what can be captured, with fixes.
///
/// Each check prints ok, warn, fail or info, what was found, and the fix.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Fleet checks: the host's pid namespace (hostPID), the metrics port bindable, the node_exporter
textfile directory writable (a file is created and removed), the ring directories' modes
(sticky and world-writable, parents searchable), /dev/kmsg readable.

Examples:
  wedge-capture doctor
  wedge-capture doctor --config /etc/wedge-capture/agent.json    # the agent's settings
  wedge-capture doctor --metrics-listen 0.0.0.0:9465
  kubectl -n wedge-capture exec ds/wedge-capture -- wedge-capture doctor --format json")]
pub struct Args {
    /// The incident store to check (durable filesystem, writable)
    /// [default: the config's `out`, else /var/lib/wedge-capture/incidents].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The agent's config file: check its `out`, `metrics_listen`, `textfile_dir` and `ring_dir` (flags win).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Check that the agent could listen on ADDR (IP:PORT).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Check that the agent could write node_exporter's textfile into DIR.
    #[arg(long, value_name = "DIR")]
    pub textfile_dir: Option<PathBuf>,
    /// Check a ring directory's mode (repeatable) [default: the config's, else /var/lib/wedge-capture/rings].
    #[arg(long, value_name = "DIR")]
    pub ring_dir: Vec<PathBuf>,
    /// Output format: text (a line per check, with its fix), or json (`checks[]`, `failed`).
    #[arg(long, value_name = "FORMAT", default_value = "text",
          value_parser = cli::formats(&[OutputFormat::Text, OutputFormat::Json]))]
    pub format: OutputFormat,
    /// Old spelling of `--format json`.
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
}

/// Run every check.
pub fn checks(proc_root: &ProcRoot, out: &Path, fleet: &FleetTargets) -> Vec<Check> {
    let me = std::process::id() as i32;
    let status = proc_root.read_task_status(me, me).ok();
    let eff = status.as_ref().and_then(|s| s.cap_eff);
    let cap = |bit: u32| eff.map(|e| e & (1u64 << bit) != 0);
    let mut out_checks = capability_checks(cap);
    out_checks.push(privileges::realtime_check(cap));
    out_checks.extend(privileges::credential_switch_check(cap));
    out_checks.extend(ptrace_scope_check(
        proc_root,
        cap(crate::preflight::CAP_SYS_PTRACE),
    ));
    out_checks.extend(hung_task_checks(proc_root));
    out_checks.push(kmsg_check(proc_root));
    out_checks.extend(proc_file_checks(proc_root, me));
    out_checks.extend(netlink_checks());
    out_checks.push(output_dir_check(out));
    out_checks.extend(fleet::checks(fleet));
    out_checks.extend(driver_checks(proc_root));
    out_checks.push(py_spy_check());
    out_checks
}

/// CAP_SYS_ADMIN (kernel stacks) and CAP_SYS_PTRACE (other users' tasks), from our effective set.
fn capability_checks(cap: impl Fn(u32) -> Option<bool>) -> Vec<Check> {
    let mut out_checks = Vec::new();
    let grant = "run as root, or grant it (systemd: AmbientCapabilities=…; shell: sudo setcap cap_sys_admin,cap_sys_ptrace,cap_syslog+ep $(command -v wedge-capture))";
    match cap(crate::preflight::CAP_SYS_ADMIN) {
        Some(true) => out_checks.push(check(
            "CAP_SYS_ADMIN",
            Status::Ok,
            "in the effective set: kernel stacks are readable",
            "",
        )),
        Some(false) => out_checks.push(check(
            "CAP_SYS_ADMIN",
            Status::Fail,
            "missing: task stack files cannot be read, so incidents lack kernel stacks",
            grant,
        )),
        None => out_checks.push(check(
            "CAP_SYS_ADMIN",
            Status::Warn,
            "cannot read our own status (CapEff)",
            grant,
        )),
    }
    match cap(crate::preflight::CAP_SYS_PTRACE) {
        Some(true) => out_checks.push(check(
            "CAP_SYS_PTRACE",
            Status::Ok,
            "in the effective set: other users' syscall/wchan/fd links are readable",
            "",
        )),
        Some(false) => out_checks.push(check(
            "CAP_SYS_PTRACE",
            Status::Warn,
            "missing: processes of other users show no syscall, wchan or fd links",
            grant,
        )),
        None => {}
    }
    out_checks
}

/// Yama's ptrace_scope: whether syscall and stack reads of other processes are allowed at all.
fn ptrace_scope_check(proc_root: &ProcRoot, ptrace: Option<bool>) -> Option<Check> {
    let mut out_checks = Vec::new();
    match proc_root.sysctl("kernel.yama.ptrace_scope").ok() {
        None => out_checks.push(check("yama.ptrace_scope", Status::Info, "Yama is not built in: no extra ptrace restriction", "")),
        Some(v) if v == "0" || v == "1" => out_checks.push(check("yama.ptrace_scope", Status::Ok, format!("ptrace_scope={v}: CAP_SYS_PTRACE (or root) reads any task"), "")),
        Some(v) if v == "2" => out_checks.push(check(
            "yama.ptrace_scope",
            if ptrace == Some(true) { Status::Ok } else { Status::Fail },
            "ptrace_scope=2: syscall and stack reads need CAP_SYS_PTRACE",
            "grant CAP_SYS_PTRACE, or sysctl -w kernel.yama.ptrace_scope=1",
        )),
        Some(v) => out_checks.push(check(
            "yama.ptrace_scope",
            Status::Fail,
            format!("ptrace_scope={v}: no process may read another's syscall or stack (cannot be lowered until reboot)"),
            "boot with kernel.yama.ptrace_scope=1 (sysctl.d)",
        )),
    }
    out_checks.pop()
}

/// The kernel's hung-task detector: its log lines are evidence, its panic setting destroys it.
fn hung_task_checks(proc_root: &ProcRoot) -> Vec<Check> {
    let mut out_checks = Vec::new();
    match proc_root.sysctl("kernel.hung_task_timeout_secs").ok() {
        None => out_checks.push(check("kernel.hung_task_timeout_secs", Status::Info, "not available (CONFIG_DETECT_HUNG_TASK off): no 'blocked for more than' lines in the kernel log", "")),
        Some(v) if v == "0" => out_checks.push(check("kernel.hung_task_timeout_secs", Status::Warn, "0: the kernel's hung-task detector is off, so the kernel log has no 'blocked for more than' lines", "sysctl -w kernel.hung_task_timeout_secs=120")),
        Some(v) => out_checks.push(check("kernel.hung_task_timeout_secs", Status::Ok, format!("{v} s: the kernel logs tasks blocked longer"), "")),
    }
    match proc_root.sysctl("kernel.hung_task_panic").ok() {
        Some(v) if v != "0" => out_checks.push(check(
            "kernel.hung_task_panic",
            Status::Fail,
            format!("{v}: a wedge panics the host before anything can be captured"),
            "sysctl -w kernel.hung_task_panic=0",
        )),
        Some(v) => out_checks.push(check(
            "kernel.hung_task_panic",
            Status::Ok,
            format!("{v}: a hung task does not panic the host"),
            "",
        )),
        None => {}
    }
    out_checks
}

/// `/dev/kmsg` readable (NVRM and Xid lines come from it).
fn kmsg_check(proc_root: &ProcRoot) -> Check {
    let dmesg_restrict = proc_root.sysctl("kernel.dmesg_restrict").ok();
    match capture::kmsg::open(std::path::Path::new(capture::kmsg::KMSG_PATH)) {
        Ok(_) => check(
            "kmsg",
            Status::Ok,
            format!(
                "{} is readable (kernel.dmesg_restrict={})",
                capture::kmsg::KMSG_PATH,
                dmesg_restrict.as_deref().unwrap_or("?")
            ),
            "",
        ),
        Err(err) => check(
            "kmsg",
            Status::Warn,
            format!(
                // The error names the device.
                "{err} (kernel.dmesg_restrict={}): incidents will have no kernel log",
                dmesg_restrict.as_deref().unwrap_or("?")
            ),
            kmsg_fix(&err),
        ),
    }
}

/// Kernel stacks and `task/<tid>/children` (descendants found by `run`).
fn proc_file_checks(proc_root: &ProcRoot, me: i32) -> Vec<Check> {
    let mut out_checks = Vec::new();
    let stack = proc_root.read_stack(me, me);
    out_checks.push(match stack {
        Ok(_) => check(
            "kernel-stacks",
            Status::Ok,
            "task stack files are readable",
            "",
        ),
        Err(err) => check(
            "kernel-stacks",
            Status::Warn,
            format!("cannot read a kernel stack: {err}"),
            "run as root (CAP_SYS_ADMIN); the kernel needs CONFIG_STACKTRACE",
        ),
    });
    out_checks.push(if proc_root.has_children_files(me) {
        check("proc-children", Status::Ok, "task/<tid>/children exists: run finds every descendant", "")
    } else {
        check("proc-children", Status::Warn, "task/<tid>/children is missing (CONFIG_PROC_CHILDREN off): run watches only its direct child", "use a kernel with CONFIG_PROC_CHILDREN=y")
    });
    out_checks
}

/// The agent's three CPU shortcuts, tried for real rather than judged from capability bits: taskstats
/// (needs CAP_NET_ADMIN, works in any network namespace) for our own process, a proc connector
/// subscription (the connector exists only in the host's network namespace), and the BPF task iterator
/// (CAP_BPF + CAP_PERFMON, kernel BTF, Linux >= 6.1), loaded and read on our own threads.
fn netlink_checks() -> Vec<Check> {
    let me = std::process::id() as i32;
    let taskstats = capture::taskstats::Taskstats::open().and_then(|mut t| t.tgid(me));
    let events = capture::proc_events::ProcEvents::open();
    vec![
        match taskstats {
            Ok(_) => check("taskstats", Status::Ok, "per-process counters readable: the agent skips the threads of quiet processes", ""),
            Err(err) => check(
                "taskstats",
                Status::Warn,
                format!("unavailable ({err}): the agent reads every watched thread's state each scan (more CPU, same detection)"),
                "grant CAP_NET_ADMIN (systemd unit: as shipped; Kubernetes: add NET_ADMIN)",
            ),
        },
        match capture::task_iter::TaskIter::load() {
            Ok(iter) => check("task-iter", Status::Ok, format!("BPF task iterator loaded: the agent skips the sleeping threads of busy processes that have not run since the last scan ({})", if iter.walks_groups() { "each process's threads walked in one call, per thread above 2046 threads" } else { "asked per thread: this kernel refused the group walk" }), ""),
            Err(err) => check(
                "task-iter",
                Status::Warn,
                format!("unavailable ({err}): the agent reads each sleeping thread's schedstat every scan (more CPU on busy workers, same detection)"),
                "grant CAP_BPF and CAP_PERFMON (systemd unit: as shipped; Kubernetes: add BPF and PERFMON), run in the host's pid namespace (Kubernetes: hostPID: true); needs kernel BTF (CONFIG_DEBUG_INFO_BTF) and Linux >= 6.1",
            ),
        },
        match events {
            Ok(_) => check("proc-connector", Status::Ok, "fork/exec/exit events received: the agent lists /proc only every 16 scans", ""),
            Err(err) => check(
                "proc-connector",
                Status::Warn,
                format!("unavailable ({err}): the agent lists every process each scan (more CPU, same discovery)"),
                "run in the host's network namespace (Kubernetes: hostNetwork: true)",
            ),
        },
    ]
}

/// The output directory's filesystem must survive a reboot (not tmpfs/ramfs) and be writable.
fn output_dir_check(out: &Path) -> Check {
    let mut existing = out.to_path_buf();
    while !existing.exists() {
        match existing.parent() {
            Some(parent) => existing = parent.to_path_buf(),
            None => break,
        }
    }
    let kind = match nix::sys::statfs::statfs(&existing) {
        Ok(fs) => fs.filesystem_type(),
        Err(err) => {
            return check(
                "output-dir",
                Status::Warn,
                format!("{}: statfs failed: {err}", existing.display()),
                "create the directory on a disk filesystem",
            )
        }
    };
    let volatile = kind == nix::sys::statfs::TMPFS_MAGIC || kind.0 as i64 == 0x8584_58f6;
    if volatile {
        return check(
            "output-dir",
            Status::Warn,
            format!(
                "{} is on tmpfs/ramfs: incidents are lost at the reboot a wedge usually ends with",
                out.display()
            ),
            "use --out on a disk filesystem (default /var/lib/wedge-capture/incidents)",
        );
    }
    if existing != out {
        // Not there yet: the agent creates it (0700) at start. Say so rather than calling it writable: a
        // typo in --out looks exactly like this.
        let parent_ok = fleet::write_probe(&existing).is_ok();
        return check(
            "output-dir",
            if parent_ok { Status::Warn } else { Status::Fail },
            format!(
                "{} does not exist; its nearest existing parent {} is {}",
                out.display(),
                existing.display(),
                if parent_ok {
                    "writable, so the agent will create it (0700) at start"
                } else {
                    "not writable: the agent cannot create it"
                }
            ),
            "check the path; create it with `install -d -m 0700 DIR` (systemd: the tmpfiles entry does)",
        );
    }
    // A real file, created and removed: a read-only mount or a sandbox refuses what permission bits allow.
    if let Err(err) = fleet::write_probe(out) {
        return check(
            "output-dir",
            Status::Fail,
            format!(
                "cannot write into {}: {err}{}",
                out.display(),
                crate::host::sandbox::write_hint(&err)
            ),
            "run as root or choose a writable --out",
        );
    }
    check(
        "output-dir",
        Status::Ok,
        format!(
            "{} is on a disk filesystem (statfs type {:#x}) and writable (a file was created and removed)",
            out.display(),
            kind.0
        ),
        "",
    )
}

fn driver_checks(proc_root: &ProcRoot) -> Vec<Check> {
    let mut out = Vec::new();
    let mut runner = ProbeRunner::new(crate::defaults::PROBE_TIMEOUT, 2);
    let version = runner.run_all(&[Probe::read_file(
        "nvidia-version",
        proc_root.risky_path(RiskyFile::NvidiaVersion),
        "the RM lock is probably held (the driver is wedged now)",
    )]);
    let outcome = &version[0];
    out.push(match outcome.status {
        ProbeStatus::Ok => check(
            "nvidia-driver",
            Status::Ok,
            outcome.output.lines().next().unwrap_or("").trim().to_string(),
            "",
        ),
        ProbeStatus::TimedOut => check(
            "nvidia-driver",
            Status::Fail,
            format!("reading the driver version {}", outcome.detail),
            "the driver is wedged now: run `wedge-capture run`/`agent` captures, then reset the GPU or reboot",
        ),
        _ => check(
            "nvidia-driver",
            Status::Info,
            format!("no NVIDIA kernel driver loaded ({})", outcome.detail),
            "",
        ),
    });
    out.push(library_check("libcuda", tools::LIBCUDA_NAMES, "install the NVIDIA driver's user-space libraries (libcuda.so.1) to use `upload` and breadcrumbs from CUDA programs"));
    let mut cupti = library_check(
        "libcupti",
        tools::LIBCUPTI_NAMES,
        "install CUPTI (cuda-cupti package) and add its lib directory to the loader path, for --inject=cupti",
    );
    if cupti.status == Status::Warn {
        // Only --inject=cupti needs it: the default breadcrumb path does not.
        cupti.status = Status::Info;
    }
    out.push(cupti);
    out.push(breadcrumbs_check());
    out.push(match tools::nvidia_smi() {
        Some(path) => check(
            "nvidia-smi",
            Status::Ok,
            format!("{} (run as a probe with a deadline)", path.display()),
            "",
        ),
        None => check(
            "nvidia-smi",
            Status::Info,
            "not on PATH: incidents have no `nvidia-smi -q`",
            "",
        ),
    });
    out
}

/// Whether py-spy (the Python stacks of CPython targets) is on PATH and runs: `py-spy --version` as a probe with
/// a deadline.
fn py_spy_check() -> Check {
    let fix = "pip install py-spy (or give its path with --py-spy PATH): incidents of Python workers then name \
               the file, function and line of every thread";
    let Some(program) = tools::py_spy(Path::new(crate::defaults::PY_SPY)) else {
        return check(
            "py-spy",
            Status::Warn,
            "not on PATH: incidents have no Python stacks",
            fix,
        );
    };
    let mut runner = ProbeRunner::new(crate::defaults::PROBE_TIMEOUT, 1);
    let outcome = runner.run_all(&[Probe {
        name: "py-spy".into(),
        kind: probe::ProbeKind::Command {
            program: program.display().to_string(),
            args: vec!["--version".into()],
            confinement: probe::Confinement::default(),
        },
        timeout_meaning: "py-spy did not answer".into(),
    }]);
    match outcome[0].status {
        ProbeStatus::Ok => check(
            "py-spy",
            Status::Ok,
            format!(
                "{} ({}; run as `dump --nonblocking` in a sacrificial child with the probe deadline)",
                outcome[0].output.trim(),
                program.display()
            ),
            "",
        ),
        _ => check(
            "py-spy",
            Status::Warn,
            format!("{} does not run: {}", program.display(), outcome[0].detail),
            fix,
        ),
    }
}

/// Which breadcrumb path is active in this environment (LD_PRELOAD or CUDA_INJECTION64_PATH naming the
/// injection library), and which one `run --inject` would use, with the library it would load.
fn breadcrumbs_check() -> Check {
    use crate::inject_env::{
        InjectMode, InjectSearch, ENV_INJECTION_PATH, ENV_PRELOAD, INJECT_LIB_NAME,
    };
    let names_library = |name: &str| {
        std::env::var_os(name).is_some_and(|v| v.to_string_lossy().contains(INJECT_LIB_NAME))
    };
    let active = if names_library(ENV_PRELOAD) {
        format!("active here: {}", InjectMode::Driver.describe())
    } else if names_library(ENV_INJECTION_PATH) {
        format!("active here: {}", InjectMode::Cupti.describe())
    } else {
        "none active in this environment".to_string()
    };
    match crate::inject_env::find_injection_library(&InjectSearch::from_env()) {
        Ok(library) => check(
            "breadcrumbs",
            Status::Ok,
            format!(
                "{active}; `run --inject`: {} with {}; `run --inject=cupti`: {}",
                InjectMode::Driver.describe(),
                library.display(),
                InjectMode::Cupti.describe()
            ),
            "",
        ),
        Err(err) => check(
            "breadcrumbs",
            Status::Info,
            format!("{active}; `run --inject` unavailable: {err}"),
            "install libwedge_inject.so next to wedge-capture or in ../lib (or set WEDGE_CAPTURE_INJECT_LIB)",
        ),
    }
}

/// Whether the dynamic loader finds one of `names` (dlopen, then dlclose).
fn library_check(name: &str, names: &[&str], fix: &str) -> Check {
    if let Some(candidate) = tools::loadable(names) {
        return check(name, Status::Ok, format!("{candidate} loads"), "");
    }
    check(
        name,
        Status::Warn,
        format!("none of {} could be loaded", names.join(", ")),
        fix,
    )
}

/// The incident directory and fleet targets: flags, then the agent's config file, then the defaults.
fn targets(args: &Args) -> anyhow::Result<(PathBuf, FleetTargets)> {
    let settings = match &args.config {
        Some(path) => Some(
            crate::settings::Settings::load(Some(path), &crate::settings::Options::default())
                .map_err(|e| Failure::new(ExitCode::USAGE, format!("bad configuration: {e}")))?,
        ),
        None => None,
    };
    let out = args
        .out
        .clone()
        .or_else(|| settings.as_ref().map(|s| s.watch.out.clone()))
        .unwrap_or_else(|| PathBuf::from(reports::layout::DEFAULT_DIR));
    let mut ring_dirs = args.ring_dir.clone();
    if ring_dirs.is_empty() {
        ring_dirs = match &settings {
            Some(s) => s.agent.ring_dir.clone(),
            None => vec![PathBuf::from(DEFAULT_RING_DIR)],
        };
    }
    let fleet = FleetTargets {
        metrics_listen: args
            .metrics_listen
            .or_else(|| settings.as_ref().and_then(|s| s.agent.metrics_listen)),
        textfile_dir: args
            .textfile_dir
            .clone()
            .or_else(|| settings.as_ref().and_then(|s| s.agent.textfile_dir.clone())),
        ring_dirs,
    };
    Ok((out, fleet))
}

/// The ring directory of the shipped unit, tmpfiles entry and DaemonSet.
const DEFAULT_RING_DIR: &str = "/var/lib/wedge-capture/rings";

/// What to do about a /dev/kmsg that cannot be opened, by why.
fn kmsg_fix(err: &capture::Error) -> &'static str {
    let text = err.to_string();
    if text.contains("Operation not permitted") || text.contains("os error 1)") {
        // EPERM from open(2) of a device: the device cgroup, not a permission bit.
        "in a container the device cgroup refuses it: Kubernetes needs privileged: true (deploy/kubernetes/base/\
         daemonset.yaml says why); under systemd keep DeviceAllow=/dev/kmsg r"
    } else if text.contains("No such file") {
        "mount the host's /dev/kmsg (Kubernetes: a hostPath CharDevice volume)"
    } else {
        "grant CAP_SYSLOG, or sysctl -w kernel.dmesg_restrict=0"
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let proc_root = ProcRoot::default();
    let (out, fleet) = targets(&args)?;
    let results = checks(&proc_root, &out, &fleet);
    let failed = results.iter().any(|c| c.status == Status::Fail);
    if cli::chosen(args.format, args.json) == OutputFormat::Json {
        println!(
            "{}",
            serde_json::json!({ "checks": results, "failed": failed })
        );
    } else {
        for c in &results {
            let tag = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "WARN",
                Status::Fail => "FAIL",
                Status::Info => "info",
            };
            println!("[{tag}] {:<32} {}", c.name, c.detail);
            if !c.fix.is_empty() {
                println!("       {:<32} fix: {}", "", c.fix);
            }
        }
    }
    Ok(if failed {
        ExitCode::ERROR
    } else {
        ExitCode::OK
    })
}
