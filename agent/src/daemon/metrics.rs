//! The agent's Prometheus metrics (`--metrics-listen`, `--textfile-dir`), from the official
//! `prometheus-client` crate's registry and encoder.
//!
//! The watch loop owns [`Metrics`]: after each scan it sets the numbers ([`Metrics::observe_scan`]),
//! renders the text once and publishes it ([`http::Published`]) for the server thread, and, at most every
//! [`defaults::TEXTFILE_EVERY`] (sooner when the wedged-threads gauge changes), writes
//! `<dir>/wedge_capture.prom` (temp file + rename: node_exporter never reads half a file; no timestamps).
//!
//! Numbers that cannot lie when the agent is gone: `wedge_capture_last_scan_timestamp_seconds` is the Unix
//! time of the last finished scan, on `/metrics` and in the textfile. A dead agent's textfile keeps its last
//! numbers (node_exporter serves it on), and a stuck loop's server keeps serving its last text, but the
//! timestamp stops: `time() - wedge_capture_last_scan_timestamp_seconds > 120` is the dead-agent alert of both
//! scrape paths (docs/agent.md, "Metrics"). On a clean stop the textfile is rewritten once more with the last
//! numbers and `wedge_capture_stopped_timestamp_seconds` (the stop time), never removed: the series stay, so
//! per-node staleness alerts keep working and a reader sees when and that it stopped.
//!
//! The text is the classic Prometheus format (`text/plain; version=0.0.4`), which both Prometheus and
//! node_exporter's textfile collector parse: the crate writes OpenMetrics, so [`to_prometheus_text`]
//! names counter families by their `_total` samples and drops the `# EOF` line. No label names a process:
//! the incident says which one (labels per pid would be unbounded series). The one label set that names a pod,
//! `wedge_capture_wedged_process_info{namespace,pod,container,site}`, exists only while that pod's process is
//! wedged ([`Metrics::set_wedged_processes`] replaces the whole family every scan, at most
//! [`MAX_WEDGED_PROCESS_SERIES`]); `wedge_capture_xid_total{xid}` has the catalogue's numbers, `other` and `sxid`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

use super::http::Published;
use crate::defaults;
use crate::watch::WedgeSummary;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabel {
    trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CaptureStateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct XidLabel {
    xid: String,
}

/// The labels of `wedge_capture_wedged_process_info`: the pod (as the node confirmed it), the container and
/// where the process's first wedged thread sleeps.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct WedgedProcessLabels {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub site: String,
}

/// The most `wedge_capture_wedged_process_info` series at once: a host with more wedged processes than this
/// has one problem, not 64 (the rest are counted in `wedge_capture_wedged_threads`).
pub const MAX_WEDGED_PROCESS_SERIES: usize = 64;
/// The longest label value kept (a site names a call and a lock; a Kubernetes name is at most 253 bytes).
const MAX_LABEL_VALUE: usize = 160;

/// What an incident was written for (the `trigger` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncidentTrigger {
    Wedge,
    OnDemand,
}

impl IncidentTrigger {
    fn label(self) -> &'static str {
        match self {
            IncidentTrigger::Wedge => "wedge",
            IncidentTrigger::OnDemand => "on_demand",
        }
    }
}

/// The numbers of one scan.
#[derive(Debug, Clone, Copy)]
pub struct ScanNumbers {
    pub summary: WedgeSummary,
    pub targets: usize,
    /// Probe timeouts since the start (a running total; the counter follows it).
    pub probe_timeouts: u64,
    /// Captures waiting in the queue and running in the workers.
    pub captures: (usize, usize),
    /// When the scan finished (wall clock): `wedge_capture_last_scan_timestamp_seconds`.
    pub finished_at: SystemTime,
}

impl Default for ScanNumbers {
    fn default() -> Self {
        ScanNumbers {
            summary: WedgeSummary::default(),
            targets: 0,
            probe_timeouts: 0,
            captures: (0, 0),
            finished_at: SystemTime::UNIX_EPOCH,
        }
    }
}

