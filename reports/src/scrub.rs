//! `report bundle --public`: what of an incident must not reach a public issue, and how it is removed.
//!
//! An incident describes one process, but it is taken on a shared host. Before it is posted where anyone can read
//! it, [`scrub`] drops or masks what identifies the host or belongs to other tenants:
//! - the host name (also inside the incident id: the archive's directory is renamed `<time>-scrubbed-<pid>`) and
//!   the boot id (also the 16 raw bytes of the ring header's copy);
//! - the host-wide D-state census rows of other processes (their comm and cgroup name other pods); the count stays;
//! - the wait graph's threads of other processes (a host-wide lock's waiters and holders): comm masked, what they
//!   do dropped; their tids stay (the graph's edges);
//! - kernel-log lines about other processes (classified `other_process`, or naming a pid that is not one of the
//!   watched process's pids and tids);
//! - GPU serial numbers and UUIDs (`GPU-…`, `MIG-…`, `Serial Number : …` in `nvidia-smi -q`), and the process list
//!   of `nvidia-smi -q` (other processes' pids and names);
//! - source text: the Python frames' `code` (a line of the tenant's program, or of whatever file the target
//!   named: never public), also out of the verdict's "(from train.py:142 `…`)" clause. The file, line and
//!   function stay.
//!
//! The values removed from structured fields are then masked ([`MASK`]) wherever else they occur, in every file of
//! the archive (text and binary: a binary match is overwritten with `*` bytes of the same length, so a ring copy
//! keeps its layout). Values shorter than [`MIN_MASKED_LEN`] bytes are only dropped from their fields: masking
//! `sh` everywhere would destroy the report without hiding anything. The watched process's own comm and cgroup
//! are never masked (they are what the bug is about), even when another process shares them.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use regex::Regex;

use crate::model::{Incident, KernelLogLine, Relevance};

/// What replaces a scrubbed value in text.
pub const MASK: &str = "[scrubbed]";
/// Values shorter than this are dropped from their fields but not searched for elsewhere.
pub const MIN_MASKED_LEN: usize = 3;

/// An incident with the host's and other tenants' data removed, and the means to scrub the raw files beside it.
#[derive(Debug, Clone)]
pub struct Scrubbed {
    pub incident: Incident,
    /// The id the archive uses (the host name removed).
    pub id: String,
    pub summary: Summary,
    /// Literal values masked wherever they occur, longest first (a value containing another is masked whole).
    values: Vec<String>,
    /// Texts of the kernel-log lines dropped: a raw file's line containing one is dropped too.
    dropped_lines: Vec<String>,
    /// The boot id as the 16 bytes a ring header holds.
    boot_id_raw: Option<[u8; 16]>,
}

/// What was scrubbed, for the note at the top of report.md.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub hostname: bool,
    pub boot_id: bool,
    pub other_dstate_tasks: usize,
    pub kernel_log_lines: usize,
    pub gpu_identifiers: usize,
    pub nvidia_smi_processes: usize,
    /// Python source lines (frames' `code`) removed.
    pub source_lines: usize,
    /// Threads of other processes in the wait graph (their comm and what they do).
    pub wait_graph_threads: usize,
}

