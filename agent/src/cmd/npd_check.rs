//! `wedge-capture npd-check`: a node-problem-detector custom plugin. It says whether a wedge episode is
//! going on, in NPD's plugin protocol (exit 0 = False, 1 = True, anything else = Unknown), one line of at
//! most [`MAX_MESSAGE`] characters on stdout.
//!
//! It reads the incident store, and of /proc only `/proc/<pid>/stat` of an episode's process (the pid and
//! start time that identify it; stat never takes the process's mmap lock), `/proc/<pid>/task/<tid>/stat` of
//! its recorded wedged threads when the process's leader is a zombie (a leader that called `pthread_exit`
//! leaves its other threads running: the process lives while one of them, with its recorded start time, is
//! in D), and the boot id. Design invariant 8: whatever it cannot know is **unknown** (2), never healthy: a
//! missing store (a forgotten hostPath mount), a store that is a symlink (it can name any directory, an empty
//! one reads as healthy) or not a directory, an incident that cannot be read (corrupt, a FIFO, not a regular
//! file), an episode nobody has watched for longer than `--max-age`, or running out of its time budget.
//!
//! Bounded in time whatever the store holds: the budget ([`BUDGET`]) covers the listing, which reads the
//! directory's names only (ids start with the UTC time: newest first), and each incident is judged by its
//! head (`trigger` and `episode`, the first few KiB of its incident.json: [`Store::load_head`]); only an
//! episode still open is read whole. When the budget runs out before every incident was judged, the answer
//! is 1 if a wedge was found, else unknown (2).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use capture::ProcRoot;
use reports::model::{EpisodeStatus, Incident, Trigger};
use reports::store::Store;

use crate::defaults;
use crate::duration::parse_duration;
use crate::exit::ExitCode;

/// NPD's plugin protocol: a problem.
pub const PROBLEM: ExitCode = ExitCode(1);
/// NPD's plugin protocol: the state is unknown.
pub const UNKNOWN: ExitCode = ExitCode(2);
/// NPD keeps a plugin's message short; it becomes the node condition's message.
pub const MAX_MESSAGE: usize = 80;
/// Stop reading incidents after this, listing included (NPD's default plugin timeout is 5 s; the issue asks
/// for 1 s).
pub const BUDGET: Duration = Duration::from_millis(800);

/// Tell node-problem-detector whether a GPU worker on this node is wedged.
///
/// The exit code (below) is the answer, in node-problem-detector's plugin protocol; a process whose leader
/// is a zombie counts while a recorded wedged thread is still in D. One line of at most 80 characters on
/// stdout says which.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  wedge-capture npd-check
  wedge-capture npd-check --out /var/lib/wedge-capture/incidents --max-age 2h --budget 2s")]
