//! Integration tests: a ring directory written by someone hostile (issue 13, defects 1–4). A FIFO, forged
//! headers, thousands of foreign-namespace rings and a symlink to a secret are put in the agent's (and
//! `run`'s) ring directory; the agent must still send READY=1, detect a real frozen-fs wedge within
//! threshold + 2 intervals, stop on SIGTERM within 2 s, make no forged claim a target, and leak nothing.
//!
//! Tests that need root and loop devices skip with a message, except with CI=true, where they must run.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use breadcrumb::identity::ProcessIdentity;
use breadcrumb::{Args, Call, Writer, WriterOptions};
use capture::frozen_fs::FrozenFs;
use capture::ProcRoot;

use crate::agent::{
    incidents_for, link_as, unique_comm, wait_in_d, wait_incident, wedge_helper, Agent, Helper,
    TempDir, FAST,
};
use crate::util::{bin, frozen_fs_or_skip};

/// `FAST`'s threshold and interval: the acceptance bound is threshold + 2 intervals.
pub(crate) const DETECT_BOUND: Duration = Duration::from_millis(1000 + 2 * 100);
const STOP_BOUND: Duration = Duration::from_secs(2);

/// A frozen fs with a target file, a test directory, its ring directory and incidents directory.
pub(crate) struct Setup {
    pub(crate) fs: FrozenFs,
    pub(crate) file: PathBuf,
    pub(crate) dir: TempDir,
    pub(crate) rings: PathBuf,
    pub(crate) out: PathBuf,
}

pub(crate) fn setup(test: &str) -> Option<Setup> {
    let mut fs = frozen_fs_or_skip(test)?;
    let file = fs.create_file("target", b"x").unwrap();
    fs.freeze().unwrap();
    let dir = TempDir::new(test);
    let rings = dir.path().join("rings");
    std::fs::create_dir_all(&rings).unwrap();
    let out = dir.path().join("incidents");
    Some(Setup {
        fs,
        file,
        dir,
        rings,
        out,
    })
}

/// sd_notify datagrams the agent sends.
pub(crate) struct Notify {
    socket: UnixDatagram,
    pub(crate) path: PathBuf,
}

impl Notify {
    pub(crate) fn new(dir: &Path) -> Notify {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_nonblocking(true).unwrap();
        Notify { socket, path }
    }

