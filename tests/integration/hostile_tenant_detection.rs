//! Integration tests: one tenant's wedges cannot delay another tenant's detection nor starve its capture
//! (issue 35, item 1). A hostile tenant (uid 65534, no privilege) puts ten processes in D on demand
//! (vfork + a FIFO nobody writes: the caller sleeps in `kernel_clone`), and every capture of them is slow
//! (a probe that stalls to its deadline); then a real wedge of another tenant (root: a thread blocked on a
//! frozen loop-mounted ext4) must be judged within threshold + 2 intervals of entering D, its capture must
//! not wait behind the hostile ones, and the agent must keep pinging the systemd watchdog.
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
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ])
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
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    path
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

#[test]
fn ten_hostile_wedges_delay_neither_another_tenants_detection_nor_its_capture() {
    let test = "hostile tenant detection";
    let Some(mut target) = frozen_fs_or_skip(test) else {
        return;
    };
    let Some(python) = unprivileged_python() else {
        assert!(!in_ci(), "{test}: setpriv/python3 for uid 65534 missing with CI=true");
        eprintln!("skipping {test}: setpriv or a python3 uid 65534 may run is missing");
        return;
    };
    let dir = TempDir::new("hostile-detect");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // Every capture stalls on a probe to its deadline (a stand-in for the tenant's slow files).
    let stall = open_fifo(dir.path(), "stall.fifo");
    let out = dir.path().join("incidents");
    let (interval, threshold) = (Duration::from_millis(500), Duration::from_secs(2));

    let hostile_prefix = unique_comm("h");
    let mut hostile = Vec::new();
    for n in 0..10 {
        let fifo = open_fifo(dir.path(), &format!("h{n}.fifo"));
        let comm = format!("{}{n}", &hostile_prefix[..hostile_prefix.len().min(13)]);
        hostile.push(VforkWedge::start(&python, &comm, &fifo));
    }
    for wedge in &hostile {
        wait_in_d(wedge.pid(), Duration::from_secs(10));
    }

    let notify = NotifySocket::new(dir.path());
    let real_comm = unique_comm("r");
    let mut agent = Agent::start(
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
            &format!("^{}", &hostile_prefix[..hostile_prefix.len().min(13)]),
            "--match-comm",
            &format!("^{real_comm}$"),
        ],
        &[
            ("NOTIFY_SOCKET", notify.path.to_str().unwrap()),
            ("WATCHDOG_USEC", "30000000"),
        ],
    );
    // The hostile wedges are judged and their (slow) captures queued.
    let mut seen = Vec::new();
    let mut pings = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    while hostile
        .iter()
        .any(|w| incidents_for(&out, w.pid()).is_empty())
    {
        assert!(Instant::now() < until, "{test}: hostile wedges not judged:\n{}", agent.log());
        collect_pings(&notify, &mut seen, &mut pings);
        std::thread::sleep(Duration::from_millis(50));
    }

    // Now the real wedge of another tenant, while ten slow captures wait.
    let file = target.create_file("target", b"x").unwrap();
    target.freeze().unwrap();
    let program = link_as(dir.path(), &real_comm, Path::new(bin()));
    let mut helper = wedge_helper(&program, &file, &[], "real ioctl FS_IOC_SETFLAGS");
    wait_in_d(helper.pid(), Duration::from_secs(10));
    let in_d_seen_ns = monotonic_ns();

    let until = Instant::now() + Duration::from_secs(60);
    let real = loop {
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
    let detected_ns = real["wedged_threads"][0]["detected_at"]["monotonic_ns"]
        .as_u64()
        .unwrap_or_else(|| panic!("{test}: no detection time: {real}"));
    // It entered D before `in_d_seen_ns`: judged within threshold + 2 intervals of entering D.
    let bound = threshold + 2 * interval;
    let judged_after = Duration::from_nanos(detected_ns.saturating_sub(in_d_seen_ns));
    assert!(
        judged_after <= bound,
        "{test}: the real wedge was judged {judged_after:?} after it entered D (bound {bound:?}) behind \
         ten hostile captures:\n{}",
        agent.log()
    );
    // Its capture did not queue behind the hostile tenant's ten (each takes >= 3 s: one per worker).
    let waited = queued_ms(&real).unwrap_or_else(|| panic!("{test}: {}", timeline_text(&real)));
    assert!(
        waited < 3_000,
        "{test}: the real wedge's capture waited {waited} ms in the queue:\n{}",
        timeline_text(&real)
    );
    let verdict = real["verdict"].as_str().unwrap_or_default();
    assert!(verdict.contains("FS_IOC_SETFLAGS"), "{test}: {verdict}");

    // The hostile captures are still being worked through (one at a time for their tenant).
    let hostile_complete = hostile
        .iter()
        .filter(|w| {
            incidents_for(&out, w.pid())
                .first()
                .is_some_and(|i| i["complete"] == true)
        })
        .count();
    assert!(
        hostile_complete < 10,
        "{test}: all ten hostile captures finished before the real one: no queue was tested"
    );
    collect_pings(&notify, &mut seen, &mut pings);
    let gap = longest_gap(&pings);
    assert!(
        pings.len() >= 5 && gap <= Duration::from_secs(10),
        "{test}: watchdog pings: {} with a longest gap of {gap:?}",
        pings.len()
    );

    let (code, _, log) = agent.terminate();
    assert_eq!(code, Some(0), "{test}: exit status after SIGTERM:\n{log}");
    target.thaw().unwrap();
    assert!(helper.wait_exit(Duration::from_secs(10)).is_some());
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
