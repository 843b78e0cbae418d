//! Fleet, issue 37 points 3 and 4, on a real agent and real D-state threads: an Xid line written to the kernel
//! log is counted once (`wedge_capture_xid_total{xid="79"}`) and named in the verdict of the wedge it came
//! during; a wedged process of a pod (its identity confirmed by a container runtime's state under `--node-root`)
//! shows as `wedge_capture_wedged_process_info{namespace,pod,container,site} 1` while it is wedged, and the series
//! is gone once it is released.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::agent::{
    link_as, unique_comm, wait_in_d, wait_incident, wedge_helper, Agent, Helper, TempDir, FAST,
};
use crate::fleet::{http_get, metrics_addr, promtool_clean, sample};
use capture::frozen_fs::FrozenFs;

use crate::util::{bin, frozen_fs_or_skip, in_ci};

/// Poll `/metrics` until `done` says yes (at most `limit`); the last text either way.
fn metrics_until(
    addr: std::net::SocketAddr,
    limit: Duration,
    agent: &Agent,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let until = Instant::now() + limit;
    loop {
        let text = http_get(addr, "/metrics").unwrap_or_default();
        if done(&text) {
            return text;
        }
        assert!(
            Instant::now() < until,
            "{what} not seen within {limit:?}:\n{text}\nagent:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn promtool_present() -> bool {
    Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_kernel_xid_is_counted_once_and_named_in_the_verdict_of_the_wedge() {
    let test = "fleet xid";
    let Some(mut fs) = frozen_fs_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("xid");
    let out = dir.path().join("incidents");
    let file = fs.create_file("target", b"x").unwrap();
    let comm = unique_comm("x");
    let program = link_as(dir.path(), &comm, Path::new(bin()));
    let pattern = format!("^{comm}$");
    let mut args = vec![
        "--out",
        out.to_str().unwrap(),
        "--match-comm",
        &pattern,
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(FAST);
    let mut agent = Agent::start(dir.path(), &args, &[]);
    let addr = metrics_addr(&mut agent);
    const XID79: &str = "wedge_capture_xid_total{xid=\"79\"}";
    let idle = http_get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(sample(&idle, XID79), Some(0.0), "{idle}");

    fs.freeze().unwrap();
    let helper = wedge_helper(&program, &file, &[], "xid test ioctl FS_IOC_SETFLAGS");
    let pid = helper.pid();
    wait_in_d(pid, Duration::from_secs(5));
    // What the driver prints when the GPU of a process in a driver call falls off the bus.
    let line = format!(
        "NVRM: Xid (PCI:0000:00:00): 79, pid={pid}, name={comm}, GPU has fallen off the bus."
    );
    std::fs::write("/dev/kmsg", format!("<3>{line}\n")).expect("writing /dev/kmsg (needs root)");

    let counted = metrics_until(addr, Duration::from_secs(15), &agent, XID79, |t| {
        sample(t, XID79).is_some_and(|v| v >= 1.0)
    });
    assert_eq!(sample(&counted, XID79), Some(1.0), "{counted}");

    let incident = wait_incident(&mut agent, &out, pid, Duration::from_secs(30));
    let verdict = incident["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("latest `Xid 79 (GPU has fallen off the bus)` on `0000:00:00`"),
        "{verdict}"
    );
    assert!(verdict.contains("printed for this process"), "{verdict}");
    assert!(
        verdict.contains("into the wedge") || verdict.contains("before the thread entered D"),
        "{verdict}"
    );
    let xids = incident["xids"]
        .as_array()
        .expect("the incident keeps its Xids");
    let ours = xids
        .iter()
        .find(|x| x["pid"] == pid && x["xid"] == 79)
        .unwrap_or_else(|| panic!("no Xid 79 for pid {pid} in {xids:?}"));
    assert_eq!(ours["meaning"], "GPU has fallen off the bus");
    assert!(ours["kernel_time_us"].as_u64().is_some(), "{ours}");
    assert!(incident["kernel_log"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["text"] == line.as_str()));

    // Scans and the capture's re-reads of the kernel log go on: the line is never counted again.
    std::thread::sleep(Duration::from_secs(2));
    let later = http_get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(sample(&later, XID79), Some(1.0), "{later}");
    if promtool_present() {
        promtool_clean(&later, "/metrics with an Xid counted");
    } else {
        assert!(!in_ci(), "promtool missing under CI=true");
    }
    fs.thaw().unwrap();
    drop(helper);
    let (status, _, log) = agent.terminate();
    assert_eq!(status, Some(0), "{log}");
}

/// A pod as the node shows it (namespace `ml`, pod `trainer-0`, container `trainer`): containerd's state under
/// `node_root` names the container at its cgroup, a nested cgroup shaped as the kubelet makes them, and the
/// kubelet's pod log directory. [`Pod::wedge`] starts a process in it, wedged on a frozen filesystem.
pub(crate) struct Pod {
    pub node_root: std::path::PathBuf,
    pub pods_log: std::path::PathBuf,
    pub cgroup: crate::hostile_tenant_wide::NestedCgroup,
}

/// The pod's namespace/pod/container labels as the metrics show them.
pub(crate) const POD_LABELS: &str = "namespace=\"ml\",pod=\"trainer-0\",container=\"trainer\"";

/// A [`Pod`] under `dir`; `None` (after saying why) where this host has no cgroup v2 to nest in, outside CI.
pub(crate) fn pod(test: &str, dir: &TempDir) -> Option<Pod> {
    const UID: &str = "5e6f7a8b-0000-1111-2222-333344445555";
    let id = "c0ffee".repeat(10) + "c0de";
    let name = format!("wedge-capture-{}", unique_comm("pod"));
    let relative = format!("{name}/kubepods/burstable/pod{UID}/cri-containerd-{id}.scope");
    let cgroup = match crate::hostile_tenant_wide::nested_cgroup(dir.path(), &relative) {
        Ok(cgroup) => cgroup,
        Err(err) if in_ci() => panic!("{test}: CI=true but no cgroup v2 to nest in: {err}"),
        Err(err) => {
            eprintln!("{test}: skipped: {err}");
            return None;
        }
    };
    // The node as the kubelet and containerd leave it (root-owned, as they are): containerd's state names the
    // container in the pod, at the process's cgroup; the kubelet's log names hold the pod and container names.
    let node_root = dir.path().join("node");
    let state = node_root
        .join("run/containerd/io.containerd.runtime.v2.task/k8s.io")
        .join(&id);
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("config.json"),
        serde_json::json!({
            "linux": {"cgroupsPath": format!("/{relative}")},
            "annotations": {
                "io.kubernetes.cri.sandbox-uid": UID,
                "io.kubernetes.cri.sandbox-namespace": "ml",
                "io.kubernetes.cri.sandbox-name": "trainer-0",
            }
        })
        .to_string(),
    )
    .unwrap();
    let containers = node_root.join("var/log/containers");
    std::fs::create_dir_all(&containers).unwrap();
    std::fs::write(
        containers.join(format!("trainer-0_ml_trainer-{id}.log")),
        b"",
    )
    .unwrap();
    let pods_log = dir.path().join("pods");
    std::fs::create_dir_all(pods_log.join(format!("ml_trainer-0_{UID}"))).unwrap();
    Some(Pod {
        node_root,
        pods_log,
        cgroup,
    })
}

impl Pod {
    /// A process of this pod, wedged on `fs` (frozen here) and in D; its comm is `comm`.
    pub(crate) fn wedge(&self, dir: &TempDir, fs: &mut FrozenFs, comm: &str) -> Helper {
        let file = fs.create_file("target", b"x").unwrap();
        let program = link_as(dir.path(), comm, Path::new(bin()));
        fs.freeze().unwrap();
        let procs = std::ffi::CString::new(
            self.cgroup
                .levels
                .last()
                .unwrap()
                .join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        let mut command = Command::new(&program);
        command
            .args(["internal", "wedge-helper", "--label", "pod test", "--path"])
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
        let helper = Helper {
            child: command.spawn().unwrap(),
        };
        wait_in_d(helper.pid(), Duration::from_secs(10));
        helper
    }
}

#[test]
fn the_wedged_process_info_names_its_pod_while_wedged_and_goes_away_when_released() {
    let test = "fleet wedged process info";
    let Some(mut fs) = frozen_fs_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("podinfo");
    let Some(pod) = pod(test, &dir) else {
        return;
    };
    let comm = unique_comm("k");
    let helper = pod.wedge(&dir, &mut fs, &comm);
    let pid = helper.pid();
    let (node_root, pods_log) = (&pod.node_root, &pod.pods_log);
    let out = dir.path().join("incidents");
    let pattern = format!("^{comm}$");
    let mut args = vec![
        "--out",
        out.to_str().unwrap(),
        "--match-comm",
        &pattern,
        "--metrics-listen",
        "127.0.0.1:0",
        "--node-root",
        node_root.to_str().unwrap(),
        "--pods-log-dir",
        pods_log.to_str().unwrap(),
    ];
    args.extend_from_slice(FAST);
    let mut agent = Agent::start(dir.path(), &args, &[]);
    let addr = metrics_addr(&mut agent);
    let prefix = "wedge_capture_wedged_process_info{namespace=\"ml\",pod=\"trainer-0\",container=\"trainer\",site=\"";
    let series = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("wedge_capture_wedged_process_info{"))
            .map(str::to_string)
            .collect()
    };
    let wedged = metrics_until(
        addr,
        Duration::from_secs(30),
        &agent,
        "the pod's info series",
        |t| {
            series(t)
                .iter()
                .any(|l| l.starts_with(prefix) && l.ends_with("} 1"))
        },
    );
    assert_eq!(series(&wedged).len(), 1, "{wedged}");
    let line = &series(&wedged)[0];
    assert!(
        line.len() > prefix.len() + "\"} 1".len(),
        "the site is named: {line}"
    );
    if promtool_present() {
        promtool_clean(&wedged, "/metrics with a wedged pod");
    }
    let incident = wait_incident(&mut agent, &out, pid, Duration::from_secs(30));
    assert_eq!(
        incident["process"]["container"]["pod_identity"], "container_runtime",
        "{}",
        incident["process"]["container"]
    );

    // Released: the thread leaves D, the series goes (no stale pod series accumulates).
    fs.thaw().unwrap();
    let released = metrics_until(
        addr,
        Duration::from_secs(30),
        &agent,
        "the series gone",
        |t| series(t).is_empty() && sample(t, "wedge_capture_wedged_threads") == Some(0.0),
    );
    // No series is left behind: the family has none (and prints none).
    assert!(
        !released.contains("wedge_capture_wedged_process_info{"),
        "{released}"
    );
    eprintln!("{test}: while wedged: {line}");
    drop(helper);
    let (status, _, log) = agent.terminate();
    assert_eq!(status, Some(0), "{log}");
    drop(pod);
}

/// `wedge-capture explain` on a paste of a hung-task report and the Xid the driver printed for it: both read,
/// tied by pid, in JSON and Markdown; exit 0.
#[test]
fn explain_ties_a_pasted_xid_to_the_hung_task() {
    use std::io::Write;
    let paste = "\
[  100.000000] NVRM: Xid (PCI:0000:3b:00): 119, pid=4242, name=python3, Timeout after 45s of waiting for RPC response from GPU0 GSP!
[  222.000000] INFO: task python3:4242 blocked for more than 122 seconds.
[  222.000001] Call Trace:
[  222.000002]  schedule+0x33/0x110
[  222.000003]  rwsem_down_write_slowpath+0x27e/0x550
[  222.000004]  os_acquire_rwlock_write+0x3c/0x70 [nvidia]
[  222.000005]  rmapiLockAcquire+0x294/0x360 [nvidia]
[  222.000006]  nvidia_ioctl+0x5e4/0x8c0 [nvidia]
";
    let run = |format: &str| {
        let mut child = Command::new(bin())
            .args(["explain", "-", "--format", format])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(paste.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&run("json")).unwrap();
    let xid = &json["xids"][0];
    assert_eq!(xid["xid"], 119, "{json}");
    assert_eq!(xid["kernel_time_us"], 100_000_000u64, "{json}");
    assert_eq!(xid["tasks"][0]["task"], "python3", "{json}");
    assert_eq!(xid["tasks"][0]["by"], "pid", "{json}");
    assert!(
        xid["action"].as_str().unwrap().contains("reset the GPU"),
        "{json}"
    );
    let md = run("markdown");
    assert!(md.contains("## Xid and SXid lines"), "{md}");
    assert!(
        md.contains("`Xid 119` on `0000:3b:00`: timeout waiting for an RPC from the GSP firmware"),
        "{md}"
    );
}

/// The count survives a restart of the agent without counting a line twice or missing one printed while the
/// agent was down: the first agent counts Xid 94 and stops; Xid 95 is printed while none runs; the second
/// agent (same store) counts the 95 and not the 94 again.
#[test]
fn xid_lines_are_counted_once_across_agent_restarts() {
    let dir = TempDir::new("xid-restart");
    let out = dir.path().join("incidents");
    let args = [
        "--out",
        out.to_str().unwrap(),
        "--match-comm",
        "^no-process-is-named-this$",
        "--metrics-listen",
        "127.0.0.1:0",
        "--interval",
        "100ms",
    ];
    let tag = format!("xid-restart-{}", std::process::id());
    let write = |xid: u32| {
        std::fs::write(
            "/dev/kmsg",
            format!("<4>NVRM: Xid (PCI:0000:00:00): {xid}, pid=1, name=restart-test, {tag}\n"),
        )
        .expect("writing /dev/kmsg (needs root)");
    };
    const XID94: &str = "wedge_capture_xid_total{xid=\"94\"}";
    const XID95: &str = "wedge_capture_xid_total{xid=\"95\"}";

    let mut first = Agent::start(dir.path(), &args, &[]);
    let addr = metrics_addr(&mut first);
    write(94);
    metrics_until(addr, Duration::from_secs(15), &first, XID94, |t| {
        sample(t, XID94) == Some(1.0)
    });
    let (status, _, log) = first.terminate();
    assert_eq!(status, Some(0), "{log}");
    let state = std::fs::read_to_string(out.join(".xid-follow")).expect("the state file");
    assert_eq!(state.split_whitespace().count(), 2, "{state:?}");

    write(95);
    let mut second = Agent::start(dir.path(), &args, &[]);
    let addr = metrics_addr(&mut second);
    let text = metrics_until(addr, Duration::from_secs(15), &second, XID95, |t| {
        sample(t, XID95) == Some(1.0)
    });
    assert_eq!(sample(&text, XID94), Some(0.0), "counted twice:\n{text}");
    std::thread::sleep(Duration::from_millis(500));
    let later = http_get(addr, "/metrics").unwrap();
    assert_eq!(
        (sample(&later, XID94), sample(&later, XID95)),
        (Some(0.0), Some(1.0)),
        "{later}"
    );
    let (status, _, log) = second.terminate();
    assert_eq!(status, Some(0), "{log}");
}
