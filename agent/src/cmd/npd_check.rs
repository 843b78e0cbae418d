//! `wedge-capture npd-check`: a node-problem-detector custom plugin. It says whether a wedge episode is
//! going on, in NPD's plugin protocol (exit 0 = False, 1 = True, anything else = Unknown), one line of at
//! most [`MAX_MESSAGE`] characters on stdout.
//!
//! It reads the incident store, and of /proc only `/proc/<pid>/stat` of an episode's process (the pid and
//! start time that identify it; stat never takes the process's mmap lock) and the boot id. Design invariant
//! 8: whatever it cannot know is **unknown** (2), never healthy: a missing store (a forgotten hostPath
//! mount), an incident that cannot be read (corrupt, a FIFO, not a regular file), an episode nobody has
//! watched for longer than `--max-age`, or running out of its time budget.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use capture::ProcRoot;
use reports::model::{EpisodeStatus, Incident, Trigger};
use reports::store::{IncidentSummary, Store};

use crate::defaults;
use crate::duration::parse_duration;
use crate::exit::ExitCode;

/// NPD's plugin protocol: a problem.
pub const PROBLEM: ExitCode = ExitCode(1);
/// NPD's plugin protocol: the state is unknown.
pub const UNKNOWN: ExitCode = ExitCode(2);
/// NPD keeps a plugin's message short; it becomes the node condition's message.
pub const MAX_MESSAGE: usize = 80;
/// Stop reading incidents after this (NPD's default plugin timeout is 5 s; the issue asks for 1 s).
const BUDGET: Duration = Duration::from_millis(800);

/// What `npd-check --help` says after the options: NPD's three codes and when each is given.
const EXIT_CODES_HELP: &str = "\
Exit codes (node-problem-detector's plugin protocol: 0 = False, 1 = True, other = Unknown):
  1  a wedge episode is going on: `open` or `still_wedged_at_exit`, and its process (same pid and
     start time, read from /proc/<pid>/stat only) still exists
  0  none: every episode resolved, closed, or its process is gone
  2  unknown: no store at --out, the store or an incident unreadable, corrupt or not a regular
     file, an episode nobody watches last written longer ago than --max-age (default 1h), or the
     0.8 s time budget ran out
One line of at most 80 characters on stdout says which.";

/// Tell node-problem-detector whether a GPU worker on this node is wedged.
///
/// Exit 1 (True): an episode is `open` or `still_wedged_at_exit` and its process (same pid and start time,
/// from /proc/<pid>/stat only) still exists. Exit 0 (False): no such episode (resolved, closed, or its
/// process is gone). Exit 2 (Unknown): the store is missing or unreadable, an incident file is unreadable,
/// corrupt or not a regular file, an episode has gone unwatched for longer than --max-age (default 1h),
/// or the time budget (0.8 s) ran out. One line of at most 80 characters says which.
#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct Args {
    /// The agent's incident directory.
    #[arg(long, value_name = "DIR", default_value = defaults::INCIDENT_DIR)]
    pub out: PathBuf,
    /// An episode nobody watches (its watcher stopped or died) whose incident was last written longer ago
    /// than this is reported unknown (exit 2) [default: 1h].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub max_age: Option<Duration>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let max_age = args.max_age.unwrap_or(defaults::NPD_MAX_AGE);
    let (code, message) = check(&args.out, max_age, &ProcRoot::default());
    println!("{}", clip(&message));
    Ok(code)
}

/// What one incident says about the node now.
enum Finding {
    /// Nothing going on (resolved, closed, another boot, the process gone, an on-demand capture).
    Clear,
    Wedged(Box<Incident>),
    Unknown(String),
}