pub struct Metrics {
    registry: Registry,
    wedged: Gauge,
    dstate: Gauge,
    oldest: Gauge<f64, AtomicU64>,
    incidents: Family<TriggerLabel, Counter>,
    targets: Gauge,
    captures: Family<CaptureStateLabel, Gauge>,
    scan: Histogram,
    probe_timeouts: Counter,
    probe_timeouts_seen: u64,
    last_scan: Gauge<f64, AtomicU64>,
    xids: Family<XidLabel, Counter>,
    wedged_processes: Family<WedgedProcessLabels, Gauge>,
    published: Arc<Published>,
    textfile_dir: Option<PathBuf>,
    textfile_written: Option<(Instant, i64)>,
}

/// Scan durations are milliseconds normally, seconds when /proc is slow (a fork storm, a wedged host).
const SCAN_BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// Register `metric` under `name` and keep it: a metric is a shared handle, so the one registered and the one
/// returned are the same series.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// The incidents counter, every trigger present at 0 from the start, so `increase()` sees the first incident.
fn zeroed_incidents() -> Family<TriggerLabel, Counter> {
    let incidents = Family::<TriggerLabel, Counter>::default();
    for trigger in [IncidentTrigger::Wedge, IncidentTrigger::OnDemand] {
        drop(incidents.get_or_create(&TriggerLabel {
            trigger: trigger.label().to_string(),
        }));
    }
    incidents
}

/// The captures gauge, waiting and running at 0 from the start.
fn zeroed_captures() -> Family<CaptureStateLabel, Gauge> {
    let captures = Family::<CaptureStateLabel, Gauge>::default();
    for state in ["waiting", "running"] {
        captures
            .get_or_create(&CaptureStateLabel {
                state: state.to_string(),
            })
            .set(0);
    }
    captures
}

/// The Xid counter with every label present at 0 from the start (a bounded set: the catalogue's Xids,
/// `other`, `sxid`), so `increase()` sees the first Xid of each.
fn zeroed_xids() -> Family<XidLabel, Counter> {
    let xids = Family::<XidLabel, Counter>::default();
    for xid in capture::xid::catalog::entries()
        .iter()
        .map(|e| e.xid.to_string())
        .chain(["other".to_string(), "sxid".to_string()])
    {
        drop(xids.get_or_create(&XidLabel { xid }));
    }
    xids
}

/// `wedge_capture_build_info`: always 1, labelled with the agent's version.
fn build_info() -> Family<VersionLabel, Gauge> {
    let build = Family::<VersionLabel, Gauge>::default();
    build
        .get_or_create(&VersionLabel {
            version: env!("CARGO_PKG_VERSION").to_string(),
        })
        .set(1);
    build
}

