//! Fleet integration (issue 15): the agent's metrics scraped by a real Prometheus during a real wedge, the
//! endpoint under a connection flood, and `npd-check`'s exit codes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::agent::{link_as, unique_comm, wait_in_d, wedge_helper, Agent, TempDir, FAST};
use crate::util::{bin, frozen_fs_or_skip, in_ci};

/// One HTTP GET on 127.0.0.1 (no client crate: the request is one line); the body, or None.
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().replace(' ', "") == "transfer-encoding:chunked");
    if chunked {
        dechunk(body)
    } else {
        Some(body.to_string())
    }
}

/// An HTTP/1.1 chunked body put back together (Prometheus's API answers large queries so).
fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// A real Prometheus with `config` (YAML) as its prometheus.yml, its data and log under `dir` (the log:
/// prometheus.log); stopped when the returned server is dropped.
pub(crate) fn start_prometheus(dir: &Path, config: &str) -> (Server, SocketAddr) {
    let port = free_port();
    let config_path = dir.join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let server = Server(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("prometheus.log")).unwrap(),
            ))
            .spawn()
            .unwrap(),
    );
    (server, format!("127.0.0.1:{port}").parse().unwrap())
}

/// The address the agent logged for its metrics server (it listens on port 0).
/// The agent's endpoint, once it serves the first scan's figures (the endpoint opens just before the
/// first scan; a loaded CI machine can stretch that moment).
pub(crate) fn metrics_addr(agent: &mut Agent) -> SocketAddr {
    let log = agent.wait_log("serving metrics on http://", 1, Duration::from_secs(10));
    let rest = log.split("serving metrics on http://").nth(1).unwrap();
    let addr: SocketAddr = rest.split('/').next().unwrap().parse().unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let body = http_get(addr, "/metrics").unwrap_or_default();
        if sample(&body, "wedge_capture_last_scan_timestamp_seconds").is_some() {
            return addr;
        }
        assert!(
            std::time::Instant::now() < until,
            "no scan within 10 s of serving metrics:\n{body}\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A sample's value in exposition text.
pub(crate) fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

pub(crate) fn promtool_clean(text: &str, what: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics on {what}: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Prometheus's binary, or None (skip) when the package is missing and this is not CI.
pub(crate) fn prometheus_or_skip(test: &str) -> Option<()> {
    let found = ["prometheus", "promtool"].iter().all(|tool| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if found {
        return Some(());
    }
    assert!(
        !in_ci(),
        "{test}: prometheus/promtool missing under CI=true (.ci/run installs the Debian package)"
    );
    eprintln!("{test}: skipped: install the Debian package `prometheus` to run it");
    None
}

/// Kills and reaps the Prometheus server on drop.
pub(crate) struct Server(pub(crate) std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_real_prometheus_sees_a_real_wedge() {
    let test = "fleet prometheus";
    if prometheus_or_skip(test).is_none() {
        return;
    }
    let Some(mut fs) = frozen_fs_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("prom");
    let out = dir.path().join("incidents");
    let textfile = dir.path().join("textfile");
    std::fs::create_dir_all(&textfile).unwrap();
    let file = fs.create_file("target", b"x").unwrap();
    let comm = unique_comm("p");
    let program = link_as(dir.path(), &comm, Path::new(bin()));
    let pattern = format!("^{comm}$");
    let mut args = vec![
        "--out",
        out.to_str().unwrap(),
        "--match-comm",
        &pattern,
        "--metrics-listen",
        "127.0.0.1:0",
        "--textfile-dir",
        textfile.to_str().unwrap(),
    ];
    args.extend_from_slice(FAST);
    let mut agent = Agent::start(dir.path(), &args, &[]);
    let addr = metrics_addr(&mut agent);
    let idle = http_get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(sample(&idle, "wedge_capture_wedged_threads"), Some(0.0));
    promtool_clean(&idle, "/metrics before the wedge");

    let (_prometheus, prometheus) = start_prometheus(
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
             - job_name: wedge-capture\n    static_configs:\n      - targets: ['{addr}']\n"
        ),
    );

    fs.freeze().unwrap();
    let helper = wedge_helper(&program, &file, &[], "fleet test ioctl FS_IOC_SETFLAGS");
    wait_in_d(helper.pid(), Duration::from_secs(5));
    let query = "/api/v1/query?query=wedge_capture_wedged_threads%20%3E%3D%201";
    let until = Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let answer = http_get(prometheus, query).unwrap_or_default();
        if answer.contains("\"value\"") {
            break answer;
        }
        assert!(
            Instant::now() < until,
            "{test}: Prometheus never saw wedge_capture_wedged_threads >= 1: {answer}\nagent:\n{}\nprometheus:\n{}",
            agent.log(),
            std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(answer.contains("\"status\":\"success\""), "{answer}");
    assert!(answer.contains("wedge-capture"), "{answer}");

    let wedged = http_get(addr, "/metrics").expect("GET /metrics");
    assert!(sample(&wedged, "wedge_capture_wedged_threads").unwrap() >= 1.0);
    assert!(sample(&wedged, "wedge_capture_oldest_wedge_seconds").unwrap() >= 1.0);
    assert!(sample(&wedged, "wedge_capture_targets").unwrap() >= 1.0);
    promtool_clean(&wedged, "/metrics during the wedge");
    let until = Instant::now() + Duration::from_secs(15);
    let on_disk = loop {
        let text = std::fs::read_to_string(textfile.join("wedge_capture.prom")).unwrap_or_default();
        if sample(&text, "wedge_capture_wedged_threads").is_some_and(|v| v >= 1.0) {
            break text;
        }
        assert!(
            Instant::now() < until,
            "{test}: textfile never showed the wedge: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    promtool_clean(&on_disk, "the textfile");
    fs.thaw().unwrap();
    drop(helper);
    let (status, took, log) = agent.terminate();
    assert_eq!(status, Some(0), "{log}");
    assert!(took < Duration::from_secs(2), "{test}: stop took {took:?}");
}

/// Raise this process's open-file limit so it can hold `wanted` sockets (root may raise the hard one).
fn allow_open_files(wanted: u64) {
    let limit = libc::rlimit {
        rlim_cur: wanted,
        rlim_max: wanted,
    };
    // SAFETY: setrlimit(2) reads one rlimit struct, which `limit` is.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(rc, 0, "cannot raise RLIMIT_NOFILE to {wanted}");
}

#[test]
fn the_endpoint_survives_a_connection_flood_and_slow_clients_without_delaying_scans() {
    let dir = TempDir::new("flood");
    let out = dir.path().join("incidents");
    // A watched process that never wedges: the scans have a target.
    let comm = unique_comm("f");
    let program = link_as(dir.path(), &comm, Path::new("/bin/sleep"));
    let mut sleeper = Command::new(&program).arg("60").spawn().unwrap();
    let pattern = format!("^{comm}$");
    let interval = Duration::from_millis(200);
    let mut agent = Agent::start(
        dir.path(),
        &[
            "--out",
            out.to_str().unwrap(),
            "--match-comm",
            &pattern,
            "--interval",
            "200ms",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    let addr = metrics_addr(&mut agent);
    let scans = |text: &str| sample(text, "wedge_capture_scan_duration_seconds_count").unwrap();
    let before = http_get(addr, "/metrics").expect("GET /metrics");
    let started = Instant::now();
    let scans_before = scans(&before);

    allow_open_files(4096);
    let mut held = Vec::with_capacity(1000);
    for i in 0..1000 {
        // Connect may fail once the server's backlog is full; what counts is what the server does.
        if let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            if i % 10 == 0 {
                // Slowloris: part of a request head, never finished.
                let _ = stream.write_all(b"GET /metr");
            }
            held.push(stream);
        }
    }
    assert!(
        held.len() >= 900,
        "only {} connections were made",
        held.len()
    );
    // Trickle one byte at a time on a few, within the request deadline, to hold their slots.
    for _ in 0..5 {
        for stream in held.iter_mut().step_by(50) {
            let _ = stream.write_all(b"e");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let held_count = held.len();
    drop(held);
    // Slow clients are dropped at the request deadline (2 s); then the endpoint serves again.
    let until = Instant::now() + Duration::from_secs(5);
    let after = loop {
        if let Some(text) = http_get(addr, "/metrics") {
            break text;
        }
        assert!(
            Instant::now() < until,
            "the endpoint never served again after the flood"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let elapsed = started.elapsed();
    let done = scans(&after) - scans_before;
    let expected = elapsed.as_secs_f64() / interval.as_secs_f64();
    eprintln!(
        "flood: {held_count} connections held, {done} scans in {elapsed:?} ({expected:.1} expected \
         at {interval:?})"
    );
    // One interval of delay loses one scan; one more for where the two reads fell between scans.
    assert!(
        done >= expected.floor() - 2.0,
        "{done} scans in {elapsed:?} at {interval:?}: the flood delayed the watch loop\n{}",
        agent.log()
    );
    assert!(!agent.log().contains("panicked"), "{}", agent.log());
    let (status, _, log) = agent.terminate();
    assert_eq!(status, Some(0), "{log}");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// `npd-check --out DIR [extra]`: exit code, stdout line, and how long it took.
fn npd_check(out: &Path, extra: &[&str]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let output = Command::new(bin())
        .arg("npd-check")
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout)
        .trim_end()
        .to_string();
    assert!(
        !stdout.contains('\n') && stdout.chars().count() <= 80,
        "npd-check must print one line of at most 80 characters: {stdout:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "npd-check took {took:?} (the NPD rule allows 3 s)"
    );
    (output.status.code(), stdout, took)
}

fn wedged_incident(pid: i32, comm: &str) -> reports::model::Incident {
    let mut incident = reports::model::Incident::new(pid);
    incident.process.comm = comm.to_string();
    incident.wedged_threads.push(reports::model::WedgedThread {
        tid: pid + 1,
        comm: comm.to_string(),
        d_since: incident.detected_at.clone(),
        ..Default::default()
    });
    let mut sample = reports::model::Sample::default();
    sample
        .snapshot
        .threads
        .push(capture::snapshot::ThreadSnapshot {
            tid: pid + 1,
            comm: comm.to_string(),
            state: "D".into(),
            wchan: Some("uvm_va_block_make_resident".into()),
            ..Default::default()
        });
    incident.samples.push(sample);
    incident.process.container = Some(reports::model::ContainerInfo {
        runtime: "containerd".into(),
        id: "0".repeat(64),
        pod_uid: Some("1a2b3c4d-0000-1111-2222-333344445555".into()),
        pod: Some(reports::model::PodInfo {
            namespace: "ml".into(),
            name: "trainer-0".into(),
        }),
        pod_identity: Some(reports::model::PodIdentity::ContainerRuntime),
        pod_identity_note: None,
    });
    incident
}

/// `incident` made the record of live process `pid` on this boot (its identity as a watcher records it).
fn as_live(mut incident: reports::model::Incident, pid: i32) -> reports::model::Incident {
    let root = capture::ProcRoot::default();
    incident.process.pid = pid;
    incident.process.start_time = Some(root.read_stat(pid).unwrap().starttime);
    incident.host.boot_id = root.boot_id().unwrap();
    incident
}

#[test]
fn npd_check_exit_codes() {
    use reports::retention::Retention;
    use reports::store::Store;
    let dir = TempDir::new("npd");
    let out = dir.path().join("incidents");

    // The forgotten hostPath mount: unknown, never healthy.
    let (code, message, _) = npd_check(&out, &[]);
    assert_eq!(code, Some(2), "{message}");
    assert!(message.starts_with("no incident store at"), "{message}");

    let store = Store::open(&out, Retention::DEFAULT).unwrap();
    let (code, message, _) = npd_check(&out, &[]);
    assert_eq!((code, message.as_str()), (Some(0), "no open wedge episode"));

    let mut resolved = wedged_incident(4100, "old-worker");
    resolved.episode.status = reports::model::EpisodeStatus::Resolved;
    store.create(&resolved).unwrap();
    let (code, message, _) = npd_check(&out, &[]);
    assert_eq!(code, Some(0), "a resolved episode is no problem: {message}");

    // An open episode whose process is gone (a reaped child's pid, start time recorded): not a problem.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let mut dead = wedged_incident(gone.id() as i32, "gone");
    dead.process.start_time = Some(1);
    gone.wait().unwrap();
    store.create(&dead).unwrap();
    let (code, message, _) = npd_check(&out, &[]);
    assert_eq!(code, Some(0), "the process is gone: {message}");

    // Still wedged when its watcher exited, and the process (same pid and start time) lives: a problem.
    let mut sleeper = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let mut wedged = as_live(wedged_incident(0, "python3"), sleeper.id() as i32);
    wedged.episode.status = reports::model::EpisodeStatus::StillWedgedAtExit;
    let handle = store.create(&wedged).unwrap();
    let id = handle.id().to_string();
    drop(handle);
    let (code, message, _) = npd_check(&out, &[]);
    assert_eq!(code, Some(1), "{message}");
    assert!(
        message.contains(&format!("pid {} (python3)", sleeper.id())),
        "{message}"
    );
    assert!(
        message.contains("uvm_va_block_make_resident"),
        "the site: {message}"
    );
    assert!(message.contains("pod ml/trainer-0"), "the pod: {message}");

    // Nobody watched it for longer than --max-age: unknown.
    std::thread::sleep(Duration::from_millis(20));
    let (code, message, _) = npd_check(&out, &["--max-age", "10ms"]);
    assert_eq!(code, Some(2), "{message}");
    assert!(message.contains("unwatched"), "{message}");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let (code, message, _) = npd_check(&out, &[]);
    assert_eq!(code, Some(0), "its process is gone now: {message}");

    // A FIFO where an incident.json must be: unknown, and it does not hang (npd_check asserts < 1 s).
    let fifo = out.join(&id).join("incident.json");
    std::fs::remove_file(&fifo).unwrap();
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (code, message, _) = npd_check(&out, &[]);
    assert_eq!(code, Some(2), "{message}");
    assert!(message.contains("unreadable"), "{message}");
    std::fs::remove_file(&fifo).unwrap();
    // Corrupt: unknown too.
    std::fs::write(&fifo, b"{not json").unwrap();
    let (code, message, _) = npd_check(&out, &[]);
    assert_eq!(code, Some(2), "{message}");

    // Unreadable: root reads any mode, so the store is a file where a directory must be.
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let (code, message, _) = npd_check(&not_a_dir, &[]);
    assert_eq!(code, Some(2), "{message}");
    assert!(message.starts_with("cannot read incidents"), "{message}");
}
