//! The Grafana dashboard (deploy/grafana/) and the alert rules (deploy/prometheus/rules.yml,
//! deploy/kubernetes/prometheusrule.yaml) against what a really running agent exports (issue 37): every PromQL
//! expression names only metrics of a live `/metrics` taken during a real wedge (or Prometheus's own `up`),
//! `promtool check rules` parses each one, and a real Prometheus scraping that agent evaluates each dashboard
//! query without error; what the dashboard's panels show during the wedge is printed.

use std::collections::BTreeSet;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::agent::{unique_comm, wait_incident, Agent, TempDir, FAST};
use crate::fleet::{http_get, metrics_addr, prometheus_or_skip, start_prometheus};
use crate::util::frozen_fs_or_skip;

/// Series Prometheus makes itself at each scrape.
const PROMETHEUS_SERIES: &[&str] = &[
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// (where, expression) of every query of the dashboard: panel targets (rows' panels too) and query variables.
fn dashboard_exprs(path: &Path) -> Vec<(String, String)> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    fn walk(panels: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for panel in panels.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?");
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push((format!("panel {title:?}"), expr.to_string()));
                }
            }
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if var["type"] != "query" {
            continue;
        }
        let query = var["query"]["query"]
            .as_str()
            .or(var["query"].as_str())
            .unwrap_or_default();
        // label_values(SELECTOR, LABEL) / query_result(EXPR): the PromQL inside.
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.rsplit_once(',').map(|(sel, _)| sel))
            .or_else(|| {
                query
                    .strip_prefix("query_result(")
                    .and_then(|q| q.strip_suffix(')'))
            })
            .unwrap_or(query);
        out.push((
            format!("variable {}", var["name"]),
            inner.trim().to_string(),
        ));
    }
    out
}

fn rule_exprs(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let doc = serde_yaml::Value::deserialize(doc).unwrap();
        let groups = if doc["spec"]["groups"].is_sequence() {
            &doc["spec"]["groups"]
        } else {
            &doc["groups"]
        };
        for group in groups.as_sequence().into_iter().flatten() {
            for rule in group["rules"].as_sequence().into_iter().flatten() {
                let name = rule["alert"]
                    .as_str()
                    .or(rule["record"].as_str())
                    .unwrap_or("?");
                out.push((
                    format!(
                        "{} rule {name}",
                        path.file_name().unwrap().to_string_lossy()
                    ),
                    rule["expr"].as_str().unwrap().to_string(),
                ));
            }
        }
    }
    out
}

/// Grafana's variables made plain PromQL: interval variables a duration, the others a match-anything regex.
pub(crate) fn grafana_to_promql(expr: &str) -> String {
    let mut s = expr.to_string();
    for interval in [
        "$__rate_interval",
        "$__interval",
        "$__range",
        "${__rate_interval}",
        "${__interval}",
        "${__range}",
    ] {
        s = s.replace(interval, "5m");
    }
    let var = regex::Regex::new(r"\$\{[A-Za-z0-9_]+(:[a-z]+)?\}|\$[A-Za-z_][A-Za-z0-9_]*").unwrap();
    var.replace_all(&s, ".*").into_owned()
}

/// The metric names an expression selects: identifiers that are not functions, aggregations, keywords, or inside
/// label matchers, strings, ranges and grouping clauses.
pub(crate) fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut s = expr.to_string();
    for re in [
        r#""(\\.|[^"\\])*""#,
        r"'(\\.|[^'\\])*'",
        r"`[^`]*`",
        r"\{[^}]*\}",
        r"\[[^\]]*\]",
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",
        r"#[^\n]*",
    ] {
        s = regex::Regex::new(re)
            .unwrap()
            .replace_all(&s, " ")
            .into_owned();
    }
    let keywords = [
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "inf",
        "nan",
        "Inf",
        "NaN",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
        "atan2",
    ];
    let ident = regex::Regex::new(r"[A-Za-z_:][A-Za-z0-9_:]*").unwrap();
    let mut out = BTreeSet::new();
    for m in ident.find_iter(&s) {
        let before = s[..m.start()].chars().last();
        if before.is_some_and(|c| c.is_ascii_digit() || c == '.') {
            continue; // a duration's unit (5m) or a number's exponent
        }
        let after = s[m.end()..].trim_start();
        if after.starts_with('(') || keywords.contains(&m.as_str()) {
            continue;
        }
        out.insert(m.as_str().to_string());
    }
    out
}