impl Summary {
    /// The Markdown note put at the top of a public report.md.
    pub fn note(&self) -> String {
        let mut parts = Vec::new();
        parts.push(if self.hostname {
            "the host name (also in the incident id)".to_string()
        } else {
            "the host name (none recorded)".to_string()
        });
        parts.push(if self.boot_id {
            "the boot id (also in the ring copy's header)".to_string()
        } else {
            "the boot id (none recorded)".to_string()
        });
        parts.push(format!(
            "{} other process{} in the host's D-state census (comm, cgroup; the total stays)",
            self.other_dstate_tasks,
            plural_es(self.other_dstate_tasks)
        ));
        parts.push(format!(
            "{} kernel-log line{} about other processes",
            self.kernel_log_lines,
            plural_s(self.kernel_log_lines)
        ));
        parts.push(format!(
            "{} GPU serial number{} and UUID{}",
            self.gpu_identifiers,
            plural_s(self.gpu_identifiers),
            plural_s(self.gpu_identifiers)
        ));
        parts.push(format!(
            "{} `nvidia-smi -q` process entr{}",
            self.nvidia_smi_processes,
            if self.nvidia_smi_processes == 1 {
                "y"
            } else {
                "ies"
            }
        ));
        parts.push(format!(
            "{} Python source line{} (source text is never public; file, line and function stay)",
            self.source_lines,
            plural_s(self.source_lines)
        ));
        if self.wait_graph_threads > 0 {
            parts.push(format!(
                "{} thread{} of other processes in the wait graph (comm, what it does)",
                self.wait_graph_threads,
                plural_s(self.wait_graph_threads)
            ));
        }
        format!(
            "> **Scrubbed for a public issue** (`wedge-capture report bundle --public`): removed or masked as \
             `{MASK}`: {}. Every file of this archive was scrubbed the same way.\n\n",
            parts.join("; ")
        )
    }
}

fn plural_s(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn plural_es(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "es"
    }
}

/// GPU and MIG UUIDs as NVIDIA prints them.
fn uuid_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)\b(?:GPU|MIG)-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b")
            .expect("valid regex")
    })
}

/// `nvidia-smi -q` lines whose value identifies a board or another process: serials, UUIDs, process ids and names.
fn smi_line_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?m)^(\s*(?:Serial Number|GPU UUID|Process ID|Name|Module ID)\s*:\s*)(\S[^\r\n]*)$",
        )
        .expect("valid regex")
    })
}

/// Pids a kernel-log line names: `comm[pid]`, `pid=N`, `pid N`, `task comm:N`, `Killed process N`.
fn pid_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?i)(?:\[(\d+)\]|\bpid[=: ]\s*(\d+)|\btask [^\s:]+:(\d+)|\bkilled process (\d+))",
        )
        .expect("valid regex")
    })
}

/// Remove the host's and other tenants' data from `incident` (see the module documentation).
pub fn scrub(incident: &Incident) -> Scrubbed {
    let mut out = incident.clone();
    let mut found = Found::default();
    let own_comm = incident.process.comm.clone();
    let own_cgroup = incident.process.cgroup.clone().unwrap_or_default();

    let boot_id_raw = take_host_ids(&mut out, &mut found);
    keep_own_dstate_tasks(incident, &mut out, &mut found);
    mask_other_wait_graph_threads(incident.process.pid, &mut out, &mut found);
    let dropped_lines = drop_other_processes_lines(&own_pids(incident), &mut out, &mut found);
    drop_source_text(&mut out, &mut found);

    // GPU identifiers and nvidia-smi's process list, wherever text is stored.
    let mut json = serde_json::to_value(&out).unwrap_or_default();
    let Found {
        mut summary,
        mut values,
    } = found;
    let mut gpu = BTreeSet::new();
    collect_gpu_values(&json, &mut gpu, &mut summary);
    summary.gpu_identifiers = gpu.len();
    values.extend(gpu);
    values.retain(|v| v.len() >= MIN_MASKED_LEN && *v != own_comm && *v != own_cgroup);
    let mut values: Vec<String> = values.into_iter().collect();
    values.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));

    let id = public_id(&incident.id, incident.process.pid);
    let mut scrubbed = Scrubbed {
        incident: Incident::default(),
        id: id.clone(),
        summary,
        values,
        dropped_lines,
        boot_id_raw,
    };
    scrubbed.mask_strings(&mut json);
    let mut incident: Incident = serde_json::from_value(json).unwrap_or_else(|_| out.clone());
    incident.id = id;
    scrubbed.incident = incident;
    scrubbed
}

/// What the steps of [`scrub`] found as they went: what went (the summary), and the values to mask wherever else
/// they occur.
#[derive(Default)]
struct Found {
    summary: Summary,
    values: BTreeSet<String>,
}

