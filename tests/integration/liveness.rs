//! Issue 26 item 3: metrics that cannot lie when the agent is gone. `/metrics` and the textfile carry
//! `wedge_capture_last_scan_timestamp_seconds`; a clean stop rewrites the textfile with the stop time; a real
//! Prometheus fires the dead-agent alert of docs/agent.md for a killed agent on both scrape paths (the
//! agent's endpoint, and the textfile as node_exporter would serve it).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::agent::{Agent, TempDir};
use crate::fleet::{
    http_get, metrics_addr, prometheus_or_skip, promtool_clean, sample, start_prometheus,
};

const LAST_SCAN: &str = "wedge_capture_last_scan_timestamp_seconds";
const STOPPED: &str = "wedge_capture_stopped_timestamp_seconds";

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// An agent with no target (a comm nothing has), its endpoint on a free port and a textfile directory.
fn start_agent(dir: &Path) -> (Agent, SocketAddr, PathBuf) {
    let out = dir.join("incidents");
    let textfile = dir.join("textfile");
    std::fs::create_dir_all(&textfile).unwrap();
    let mut agent = Agent::start(
        dir,
        &[
            "--out",
            out.to_str().unwrap(),
            "--match-comm",
            "^no-such-comm-liveness$",
            "--interval",
            "200ms",
            "--metrics-listen",
            "127.0.0.1:0",
            "--textfile-dir",
            textfile.to_str().unwrap(),
        ],
        &[],
    );
    let addr = metrics_addr(&mut agent);
    (agent, addr, textfile.join("wedge_capture.prom"))
}

fn wait_textfile(path: &Path) -> String {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if sample(&text, LAST_SCAN).is_some() {
            return text;
        }
        assert!(
            Instant::now() < until,
            "no textfile with {LAST_SCAN}: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn both_scrape_paths_carry_the_last_scan_time_and_a_clean_stop_says_when_it_stopped() {
    let dir = TempDir::new("liveness");
    let (agent, addr, textfile) = start_agent(dir.path());
    let first = http_get(addr, "/metrics").expect("GET /metrics");
    let scanned = sample(&first, LAST_SCAN).expect(LAST_SCAN);
    assert!((now_unix() - scanned).abs() < 5.0, "{scanned}");
    promtool_clean(&first, "/metrics");
    std::thread::sleep(Duration::from_millis(600));
    let later = http_get(addr, "/metrics").expect("GET /metrics");
    assert!(
        sample(&later, LAST_SCAN).unwrap() > scanned,
        "the timestamp moves with the scans"
    );
    let on_disk = wait_textfile(&textfile);
    assert!(sample(&on_disk, STOPPED).is_none(), "{on_disk}");
    assert!((now_unix() - sample(&on_disk, LAST_SCAN).unwrap()).abs() < 15.0);
    promtool_clean(&on_disk, "the textfile");

    let stop = now_unix();
    let (code, _, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
    let left = std::fs::read_to_string(&textfile).unwrap();
    let stopped = sample(&left, STOPPED).unwrap_or_else(|| panic!("no stop time: {left}"));
    assert!(
        stopped >= stop - 1.0 && stopped <= now_unix() + 1.0,
        "{left}"
    );
    assert!(sample(&left, LAST_SCAN).unwrap() <= stopped, "{left}");
    assert_eq!(sample(&left, "wedge_capture_wedged_threads"), Some(0.0));
    promtool_clean(&left, "the textfile left by a clean stop");
}

/// node_exporter's textfile collector, reduced to what the test needs: every GET serves the file as it
/// is now (a dead agent's file is served on, unchanged).
struct TextfileServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TextfileServer {
    fn start(path: PathBuf) -> TextfileServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let body = std::fs::read_to_string(&path).unwrap_or_default();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        TextfileServer {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for TextfileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// docs/agent.md's dead-agent alerts, thresholds shortened for the test (the textfile is rewritten every
/// 10 s while the agent lives, so its threshold stays above that).
const RULES: &str = r#"groups:
  - name: wedge-capture-liveness
    rules:
      - alert: WedgeCaptureAgentDead
        expr: up{job="wedge-capture"} == 0 or (time() - wedge_capture_last_scan_timestamp_seconds{job="wedge-capture"}) > 5
      - alert: WedgeCaptureTextfileStale
        expr: (time() - wedge_capture_last_scan_timestamp_seconds{job="node"}) > 13
"#;

/// The names of the alerts Prometheus says are firing.
fn firing(prometheus: SocketAddr) -> Vec<String> {
    let answer = http_get(prometheus, "/api/v1/alerts").unwrap_or_default();
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&answer) else {
        return Vec::new();
    };
    value["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["state"] == "firing")
        .filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_real_prometheus_fires_the_dead_agent_alert_for_a_killed_agent_on_both_paths() {
    let test = "dead-agent alert";
    if prometheus_or_skip(test).is_none() {
        return;
    }
    let dir = TempDir::new("dead-agent");
    let (mut agent, addr, textfile) = start_agent(dir.path());
    wait_textfile(&textfile);
    let node = TextfileServer::start(textfile.clone());
    let rules = dir.path().join("rules.yml");
    std::fs::write(&rules, RULES).unwrap();
    let check = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    let (_prometheus, prometheus) = start_prometheus(
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files: ['{}']\nscrape_configs:\n  \
             - job_name: wedge-capture\n    static_configs:\n      - targets: ['{addr}']\n  \
             - job_name: node\n    static_configs:\n      - targets: ['{}']\n",
            rules.display(),
            node.addr
        ),
    );
    // Both paths scraped and the rules evaluated on them while the agent lives: nothing fires.
    let query = "/api/v1/query?query=count(wedge_capture_last_scan_timestamp_seconds)";
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = http_get(prometheus, query).unwrap_or_default();
        if answer.contains("\"2\"") {
            break;
        }
        assert!(
            Instant::now() < until,
            "{test}: Prometheus never scraped both paths: {answer}\n{}",
            std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(firing(prometheus), Vec::<String>::new(), "{test}: alive");

    let _ = agent.child.kill();
    let _ = agent.child.wait();
    let killed = Instant::now();
    let until = killed + Duration::from_secs(40);
    loop {
        let names = firing(prometheus);
        if names.iter().any(|n| n == "WedgeCaptureAgentDead")
            && names.iter().any(|n| n == "WedgeCaptureTextfileStale")
        {
            break;
        }
        assert!(
            Instant::now() < until,
            "{test}: not both alerts fired 40 s after the kill: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "{test}: both dead-agent alerts fired {:.1} s after SIGKILL",
        killed.elapsed().as_secs_f64()
    );
}
