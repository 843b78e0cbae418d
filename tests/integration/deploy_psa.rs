//! Pod Security Admission, emulated for the checks that matter to a node agent (deploy_rendered.rs grades every
//! rendered overlay with it): the least permissive level that admits a pod, and the level a kustomization states.

use std::path::Path;

use serde_yaml::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Restricted,
    Baseline,
    Privileged,
}

impl Level {
    pub(crate) fn parse(s: &str) -> Option<Level> {
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

pub(crate) fn cap_name(v: &Value) -> String {
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
pub(crate) fn stated_level(dir: &Path) -> Option<Level> {
    let re =
        regex::Regex::new(r"(?i)pod security[^`\n]*`(privileged|baseline|restricted)`").unwrap();
    ["README.md", "kustomization.yaml", "kustomization.yml"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .find_map(|text| Level::parse(&re.captures(&text)?[1].to_lowercase()))
}