/// The host name and boot id go (and are masked wherever else they occur); returns the boot id's raw bytes.
fn take_host_ids(out: &mut Incident, found: &mut Found) -> Option<[u8; 16]> {
    let hostname = std::mem::take(&mut out.host.hostname);
    if !hostname.is_empty() {
        found.summary.hostname = true;
        found.values.insert(id_safe(&hostname));
        found.values.insert(hostname);
    }
    let boot_id = std::mem::take(&mut out.host.boot_id);
    let boot_id_raw = parse_uuid(&boot_id);
    if !boot_id.is_empty() {
        found.summary.boot_id = true;
        found.values.insert(boot_id.replace('-', ""));
        found.values.insert(boot_id);
    }
    boot_id_raw
}

/// The host's D-state tasks of other processes go (their comms and cgroups masked); the total stays.
fn keep_own_dstate_tasks(incident: &Incident, out: &mut Incident, found: &mut Found) {
    let own_comm = &incident.process.comm;
    let own_cgroup = incident.process.cgroup.as_deref().unwrap_or_default();
    let tasks = std::mem::take(&mut out.host_context.d_state_tasks);
    // The total stays (the note says so): rows go, the count of tasks in D does not.
    let total = out.host_context.d_state_total.unwrap_or(tasks.len() as u64);
    for task in tasks {
        if task.pid == incident.process.pid {
            out.host_context.d_state_tasks.push(task);
            continue;
        }
        found.summary.other_dstate_tasks += 1;
        if task.comm != *own_comm {
            found.values.insert(task.comm);
        }
        if let Some(cgroup) = task.cgroup.filter(|c| c != own_cgroup) {
            found.values.insert(cgroup);
        }
    }
    if total > out.host_context.d_state_tasks.len() as u64 {
        out.host_context.d_state_total = Some(total);
    }
}

/// The wait graph's threads of other processes (host-wide locks): their comms masked, what they do dropped.
fn mask_other_wait_graph_threads(own: i32, out: &mut Incident, found: &mut Found) {
    let Some(graph) = out.wait_graph.as_mut() else {
        return;
    };
    for lock in graph.locks.iter_mut() {
        if lock.identity.pid.is_some_and(|p| p != own) {
            if let Some(comm) = lock.identity.comm.take() {
                found.values.insert(comm);
            }
        }
        for w in lock.waiters.iter_mut().filter(|w| w.pid != own) {
            found.summary.wait_graph_threads += 1;
            found
                .values
                .insert(std::mem::replace(&mut w.comm, MASK.to_string()));
            w.call = MASK.to_string();
        }
        for h in lock.holders.iter_mut().filter(|h| h.pid != own) {
            found.summary.wait_graph_threads += 1;
            found
                .values
                .insert(std::mem::replace(&mut h.comm, MASK.to_string()));
            h.doing = MASK.to_string();
            h.call = None;
        }
    }
}

/// Kernel log lines and Xids about another process go; returns the dropped lines' text (a bundled kernel-log.txt
/// loses them too).
fn drop_other_processes_lines(
    own_pids: &BTreeSet<u64>,
    out: &mut Incident,
    found: &mut Found,
) -> Vec<String> {
    let mut dropped_lines = Vec::new();
    let lines = std::mem::take(&mut out.kernel_log);
    for line in lines {
        if about_another_process(&line, own_pids) {
            found.summary.kernel_log_lines += 1;
            dropped_lines.push(line.text);
        } else {
            out.kernel_log.push(line);
        }
    }
    // An Xid the driver printed for another process goes with its line (its pid and name are that process's).
    let (own_xids, other_xids): (Vec<_>, Vec<_>) =
        std::mem::take(&mut out.xids).into_iter().partition(|x| {
            x.pid
                .is_none_or(|p| u64::try_from(p).is_ok_and(|p| own_pids.contains(&p)))
        });
    out.xids = own_xids;
    found
        .values
        .extend(other_xids.into_iter().filter_map(|x| x.name));
    dropped_lines
}