pub struct Args {
    /// The agent's incident store.
    #[arg(long, value_name = "DIR", default_value = defaults::INCIDENT_DIR)]
    pub out: PathBuf,
    /// An episode nobody watches (its watcher stopped or died) whose incident was last written longer ago
    /// than this is reported unknown (exit 2) [default: 1h].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub max_age: Option<Duration>,
    /// Time budget of the check, the listing included: once it is spent the answer is unknown (exit 2),
    /// unless a wedge was already found (exit 1). Raise it with NPD's plugin timeout [default: 800ms].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub budget: Option<Duration>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let max_age = args.max_age.unwrap_or(defaults::NPD_MAX_AGE);
    let budget = args.budget.unwrap_or(BUDGET);
    let (code, message) = check_within(&args.out, max_age, &ProcRoot::default(), budget);
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

/// The verdict and its message (not yet clipped), within the default time budget.
pub fn check(dir: &Path, max_age: Duration, proc_root: &ProcRoot) -> (ExitCode, String) {
    check_within(dir, max_age, proc_root, BUDGET)
}

/// [`check`] within `budget`.
pub fn check_within(
    dir: &Path,
    max_age: Duration,
    proc_root: &ProcRoot,
    budget: Duration,
) -> (ExitCode, String) {
    let started = Instant::now();
    let in_time = || started.elapsed() <= budget;
    // The store itself, not what a link names: a symlink swapped in can point at any directory (an empty
    // one would read as healthy).
    match std::fs::symlink_metadata(dir) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return (UNKNOWN, format!("no incident store at {}", dir.display()))
        }
        Err(err) => return (UNKNOWN, format!("cannot read incidents: {err}")),
        Ok(meta) if meta.file_type().is_symlink() => {
            return (
                UNKNOWN,
                format!(
                    "cannot read incidents: store is a symlink: {}",
                    dir.display()
                ),
            )
        }
        Ok(meta) if !meta.is_dir() => {
            return (
                UNKNOWN,
                format!(
                    "cannot read incidents: store is not a directory: {}",
                    dir.display()
                ),
            )
        }
        Ok(_) => {}
    }
    let store = match Store::open_read_only(dir) {
        Ok(store) => store,
        Err(reports::Error::NoStore { .. }) => {
            return (UNKNOWN, format!("no incident store at {}", dir.display()))
        }
        Err(err) => return (UNKNOWN, format!("cannot read incidents: {}", short(&err))),
    };
    let ids = match store.ids_newest_first(in_time) {
        Ok((ids, true)) => ids,
        Ok((_, false)) => return (UNKNOWN, "ran out of time listing incidents".to_string()),
        Err(err) => return (UNKNOWN, format!("cannot read incidents: {}", short(&err))),
    };
    let boot_id = proc_root.boot_id().ok();
    let mut wedged: Vec<Incident> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut judged = 0;
    for id in &ids {
        if !in_time() {
            break;
        }
        match judge(&store, id, max_age, proc_root, boot_id.as_deref()) {
            Finding::Clear => {}
            Finding::Wedged(incident) => wedged.push(*incident),
            Finding::Unknown(why) => unknown.push(why),
        }
        judged += 1;
    }
    let all_judged = judged == ids.len();
    if let Some(first) = wedged.first() {
        let more = match (wedged.len(), all_judged) {
            (1, true) => String::new(),
            (n, true) => format!(" (+{} more)", n - 1),
            (n, false) => format!(" (+{} more of {judged}/{} read)", n - 1, ids.len()),
        };
        return (PROBLEM, format!("{}{more}", describe(first)));
    }
    if !all_judged {
        return (
            UNKNOWN,
            format!(
                "ran out of time: {judged} of {} incidents judged",
                ids.len()
            ),
        );
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

/// One incident: whether its episode is going on now. Its head first (a few KiB); the whole incident only
/// for an episode still open.
fn judge(
    store: &Store,
    id: &str,
    max_age: Duration,
    proc_root: &ProcRoot,
    boot_id: Option<&str>,
) -> Finding {
    let unreadable = |err: &reports::Error| {
        Finding::Unknown(format!("incident {id} unreadable: {}", short(err)))
    };
    let head = match store.load_head(id) {
        Ok(head) => head,
        Err(err) => return unreadable(&err),
    };
    if head.trigger != Trigger::Wedge {
        return Finding::Clear;
    }
    match head.episode.status {
        EpisodeStatus::Open | EpisodeStatus::StillWedgedAtExit => {}
        EpisodeStatus::Resolved => return Finding::Clear,
        // Closed by a later watcher that found the process gone: nothing is going on now.
        EpisodeStatus::Unknown if head.episode.outcome_unknown.is_some() => return Finding::Clear,
        EpisodeStatus::Unknown => {
            return Finding::Unknown(format!("incident {id}: episode status unknown"))
        }
    }
    let incident = match store.load(id) {
        Ok(incident) => incident,
        Err(err) => return unreadable(&err),
    };
    // The head is read from the first fields only: the whole file has the last word.
    if incident.trigger != Trigger::Wedge {
        return Finding::Clear;
    }
    // Another boot: that process is gone with it.
    if let Some(boot) = boot_id {
        if !incident.host.boot_id.is_empty() && incident.host.boot_id != boot {
            return Finding::Clear;
        }
    }
    if !process_lives(&incident, proc_root) {
        return Finding::Clear;
    }
    // A live writer holds the incident's marker: it is watched, and current.
    if store.writer_alive(id) {
        return Finding::Wedged(Box::new(incident));
    }
    let pid = incident.process.pid;
    let age = std::fs::metadata(store.dir().join(id).join(reports::layout::INCIDENT_FILE))
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

/// Whether the episode's process is still the one it recorded and still alive: its pid with the recorded
/// start time, not dead; with a zombie leader (it called `pthread_exit`, its other threads run on), while a
/// recorded wedged thread with its recorded start time is in D.
fn process_lives(incident: &Incident, proc_root: &ProcRoot) -> bool {
    let pid = incident.process.pid;
    let Ok(stat) = proc_root.read_stat(pid) else {
        return false;
    };
    if incident
        .process
        .start_time
        .is_some_and(|t| t != stat.starttime)
    {
        return false;
    }
    match stat.state {
        'X' => false,
        'Z' => incident.wedged_threads.iter().any(|thread| {
            thread.start_time.is_some_and(|start| {
                proc_root
                    .read_task_stat(pid, thread.tid)
                    .is_ok_and(|task| task.starttime == start && task.state == 'D')
            })
        }),
        _ => true,
    }
}

/// `45 s`, `12 min`, `3 h`: short enough for NPD's message.
fn rough_duration(age: Duration) -> String {
    match age.as_secs() {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
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