impl Metrics {
    /// `stale_after`: how long without a scan makes `/healthz` fail.
    pub fn new(textfile_dir: Option<PathBuf>, stale_after: Duration) -> Metrics {
        let mut registry = Registry::default();
        let wedged = registered(
            &mut registry,
            "wedge_capture_wedged_threads",
            "Watched threads judged wedged now (in D without progress for the threshold)",
            Gauge::default(),
        );
        let dstate = registered(
            &mut registry,
            "wedge_capture_dstate_threads",
            "Watched threads in uninterruptible sleep (D) now",
            Gauge::default(),
        );
        let oldest = registered(
            &mut registry,
            "wedge_capture_oldest_wedge_seconds",
            "How long the longest-wedged thread has been in D (0 when none is wedged)",
            Gauge::<f64, AtomicU64>::default(),
        );
        let incidents = registered(
            &mut registry,
            "wedge_capture_incidents",
            "Incidents written since the agent started, by what triggered them",
            zeroed_incidents(),
        );
        let targets = registered(
            &mut registry,
            "wedge_capture_targets",
            "Processes watched now",
            Gauge::default(),
        );
        let captures = registered(
            &mut registry,
            "wedge_capture_captures",
            "Captures waiting in the per-tenant queue and running in the capture workers (detection never waits for them)",
            zeroed_captures(),
        );
        let scan = registered(
            &mut registry,
            "wedge_capture_scan_duration_seconds",
            "Time to list the targets and read their threads, per scan",
            Histogram::new(SCAN_BUCKETS),
        );
        let probe_timeouts = registered(
            &mut registry,
            "wedge_capture_probe_timeouts",
            "Risky reads (in sacrificial children) that ran into their deadline",
            Counter::default(),
        );
        let last_scan = registered(
            &mut registry,
            "wedge_capture_last_scan_timestamp_seconds",
            "Unix time the watch loop last finished a scan; stops moving when the agent dies or its loop is stuck (alert on time() minus this)",
            Gauge::<f64, AtomicU64>::default(),
        );
        let xids = registered(
            &mut registry,
            "wedge_capture_xid",
            "NVIDIA Xid lines of the kernel log by Xid number (the catalogue's numbers, else other; NVSwitch SXids as sxid), each line counted once, across agent restarts too",
            zeroed_xids(),
        );
        let wedged_processes = registered(
            &mut registry,
            "wedge_capture_wedged_process_info",
            "1 for each process wedged now, labelled with its pod as the node confirmed it (namespace, pod; empty when not confirmed), its container and the site of its first wedged thread; absent once the wedge resolves",
            Family::<WedgedProcessLabels, Gauge>::default(),
        );
        registry.register(
            "wedge_capture_build_info",
            "Always 1; the version label says which agent runs",
            build_info(),
        );
        Metrics {
            registry,
            wedged,
            dstate,
            oldest,
            incidents,
            targets,
            captures,
            scan,
            probe_timeouts,
            probe_timeouts_seen: 0,
            last_scan,
            xids,
            wedged_processes,
            published: Arc::new(Published::new(stale_after)),
            textfile_dir,
            textfile_written: None,
        }
    }

    /// What the HTTP server serves.
    pub fn published(&self) -> Arc<Published> {
        self.published.clone()
    }

    /// A reload may move or turn off the textfile.
    pub fn set_textfile_dir(&mut self, dir: Option<PathBuf>) {
        if dir != self.textfile_dir {
            self.textfile_dir = dir;
            self.textfile_written = None;
        }
    }

    pub fn incident(&mut self, trigger: IncidentTrigger) {
        self.incidents
            .get_or_create(&TriggerLabel {
                trigger: trigger.label().to_string(),
            })
            .inc();
    }

    /// One Xid (or SXid) line of the kernel log: `wedge_capture_xid_total{xid}` goes up by one.
    pub fn xid(&mut self, event: &capture::xid::XidEvent) {
        self.xids
            .get_or_create(&XidLabel {
                xid: capture::xid::metric_label(event),
            })
            .inc();
    }

    /// The processes wedged now (the next render shows exactly these, at most
    /// [`MAX_WEDGED_PROCESS_SERIES`]): a resolved wedge's series goes away, so the series never accumulate.
    pub fn set_wedged_processes(&mut self, processes: Vec<WedgedProcessLabels>) {
        let mut processes: Vec<WedgedProcessLabels> = processes
            .into_iter()
            .map(|p| WedgedProcessLabels {
                namespace: clip(&p.namespace),
                pod: clip(&p.pod),
                container: clip(&p.container),
                site: clip(&p.site),
            })
            .collect();
        processes.sort();
        processes.dedup();
        processes.truncate(MAX_WEDGED_PROCESS_SERIES);
        self.wedged_processes.clear();
        for labels in &processes {
            self.wedged_processes.get_or_create(labels).set(1);
        }
    }