/// Source text: never public. Each frame's line text goes (saying why), the verdict's clause loses it, and the
/// texts are masked wherever else they occur.
fn drop_source_text(out: &mut Incident, found: &mut Found) {
    for thread in &mut out.wedged_threads {
        let with_code = crate::verdict::python_clause(thread);
        if let Some(frames) = thread.python_stack.as_mut() {
            for frame in frames.iter_mut() {
                drop_code(frame, &mut found.values, &mut found.summary);
            }
        }
        let without = crate::verdict::python_clause(thread);
        if let (Some(with_code), Some(without)) = (with_code, without) {
            if with_code != without {
                out.verdict = out.verdict.replace(&with_code, &without);
            }
        }
    }
    for sample in &mut out.samples {
        for thread in &mut sample.python_threads {
            for frame in &mut thread.frames {
                drop_code(frame, &mut found.values, &mut found.summary);
            }
        }
    }
}

impl Scrubbed {
    /// Scrub a text: lines holding a dropped kernel-log line go, GPU identifiers and scrubbed values are masked.
    pub fn text(&self, text: &str) -> String {
        let mut kept = String::with_capacity(text.len());
        for line in text.split_inclusive('\n') {
            if self
                .dropped_lines
                .iter()
                .any(|dropped| !dropped.is_empty() && line.contains(dropped.as_str()))
            {
                continue;
            }
            kept.push_str(line);
        }
        self.mask(&kept)
    }

    /// Scrub a file's bytes: UTF-8 text as [`Scrubbed::text`]; anything else byte for byte, every scrubbed
    /// value (and the boot id's raw bytes) overwritten with as many `*`, so that binary layouts survive.
    pub fn bytes(&self, bytes: &[u8]) -> Vec<u8> {
        if let Ok(text) = std::str::from_utf8(bytes) {
            return self.text(text).into_bytes();
        }
        let mut out = bytes.to_vec();
        let mut needles: Vec<Vec<u8>> = self.values.iter().map(|v| v.as_bytes().to_vec()).collect();
        needles.extend(self.boot_id_raw.map(|raw| raw.to_vec()));
        for needle in needles.iter().filter(|n| !n.is_empty()) {
            let mut at = 0;
            while let Some(pos) = find(&out[at..], needle) {
                let start = at + pos;
                out[start..start + needle.len()].fill(b'*');
                at = start + needle.len();
            }
        }
        out
    }

    fn mask(&self, text: &str) -> String {
        let mut text = smi_line_regex()
            .replace_all(text, |c: &regex::Captures| format!("{}{MASK}", &c[1]))
            .into_owned();
        text = uuid_regex().replace_all(&text, MASK).into_owned();
        for value in &self.values {
            if text.contains(value.as_str()) {
                text = text.replace(value.as_str(), MASK);
            }
        }
        text
    }

    fn mask_strings(&self, value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(s) => {
                let masked = self.mask(s);
                if masked != *s {
                    *s = masked;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| self.mask_strings(v)),
            serde_json::Value::Object(map) => map.values_mut().for_each(|v| self.mask_strings(v)),
            _ => {}
        }
    }
}

/// Why a public bundle's Python frame has no `code`.
pub const SOURCE_TEXT_DROPPED: &str = "left out of a public bundle: source text is never public";

/// Take a frame's source text out (counted, and kept to be masked elsewhere).
fn drop_code(
    frame: &mut crate::model::PythonFrame,
    values: &mut BTreeSet<String>,
    summary: &mut Summary,
) {
    if let Some(code) = frame.code.take() {
        summary.source_lines += 1;
        frame.code_not_captured = Some(SOURCE_TEXT_DROPPED.to_string());
        let code = code.trim().to_string();
        if !code.is_empty() {
            values.insert(code);
        }
    }
}

