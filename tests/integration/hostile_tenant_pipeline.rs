//! Integration tests: the capture pipeline under a hostile tenant (issue 35, items 1, 3 and 4). A hostile
//! tenant (uid 65534, no privilege) puts processes in D on demand (vfork + a FIFO nobody writes: the caller
//! sleeps in `kernel_clone`) and decides what their captures cost:
//! - ten such wedges whose captures stall on a probe: a real wedge of another tenant (root: a thread blocked
//!   on a frozen loop-mounted ext4) is still judged within threshold + 2 intervals of entering D, its capture
//!   does not wait behind theirs, and the agent keeps pinging the systemd watchdog;
//! - four such processes whose probe children get stuck in D for good: another process's probes still run;
//! - an agent killed during a stage: the next one does not run that stage again.
//!
//! Root-only (setpriv, loop devices); skipped with a message without root, except with CI=true.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::agent::{
    incidents_for, link_as, unique_comm, wait_in_d, wedge_helper, Agent, NotifySocket, TempDir,
};
use crate::util::{bin, frozen_fs_or_skip, in_ci};

/// CLOCK_MONOTONIC in ns (the clock of the incidents' `monotonic_ns`).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is, and keeps no pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A process of the hostile tenant in D without privilege: as uid/gid 65534 it names itself `comm` and
/// `posix_spawn`s a child whose file action opens `fifo`, which nobody writes: glibc's vfork-style spawn
/// keeps the caller in D (`kernel_clone`) until the child opens it. Killed (it is TASK_KILLABLE) on drop.
pub(crate) struct VforkWedge {
    child: Child,
}

impl VforkWedge {
    pub(crate) fn start(python: &Path, comm: &str, fifo: &Path) -> VforkWedge {
        let script = format!(
            "import os\n\
             open('/proc/self/comm', 'w').write({comm:?})\n\
             os.posix_spawn('/bin/true', ['true'], {{}}, \
             file_actions=[(os.POSIX_SPAWN_OPEN, 0, {fifo:?}, os.O_RDONLY, 0)])\n",
            fifo = fifo.display().to_string()
        );
        let child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(python)
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("setpriv and python3 are needed");
        VforkWedge { child }
    }

    /// The process in D is setpriv's (it execs python3 in place).
    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for VforkWedge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A FIFO nobody writes, that uid 65534 can open.
pub(crate) fn open_fifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    crate::util::mkfifo(&path, 0o666);
    path
}

/// [`unprivileged_python`], or None with the reason printed (never with CI=true: then it fails).
fn python_or_skip(test: &str) -> Option<PathBuf> {
    let python = unprivileged_python();
    if python.is_none() {
        assert!(
            !in_ci(),
            "{test}: setpriv/python3 for uid 65534 missing with CI=true"
        );
        eprintln!("skipping {test}: setpriv or a python3 uid 65534 may run is missing");
    }
    python
}