    /// Set the numbers of a scan, then publish them (and maybe write the textfile; its error is returned
    /// for the log, the scan goes on).
    pub fn observe_scan(&mut self, numbers: ScanNumbers) -> Result<(), String> {
        let summary = numbers.summary;
        self.wedged.set(summary.wedged_threads as i64);
        self.dstate.set(summary.dstate_threads as i64);
        self.oldest
            .set(summary.oldest_wedge.unwrap_or_default().as_secs_f64());
        self.targets.set(numbers.targets as i64);
        for (state, count) in [
            ("waiting", numbers.captures.0),
            ("running", numbers.captures.1),
        ] {
            self.captures
                .get_or_create(&CaptureStateLabel {
                    state: state.to_string(),
                })
                .set(count as i64);
        }
        self.scan.observe(summary.scan_duration.as_secs_f64());
        self.last_scan.set(unix_seconds(numbers.finished_at));
        if numbers.probe_timeouts > self.probe_timeouts_seen {
            self.probe_timeouts
                .inc_by(numbers.probe_timeouts - self.probe_timeouts_seen);
            self.probe_timeouts_seen = numbers.probe_timeouts;
        }
        let wedged = summary.wedged_threads as i64;
        let textfile_due = self.textfile_dir.is_some()
            && match self.textfile_written {
                None => true,
                Some((at, last_wedged)) => {
                    at.elapsed() >= defaults::TEXTFILE_EVERY || last_wedged != wedged
                }
            };
        // Rendering costs ~50-70 µs a scan (issue 40): only when someone reads the text, i.e. a server
        // holds the published text (`published()` hands out the only other references) or the textfile
        // is due.
        let served = Arc::strong_count(&self.published) > 1;
        if !served && !textfile_due {
            return Ok(());
        }
        let text = self.render();
        if served {
            self.published.publish(text.clone().into_bytes());
        }
        let Some(dir) = self.textfile_dir.as_ref().filter(|_| textfile_due) else {
            return Ok(());
        };
        self.textfile_written = Some((Instant::now(), wedged));
        write_textfile(dir, &text)
    }

    /// The agent stops cleanly: the textfile is rewritten with the last numbers and the stop time
    /// (`wedge_capture_stopped_timestamp_seconds`), so node_exporter never serves numbers that look current
    /// from a stopped agent. Its error is returned for the log.
    pub fn stopped(&mut self) -> Result<(), String> {
        let stopped = Gauge::<f64, AtomicU64>::default();
        stopped.set(unix_seconds(SystemTime::now()));
        self.registry.register(
            "wedge_capture_stopped_timestamp_seconds",
            "Unix time the agent stopped (present only in the textfile it leaves behind); its numbers are as of wedge_capture_last_scan_timestamp_seconds",
            stopped,
        );
        let text = self.render();
        self.published.publish(text.clone().into_bytes());
        match &self.textfile_dir {
            Some(dir) => write_textfile(dir, &text),
            None => Ok(()),
        }
    }

    /// The exposition text, in the classic Prometheus format.
    pub fn render(&self) -> String {
        let mut open_metrics = String::new();
        // Writing into a String cannot fail.
        let _ =
            prometheus_client::encoding::text::encode_registry(&mut open_metrics, &self.registry);
        to_prometheus_text(&open_metrics)
    }
}

/// A label value: at most [`MAX_LABEL_VALUE`] bytes (cut at a character boundary), control characters dropped.
fn clip(value: &str) -> String {
    let mut out = String::new();
    for c in value.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_LABEL_VALUE {
            break;
        }
        out.push(c);
    }
    out
}

/// The Kubernetes container name of container `id` in pod `namespace/pod`, from the kubelet's
/// `<node_root>/var/log/containers/<pod>_<namespace>_<container>-<id>.log` entries (only names are read, at
/// most 10 000 of them; nothing is opened or followed).
pub fn container_name(node_root: &Path, namespace: &str, pod: &str, id: &str) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let prefix = format!("{pod}_{namespace}_");
    let suffix = format!("-{id}.log");
    std::fs::read_dir(node_root.join("var/log/containers"))
        .ok()?
        .take(10_000)
        .filter_map(|e| e.ok())
        .find_map(|e| {
            let name = std::str::from_utf8(e.file_name().as_bytes())
                .ok()?
                .to_string();
            let container = name.strip_prefix(&prefix)?.strip_suffix(&suffix)?;
            (!container.is_empty() && !container.contains(['/', '_']))
                .then(|| container.to_string())
        })
}