/// The watched process's pid and every tid the incident names.
fn own_pids(incident: &Incident) -> BTreeSet<u64> {
    let mut pids = BTreeSet::new();
    pids.insert(incident.process.pid as u64);
    pids.extend(incident.process.nspid.iter().map(|p| *p as u64));
    pids.extend(incident.wedged_threads.iter().map(|t| t.tid as u64));
    for sample in &incident.samples {
        pids.extend(sample.snapshot.threads.iter().map(|t| t.tid as u64));
    }
    for sample in &incident.history {
        pids.extend(sample.threads.iter().map(|t| t.tid as u64));
    }
    pids
}

/// Whether a kernel-log line is about another process: classified so, or naming a pid that is not ours.
fn about_another_process(line: &KernelLogLine, own: &BTreeSet<u64>) -> bool {
    match line.relevance {
        Some(Relevance::OtherProcess) => return true,
        Some(Relevance::Target) => return false,
        _ => {}
    }
    pid_regex().captures_iter(&line.text).any(|c| {
        c.iter()
            .skip(1)
            .flatten()
            .filter_map(|m| m.as_str().parse::<u64>().ok())
            .any(|pid| !own.contains(&pid))
    })
}

/// Collect UUIDs, serials and nvidia-smi process entries found in any string of `value`.
fn collect_gpu_values(
    value: &serde_json::Value,
    out: &mut BTreeSet<String>,
    summary: &mut Summary,
) {
    match value {
        serde_json::Value::String(s) => {
            out.extend(uuid_regex().find_iter(s).map(|m| m.as_str().to_string()));
            for c in smi_line_regex().captures_iter(s) {
                let key = c[1].trim().trim_end_matches(':').trim();
                let value = c[2].trim().to_string();
                match key {
                    "Process ID" => summary.nvidia_smi_processes += 1,
                    // A process name is not a GPU identifier; masked through the line, counted with its pid.
                    "Name" => {}
                    _ => {
                        out.insert(value);
                    }
                }
            }
        }
        serde_json::Value::Array(items) => items
            .iter()
            .for_each(|v| collect_gpu_values(v, out, summary)),
        serde_json::Value::Object(map) => map
            .values()
            .for_each(|v| collect_gpu_values(v, out, summary)),
        _ => {}
    }
}