/// A python3 that uid 65534 may run (a pyenv shim under /root is not one), if any.
pub(crate) fn unprivileged_python() -> Option<PathBuf> {
    let mut candidates = vec![PathBuf::from("/usr/bin/python3")];
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|dir| dir.join("python3")));
    }
    candidates.into_iter().find(|python| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(python)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The earliest and latest seconds between two WATCHDOG=1 pings seen so far.
fn longest_gap(pings: &[Instant]) -> Duration {
    pings
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap_or_default()
}

fn timeline_text(incident: &serde_json::Value) -> String {
    incident["timeline"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter_map(|e| e["event"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Milliseconds the capture waited in the queue, from the incident's timeline.
fn queued_ms(incident: &serde_json::Value) -> Option<u64> {
    let text = timeline_text(incident);
    let line = text
        .lines()
        .find(|l| l.starts_with("capture started by a worker "))?;
    line.trim_start_matches("capture started by a worker ")
        .split(' ')
        .next()?
        .parse()
        .ok()
}

/// What one run of [`detection_behind`] measured.
#[derive(Debug)]
struct Figures {
    /// From the real thread seen in D to its judgement (the incident's `detected_at`).
    judged_after: Duration,
    /// How long its capture waited in the queue (None: no capture queue, as before issue 35).
    queued: Option<Duration>,
    /// From its judgement to its complete incident.
    completed_after: Duration,
    /// Hostile incidents complete when the real one completed.
    hostile_complete: usize,
    /// Longest gap between two WATCHDOG=1 pings, and how many.
    ping_gap: Duration,
    pings: usize,
    /// The agent's peak RSS (VmHWM), KiB.
    peak_rss_kib: u64,
    incident: serde_json::Value,
    log: String,
}

fn vm_hwm_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

/// `hostile` wedges of uid 65534 (each capture stalls 3 s on a probe), then a real wedge of root; the
/// agent at 500 ms / 2 s / 2 samples. None when the test cannot run here (skipped, said why).
fn detection_behind(test: &str, hostile: usize) -> Option<Figures> {
    let mut target = frozen_fs_or_skip(test)?;
    let python = python_or_skip(test)?;
    let dir = TempDir::new("hostile-detect");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // Every capture stalls on a probe to its deadline (a stand-in for the tenant's slow files).
    let stall = open_fifo(dir.path(), "stall.fifo");
    let out = dir.path().join("incidents");

    let hostile_prefix = unique_comm("h");
    let prefix = &hostile_prefix[..hostile_prefix.len().min(12)];
    let mut wedges = Vec::new();
    for n in 0..hostile {
        let fifo = open_fifo(dir.path(), &format!("h{n}.fifo"));
        wedges.push(VforkWedge::start(&python, &format!("{prefix}{n}"), &fifo));
    }
    for wedge in &wedges {
        wait_in_d(wedge.pid(), Duration::from_secs(30));
    }

    let notify = NotifySocket::new(dir.path());
    let real_comm = unique_comm("r");
    let agent = Agent::start(
        dir.path(),
        &[
            "--out",
            out.to_str().unwrap(),
            "--interval",
            "500ms",
            "--threshold",
            "2s",
            "--samples",
            "2",
            "--probe-timeout",
            "3s",
            "--extra-probe",
            stall.to_str().unwrap(),
            "--match-comm",
            &format!("^{prefix}"),
            "--match-comm",
            &format!("^{real_comm}$"),
        ],
        &[
            ("NOTIFY_SOCKET", notify.path.to_str().unwrap()),
            ("WATCHDOG_USEC", "30000000"),
        ],
    );
    // The first hostile wedge is judged: its capture runs, the others' are due (all entered D together).
    let mut seen = Vec::new();
    let mut pings = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    while !wedges.is_empty()
        && wedges
            .iter()
            .all(|w| incidents_for(&out, w.pid()).is_empty())
    {
        assert!(
            Instant::now() < until,
            "{test}: hostile wedges not judged:\n{}",
            agent.log()
        );
        collect_pings(&notify, &mut seen, &mut pings);
        std::thread::sleep(Duration::from_millis(50));
    }

    // Now the real wedge of another tenant, while the hostile captures run and wait.
    let file = target.create_file("target", b"x").unwrap();
    target.freeze().unwrap();
    let program = link_as(dir.path(), &real_comm, Path::new(bin()));
    let mut helper = wedge_helper(&program, &file, &[], "real ioctl FS_IOC_SETFLAGS");
    wait_in_d(helper.pid(), Duration::from_secs(10));
    let in_d_seen_ns = monotonic_ns();

    // Before issue 35 the captures ran on the watch loop, one after another: 50 of them take minutes.
    let until = Instant::now() + Duration::from_secs(600);
    let incident = loop {
        collect_pings(&notify, &mut seen, &mut pings);
        if let Some(incident) = incidents_for(&out, helper.pid()).pop() {
            if incident["complete"] == true {
                break incident;
            }
        }
        assert!(
            Instant::now() < until,
            "{test}: the real wedge's incident never completed:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let completed_ns = monotonic_ns();
    let detected_ns = incident["wedged_threads"][0]["detected_at"]["monotonic_ns"]
        .as_u64()
        .unwrap_or_else(|| panic!("{test}: no detection time: {incident}"));
    let hostile_complete = wedges
        .iter()
        .filter(|w| {
            incidents_for(&out, w.pid())
                .first()
                .is_some_and(|i| i["complete"] == true)
        })
        .count();
    collect_pings(&notify, &mut seen, &mut pings);
    let peak_rss_kib = vm_hwm_kib(agent.pid());
    let (code, _, log) = agent.terminate();
    assert_eq!(code, Some(0), "{test}: exit status after SIGTERM:\n{log}");
    target.thaw().unwrap();
    assert!(helper.wait_exit(Duration::from_secs(10)).is_some());
    Some(Figures {
        judged_after: Duration::from_nanos(detected_ns.saturating_sub(in_d_seen_ns)),
        queued: queued_ms(&incident).map(Duration::from_millis),
        completed_after: Duration::from_nanos(completed_ns.saturating_sub(detected_ns)),
        hostile_complete,
        ping_gap: longest_gap(&pings),
        pings: pings.len(),
        peak_rss_kib,
        incident,
        log,
    })
}

#[test]
fn ten_hostile_wedges_delay_neither_another_tenants_detection_nor_its_capture() {
    let test = "hostile tenant detection";
    let Some(figures) = detection_behind(test, 10) else {
        return;
    };
    let (interval, threshold) = (Duration::from_millis(500), Duration::from_secs(2));
    // It entered D before it was seen there: judged within threshold + 2 intervals of entering D.
    let bound = threshold + 2 * interval;
    assert!(
        figures.judged_after <= bound,
        "{test}: the real wedge was judged {:?} after it entered D (bound {bound:?}) behind ten hostile \
         captures:\n{}",
        figures.judged_after,
        figures.log
    );
    // Its capture did not queue behind the hostile tenant's ten (each takes >= 3 s, one at a time).
    let queued = figures
        .queued
        .unwrap_or_else(|| panic!("{test}: no queue: {}", timeline_text(&figures.incident)));
    assert!(
        queued < Duration::from_secs(3),
        "{test}: the real wedge's capture waited {queued:?} in the queue:\n{}",
        timeline_text(&figures.incident)
    );
    let verdict = figures.incident["verdict"].as_str().unwrap_or_default();
    assert!(verdict.contains("FS_IOC_SETFLAGS"), "{test}: {verdict}");
    // The hostile captures were still being worked through (one at a time for their tenant).
    assert!(
        figures.hostile_complete < 10,
        "{test}: all ten hostile captures finished before the real one: no queue was tested"
    );
    assert!(
        figures.pings >= 5 && figures.ping_gap <= Duration::from_secs(10),
        "{test}: watchdog pings: {} with a longest gap of {:?}",
        figures.pings,
        figures.ping_gap
    );
}

/// The benchmark of BENCHMARKS.md ("Detection behind hostile wedges"): N = 0, 10, 50 in one run
/// (`WEDGE_BENCH_HOSTILE=0,10,50` to choose). Run with
/// `cargo test --test integration -- --ignored --nocapture bench_detection_behind_hostile_wedges`.
#[test]
#[ignore = "a benchmark: see BENCHMARKS.md"]
fn bench_detection_behind_hostile_wedges() {
    let counts: Vec<usize> = std::env::var("WEDGE_BENCH_HOSTILE")
        .unwrap_or_else(|_| "0,10,50".to_string())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    println!("| hostile wedges | judged after D | capture queued | complete after judged | hostile complete then | longest watchdog gap | agent peak RSS |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for n in counts {
        let Some(f) = detection_behind("bench hostile detection", n) else {
            return;
        };
        println!(
            "| {n} | {:.2} s | {} | {:.1} s | {}/{n} | {:.2} s | {:.1} MiB |",
            f.judged_after.as_secs_f64(),
            f.queued
                .map(|q| format!("{} ms", q.as_millis()))
                .unwrap_or_else(|| "(no queue)".into()),
            f.completed_after.as_secs_f64(),
            f.hostile_complete,
            f.ping_gap.as_secs_f64(),
            f.peak_rss_kib as f64 / 1024.0
        );
    }
}

/// Note the arrival time of every new WATCHDOG=1.
fn collect_pings(notify: &NotifySocket, seen: &mut Vec<String>, pings: &mut Vec<Instant>) {
    let before = seen.len();
    notify.drain(seen);
    for message in &seen[before..] {
        if message.lines().any(|l| l == "WATCHDOG=1") {
            pings.push(Instant::now());
        }
    }
}

/// An agent killed during a stage (the OOM killer, say) leaves the stage named beside the incident; the next
/// agent that adopts the episode records that stage as not captured and never runs it again, so the stage
/// cannot kill every restart in turn (issue 35, item 3).
#[test]
fn the_stage_an_agent_died_in_is_not_run_again_by_the_next() {
    let test = "agent died during a stage";
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        assert!(!in_ci(), "{test}: needs root with CI=true");
        eprintln!("skipping {test}: needs root");
        return;
    }
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("died-in-stage");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let stall = open_fifo(dir.path(), "stall.fifo");
    let out = dir.path().join("incidents");
    let comm = unique_comm("d");
    let fifo = open_fifo(dir.path(), "wedge.fifo");
    let wedge = VforkWedge::start(&python, &comm, &fifo);
    wait_in_d(wedge.pid(), Duration::from_secs(10));
    let args = |probe_timeout: &'static str| -> Vec<String> {
        [
            "--out",
            out.to_str().unwrap(),
            "--interval",
            "200ms",
            "--threshold",
            "1s",
            "--samples",
            "2",
            "--probe-timeout",
            probe_timeout,
            "--extra-probe",
            stall.to_str().unwrap(),
            "--match-comm",
            &format!("^{comm}$"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let first_args = args("60s");
    let first_refs: Vec<&str> = first_args.iter().map(String::as_str).collect();
    let first = Agent::start(dir.path(), &first_refs, &[]);
    // The first agent reaches the probes stage, which stalls for a minute: it dies there.
    let until = Instant::now() + Duration::from_secs(30);
    let incident_dir = loop {
        let marker = crate::util::incident_dirs(&out).into_iter().find(|d| {
            std::fs::read_to_string(d.join("capture-stage.json"))
                .is_ok_and(|m| m.contains("\"stage\":\"probes\""))
        });
        if let Some(dir) = marker {
            break dir;
        }
        assert!(
            Instant::now() < until,
            "{test}: the capture never reached the probes stage:\n{}",
            first.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    first.signal(libc::SIGKILL);
    drop(first);
    crate::util::release_fifo(&stall);

    // The next agent on the same store: the episode is adopted, the probes stage is not run again (were it
    // run, it would stall for a minute again), and the capture completes.
    let second_args = args("60s");
    let second_refs: Vec<&str> = second_args.iter().map(String::as_str).collect();
    let second = Agent::start(dir.path(), &second_refs, &[]);
    let until = Instant::now() + Duration::from_secs(40);
    let incident = loop {
        let text = std::fs::read_to_string(incident_dir.join("incident.json")).unwrap_or_default();
        if let Ok(incident) = serde_json::from_str::<serde_json::Value>(&text) {
            if incident["complete"] == true {
                break incident;
            }
        }
        assert!(
            Instant::now() < until,
            "{test}: the adopted incident never completed:\n{}",
            second.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let not_captured = incident["not_captured"].to_string();
    assert!(
        not_captured.contains("\"what\":\"probes\"")
            && not_captured.contains("the previous agent died during it"),
        "{test}: {not_captured}"
    );
    let timeline = timeline_text(&incident);
    assert!(
        timeline.contains("watcher restarted at"),
        "{test}: {timeline}"
    );
    let (code, _, log) = second.terminate();
    assert_eq!(code, Some(0), "{test}: {log}");
    crate::util::release_fifo(&stall);
    drop(wedge);
}

/// Probe children that stay stuck in D after SIGKILL are counted against their own target: four hostile
/// targets each leaving one cost another process's capture nothing (before issue 35, four stuck children
/// anywhere on the host skipped every later probe of every process). The stuck children are real: the hostile
/// targets look like CPython, and the "py-spy" the agent runs for them blocks in D on a frozen filesystem,
/// as a real py-spy blocks behind a wedged mmap-lock writer.
#[test]
fn stuck_probe_children_of_one_target_never_disable_anothers_probes() {
    let test = "stuck probes per target";
    let Some(mut fs) = frozen_fs_or_skip(test) else {
        return;
    };
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("stuck-probes");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let stuck_file = fs.create_file("stuck", b"x").unwrap();
    let victim_file = fs.create_file("victim", b"x").unwrap();
    fs.freeze().unwrap();
    // A "py-spy" that blocks a thread in D on the frozen filesystem: SIGKILL cannot end it.
    let fake_py_spy = dir.path().join("py-spy-stuck");
    std::fs::write(
        &fake_py_spy,
        format!(
            "#!/bin/sh\nexec {} internal wedge-helper --path {}\n",
            bin(),
            stuck_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake_py_spy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path().join("incidents");
    let prefix_full = unique_comm("s");
    let prefix = &prefix_full[..prefix_full.len().min(12)];
    let mut hostile = Vec::new();
    for n in 0..4 {
        let fifo = open_fifo(dir.path(), &format!("s{n}.fifo"));
        hostile.push(VforkWedge::start(&python, &format!("{prefix}{n}"), &fifo));
    }
    for wedge in &hostile {
        wait_in_d(wedge.pid(), Duration::from_secs(10));
    }
    let victim_comm = unique_comm("v");
    let agent = Agent::start(
        dir.path(),
        &[
            "--out",
            out.to_str().unwrap(),
            "--interval",
            "200ms",
            "--threshold",
            "1s",
            "--samples",
            "2",
            "--probe-timeout",
            "1s",
            "--py-spy",
            fake_py_spy.to_str().unwrap(),
            "--match-comm",
            &format!("^{prefix}"),
            "--match-comm",
            &format!("^{victim_comm}$"),
        ],
        &[],
    );
    // The four hostile captures finish, each leaving its "py-spy" stuck.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let done = hostile
            .iter()
            .filter(|w| {
                incidents_for(&out, w.pid())
                    .first()
                    .is_some_and(|i| i["complete"] == true)
            })
            .count();
        if done == hostile.len() {
            break;
        }
        assert!(
            Instant::now() < until,
            "{test}: {done} of the hostile captures finished:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stuck: usize = hostile
        .iter()
        .map(|w| {
            incidents_for(&out, w.pid())[0]["probes"]
                .as_array()
                .map(|probes| {
                    probes
                        .iter()
                        .filter(|p| {
                            p["name"].as_str().is_some_and(|n| n.starts_with("py-spy"))
                                && p["error"].as_str().is_some_and(|e| e.contains("SIGKILL"))
                        })
                        .count()
                })
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(
        stuck,
        4,
        "{test}: the hostile py-spy children did not all stay stuck: {}",
        incidents_for(&out, hostile[0].pid())[0]["probes"]
    );

    // Another process wedges: its probes run.
    let program = link_as(dir.path(), &victim_comm, Path::new(bin()));
    let mut victim = wedge_helper(&program, &victim_file, &[], "victim ioctl FS_IOC_SETFLAGS");
    wait_in_d(victim.pid(), Duration::from_secs(10));
    let until = Instant::now() + Duration::from_secs(60);
    let incident = loop {
        if let Some(incident) = incidents_for(&out, victim.pid()).pop() {
            if incident["complete"] == true {
                break incident;
            }
        }
        assert!(
            Instant::now() < until,
            "{test}: the victim's incident never completed:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let probes = incident["probes"].as_array().cloned().unwrap_or_default();
    let cmdline = probes
        .iter()
        .find(|p| p["name"].as_str().is_some_and(|n| n.starts_with("cmdline")))
        .unwrap_or_else(|| panic!("{test}: no cmdline probe: {probes:?}"));
    assert_eq!(cmdline["outcome"], "ok", "{test}: {cmdline}");
    assert!(
        !incident["not_captured"].to_string().contains("still stuck"),
        "{test}: {}",
        incident["not_captured"]
    );
    let (code, _, log) = agent.terminate();
    assert_eq!(code, Some(0), "{test}: {log}");
    drop(hostile);
    fs.thaw().unwrap();
    assert!(victim.wait_exit(Duration::from_secs(10)).is_some());
}