/// The info labels of a wedged incident: namespace and pod only when the node confirmed the pod (a cgroup path
/// can name another tenant's pod: an alert never blames a pod on a claim), the container's Kubernetes name
/// (else the first 12 hex digits of its id) and the site of the first thread still wedged.
/// `names` caches container names by container id between scans (the caller keeps it to the wedged ones).
pub fn wedged_process_labels(
    incident: &reports::model::Incident,
    node_root: &Path,
    names: &mut std::collections::HashMap<String, Option<String>>,
) -> WedgedProcessLabels {
    let container = incident.process.container.as_ref();
    let pod = container
        .filter(|c| c.pod_confirmed())
        .and_then(|c| c.pod.as_ref());
    let (namespace, pod_name) = pod
        .map(|p| (p.namespace.clone(), p.name.clone()))
        .unwrap_or_default();
    let container_label = container
        .map(|c| {
            pod.and_then(|p| {
                names
                    .entry(c.id.clone())
                    .or_insert_with(|| container_name(node_root, &p.namespace, &p.name, &c.id))
                    .clone()
            })
            .unwrap_or_else(|| c.id.chars().take(12).collect())
        })
        .unwrap_or_default();
    let site = incident
        .wedged_threads
        .iter()
        .find(|w| w.fate.is_wedged())
        .and_then(|w| w.at_detection.as_ref())
        .and_then(|t| t.site.clone().or_else(|| t.wchan.clone()))
        .unwrap_or_default();
    WedgedProcessLabels {
        namespace,
        pod: pod_name,
        container: container_label,
        site,
    }
}

fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The crate's OpenMetrics text as the classic text format: a counter family is named after its
/// `_total` sample (OpenMetrics names it without), and there is no `# EOF` or `# UNIT` line.
pub fn to_prometheus_text(open_metrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in open_metrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                counters.insert(name.to_string());
            }
        }
    }
    let mut out = String::with_capacity(open_metrics.len() + 64);
    for line in open_metrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(line.trim_end()),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// `<dir>/wedge_capture.prom`, replaced whole. Not fsynced on purpose: it is rewritten every few seconds,