/// The verdict and its message (not yet clipped).
pub fn check(dir: &Path, max_age: Duration, proc_root: &ProcRoot) -> (ExitCode, String) {
    let started = Instant::now();
    let store = match Store::open_read_only(dir) {
        Ok(store) => store,
        Err(reports::Error::NoStore { .. }) => {
            return (UNKNOWN, format!("no incident store at {}", dir.display()))
        }
        Err(err) => return (UNKNOWN, format!("cannot read incidents: {}", short(&err))),
    };
    let list = match store.list() {
        Ok(list) => list,
        Err(err) => return (UNKNOWN, format!("cannot read incidents: {}", short(&err))),
    };
    let boot_id = proc_root.boot_id().ok();
    let mut wedged: Vec<Incident> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    for summary in &list {
        if started.elapsed() > BUDGET {
            return (
                UNKNOWN,
                format!("ran out of time reading {} incidents", list.len()),
            );
        }
        match judge(&store, summary, max_age, proc_root, boot_id.as_deref()) {
            Finding::Clear => {}
            Finding::Wedged(incident) => wedged.push(*incident),
            Finding::Unknown(why) => unknown.push(why),
        }
    }
    if let Some(first) = wedged.first() {
        let more = match wedged.len() {
            1 => String::new(),
            n => format!(" (+{} more)", n - 1),
        };
        return (PROBLEM, format!("{}{more}", describe(first)));
    }
    if let Some(first) = unknown.first() {
        let more = match unknown.len() {
            1 => String::new(),
            n => format!(" (+{} more)", n - 1),
        };
        return (UNKNOWN, format!("{first}{more}"));
    }
    (ExitCode::OK, "no open wedge episode".to_string())
}

/// One incident: whether its episode is going on now.
fn judge(
    store: &Store,
    summary: &IncidentSummary,
    max_age: Duration,
    proc_root: &ProcRoot,
    boot_id: Option<&str>,
) -> Finding {
    if let Some(err) = &summary.error {
        return Finding::Unknown(format!(
            "incident {} unreadable: {}",
            summary.id,
            first_line(err)
        ));
    }
    // Finished resolved episodes are the common case: the summary's verdict is not enough to know, so
    // the incident itself is read.
    let incident = match store.load(&summary.id) {
        Ok(incident) => incident,
        Err(err) => {
            return Finding::Unknown(format!(
                "incident {} unreadable: {}",
                summary.id,
                short(&err)
            ))
        }
    };
    if incident.trigger != Trigger::Wedge {
        return Finding::Clear;
    }
    match incident.episode.status {
        EpisodeStatus::Open | EpisodeStatus::StillWedgedAtExit => {}
        EpisodeStatus::Resolved => return Finding::Clear,
        // Closed by a later watcher that found the process gone: nothing is going on now.
        EpisodeStatus::Unknown if incident.episode.outcome_unknown.is_some() => {
            return Finding::Clear
        }
        EpisodeStatus::Unknown => {
            return Finding::Unknown(format!("incident {}: episode status unknown", summary.id))
        }
    }
    // Another boot: that process is gone with it.
    if let Some(boot) = boot_id {
        if !incident.host.boot_id.is_empty() && incident.host.boot_id != boot {
            return Finding::Clear;
        }
    }
    let pid = incident.process.pid;
    match proc_root.read_stat(pid) {
        Err(_) => return Finding::Clear,
        Ok(stat) if matches!(stat.state, 'Z' | 'X') => return Finding::Clear,
        Ok(stat)
            if incident
                .process
                .start_time
                .is_some_and(|t| t != stat.starttime) =>
        {
            return Finding::Clear
        }
        Ok(_) => {}
    }
    // A live writer holds the incident's marker: it is watched, and current.
    if summary.in_progress {
        return Finding::Wedged(Box::new(incident));
    }
    let age = std::fs::metadata(summary.path.join(reports::store::INCIDENT_FILE))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|at| SystemTime::now().duration_since(at).ok())
        .unwrap_or_default();
    if age > max_age {
        return Finding::Unknown(format!(
            "pid {pid} wedge unwatched for {} (over --max-age)",
            rough_duration(age)
        ));
    }
    Finding::Wedged(Box::new(incident))
}

