//! `wedge-capture npd-check`: a node-problem-detector custom plugin. It reads only the incident store
//! (never /proc: NPD runs it every few seconds, and a scan of a wedged host can itself hang) and says
//! whether a wedge episode is open, in NPD's plugin protocol: exit 0 OK, 1 problem, 2 unknown, one line of
//! at most [`MAX_MESSAGE`] characters on stdout.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use reports::model::{EpisodeStatus, Incident, Trigger};
use reports::store::Store;

use crate::defaults;
use crate::duration::parse_duration;
use crate::exit::ExitCode;

/// NPD's plugin protocol: a problem.
pub const PROBLEM: ExitCode = ExitCode(1);
/// NPD's plugin protocol: the state is unknown (the store could not be read).
pub const UNKNOWN: ExitCode = ExitCode(2);
/// NPD keeps a plugin's message short; it becomes the node condition's message.
pub const MAX_MESSAGE: usize = 80;
/// Stop reading incidents after this (NPD's default plugin timeout is 5 s; the issue asks for 1 s).
const BUDGET: Duration = Duration::from_millis(800);

/// Tell node-problem-detector whether a GPU worker on this node is wedged (exit 0 no, 1 yes, 2 unknown).
///
/// Reads the agent's incident store only. An open episode whose incident was last written more than
/// --max-age ago is stale (its agent died) and does not count.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's incident directory.
    #[arg(long, value_name = "DIR", default_value = defaults::INCIDENT_DIR)]
    pub out: PathBuf,
    /// Ignore open episodes whose incident was last written longer ago than this.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub max_age: Option<Duration>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let max_age = args.max_age.unwrap_or(defaults::NPD_MAX_AGE);
    let (code, message) = check(&args.out, max_age);
    println!("{}", clip(&message));
    Ok(code)
}

/// The verdict and its message (not yet clipped).
pub fn check(dir: &Path, max_age: Duration) -> (ExitCode, String) {
    let started = Instant::now();
    if !dir.exists() {
        return (ExitCode::OK, "no incident store yet".to_string());
    }
    let store = match Store::open_read_only(dir) {
        Ok(store) => store,
        Err(err) => return (UNKNOWN, format!("cannot read incidents: {}", short(&err))),
    };
    let list = match store.list() {
        Ok(list) => list,
        Err(err) => return (UNKNOWN, format!("cannot read incidents: {}", short(&err))),
    };
    let mut stale = 0usize;
    let mut open: Vec<Incident> = Vec::new();
    for summary in list.iter().filter(|s| s.error.is_none()) {
        if started.elapsed() > BUDGET {
            return (UNKNOWN, "too many incidents to read in time".to_string());
        }
        // Finished resolved episodes are the common case: the summary's verdict is not enough to
        // know, so the incident itself is read.
        let Ok(incident) = store.load(&summary.id) else {
            continue;
        };
        if incident.trigger != Trigger::Wedge || incident.episode.status != EpisodeStatus::Open {
            continue;
        }
        let age = std::fs::metadata(summary.path.join("incident.json"))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|at| SystemTime::now().duration_since(at).ok())
            .unwrap_or_default();
        if age > max_age {
            stale += 1;
            continue;
        }
        open.push(incident);
    }
    let Some(first) = open.first() else {
        return (
            ExitCode::OK,
            match stale {
                0 => "no open wedge episode".to_string(),
                n => format!("no open wedge episode ({n} stale ignored)"),
            },
        );
    };
    let more = match open.len() {
        1 => String::new(),
        n => format!(" (+{} more)", n - 1),
    };
    (PROBLEM, format!("{}{more}", describe(first)))
}

/// `pid 123 (python) wedged in ioctl NV_ESC_RM_CONTROL pod ns/name`.
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
    if let Some(pod) = process.container.as_ref().and_then(|c| c.pod.as_ref()) {
        out.push_str(&format!(
            " pod {}/{}",
            printable(&pod.namespace),
            printable(&pod.name)
        ));
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
}