/// and a watch loop must not wait on a slow disk for numbers that are only current anyway.
fn write_textfile(dir: &Path, text: &str) -> Result<(), String> {
    let target = dir.join(defaults::TEXTFILE_NAME);
    // node_exporter reads only `*.prom`: the temp name must not end so.
    let temp = dir.join(format!(".{}.tmp", defaults::TEXTFILE_NAME));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)?;
        // node_exporter reads it as another user: 0644 whatever the umask (the unit sets UMask=0077).
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
        file.write_all(text.as_bytes())?;
        drop(file);
        std::fs::rename(&temp, &target)
    })();
    result.map_err(|e| {
        let hint = crate::host::sandbox::write_hint(&e);
        format!("cannot write {}: {e}{hint}", target.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(wedged: usize) -> ScanNumbers {
        ScanNumbers {
            summary: WedgeSummary {
                wedged_threads: wedged,
                dstate_threads: wedged + 1,
                oldest_wedge: (wedged > 0).then_some(Duration::from_secs(42)),
                scan_duration: Duration::from_millis(3),
            },
            targets: 5,
            probe_timeouts: 2,
            captures: (3, 1),
            finished_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        }
    }

    #[test]
    fn every_metric_of_the_issue_is_there_with_its_type() {
        let mut metrics = Metrics::new(None, Duration::from_secs(60));
        metrics.incident(IncidentTrigger::Wedge);
        metrics.observe_scan(numbers(1)).unwrap();
        let text = metrics.render();
        for expected in [
            "# TYPE wedge_capture_wedged_threads gauge",
            "wedge_capture_wedged_threads 1",
            "wedge_capture_dstate_threads 2",
            "# TYPE wedge_capture_oldest_wedge_seconds gauge",
            "wedge_capture_oldest_wedge_seconds 42.0",
            "# TYPE wedge_capture_incidents_total counter",
            "wedge_capture_incidents_total{trigger=\"wedge\"} 1",
            "wedge_capture_incidents_total{trigger=\"on_demand\"} 0",
            "wedge_capture_targets 5",
            "# TYPE wedge_capture_scan_duration_seconds histogram",
            "wedge_capture_scan_duration_seconds_count 1",
            "# TYPE wedge_capture_probe_timeouts_total counter",
            "wedge_capture_probe_timeouts_total 2",
            "# TYPE wedge_capture_last_scan_timestamp_seconds gauge",
            "wedge_capture_last_scan_timestamp_seconds 1800000000.0",
            &format!(
                "wedge_capture_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            ),
        ] {
            assert!(
                text.lines().any(|l| l == expected),
                "missing {expected:?} in\n{text}"
            );
        }
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains("pid"), "no per-pid label: {text}");
    }

    /// Issue 37: Xids counted by a bounded label, present at 0 from the start; the wedged-process info series
    /// exist only while their process is wedged, bounded, with the pod only when the node confirmed it.
    #[test]
    fn xids_and_wedged_processes() {
        let mut metrics = Metrics::new(None, Duration::from_secs(60));
        let text = metrics.render();
        assert!(
            text.contains("# TYPE wedge_capture_xid_total counter"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == "wedge_capture_xid_total{xid=\"79\"} 0"),
            "{text}"
        );
        let line = |s: &str| capture::xid::parse_xid_line(s.as_bytes()).unwrap();
        metrics.xid(&line(
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, GPU has fallen off the bus.",
        ));
        metrics.xid(&line("NVRM: Xid (PCI:0000:3b:00): 79, x"));
        metrics.xid(&line("NVRM: Xid (PCI:0000:3b:00): 4242424, x"));
        metrics.xid(&line(
            "nvidia-nvswitch0: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 1 x",
        ));
        let text = metrics.render();
        for expected in [
            "wedge_capture_xid_total{xid=\"79\"} 2",
            "wedge_capture_xid_total{xid=\"other\"} 1",
            "wedge_capture_xid_total{xid=\"sxid\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == expected),
                "missing {expected:?} in\n{text}"
            );
        }
        let xid_series = text
            .lines()
            .filter(|l| l.starts_with("wedge_capture_xid_total{"))
            .count();
        assert_eq!(xid_series, capture::xid::catalog::entries().len() + 2);

        assert!(
            !text.contains("wedge_capture_wedged_process_info{"),
            "{text}"
        );
        let labels = |pod: &str| WedgedProcessLabels {
            namespace: "ml".into(),
            pod: pod.into(),
            container: "trainer".into(),
            site: "ioctl NV_ESC_RM_CONTROL [RM API lock]\n".into(),
        };
        metrics.set_wedged_processes(vec![labels("job-0"), labels("job-0")]);
        let text = metrics.render();
        assert!(
            text.lines().any(|l| l
                == "wedge_capture_wedged_process_info{namespace=\"ml\",pod=\"job-0\",container=\"trainer\",site=\"ioctl NV_ESC_RM_CONTROL [RM API lock]\"} 1"),
            "{text}"
        );
        metrics.set_wedged_processes((0..500).map(|i| labels(&format!("job-{i}"))).collect());
        let series = metrics
            .render()
            .lines()
            .filter(|l| l.starts_with("wedge_capture_wedged_process_info{"))
            .count();
        assert_eq!(series, MAX_WEDGED_PROCESS_SERIES);
        // Label values others chose stay one well-formed sample: quotes and backslashes escaped, controls gone.
        metrics.set_wedged_processes(vec![WedgedProcessLabels {
            site: "a\"b\\c\u{1b}[31m".into(),
            ..labels("job-q")
        }]);
        let text = metrics.render();
        assert!(
            text.lines()
                .any(|l| l.ends_with(r#"site="a\"b\\c[31m"} 1"#)),
            "{text}"
        );
        metrics.set_wedged_processes(Vec::new());
        assert!(!metrics
            .render()
            .contains("wedge_capture_wedged_process_info{"));
    }

    #[test]
    fn labels_of_a_wedged_incident() {
        use reports::model::{ContainerInfo, Incident, PodIdentity, PodInfo, WedgedThread};
        let node = tempfile::tempdir().unwrap();
        let id = "ab".repeat(32);
        std::fs::create_dir_all(node.path().join("var/log/containers")).unwrap();
        std::fs::write(
            node.path()
                .join(format!("var/log/containers/job-0_ml_trainer-{id}.log")),
            b"",
        )
        .unwrap();
        let mut incident = Incident::new(7);
        incident.process.container = Some(ContainerInfo {
            runtime: "containerd".into(),
            id: id.clone(),
            pod_uid: Some("1a2b3c4d-0000-1111-2222-333344445555".into()),
            pod: Some(PodInfo {
                namespace: "ml".into(),
                name: "job-0".into(),
            }),
            pod_identity: Some(PodIdentity::ContainerRuntime),
            pod_identity_note: None,
        });
        incident.wedged_threads.push(WedgedThread {
            tid: 7,
            at_detection: Some(capture::ThreadSnapshot {
                site: Some("page fault on a frozen filesystem".into()),
                ..Default::default()
            }),
            ..WedgedThread::default()
        });
        let mut names = std::collections::HashMap::new();
        let l = wedged_process_labels(&incident, node.path(), &mut names);
        assert_eq!(
            (
                l.namespace.as_str(),
                l.pod.as_str(),
                l.container.as_str(),
                l.site.as_str()
            ),
            (
                "ml",
                "job-0",
                "trainer",
                "page fault on a frozen filesystem"
            )
        );
        // A pod only claimed by the cgroup name is never a label; the container falls back to its short id.
        incident.process.container.as_mut().unwrap().pod_identity = Some(PodIdentity::CgroupName);
        let l = wedged_process_labels(&incident, node.path(), &mut names);
        assert_eq!((l.namespace.as_str(), l.pod.as_str()), ("", ""));
        assert_eq!(l.container, "abababababab");
    }

    #[test]
    fn the_probe_counter_follows_the_running_total() {
        let mut metrics = Metrics::new(None, Duration::from_secs(60));
        metrics.observe_scan(numbers(0)).unwrap();
        metrics.observe_scan(numbers(0)).unwrap();
        let mut more = numbers(0);
        more.probe_timeouts = 7;
        metrics.observe_scan(more).unwrap();
        assert!(metrics
            .render()
            .lines()
            .any(|l| l == "wedge_capture_probe_timeouts_total 7"));
        assert!(metrics
            .render()
            .lines()
            .any(|l| l == "wedge_capture_oldest_wedge_seconds 0.0"));
    }

    #[test]
    fn the_textfile_is_replaced_whole_and_rewritten_when_a_wedge_appears() {
        let dir = tempfile::tempdir().unwrap();
        let mut metrics = Metrics::new(Some(dir.path().to_path_buf()), Duration::from_secs(60));
        metrics.observe_scan(numbers(0)).unwrap();
        let path = dir.path().join(defaults::TEXTFILE_NAME);
        let first = std::fs::read_to_string(&path).unwrap();
        assert!(first.contains("wedge_capture_wedged_threads 0\n"));
        metrics.observe_scan(numbers(1)).unwrap();
        let second = std::fs::read_to_string(&path).unwrap();
        assert!(
            second.contains("wedge_capture_wedged_threads 1\n"),
            "{second}"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from(defaults::TEXTFILE_NAME)]
        );
    }

    #[test]
    fn a_clean_stop_rewrites_the_textfile_with_the_last_numbers_and_the_stop_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut metrics = Metrics::new(Some(dir.path().to_path_buf()), Duration::from_secs(60));
        metrics.observe_scan(numbers(1)).unwrap();
        let path = dir.path().join(defaults::TEXTFILE_NAME);
        assert!(!std::fs::read_to_string(&path)
            .unwrap()
            .contains("wedge_capture_stopped_timestamp_seconds"));
        let before = unix_seconds(SystemTime::now());
        metrics.stopped().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("wedge_capture_wedged_threads 1\n"), "{text}");
        assert!(text.contains("wedge_capture_last_scan_timestamp_seconds 1800000000.0\n"));
        let stopped: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("wedge_capture_stopped_timestamp_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(stopped >= before && stopped < before + 5.0, "{text}");
    }

    #[test]
    fn an_unwritable_textfile_dir_is_an_error_not_a_panic() {
        let mut metrics = Metrics::new(
            Some(PathBuf::from("/nonexistent/wedge-capture")),
            Duration::from_secs(60),
        );
        let err = metrics.observe_scan(numbers(0)).unwrap_err();
        assert!(err.contains("wedge_capture.prom"), "{err}");
    }
}