/// `45 s`, `12 min`, `3 h`: short enough for NPD's message.
fn rough_duration(age: Duration) -> String {
    match age.as_secs() {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// `pid 123 (python) wedged in ioctl NV_ESC_RM_CONTROL pod ns/name` (`claimed pod ns/name` when only the cgroup's
/// names say so).
fn describe(incident: &Incident) -> String {
    let process = &incident.process;
    let comm = incident
        .wedged_threads
        .first()
        .map(|w| w.comm.as_str())
        .unwrap_or(process.comm.as_str());
    let mut out = format!(
        "pid {} ({}) wedged in {}",
        process.pid,
        printable(comm),
        site(incident)
    );
    if let Some(container) = process.container.as_ref() {
        if let Some(pod) = container.pod.as_ref() {
            // A pod the node's state did not confirm is only what the cgroup's names claim (issue 35); said
            // first, so that clipping the message never drops it.
            let claimed = if container.pod_confirmed() {
                ""
            } else {
                " claimed"
            };
            out.push_str(&format!(
                "{claimed} pod {}/{}",
                printable(&pod.namespace),
                printable(&pod.name)
            ));
        }
    }
    out
}

/// Where the first wedged thread is blocked — from its evidence at detection (schema 2), else from the
/// latest sample: the ioctl, the syscall or wchan.
fn site(incident: &Incident) -> String {
    let first = incident.wedged_threads.first();
    let tid = first.map(|w| w.tid);
    let thread = first.and_then(|w| w.at_detection.as_ref()).or_else(|| {
        incident.latest_sample().and_then(|sample| {
            let threads = &sample.snapshot.threads;
            threads
                .iter()
                .find(|t| Some(t.tid) == tid)
                .or_else(|| threads.iter().find(|t| t.state == "D"))
        })
    });
    let Some(thread) = thread else {
        return "an unknown site".to_string();
    };
    if let Some(ioctl) = &thread.ioctl {
        return format!(
            "ioctl {}",
            printable(ioctl.name.as_deref().unwrap_or(&ioctl.request))
        );
    }
    if let Some(capture::snapshot::SyscallInfo::Blocked {
        name: Some(name), ..
    }) = &thread.syscall
    {
        return format!("syscall {}", printable(name));
    }
    match thread
        .wchan
        .as_deref()
        .filter(|w| !w.is_empty() && *w != "0")
    {
        Some(wchan) => printable(wchan),
        None => "an unknown site".to_string(),
    }
}

/// Names come from the watched process: no control characters reach NPD's condition message.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The error's first line, without paths' worth of context.
fn short(err: &reports::Error) -> String {
    err.to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// At most [`MAX_MESSAGE`] characters, with an ellipsis when cut.
pub fn clip(message: &str) -> String {
    if message.chars().count() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut out: String = message.chars().take(MAX_MESSAGE - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_clipped_to_80_characters() {
        let long = "é".repeat(200);
        let clipped = clip(&long);
        assert_eq!(clipped.chars().count(), MAX_MESSAGE);
        assert!(clipped.ends_with('…'));
        assert_eq!(clip("short"), "short");
    }

    #[test]
    fn control_characters_of_a_comm_never_reach_the_message() {
        let mut incident = Incident::new(7);
        incident.process.comm = "evil\n\x1b[31m".into();
        let text = describe(&incident);
        assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
        assert!(text.starts_with("pid 7 (evil?"), "{text}");
    }

    /// Issue 35: a pod named only by the cgroup's names is said to be claimed, never blamed as fact.
    #[test]
    fn an_unconfirmed_pod_is_named_as_claimed() {
        use reports::model::{ContainerInfo, PodIdentity, PodInfo};
        let mut incident = Incident::new(7);
        incident.process.container = Some(ContainerInfo {
            pod_uid: Some("1a2b3c4d-0000-1111-2222-333344445555".into()),
            pod: Some(PodInfo {
                namespace: "ml".into(),
                name: "victim".into(),
            }),
            pod_identity: Some(PodIdentity::CgroupName),
            ..ContainerInfo::default()
        });
        assert!(
            describe(&incident).ends_with(" claimed pod ml/victim"),
            "{}",
            describe(&incident)
        );
        incident.process.container.as_mut().unwrap().pod_identity =
            Some(PodIdentity::ContainerRuntime);
        assert!(describe(&incident).ends_with(" in an unknown site pod ml/victim"));
    }
}
