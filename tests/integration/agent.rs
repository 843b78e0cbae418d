//! Integration tests: `wedge-capture agent`, the host daemon — target sources on real wedges (a thread
//! blocked on a frozen loop-mounted ext4), signals, sd_notify, resource bounds, and the systemd unit.
//!
//! Tests that need root, loop devices or a writable cgroup v2 skip with a message, except with CI=true,
//! where they must run and fail loudly when they cannot set up.

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use capture::frozen_fs::FrozenFs;
use capture::ProcRoot;

use crate::util::{bin, frozen_fs_or_skip, in_ci};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A fresh directory for one test, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "wedge-capture-agent-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A unique process name (≤ 15 bytes, the comm limit): programs run through a symlink of this name get it
/// as their comm, so each test matches only its own processes.
pub(crate) fn unique_comm(tag: &str) -> String {
    let name = format!(
        "wc{tag}{}x{}",
        std::process::id() % 100_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    assert!(name.len() <= 15, "{name}");
    name
}

/// `dir/name` → `target`.
pub(crate) fn link_as(dir: &Path, name: &str, target: &Path) -> PathBuf {
    let link = dir.join(name);
    std::os::unix::fs::symlink(target, &link).unwrap();
    link
}

/// A running agent; its stderr goes to a file (a pipe would outlive it in an unkillable helper).
pub(crate) struct Agent {
    pub(crate) child: Child,
    pub(crate) log: PathBuf,
}

impl Agent {
    pub(crate) fn start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Agent {
        let log = dir.join(format!(
            "agent-{}.log",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mut command = Command::new(bin());
        command
            .arg("agent")
            .args(["--log-format", "plain", "--no-nvidia-smi"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
        for (key, value) in env {
            command.env(key, value);
        }
        Agent {
            child: command.spawn().unwrap(),
            log,
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until the log holds `needle` (at least `count` times); panic with the log past `limit`.
    pub(crate) fn wait_log(&mut self, needle: &str, count: usize, limit: Duration) -> String {
        let limit = crate::util::scaled(limit);
        let until = Instant::now() + limit;
        loop {
            let log = self.log();
            if log.matches(needle).count() >= count {
                return log;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the agent exited ({status}) before logging {needle:?}:\n{log}");
            }
            if Instant::now() > until {
                panic!("the agent did not log {needle:?} within {limit:?}:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory involved.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    /// SIGTERM, then the exit status and how long the exit took.
    pub(crate) fn terminate(mut self) -> (Option<i32>, Duration, String) {
        let sent = Instant::now();
        self.signal(libc::SIGTERM);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let took = sent.elapsed();
                return (status.code(), took, self.log());
            }
            if sent.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the agent ignored SIGTERM for 10 s:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Incident directories under `out` whose incident.json is for `pid`.
pub(crate) fn incidents_for(out: &Path, pid: i32) -> Vec<serde_json::Value> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Ok(bytes) = std::fs::read(entry.path().join("incident.json")) else {
            continue;
        };
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            continue;
        };
        if value["process"]["pid"].as_i64() == Some(i64::from(pid)) {
            found.push(value);
        }
    }
    found
}

/// Wait for a complete incident for `pid` under `out`.
pub(crate) fn wait_incident(
    agent: &mut Agent,
    out: &Path,
    pid: i32,
    limit: Duration,
) -> serde_json::Value {
    let limit = crate::util::scaled(limit);
    let until = Instant::now() + limit;
    loop {
        if let Some(done) = incidents_for(out, pid)
            .into_iter()
            .find(|i| i["complete"] == true)
        {
            return done;
        }
        if let Some(status) = agent.child.try_wait().unwrap() {
            panic!("the agent exited ({status}):\n{}", agent.log());
        }
        if Instant::now() > until {
            panic!(
                "no complete incident for pid {pid} within {limit:?}:\n{}",
                agent.log()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A wedge helper (`internal wedge-helper`) whose thread blocks on `file`; killed and reaped on drop
/// once the filesystem is thawed by its owner.
pub(crate) struct Helper {
    pub(crate) child: Child,
}

impl Helper {
    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Wait (at most `limit`) for it to end after a thaw.
    pub(crate) fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        // Never block forever on an unkillable child: the fs owner thaws before this runs.
        self.wait_exit(Duration::from_secs(5));
    }
}

/// Start `program internal wedge-helper --path file` (program: the binary or a symlink to it).
pub(crate) fn wedge_helper(
    program: &Path,
    file: &Path,
    env: &[(&str, &Path)],
    label: &str,
) -> Helper {
    let mut command = Command::new(program);
    command
        .args(["internal", "wedge-helper", "--label", label, "--path"])
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    Helper {
        child: command.spawn().unwrap(),
    }
}

/// Wait until some thread of `pid` is in D.
pub(crate) fn wait_in_d(pid: i32, limit: Duration) {
    let root = ProcRoot::default();
    let until = Instant::now() + limit;
    while Instant::now() < until {
        let in_d = root.tasks(pid).unwrap_or_default().iter().any(|&tid| {
            root.read_task_stat(pid, tid)
                .is_ok_and(|stat| stat.state == 'D')
        });
        if in_d {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("helper {pid} never entered D");
}

pub(crate) const FAST: &[&str] = &["--interval", "100ms", "--threshold", "1s", "--samples", "3"];

/// The agent run on a real wedge: start it with `args`, check the helper's incident, SIGTERM it.
pub(crate) fn check_wedge_capture(
    test: &str,
    dir: &TempDir,
    fs: &mut FrozenFs,
    helper: &mut Helper,
    args: &[&str],
) -> serde_json::Value {
    let out = dir.path().join("incidents");
    let out_arg = out.to_str().unwrap().to_string();
    let mut all: Vec<&str> = vec!["--out", &out_arg];
    all.extend_from_slice(FAST);
    all.extend_from_slice(args);
    let mut agent = Agent::start(dir.path(), &all, &[]);
    let incident = wait_incident(&mut agent, &out, helper.pid(), Duration::from_secs(20));
    let verdict = incident["verdict"].as_str().unwrap_or_default().to_string();
    assert!(
        verdict.contains("FS_IOC_SETFLAGS"),
        "{test}: the verdict does not name the ioctl: {verdict}"
    );
    let log = agent.wait_log("complete", 1, Duration::from_secs(5));
    let path = incident["id"].as_str().unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("incident") && l.contains(path)),
        "{test}: no log line names the incident {path}:\n{log}"
    );
    let (code, took, log) = agent.terminate();
    assert_eq!(code, Some(0), "{test}: exit status after SIGTERM:\n{log}");
    assert!(
        took < Duration::from_secs(2),
        "{test}: SIGTERM took {took:?} (limit 2 s, as the README promises)"
    );
    fs.thaw().unwrap();
    assert!(
        helper.wait_exit(Duration::from_secs(10)).is_some(),
        "{test}: the helper did not finish after the thaw"
    );
    incident
}

#[test]
fn match_comm_captures_a_wedged_helper() {
    let Some(mut fs) = frozen_fs_or_skip("agent match_comm") else {
        return;
    };
    let dir = TempDir::new("comm");
    let file = fs.create_file("target", b"x").unwrap();
    fs.freeze().unwrap();
    let comm = unique_comm("c");
    let program = link_as(dir.path(), &comm, Path::new(bin()));
    let mut helper = wedge_helper(&program, &file, &[], "comm test ioctl FS_IOC_SETFLAGS");
    wait_in_d(helper.pid(), Duration::from_secs(5));
    let pattern = format!("^{comm}$");
    let incident = check_wedge_capture(
        "match_comm",
        &dir,
        &mut fs,
        &mut helper,
        &["--match-comm", &pattern],
    );
    assert_eq!(incident["process"]["comm"], comm.as_str());
}

/// The cgroup v2 hierarchy: its mount point (pure v2 at /sys/fs/cgroup, or hybrid at
/// /sys/fs/cgroup/unified), or a private mount of it made for the test.
pub(crate) fn cgroup2_root(scratch: &Path) -> Result<(PathBuf, bool), String> {
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("mountinfo: {e}"))?;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() == Some("cgroup2") {
            if let Some(point) = left.split_whitespace().nth(4) {
                return Ok((PathBuf::from(point), false));
            }
        }
    }
    // No v2 hierarchy mounted (a pure v1 host): mount one privately for the test.
    let point = scratch.join("cgroup2");
    std::fs::create_dir_all(&point).map_err(|e| e.to_string())?;
    let status = Command::new("mount")
        .args(["-t", "cgroup2", "none"])
        .arg(&point)
        .status()
        .map_err(|e| format!("mount: {e}"))?;
    if status.success() {
        Ok((point, true))
    } else {
        Err("no cgroup2 mount and `mount -t cgroup2` failed".into())
    }
}

/// A child cgroup made for one test; processes moved back to the parent and removed on drop.
struct TestCgroup {
    path: PathBuf,
    mount: Option<PathBuf>,
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let parent = self.path.parent().unwrap().join("cgroup.procs");
        if let Ok(procs) = std::fs::read_to_string(self.path.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write(&parent, pid);
            }
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(mount) = &self.mount {
            let _ = Command::new("umount").arg(mount).status();
        }
    }
}

fn test_cgroup(scratch: &Path, name: &str) -> Result<TestCgroup, String> {
    let (root, mounted) = cgroup2_root(scratch)?;
    let path = root.join(name);
    std::fs::create_dir(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
    let cgroup = TestCgroup {
        path,
        mount: mounted.then_some(root),
    };
    if !cgroup.path.join("cgroup.procs").exists() {
        return Err(format!("{} has no cgroup.procs", cgroup.path.display()));
    }
    Ok(cgroup)
}

#[test]
fn match_cgroup_captures_a_wedged_helper() {
    let Some(mut fs) = frozen_fs_or_skip("agent match_cgroup") else {
        return;
    };
    let dir = TempDir::new("cgroup");
    let name = format!(
        "wedge-capture-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let cgroup = match test_cgroup(dir.path(), &name) {
        Ok(cgroup) => cgroup,
        Err(err) if in_ci() => panic!("agent match_cgroup: CI=true but no cgroup v2: {err}"),
        Err(err) => {
            eprintln!("skipping agent match_cgroup: {err}");
            return;
        }
    };
    let file = fs.create_file("target", b"x").unwrap();
    fs.freeze().unwrap();
    // The helper moves itself into the cgroup between fork and exec (writing "0" to cgroup.procs moves
    // the writer), so it runs in the cgroup from its first instruction; a failed move fails the spawn.
    let procs = std::ffi::CString::new(
        cgroup
            .path
            .join("cgroup.procs")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    let mut command = Command::new(bin());
    command
        .args([
            "internal",
            "wedge-helper",
            "--label",
            "cgroup test",
            "--path",
        ])
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: only async-signal-safe calls (open, write, close) on memory prepared before the fork.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if written != 1 {
                return Err(err);
            }
            Ok(())
        });
    }
    let mut helper = Helper {
        child: command
            .spawn()
            .expect("moving the helper into the test cgroup"),
    };
    wait_in_d(helper.pid(), Duration::from_secs(5));
    let membership = ProcRoot::default().cgroup(helper.pid()).unwrap();
    assert!(
        membership.iter().any(|line| line.path.contains(&name)),
        "{membership:?}"
    );
    let incident = check_wedge_capture(
        "match_cgroup",
        &dir,
        &mut fs,
        &mut helper,
        &["--match-cgroup", &name],
    );
    assert!(
        incident["process"]["cgroup"]
            .as_str()
            .is_some_and(|c| c.contains(&name)),
        "{}",
        incident["process"]
    );
    drop(helper);
    drop(cgroup);
}

#[test]
fn ring_dir_makes_the_ring_writer_a_target() {
    let Some(mut fs) = frozen_fs_or_skip("agent ring_dir") else {
        return;
    };
    let dir = TempDir::new("ring");
    let rings = dir.path().join("rings");
    std::fs::create_dir_all(&rings).unwrap();
    let file = fs.create_file("target", b"x").unwrap();
    fs.freeze().unwrap();
    // The agent starts first: the ring appears later, through inotify.
    let out = dir.path().join("incidents");
    let mut args: Vec<&str> = vec!["--out", out.to_str().unwrap()];
    args.extend_from_slice(FAST);
    args.extend_from_slice(&["--ring-dir", rings.to_str().unwrap()]);
    let mut agent = Agent::start(dir.path(), &args, &[]);
    agent.wait_log("watching ring directory", 1, Duration::from_secs(5));
    let label = "ring test call: ioctl FS_IOC_SETFLAGS";
    let mut helper = wedge_helper(
        Path::new(bin()),
        &file,
        &[("WEDGE_CAPTURE_RING_DIR", &rings)],
        label,
    );
    agent.wait_log(
        &format!("watching pid {}", helper.pid()),
        1,
        Duration::from_secs(5),
    );
    let incident = wait_incident(&mut agent, &out, helper.pid(), Duration::from_secs(20));
    let in_flight = &incident["ring"]["in_flight"];
    assert!(
        in_flight
            .as_array()
            .is_some_and(|calls| calls.iter().any(|c| c["label"] == label)),
        "the in-flight breadcrumb is missing: {}",
        incident["ring"]
    );

    // A writer in its own pid and mount namespaces (a container) that sees the ring directory under
    // another path (a bind mount): its ring header names pid 1 of its namespace and its fd link a path
    // that means nothing on the host. The agent maps the header to the host pid (namespace inode, start
    // time, innermost NSpid) and the capture finds the ring in the ring directory.
    let ns_label = "namespaced ring call";
    let inner = dir.path().join("container-view");
    std::fs::create_dir_all(&inner).unwrap();
    let script = format!(
        "mount --bind '{}' '{}' && WEDGE_CAPTURE_RING_DIR='{}' exec '{}' internal wedge-helper --label '{ns_label}' --path '{}'",
        rings.display(),
        inner.display(),
        inner.display(),
        bin(),
        file.display()
    );
    let mut ns_helper = Helper {
        child: Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    };
    let log = agent.wait_log("writer is pid", 2, Duration::from_secs(10));
    let ns_pid: i32 = log
        .lines()
        .filter_map(|l| l.split("writer is pid ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .find(|&pid| pid != helper.pid())
        .unwrap_or_else(|| panic!("no second ring writer:\n{log}"));
    assert_ne!(
        ns_pid, 1,
        "the namespace pid was not mapped to the host pid:\n{log}"
    );
    let ns_incident = wait_incident(&mut agent, &out, ns_pid, Duration::from_secs(20));
    let nspid = ns_incident["process"]["nspid"].as_array().unwrap();
    assert_eq!(nspid.len(), 2, "{}", ns_incident["process"]);
    assert_eq!(nspid[1], 1, "{}", ns_incident["process"]);
    assert!(
        ns_incident["ring"]["in_flight"]
            .as_array()
            .is_some_and(|calls| calls.iter().any(|c| c["label"] == ns_label)),
        "the namespaced writer's in-flight breadcrumb is missing: {}",
        ns_incident["ring"]
    );

    let (code, took, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(took < Duration::from_secs(2), "SIGTERM took {took:?}");
    fs.thaw().unwrap();
    assert!(helper.wait_exit(Duration::from_secs(10)).is_some());
    assert!(ns_helper.wait_exit(Duration::from_secs(10)).is_some());
}

/// Receives sd_notify datagrams.
pub(crate) struct NotifySocket {
    socket: UnixDatagram,
    pub(crate) path: PathBuf,
}

impl NotifySocket {
    pub(crate) fn new(dir: &Path) -> NotifySocket {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_nonblocking(true).unwrap();
        NotifySocket { socket, path }
    }

    /// Every message received so far.
    pub(crate) fn drain(&self, into: &mut Vec<String>) {
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.socket.recv(&mut buf) {
            into.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }

    fn wait_for(
        &self,
        seen: &mut Vec<String>,
        prefix: &str,
        after: usize,
        limit: Duration,
    ) -> usize {
        let until = Instant::now() + limit;
        loop {
            self.drain(seen);
            if let Some(i) = seen.iter().skip(after).position(|m| m.starts_with(prefix)) {
                return after + i;
            }
            if Instant::now() > until {
                panic!("no {prefix:?} notification within {limit:?}; got {seen:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Not root-only: the agent watches plain sleeping processes.
#[test]
fn reload_capture_now_notify_and_stop() {
    let dir = TempDir::new("signals");
    let first = unique_comm("a");
    let second = unique_comm("b");
    let sleep = Path::new("/bin/sleep");
    let mut a = Command::new(link_as(dir.path(), &first, sleep))
        .arg("30")
        .spawn()
        .unwrap();
    let mut b = Command::new(link_as(dir.path(), &second, sleep))
        .arg("30")
        .spawn()
        .unwrap();
    let (a_pid, b_pid) = (a.id() as i32, b.id() as i32);
    let config = dir.path().join("agent.json");
    let out = dir.path().join("incidents");
    let write_config = |pattern: &str| {
        let text = format!(
            r#"{{"out": "{}", "match_comm": ["{pattern}"], "interval": "100ms", "nvidia_smi": false}}"#,
            out.display()
        );
        let mut file = std::fs::File::create(dir.path().join("agent.json.tmp")).unwrap();
        file.write_all(text.as_bytes()).unwrap();
        std::fs::rename(dir.path().join("agent.json.tmp"), &config).unwrap();
    };
    write_config(&format!("^{first}$"));
    let notify = NotifySocket::new(dir.path());
    let mut agent = Agent::start(
        dir.path(),
        &["--config", config.to_str().unwrap()],
        &[
            ("NOTIFY_SOCKET", notify.path.to_str().unwrap()),
            ("WATCHDOG_USEC", "400000"),
        ],
    );
    let mut seen = Vec::new();
    let ready = notify.wait_for(&mut seen, "READY=1", 0, Duration::from_secs(5));
    // READY means watching: the first scan is done.
    assert!(
        agent.log().contains(&format!("watching pid {a_pid}")),
        "{}",
        agent.log()
    );
    notify.wait_for(&mut seen, "WATCHDOG=1", ready, Duration::from_secs(2));

    // SIGHUP with a new match: applied at once.
    write_config(&format!("^{second}$"));
    agent.signal(libc::SIGHUP);
    let reloading = notify.wait_for(&mut seen, "RELOADING=1", ready, Duration::from_secs(5));
    notify.wait_for(&mut seen, "READY=1", reloading, Duration::from_secs(5));
    agent.wait_log("configuration reloaded", 1, Duration::from_secs(5));
    agent.wait_log(&format!("watching pid {b_pid}"), 1, Duration::from_secs(5));
    agent.wait_log(
        &format!("pid {a_pid} no longer watched"),
        1,
        Duration::from_secs(5),
    );

    // A bad config is refused and the running one kept.
    std::fs::write(&config, r#"{"match_comm": ["("]}"#).unwrap();
    agent.signal(libc::SIGHUP);
    let log = agent.wait_log(
        "reload failed, keeping the previous configuration",
        1,
        Duration::from_secs(5),
    );
    assert!(log.contains("match_comm"), "{log}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !agent
            .log()
            .contains(&format!("pid {b_pid} no longer watched")),
        "{}",
        agent.log()
    );

    // SIGUSR1: an on-demand incident for the (sleeping, not wedged) target.
    agent.signal(libc::SIGUSR1);
    let incident = wait_incident(&mut agent, &out, b_pid, Duration::from_secs(10));
    let verdict = incident["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("on-demand capture (SIGUSR1)"),
        "{verdict}"
    );
    assert_eq!(incident["trigger"], "on_demand", "{incident}");
    assert!(
        incident["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"]
                .as_str()
                .unwrap()
                .contains("not a detected wedge")),
        "{}",
        incident["timeline"]
    );
    assert!(
        incidents_for(&out, a_pid).is_empty(),
        "a is not a target any more"
    );
    agent.wait_log("on-demand incident", 1, Duration::from_secs(5));

    // SIGTERM: STOPPING=1, exit 0 within 1 s.
    let (code, took, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(took < Duration::from_secs(2), "SIGTERM took {took:?}");
    let mut after = Vec::new();
    notify.drain(&mut after);
    assert!(after.iter().any(|m| m == "STOPPING=1"), "{after:?}");
    for child in [&mut a, &mut b] {
        let _ = child.kill();
        let _ = child.wait();
    }
}