/// The host name as [`crate::model::incident_id`] writes it into an id (`[A-Za-z0-9.-]`, others `_`).
fn id_safe(host: &str) -> String {
    host.chars()
        .take(63)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `<time>-<host>-<pid>[-N]` → `<time>-scrubbed-<pid>`.
fn public_id(id: &str, pid: i32) -> String {
    let time = id
        .split('-')
        .next()
        .filter(|t| !t.is_empty())
        .unwrap_or("incident");
    format!("{time}-scrubbed-{pid}")
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` → its 16 bytes.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DStateTask;

    fn planted() -> Incident {
        let mut incident = Incident {
            id: "20261202T113400Z-secret-host-42-4242".into(),
            ..Incident::default()
        };
        incident.host.hostname = "secret-host-42".into();
        incident.host.boot_id = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into();
        incident.process.pid = 4242;
        incident.process.comm = "trainer".into();
        incident.host_context.d_state_tasks = vec![
            DStateTask {
                pid: 4242,
                tid: 4243,
                comm: "trainer".into(),
                wchan: None,
                cgroup: Some("/own.slice".into()),
            },
            DStateTask {
                pid: 777,
                tid: 777,
                comm: "tenant-daemon".into(),
                wchan: None,
                cgroup: Some("/kubepods/pod-tenant-secret".into()),
            },
        ];
        incident.kernel_log = vec![
            KernelLogLine {
                text: "NVRM: Xid (PCI:0000:3b:00): 79, pid=777, name=tenant-daemon".into(),
                ..KernelLogLine::default()
            },
            KernelLogLine {
                text: "NVRM: Xid (PCI:0000:3b:00): 31, pid=4242, name=trainer".into(),
                ..KernelLogLine::default()
            },
        ];
        incident.xids = incident
            .kernel_log
            .iter()
            .filter_map(|l| capture::xid::parse_xid_line(l.text.as_bytes()))
            .collect();
        incident
    }

    #[test]
    fn planted_values_are_gone_and_own_ones_stay() {
        let s = scrub(&planted());
        let json = serde_json::to_string(&s.incident).unwrap();
        for gone in [
            "secret-host-42",
            "0f1e2d3c",
            "tenant-daemon",
            "pod-tenant-secret",
            "pid=777",
        ] {
            assert!(!json.contains(gone), "{gone} in {json}");
        }
        assert!(json.contains("pid=4242, name=trainer"), "{json}");
        // The parsed Xids keep the process's own, not the other tenant's.
        let xids: Vec<u32> = s.incident.xids.iter().map(|x| x.xid).collect();
        assert_eq!(xids, [31]);
        assert_eq!(s.id, "20261202T113400Z-scrubbed-4242");
        assert_eq!(s.summary.other_dstate_tasks, 1);
        assert_eq!(s.summary.kernel_log_lines, 1);
        assert!(s.summary.note().contains("1 kernel-log line about"));
        let text = s.text(
            "a secret-host-42 b\nNVRM: Xid (PCI:0000:3b:00): 79, pid=777, name=tenant-daemon\nc\n",
        );
        assert_eq!(text, "a [scrubbed] b\nc\n");
    }

    /// The note says "the total stays": the public report.md counts every task in D, the scrubbed ones
    /// included, and says how many it lists.
    #[test]
    fn the_public_census_header_keeps_the_total() {
        let mut incident = planted();
        incident.host_context.d_state_tasks.push(DStateTask {
            pid: 778,
            tid: 779,
            comm: "other-tenant".into(),
            wchan: None,
            cgroup: None,
        });
        let private = crate::render::markdown(&incident);
        assert!(private.contains("tasks in D on the host: 3\n"), "{private}");
        let s = scrub(&incident);
        assert_eq!(s.summary.other_dstate_tasks, 2);
        assert_eq!(s.incident.host_context.d_state_tasks.len(), 1);
        assert_eq!(s.incident.host_context.d_state_total, Some(3));
        let public = crate::render::markdown(&s.incident);
        assert!(
            public.contains("tasks in D on the host: 3 (1 listed)"),
            "{public}"
        );
        assert!(s.summary.note().contains("the total stays"));
        // A census cut short before the scrub keeps its own, larger total.
        incident.host_context.d_state_total = Some(40);
        let s = scrub(&incident);
        assert_eq!(s.incident.host_context.d_state_total, Some(40));
    }

    /// A host-wide lock's holder in another tenant's process: its comm masked everywhere, what it does
    /// dropped; the watched process's own waiter stays as it was.
    #[test]
    fn the_wait_graphs_threads_of_other_processes_are_scrubbed() {
        let mut incident = planted();
        let graph: capture::wait_graph::WaitGraph = serde_json::from_value(serde_json::json!({
            "records": "kernel blocker records", "kernel_records": true,
            "locks": [{"id": "L1", "kind": "rwsem", "name": "the NVIDIA RM API lock",
                       "identity": {"class": "RM API lock"},
                       "holders": [{"tid": 901, "pid": 900, "comm": "other-tenant-job", "evidence": "writer",
                                    "state": "R", "doing": "running in ioctl on /secret/tenant/file"}],
                       "waiters": [{"tid": 4243, "pid": 4242, "comm": "trainer", "state": "D",
                                    "call": "ioctl NV_ESC_RM_CONTROL on /dev/nvidiactl", "by": "kernel record"}]}]
        }))
        .unwrap();
        incident.wait_graph = Some(graph);
        let s = scrub(&incident);
        let json = serde_json::to_string(&s.incident).unwrap();
        for gone in ["other-tenant-job", "/secret/tenant/file"] {
            assert!(!json.contains(gone), "{gone} in {json}");
        }
        let g = s.incident.wait_graph.as_ref().unwrap();
        assert_eq!(g.locks[0].holders[0].tid, 901);
        assert_eq!(g.locks[0].waiters[0].comm, "trainer");
        assert_eq!(s.summary.wait_graph_threads, 1);
        assert!(s
            .summary
            .note()
            .contains("1 thread of other processes in the wait graph"));
        assert!(!s.text("x other-tenant-job y").contains("other-tenant-job"));
    }

    #[test]
    fn source_text_never_reaches_a_public_bundle() {
        use crate::model::{PythonFrame, PythonThread, Sample, WedgedThread};
        let secret = "root:$6$planted.shadow.hash:19000:0:99999:7:::";
        let frame = PythonFrame {
            function: "<module>".into(),
            file: "/etc/shadow".into(),
            line: Some(1),
            code: Some(secret.into()),
            code_not_captured: None,
        };
        let mut incident = planted();
        incident.wedged_threads.push(WedgedThread {
            tid: 4243,
            python_stack: Some(vec![frame.clone()]),
            ..WedgedThread::default()
        });
        incident.samples.push(Sample {
            python_threads: vec![PythonThread {
                tid: Some(4243),
                frames: vec![frame],
                ..PythonThread::default()
            }],
            ..Sample::default()
        });
        incident.verdict = format!(
            "thread 4243 `trainer` is in D{}; no breadcrumb ring",
            crate::verdict::python_clause(&incident.wedged_threads[0]).unwrap()
        );
        assert!(incident.verdict.contains(secret), "{}", incident.verdict);
        let s = scrub(&incident);
        let json = serde_json::to_string(&s.incident).unwrap();
        assert!(!json.contains("planted.shadow.hash"), "{json}");
        assert_eq!(s.summary.source_lines, 2);
        let kept = &s.incident.wedged_threads[0].python_stack.as_ref().unwrap()[0];
        assert_eq!((kept.file.as_str(), kept.line), ("/etc/shadow", Some(1)));
        assert_eq!(kept.code_not_captured.as_deref(), Some(SOURCE_TEXT_DROPPED));
        // The verdict names the place, not the text.
        assert!(
            s.incident
                .verdict
                .contains("(from `shadow:1` in `<module>`)"),
            "{}",
            s.incident.verdict
        );
        let report = crate::render::markdown(&s.incident);
        assert!(!report.contains("planted.shadow.hash"), "{report}");
        assert!(s.summary.note().contains("2 Python source lines"));
        // Anywhere else (a raw file beside incident.json), the text is masked.
        assert_eq!(s.text(&format!("x {secret} y\n")), "x [scrubbed] y\n");
    }

    #[test]
    fn gpu_identifiers_and_smi_processes_are_masked_and_binary_keeps_its_length() {
        let mut incident = planted();
        incident.probes.push(crate::model::Probe {
            name: "nvidia-smi".into(),
            output_excerpt: "    Product Name : NVIDIA H100\n    Serial Number : 1650923012345\n    GPU UUID : \
                             GPU-12345678-abcd-ef01-2345-6789abcdef01\n        Process ID : 777\n            Name : \
                             /opt/tenant/bin/secret\n"
                .into(),
            ..Default::default()
        });
        let s = scrub(&incident);
        let json = serde_json::to_string(&s.incident).unwrap();
        for gone in ["1650923012345", "GPU-12345678", "/opt/tenant", "777"] {
            assert!(!json.contains(gone), "{gone} in {json}");
        }
        assert!(json.contains("NVIDIA H100"));
        assert_eq!(s.summary.gpu_identifiers, 2);
        assert_eq!(s.summary.nvidia_smi_processes, 1);
        let mut ring = vec![0xffu8, 0, 1];
        ring.extend(parse_uuid("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").unwrap());
        ring.extend(b"1650923012345\xff");
        let out = s.bytes(&ring);
        assert_eq!(out.len(), ring.len());
        assert_eq!(&out[3..19], &[b'*'; 16]);
        assert!(find(&out, b"1650923012345").is_none());
    }
}
