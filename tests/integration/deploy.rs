//! deploy/ (issue 27) without a cluster: every kustomization's references resolve and parse, and the manifests
//! say what a typical cluster needs (PSA label, tolerations, NODE_NAME, /healthz probes, seccomp, Service and
//! ServiceMonitor that select the pods); the DaemonSet's arguments are accepted by the agent; the PrometheusRule
//! holds exactly deploy/prometheus/rules.yml's groups. (.ci/run renders and schema-checks them too, and runs
//! `promtool test rules`.)

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_yaml::Value;

use crate::util::bin;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    at(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path:?} is not a string"))
}

fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, key| &v[*key])
}

/// Every object a kustomization directory builds on (its resources, recursively; patches checked to exist and
/// to target an object of the build). Returns (kind, name, object) of the resources.
fn resources(dir: &Path) -> Vec<(String, String, Value)> {
    let kustomization = dir.join("kustomization.yaml");
    let k = &docs(&kustomization)[0];
    assert_eq!(
        str_at(k, &["kind"]),
        "Kustomization",
        "{}",
        kustomization.display()
    );
    let mut out = Vec::new();
    for entry in k["resources"].as_sequence().expect("resources") {
        let path = dir.join(entry.as_str().unwrap());
        if path.is_dir() {
            out.extend(resources(&path));
        } else {
            assert!(
                path.is_file(),
                "{} names {} which does not exist",
                kustomization.display(),
                path.display()
            );
            for doc in docs(&path) {
                let kind = str_at(&doc, &["kind"]).to_string();
                let name = str_at(&doc, &["metadata", "name"]).to_string();
                assert!(
                    doc["apiVersion"].as_str().is_some(),
                    "{}: no apiVersion",
                    path.display()
                );
                out.push((kind, name, doc));
            }
        }
    }
    for patch in k["patches"].as_sequence().into_iter().flatten() {
        let path = dir.join(str_at(patch, &["path"]));
        let body = &docs(&path)[0];
        let (kind, name) = (
            str_at(patch, &["target", "kind"]),
            str_at(patch, &["target", "name"]),
        );
        assert_eq!(
            (str_at(body, &["kind"]), str_at(body, &["metadata", "name"])),
            (kind, name)
        );
        assert!(
            out.iter().any(|(k, n, _)| k == kind && n == name),
            "{}: patch target {kind}/{name} is not in the build",
            path.display()
        );
    }
    out
}

fn find<'a>(objects: &'a [(String, String, Value)], kind: &str) -> &'a Value {
    &objects
        .iter()
        .find(|(k, _, _)| k == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
        .2
}