    /// Waits for a datagram starting with `prefix`; when it was seen.
    pub(crate) fn wait_for(
        &self,
        prefix: &str,
        agent: &mut Agent,
        limit: Duration,
    ) -> chrono::DateTime<chrono::Utc> {
        let until = Instant::now() + limit;
        let mut buf = [0u8; 4096];
        loop {
            while let Ok(n) = self.socket.recv(&mut buf) {
                if buf[..n].starts_with(prefix.as_bytes()) {
                    return chrono::Utc::now();
                }
            }
            if let Some(status) = agent.child.try_wait().unwrap() {
                panic!(
                    "the agent exited ({status}) before {prefix}:\n{}",
                    agent.log()
                );
            }
            assert!(
                Instant::now() < until,
                "no {prefix} within {limit:?}:\n{}",
                agent.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A helper wedged on the frozen fs, named `comm` (a target by --match-comm), writing its ring into
/// `rings`; returned once it is in D.
fn wedged_ring_writer(s: &Setup, label: &str) -> (Helper, String) {
    let comm = unique_comm("h");
    let program = link_as(s.dir.path(), &comm, Path::new(bin()));
    let helper = wedge_helper(
        &program,
        &s.file,
        &[("WEDGE_CAPTURE_RING_DIR", &s.rings)],
        label,
    );
    wait_in_d(helper.pid(), Duration::from_secs(5));
    (helper, format!("^{comm}$"))
}

fn agent_args<'a>(s: &'a Setup, pattern: &'a str) -> Vec<&'a str> {
    let mut args = vec!["--out", s.out.to_str().unwrap()];
    args.extend_from_slice(FAST);
    args.extend_from_slice(&[
        "--ring-dir",
        s.rings.to_str().unwrap(),
        "--match-comm",
        pattern,
    ]);
    args
}

/// The incident's detection time, in seconds after `since`.
pub(crate) fn detected_after(
    incident: &serde_json::Value,
    since: chrono::DateTime<chrono::Utc>,
) -> f64 {
    let at: chrono::DateTime<chrono::Utc> = incident["detected_at"]["wall"]
        .as_str()
        .unwrap_or_else(|| panic!("no detected_at: {incident}"))
        .parse()
        .unwrap();
    (at - since).num_milliseconds() as f64 / 1000.0
}

/// The helper's wedge incident (not an on-demand one), once complete.
pub(crate) fn wait_wedge_incident(agent: &mut Agent, out: &Path, pid: i32) -> serde_json::Value {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(found) = incidents_for(out, pid)
            .into_iter()
            .find(|i| i["complete"] == true && i["trigger"] != "on_demand")
        {
            return found;
        }
        if let Some(status) = agent.child.try_wait().unwrap() {
            panic!("the agent exited ({status}):\n{}", agent.log());
        }
        assert!(
            Instant::now() < until,
            "no wedge incident for pid {pid}:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The helper's wedge: detected within the bound after READY (the first scan saw it in D), with its
/// own ring as the incident's ring.
fn check_detected(
    test: &str,
    agent: &mut Agent,
    out: &Path,
    pid: i32,
    ready_at: chrono::DateTime<chrono::Utc>,
    label: &str,
) -> serde_json::Value {
    let incident = wait_wedge_incident(agent, out, pid);
    let after = detected_after(&incident, ready_at);
    assert!(
        after <= DETECT_BOUND.as_secs_f64(),
        "{test}: detected {after:.2} s after READY (bound {DETECT_BOUND:?}):\n{}",
        agent.log()
    );
    assert!(
        incident["ring"]["in_flight"]
            .as_array()
            .is_some_and(|calls| calls.iter().any(|c| c["label"] == label)),
        "{test}: the helper's own ring is not the incident's ring: {}",
        incident["ring"]
    );
    incident
}

/// SIGTERM within 2 s; then the fs thawed and the helper done.
pub(crate) fn check_stop(test: &str, s: &mut Setup, agent: Agent, mut helper: Helper) {
    let (code, took, log) = agent.terminate();
    assert_eq!(code, Some(0), "{test}: {log}");
    assert!(took < STOP_BOUND, "{test}: SIGTERM took {took:?}");
    s.fs.thaw().unwrap();
    assert!(helper.wait_exit(Duration::from_secs(10)).is_some());
}

#[test]
fn a_fifo_ring_does_not_blind_the_agent() {
    let Some(mut s) = setup("hostile fifo agent") else {
        return;
    };
    crate::util::mkfifo(&s.rings.join("x.ring"), 0o666);
    let label = "fifo test ioctl FS_IOC_SETFLAGS";
    let (helper, pattern) = wedged_ring_writer(&s, label);
    let notify = Notify::new(s.dir.path());
    let args = agent_args(&s, &pattern);
    let mut agent = Agent::start(
        s.dir.path(),
        &args,
        &[("NOTIFY_SOCKET", notify.path.to_str().unwrap())],
    );
    let ready_at = notify.wait_for("READY=1", &mut agent, Duration::from_secs(5));
    let log = agent.wait_log("x.ring ignored", 1, Duration::from_secs(5));
    assert!(log.contains("x.ring ignored: is a FIFO"), "{log}");
    check_detected("fifo", &mut agent, &s.out, helper.pid(), ready_at, label);
    check_stop("fifo", &mut s, agent, helper);
}

#[test]
fn a_fifo_ring_does_not_hang_run() {
    let Some(mut s) = setup("hostile fifo run") else {
        return;
    };
    crate::util::mkfifo(&s.rings.join("x.ring"), 0o666);
    let stderr = s.dir.path().join("run.stderr");
    let started_wall = chrono::Utc::now();
    let started = Instant::now();
    let mut child = Command::new(bin())
        .args([
            "run",
            "--threshold",
            "1",
            "--interval",
            "0.1",
            "--exit-after",
            "1",
        ])
        .args(["--no-nvidia-smi", "--out", s.out.to_str().unwrap()])
        .args(["--ring-dir", s.rings.to_str().unwrap(), "--"])
        .args([
            bin(),
            "internal",
            "wedge-helper",
            "--label",
            "run fifo ioctl FS_IOC_SETFLAGS",
        ])
        .arg("--path")
        .arg(&s.file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&stderr).unwrap()))
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            s.fs.thaw().unwrap();
            panic!(
                "run hung with a FIFO in its ring dir: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert_eq!(status.code(), Some(3), "{err}");
    let incident = std::fs::read_dir(&s.out)
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("incident.json")).ok())
        .map(|b| serde_json::from_slice::<serde_json::Value>(&b).unwrap())
        .next()
        .unwrap_or_else(|| panic!("no incident: {err}"));
    // From the start of run (the helper starts with it): threshold + 2 intervals + 1 s to start.
    let after = detected_after(&incident, started_wall);
    assert!(
        after <= DETECT_BOUND.as_secs_f64() + 1.0,
        "detected {after:.2} s after start"
    );
    assert!(
        incident["ring"]["in_flight"]
            .to_string()
            .contains("run fifo ioctl FS_IOC_SETFLAGS"),
        "{}",
        incident["ring"]
    );
    s.fs.thaw().unwrap();
}

/// A ring whose header claims `identity`, with one call in flight labelled `label`.
fn forged_ring(path: &Path, identity: ProcessIdentity, label: &str) -> Writer {
    let writer = Writer::create_with(
        path,
        &WriterOptions {
            slot_count: 16,
            ..WriterOptions::default()
        },
        &identity,
    )
    .unwrap();
    writer.enter(Call::CuMemcpyHtoD_v2, &Args::default(), label);
    writer
}

#[test]
fn forged_headers_make_no_target() {
    let Some(mut s) = setup("hostile forged") else {
        return;
    };
    let root = ProcRoot::default();
    let me = ProcessIdentity::current();
    let start_of = |pid: i32| root.read_stat(pid).unwrap().starttime;
    let mut bystander = Command::new("sleep").arg("30").spawn().unwrap();
    let bystander_pid = bystander.id() as i32;
    let forged_label = "FORGED call that never was";
    // The forged header, pid 1 with its real start time, a real process that does not hold the
    // file, and this test process (the agent's parent) which does hold its file open.
    drop(forged_ring(
        &s.rings.join("forged.ring"),
        ProcessIdentity {
            pid: 1,
            start_time_ticks: 0,
            pidns_inode: 0,
            ..me
        },
        forged_label,
    ));
    drop(forged_ring(
        &s.rings.join("init.ring"),
        ProcessIdentity {
            pid: 1,
            start_time_ticks: start_of(1),
            ..me
        },
        forged_label,
    ));
    drop(forged_ring(
        &s.rings.join("bystander.ring"),
        ProcessIdentity {
            pid: bystander_pid as u32,
            start_time_ticks: start_of(bystander_pid),
            ..me
        },
        forged_label,
    ));
    let _held_by_parent = forged_ring(&s.rings.join("parent.ring"), me, forged_label);
    // kthreadd (pid 2 of the host's namespace) with its real start time.
    let kthreadd = root.read_stat(2).is_ok_and(|stat| stat.comm == "kthreadd");
    if kthreadd {
        drop(forged_ring(
            &s.rings.join("kthreadd.ring"),
            ProcessIdentity {
                pid: 2,
                start_time_ticks: start_of(2).max(1),
                ..me
            },
            forged_label,
        ));
    }

    let args = {
        let mut args = vec!["--out", s.out.to_str().unwrap()];
        args.extend_from_slice(FAST);
        args.extend_from_slice(&["--ring-dir", s.rings.to_str().unwrap()]);
        args
    };
    let mut agent = Agent::start(s.dir.path(), &args, &[]);
    agent.wait_log("parent.ring ignored", 1, Duration::from_secs(5));
    // The real wedged ring writer, and a forged ring naming it (its real start time) that it does not
    // hold, with a call "in flight" since before the wedge.
    let label = "real ring call: ioctl FS_IOC_SETFLAGS";
    let mut helper = wedge_helper(
        Path::new(bin()),
        &s.file,
        &[("WEDGE_CAPTURE_RING_DIR", &s.rings)],
        label,
    );
    let helper_pid = helper.pid();
    let deadline = Instant::now() + Duration::from_secs(5);
    while root.read_stat(helper_pid).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(forged_ring(
        &s.rings.join("a-steals-the-wedge.ring"),
        ProcessIdentity {
            pid: helper_pid as u32,
            start_time_ticks: start_of(helper_pid),
            ..me
        },
        forged_label,
    ));
    agent.wait_log(
        &format!("watching pid {helper_pid}:"),
        1,
        Duration::from_secs(5),
    );
    let incident = wait_incident(&mut agent, &s.out, helper_pid, Duration::from_secs(20));
    assert!(
        incident["ring"]["in_flight"]
            .as_array()
            .is_some_and(|calls| calls.iter().any(|c| c["label"] == label)),
        "the wedged writer's own ring is not primary: {}",
        incident["ring"]
    );
    let text = incident.to_string();
    assert!(
        !text.contains(forged_label),
        "a forged ring reached the incident: {text}"
    );
    assert!(!incident["verdict"].to_string().contains("FORGED"));

    // SIGUSR1: on-demand incidents for the targets only.
    agent.signal(libc::SIGUSR1);
    let until = Instant::now() + Duration::from_secs(10);
    while !incidents_for(&s.out, helper_pid)
        .iter()
        .any(|i| i["trigger"] == "on_demand" && i["complete"] == true)
    {
        assert!(
            Instant::now() < until,
            "no on-demand incident:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for pid in [1, 2, bystander_pid, std::process::id() as i32] {
        assert!(
            incidents_for(&s.out, pid).is_empty(),
            "an incident for pid {pid}"
        );
    }
    let log = agent.log();
    for pid in [1, 2, bystander_pid, std::process::id() as i32] {
        assert!(
            !log.contains(&format!("watching pid {pid}:")),
            "pid {pid} watched:\n{log}"
        );
    }
    for (name, why) in [
        ("forged.ring", "no writer start time"),
        ("init.ring", "pid 1"),
        ("bystander.ring", "does not hold this file open"),
        ("parent.ring", "ancestor of this agent"),
        (
            if kthreadd {
                "kthreadd.ring"
            } else {
                "parent.ring"
            },
            if kthreadd {
                "kernel thread"
            } else {
                "ancestor"
            },
        ),
        ("a-steals-the-wedge.ring", "does not hold this file open"),
    ] {
        assert!(
            log.lines().any(|l| l.contains(name) && l.contains(why)),
            "{name}: {why}:\n{log}"
        );
    }
    let (code, took, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(took < STOP_BOUND, "SIGTERM took {took:?}");
    s.fs.thaw().unwrap();
    assert!(helper.wait_exit(Duration::from_secs(10)).is_some());
    let _ = bystander.kill();
    let _ = bystander.wait();
}

#[test]
fn thousands_of_foreign_namespace_rings_cost_a_bounded_scan() {
    let Some(mut s) = setup("hostile foreign") else {
        return;
    };
    // A host of about 1,000 processes, one of them in its own pid namespace (a container).
    let crowd = Crowd::spawn(700);
    let container_ns = crowd.container_ns();
    // 3,000 rings claiming pids in pid namespaces nobody is in or pids the container does not have,
    // and 500 junk files, all there before the start.
    let template = s.dir.path().join("template.ring");
    drop(forged_ring(
        &template,
        ProcessIdentity::current(),
        "foreign",
    ));
    let mut bytes = std::fs::read(&template).unwrap();
    let pidns = breadcrumb::format::header::PIDNS_INODE;
    let writer_pid = breadcrumb::format::header::WRITER_PID;
    let write_all = move |rings: &Path, round: u64| {
        for n in 0..3000u64 {
            let (ns, pid) = if n % 2 == 0 {
                (0xf000_0000 + n + (round << 16), n as u32 + 2)
            } else {
                (container_ns, (n + round) as u32 + 2)
            };
            bytes[pidns..pidns + 8].copy_from_slice(&ns.to_le_bytes());
            bytes[writer_pid..writer_pid + 4].copy_from_slice(&pid.to_le_bytes());
            std::fs::write(rings.join(format!("foreign-{n}.ring")), &bytes).unwrap();
        }
        for n in 0..500 {
            std::fs::write(
                rings.join(format!("junk-{n}.ring")),
                format!("junk {round}"),
            )
            .unwrap();
        }
    };
    let mut write_all = write_all;
    write_all(&s.rings, 0);
    let label = "foreign test ioctl FS_IOC_SETFLAGS";
    let (helper, pattern) = wedged_ring_writer(&s, label);
    let notify = Notify::new(s.dir.path());
    let args = agent_args(&s, &pattern);
    let started = Instant::now();
    let mut agent = Agent::start(
        s.dir.path(),
        &args,
        &[("NOTIFY_SOCKET", notify.path.to_str().unwrap())],
    );
    let ready_at = notify.wait_for("READY=1", &mut agent, Duration::from_secs(5));
    let to_ready = started.elapsed();
    // From now on every file is rewritten again and again (each version a new claim to examine).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rewriter = {
        let stop = stop.clone();
        let rings = s.rings.clone();
        std::thread::spawn(move || {
            let mut round = 1;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && round < 200 {
                write_all(&rings, round);
                round += 1;
            }
            round - 1
        })
    };
    // The helper's own ring is resolved even behind 3,500 hostile files (the budget spreads them).
    agent.wait_log(
        &format!("writer is pid {}", helper.pid()),
        1,
        Duration::from_secs(5),
    );
    // SIGUSR1 still answers at once.
    let signalled = Instant::now();
    agent.signal(libc::SIGUSR1);
    agent.wait_log("SIGUSR1", 1, Duration::from_secs(5));
    let sigusr1_answer = signalled.elapsed();
    let out = s.out.clone();
    let helper_pid = helper.pid();
    let incident = check_detected("foreign", &mut agent, &out, helper_pid, ready_at, label);
    let log = agent.log();
    check_stop("foreign", &mut s, agent, helper);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rewrites = rewriter.join().unwrap();
    let about_rings = log
        .lines()
        .filter(|l| l.contains("/foreign-") || l.contains("/junk-"))
        .count();
    assert!(
        about_rings <= 10,
        "{about_rings} log lines about the rings:\n{log}"
    );
    assert!(
        sigusr1_answer < Duration::from_secs(2),
        "SIGUSR1 answered after {sigusr1_answer:?}"
    );
    eprintln!(
        "3,500 hostile rings, {} processes, each file rewritten {rewrites} times: READY after \
         {to_ready:?}, SIGUSR1 logged after {sigusr1_answer:?}, {about_rings} log lines about them, \
         detection {:.2} s after READY",
        ProcRoot::default().pids().map_or(0, |p| p.len()),
        detected_after(&incident, ready_at)
    );
    assert!(!incidents_for(&out, helper_pid).is_empty());
    drop(crowd);
}

/// Processes that make the host look busy (`sleep`), one of them in its own pid namespace; killed on
/// drop.
struct Crowd {
    children: Vec<std::process::Child>,
    container: std::process::Child,
}

impl Crowd {
    fn spawn(count: usize) -> Crowd {
        let children = (0..count)
            .map(|_| {
                Command::new("sleep")
                    .arg("60")
                    .stdin(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let container = Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "sleep", "60"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Crowd {
            children,
            container,
        }
    }

    /// The pid namespace of the container's process (once `unshare` made it).
    fn container_ns(&self) -> u64 {
        let own = std::fs::read_link("/proc/self/ns/pid").unwrap();
        let link = format!("/proc/{}/ns/pid_for_children", self.container.id());
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(target) = std::fs::read_link(&link) {
                if target != own {
                    let text = target.to_string_lossy().into_owned();
                    return text
                        .trim_start_matches("pid:[")
                        .trim_end_matches(']')
                        .parse()
                        .unwrap();
                }
            }
            assert!(Instant::now() < until, "unshare made no pid namespace");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        for child in self
            .children
            .iter_mut()
            .chain(std::iter::once(&mut self.container))
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn a_symlinked_secret_appears_nowhere() {
    let Some(mut s) = setup("hostile symlink") else {
        return;
    };
    let secret_text = format!(
        "root:*:19000:0:99999:7:::SECRET-{}-hunter2",
        std::process::id()
    );
    let secrets = s.dir.path().join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    let shadow = secrets.join("shadow");
    let magic = secrets.join("magic");
    for (path, text) in [
        (&shadow, secret_text.clone()),
        (&magic, format!("WEDGERNG{secret_text}")),
    ] {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
    }
    std::os::unix::fs::symlink(&shadow, s.rings.join("s.ring")).unwrap();
    std::os::unix::fs::symlink(&magic, s.rings.join("t.ring")).unwrap();
    let label = "symlink test ioctl FS_IOC_SETFLAGS";
    let (helper, pattern) = wedged_ring_writer(&s, label);
    let notify = Notify::new(s.dir.path());
    let args = agent_args(&s, &pattern);
    let mut agent = Agent::start(
        s.dir.path(),
        &args,
        &[("NOTIFY_SOCKET", notify.path.to_str().unwrap())],
    );
    let ready_at = notify.wait_for("READY=1", &mut agent, Duration::from_secs(5));
    let log = agent.wait_log("t.ring ignored", 1, Duration::from_secs(5));
    assert!(log.contains("s.ring ignored: is a symbolic link"), "{log}");
    agent.signal(libc::SIGUSR1);
    let out = s.out.clone();
    let log_path = agent.log.clone();
    let rings = s.rings.clone();
    let helper_pid = helper.pid();
    check_detected("symlink", &mut agent, &out, helper_pid, ready_at, label);
    let until = Instant::now() + Duration::from_secs(10);
    while !incidents_for(&out, helper_pid)
        .iter()
        .any(|i| i["trigger"] == "on_demand" && i["complete"] == true)
    {
        assert!(
            Instant::now() < until,
            "no on-demand incident:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    check_stop("symlink", &mut s, agent, helper);

    let needles = ["SECRET-", "hunter2", "root:*"];
    let leaks = |what: &str, text: &[u8]| {
        let text = String::from_utf8_lossy(text);
        for needle in needles {
            assert!(!text.contains(needle), "{what} holds {needle:?}:\n{text}");
        }
    };
    leaks("the agent log", &std::fs::read(&log_path).unwrap());
    let mut files = vec![out.clone()];
    let mut seen = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(
                std::fs::read_dir(&path)
                    .unwrap()
                    .flatten()
                    .map(|e| e.path()),
            );
        } else {
            seen += 1;
            leaks(&path.display().to_string(), &std::fs::read(&path).unwrap());
        }
    }
    assert!(seen >= 2, "no incident files to check");
    for name in ["s.ring", "t.ring"] {
        for extra in [&[][..], &["--format", "json"][..], &["--strict"][..]] {
            let dump = Command::new(bin())
                .args(["ring", "dump"])
                .arg(rings.join(name))
                .args(extra)
                .output()
                .unwrap();
            assert_eq!(dump.status.code(), Some(1), "{name} {extra:?}");
            assert!(
                String::from_utf8_lossy(&dump.stderr).contains("symbolic link"),
                "{}",
                String::from_utf8_lossy(&dump.stderr)
            );
            leaks("ring dump stdout", &dump.stdout);
            leaks("ring dump stderr", &dump.stderr);
        }
    }
    // Even when pointed at the secret itself, the reader says what is wrong, not what it holds.
    for path in [&shadow, &magic] {
        let dump = Command::new(bin())
            .args(["ring", "dump"])
            .arg(path)
            .output()
            .unwrap();
        assert_eq!(dump.status.code(), Some(1));
        leaks("ring dump stdout", &dump.stdout);
        leaks("ring dump stderr", &dump.stderr);
    }
}

/// A ring no path reaches any more (unlinked while its writer is wedged) still belongs to the writer
/// that holds it open: read through its fd link.
#[test]
fn an_unlinked_ring_is_read_through_the_writers_fd() {
    let Some(mut s) = setup("hostile unlinked") else {
        return;
    };
    let label = "unlinked ring ioctl FS_IOC_SETFLAGS";
    let (helper, pattern) = wedged_ring_writer(&s, label);
    let until = Instant::now() + Duration::from_secs(5);
    let ring = loop {
        let found = std::fs::read_dir(&s.rings)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "ring"));
        if let Some(ring) = found {
            break ring;
        }
        assert!(Instant::now() < until, "the helper wrote no ring");
        std::thread::sleep(Duration::from_millis(10));
    };
    std::fs::remove_file(&ring).unwrap();
    let notify = Notify::new(s.dir.path());
    let args = agent_args(&s, &pattern);
    let mut agent = Agent::start(
        s.dir.path(),
        &args,
        &[("NOTIFY_SOCKET", notify.path.to_str().unwrap())],
    );
    let ready_at = notify.wait_for("READY=1", &mut agent, Duration::from_secs(5));
    let out = s.out.clone();
    let incident = check_detected("unlinked", &mut agent, &out, helper.pid(), ready_at, label);
    let shown = incident["ring"]["path"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(shown.contains("(deleted)"), "{}", incident["ring"]);
    check_stop("unlinked", &mut s, agent, helper);
}