/// Every expression through `promtool check rules` (one recording rule each); the failures.
fn promtool_parse(exprs: &[(String, String)], dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, (what, expr)) in exprs.iter().enumerate() {
        let file = dir.join(format!("expr-{i}.yml"));
        let rules = serde_yaml::to_string(&serde_json::json!({
            "groups": [{"name": "parse", "rules": [{"record": format!("parse:expr_{i}"), "expr": expr}]}]
        }))
        .unwrap();
        std::fs::write(&file, rules).unwrap();
        let out = Command::new("promtool")
            .args(["check", "rules"])
            .arg(&file)
            .output()
            .unwrap();
        if !out.status.success() {
            failures.push(format!(
                "{what}: promtool rejects {expr:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    failures
}

/// Metric names in exposition text (`# TYPE` families with their histogram/summary series, and samples).
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut w = rest.split_whitespace();
            let (name, kind) = (w.next().unwrap_or_default(), w.next().unwrap_or_default());
            out.insert(name.to_string());
            let suffixes: &[&str] = match kind {
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["_sum", "_count"],
                "counter" if !name.ends_with("_total") => &["_total"],
                _ => &[],
            };
            for s in suffixes {
                out.insert(format!("{name}{s}"));
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            out.insert(line[..end].to_string());
        }
    }
    out
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn the_metric_name_extraction_finds_selectors_only() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (node, le) (rate(a_bucket{node=~"x|y", le!="z"}[5m]))) / on (node) group_left(pod) b offset 1h
           + max without (x) (c) > bool 2e3 and time() - d unless count(e{q="f g"}) or vector(0)"#,
    );
    let want: BTreeSet<String> = ["a_bucket", "b", "c", "d", "e"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names, want);
    assert_eq!(
        grafana_to_promql(r#"rate(x{node=~"$node", j=~"${job}"}[$__rate_interval])"#),
        r#"rate(x{node=~".*", j=~".*"}[5m])"#
    );
}