#[test]
fn the_kustomize_base_has_what_a_typical_cluster_needs() {
    let base = repo().join("deploy/kubernetes");
    let objects = resources(&base);
    let kinds: Vec<&str> = objects.iter().map(|(k, _, _)| k.as_str()).collect();
    for want in ["Namespace", "ServiceAccount", "DaemonSet", "Service"] {
        assert!(kinds.contains(&want), "{want} missing: {kinds:?}");
    }
    // Clusters without the Prometheus Operator CRDs must be able to apply the base: no CRD kinds in it.
    assert!(
        !kinds
            .iter()
            .any(|k| *k == "ServiceMonitor" || *k == "PrometheusRule"),
        "{kinds:?}"
    );

    let namespace = find(&objects, "Namespace");
    assert_eq!(
        str_at(
            namespace,
            &["metadata", "labels", "pod-security.kubernetes.io/enforce"]
        ),
        "privileged"
    );
    let ns = str_at(namespace, &["metadata", "name"]);

    let ds = find(&objects, "DaemonSet");
    assert_eq!(str_at(ds, &["metadata", "namespace"]), ns);
    let pod = at(ds, &["spec", "template", "spec"]);
    assert_eq!(pod["hostPID"], Value::Bool(true));
    assert_eq!(
        str_at(pod, &["securityContext", "seccompProfile", "type"]),
        "RuntimeDefault"
    );
    let tolerations = pod["tolerations"].as_sequence().expect("tolerations");
    assert!(
        tolerations.iter().any(|t| t["operator"] == "Exists"
            && t.get("key").is_none()
            && t.get("effect").is_none()),
        "no toleration of every taint: {tolerations:?}"
    );
    let container = &pod["containers"][0];
    let env = container["env"].as_sequence().expect("env");
    assert!(
        env.iter().any(|e| e["name"] == "NODE_NAME"
            && str_at(e, &["valueFrom", "fieldRef", "fieldPath"]) == "spec.nodeName"),
        "{env:?}"
    );
    let port_name = str_at(&container["ports"][0], &["name"]);
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(
            str_at(container, &[probe, "httpGet", "path"]),
            "/healthz",
            "{probe}"
        );
        assert_eq!(
            str_at(container, &[probe, "httpGet", "port"]),
            port_name,
            "{probe}"
        );
    }
    // /dev/kmsg mounted from the host, and the container allowed to open it (see the comment in daemonset.yaml).
    let mounts = container["volumeMounts"].as_sequence().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"] == "/dev/kmsg"));
    assert_eq!(
        container["securityContext"]["privileged"],
        Value::Bool(true)
    );

    // The image is the one the kustomization sets, with a real tag.
    let image = str_at(container, &["image"]);
    let base_k = &docs(&base.join("base/kustomization.yaml"))[0];
    let set = &base_k["images"][0];
    let (repo_name, tag) = image.rsplit_once(':').unwrap();
    assert_eq!(repo_name, str_at(set, &["name"]));
    assert_eq!(tag, str_at(set, &["newTag"]));
    assert!(
        !["latest", "TAG", "placeholder", ""].contains(&tag),
        "{image}"
    );

    // The container's arguments are ones the agent accepts.
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "agent");
    let dir = tempfile::tempdir().unwrap();
    let checked = Command::new(bin())
        .args(&args)
        .arg("--check-config")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&checked.stderr)
    );

    // The Service selects the pods and exposes the named port.
    let service = find(&objects, "Service");
    let pod_labels = at(ds, &["spec", "template", "metadata", "labels"])
        .as_mapping()
        .unwrap();
    for (key, value) in service["spec"]["selector"].as_mapping().unwrap() {
        assert_eq!(pod_labels.get(key), Some(value), "service selector {key:?}");
    }
    let service_port = &service["spec"]["ports"][0];
    assert_eq!(str_at(service_port, &["targetPort"]), port_name);

    // The ServiceMonitor (a file of its own) selects the Service and scrapes its port, adding `node`.
    let monitor = &docs(&base.join("servicemonitor.yaml"))[0];
    assert_eq!(str_at(monitor, &["kind"]), "ServiceMonitor");
    assert_eq!(str_at(monitor, &["metadata", "namespace"]), ns);
    let service_labels = service["metadata"]["labels"].as_mapping().unwrap();
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .unwrap()
    {
        assert_eq!(
            service_labels.get(key),
            Some(value),
            "monitor selector {key:?}"
        );
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(str_at(endpoint, &["port"]), str_at(service_port, &["name"]));
    assert!(endpoint["relabelings"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(|r| r["targetLabel"] == "node"));
}

#[test]
fn every_overlay_builds_on_the_base() {
    let overlays = repo().join("deploy/kubernetes/overlays");
    let mut seen = 0;
    for entry in std::fs::read_dir(&overlays).unwrap() {
        let objects = resources(&entry.unwrap().path());
        assert!(objects.iter().any(|(k, _, _)| k == "DaemonSet"));
        seen += 1;
    }
    assert!(seen >= 2, "gpu-nodes and unprivileged");
}

#[test]
fn the_prometheus_rule_object_holds_the_rules_file() {
    let rules = &docs(&repo().join("deploy/prometheus/rules.yml"))[0];
    let object = &docs(&repo().join("deploy/kubernetes/prometheusrule.yaml"))[0];
    assert_eq!(str_at(object, &["kind"]), "PrometheusRule");
    assert_eq!(
        object["spec"]["groups"], rules["groups"],
        "prometheusrule.yaml drifted from rules.yml"
    );
    for rule in rules["groups"][0]["rules"].as_sequence().unwrap() {
        let name = str_at(rule, &["alert"]);
        assert!(
            rule["labels"]["severity"].as_str().is_some(),
            "{name}: severity"
        );
        let runbook = str_at(rule, &["annotations", "runbook_url"]);
        let anchor = runbook.rsplit_once('#').unwrap().1;
        assert_eq!(anchor, name.to_lowercase(), "{name}");
        let doc = std::fs::read_to_string(repo().join("docs/runbook.md")).unwrap();
        assert!(
            doc.contains(&format!("## {name}")),
            "docs/runbook.md has no section for {name}"
        );
        assert!(
            str_at(rule, &["expr"]).contains("by (node)")
                || str_at(rule, &["expr"]).contains("by (node, "),
            "{name}: not aggregated by node"
        );
    }
}

/// The example config sets every key `--check-config` prints (but the hidden test hook), is valid, and its comm
/// selector watches GPU workers only: not the host's Python daemons (which `^python` did, and SIGUSR1 captured).
#[test]
fn the_example_config_sets_every_key_and_no_system_python_daemon_matches() {
    let example = repo().join("systemd/agent.example.json");
    let out = Command::new(bin())
        .args(["agent", "--check-config", "--config"])
        .arg(&example)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = std::fs::read_to_string(&example).unwrap();
    let written: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys = |v: &serde_json::Value| -> std::collections::BTreeSet<String> {
        v.as_object().unwrap().keys().cloned().collect()
    };
    let mut want = keys(&printed);
    // The hidden test hooks (flags hidden from --help) are left out.
    for hook in ["extra_probe", "refuse_blocker_field"] {
        want.remove(hook);
    }
    assert_eq!(
        keys(&written),
        want,
        "systemd/agent.example.json must set every key (docs/agent.md explains each)"
    );
    let patterns: Vec<regex::Regex> = written["match_comm"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| regex::Regex::new(p.as_str().unwrap()).unwrap())
        .collect();
    // comms of Python daemons on stock distributions (a script run through its shebang is named after the script).
    for comm in [
        "python3",
        "python",
        "python3.11",
        "networkd-dispat",
        "unattended-upgr",
        "cloud-init",
        "tuned",
        "firewalld",
    ] {
        assert!(
            !patterns.iter().any(|p| p.is_match(comm)),
            "{comm} would be watched"
        );
    }
    assert!(patterns.iter().any(|p| p.is_match("pt_main_thread")));
}

/// node-problem-detector's patch gives the plugin what wedge-capture-plugin-monitor.json runs: the binary at its
/// `path`, the incident store its `--out` names, and the plugin file where the README's argument points.
#[test]
fn the_npd_patch_provides_what_the_plugin_runs() {
    let patch = &docs(&repo().join("deploy/npd/node-problem-detector-patch.yaml"))[0];
    let plugin: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/npd/wedge-capture-plugin-monitor.json"))
            .unwrap(),
    )
    .unwrap();
    let pod = at(patch, &["spec", "template", "spec"]);
    let mounts = pod["containers"][0]["volumeMounts"].as_sequence().unwrap();
    let volumes = pod["volumes"].as_sequence().unwrap();
    for mount in mounts {
        let name = str_at(mount, &["name"]);
        assert!(
            volumes.iter().any(|v| v["name"] == name),
            "volume {name} missing"
        );
    }
    let mounted = |path: &str| {
        mounts
            .iter()
            .any(|m| path.starts_with(str_at(m, &["mountPath"])))
    };
    let rule = &plugin["rules"][0];
    assert!(mounted(rule["path"].as_str().unwrap()), "{}", rule["path"]);
    let args: Vec<&str> = rule["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let out = args[args.iter().position(|a| *a == "--out").unwrap() + 1];
    assert!(mounted(out), "{out}");
    assert!(mounted(
        "/config/wedge-capture/wedge-capture-plugin-monitor.json"
    ));
    let image = volumes
        .iter()
        .find(|v| v["name"] == "wedge-capture-bin")
        .unwrap();
    let daemonset = &docs(&repo().join("deploy/kubernetes/base/daemonset.yaml"))[0];
    let agent_image = str_at(
        &daemonset["spec"]["template"]["spec"]["containers"][0],
        &["image"],
    );
    assert_eq!(str_at(image, &["image", "reference"]), agent_image);
}