#[test]
fn every_dashboard_and_alert_expression_uses_exported_metrics_and_parses() {
    let test = "dashboard";
    if prometheus_or_skip(test).is_none() {
        return;
    }
    let dashboard_path = repo().join("deploy/grafana/wedge-capture.json");
    let dashboard = dashboard_exprs(&dashboard_path);
    let mut exprs = dashboard.clone();
    exprs.extend(rule_exprs(&repo().join("deploy/prometheus/rules.yml")));
    exprs.extend(rule_exprs(
        &repo().join("deploy/kubernetes/prometheusrule.yaml"),
    ));
    assert!(dashboard.len() >= 10, "{dashboard:?}");
    let plain: Vec<(String, String)> = exprs
        .iter()
        .map(|(w, e)| (w.clone(), grafana_to_promql(e)))
        .collect();

    let dir = TempDir::new("dashboard");
    let mut failures = promtool_parse(&plain, dir.path());

    // A real agent during a real wedge: every family it has then.
    let Some(mut fs) = frozen_fs_or_skip(test) else {
        return;
    };
    // The wedged process is a pod's (its identity confirmed by the node's container runtime state), so the
    // pod panel and the pod-carrying alert have their series.
    let Some(pod) = crate::fleet_xid::pod(test, &dir) else {
        return;
    };
    let out = dir.path().join("incidents");
    let comm = unique_comm("g");
    let pattern = format!("^{comm}$");
    let mut args = vec![
        "--out",
        out.to_str().unwrap(),
        "--match-comm",
        &pattern,
        "--metrics-listen",
        "127.0.0.1:0",
        "--node-root",
        pod.node_root.to_str().unwrap(),
        "--pods-log-dir",
        pod.pods_log.to_str().unwrap(),
    ];
    args.extend_from_slice(FAST);
    let mut agent = Agent::start(dir.path(), &args, &[]);
    let addr = metrics_addr(&mut agent);

    let (_prometheus, prometheus) = start_prometheus(
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
             - job_name: wedge-capture\n    static_configs:\n      - targets: ['{addr}']\n        \
             labels: {{node: test-node}}\n"
        ),
    );

    // Prometheus holds the idle agent first, so the incident shows as an increase.
    let value_of = |expr: &str| -> Option<f64> {
        let answer = http_get(
            prometheus,
            &format!("/api/v1/query?query={}", url_encode(expr)),
        )?;
        let parsed: serde_json::Value = serde_json::from_str(&answer).ok()?;
        parsed["data"]["result"][0]["value"][1]
            .as_str()?
            .parse()
            .ok()
    };
    let wait_for = |expr: &str, what: &str| {
        let until = Instant::now() + Duration::from_secs(30);
        while value_of(expr).is_none_or(|v| v < 1.0) {
            assert!(
                Instant::now() < until,
                "{what}: Prometheus never had {expr} >= 1\n{}",
                std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    wait_for(
        "count(wedge_capture_last_scan_timestamp_seconds)",
        "the first scrape",
    );

    let helper = pod.wedge(&dir, &mut fs, &comm);
    wait_incident(&mut agent, &out, helper.pid(), Duration::from_secs(30));
    // The pod's series appears once the pod is confirmed (the scan after the incident's identity).
    let until = Instant::now() + Duration::from_secs(30);
    let live = loop {
        let live = http_get(addr, "/metrics").expect("GET /metrics");
        let pod_series = format!(
            "wedge_capture_wedged_process_info{{{}",
            crate::fleet_xid::POD_LABELS
        );
        if live.contains(&pod_series) {
            break live;
        }
        assert!(
            Instant::now() < until,
            "no {pod_series} series while wedged:\n{live}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let exported = exported_names(&live);

    for (what, expr) in &plain {
        for name in metric_names(expr) {
            let known = exported.contains(&name) || PROMETHEUS_SERIES.contains(&name.as_str());
            if !known {
                failures.push(format!(
                    "{what}: {name} is not exported by the agent (expr {expr:?})"
                ));
            }
        }
    }

    // The real Prometheus evaluates every dashboard query (its own parser and type checks) once it holds the
    // wedge and its incident; what each panel shows is printed, and the headline panels must show the wedge.
    let panel_expr = |title: &str| {
        plain
            .iter()
            .find(|(w, _)| w.contains(title))
            .unwrap_or_else(|| panic!("no panel {title:?}"))
            .1
            .clone()
    };
    wait_for(
        &panel_expr("Wedged threads now"),
        "the wedged-threads panel",
    );
    wait_for(&panel_expr("Wedge incidents (24 h)"), "the incidents panel");
    for (what, expr) in plain.iter().take(dashboard.len()) {
        let answer = http_get(
            prometheus,
            &format!("/api/v1/query?query={}", url_encode(expr)),
        )
        .unwrap_or_default();
        if !answer.contains("\"status\":\"success\"") {
            failures.push(format!(
                "{what}: Prometheus cannot evaluate {expr:?}: {answer}"
            ));
            continue;
        }
        let parsed: serde_json::Value = serde_json::from_str(&answer).unwrap();
        let values: Vec<String> = parsed["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| format!("{}={}", r["metric"], r["value"][1].as_str().unwrap_or("?")))
            .collect();
        eprintln!("dashboard during the wedge: {what}: {}", values.join(", "));
    }
    fs.thaw().unwrap();
    drop(helper);
    let (status, _, log) = agent.terminate();
    assert_eq!(status, Some(0), "{log}");
    drop(pod);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
