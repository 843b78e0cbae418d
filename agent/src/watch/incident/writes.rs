//! Every durable write of an incident goes through here ([`create`], then [`write()`]), and so does the
//! verdict it is written with ([`set_verdict`]: computed once per write).

use reports::model::{EpisodeStatus, Incident};
use reports::store::write::IncidentHandle;
use reports::store::Store;

use crate::watch::event::CaptureEvent;

/// The verdict an incident is written with, from what it holds at this write; an on-demand incident says
/// so first ("on-demand capture (SIGUSR1): …"). Called only by [`create`] and [`write()`]: the verdict is
/// computed once per durable write, here.
fn set_verdict(incident: &mut Incident, on_demand: Option<&str>) {
    let verdict = reports::verdict::verdict(incident);
    incident.verdict = match (on_demand, &incident.episode.outcome_unknown) {
        (Some(reason), _) => format!("on-demand capture ({reason}): {verdict}"),
        (None, Some(why)) if incident.episode.status == EpisodeStatus::Unknown => {
            format!("{verdict}; outcome unknown: {why}")
        }
        (None, _) => verdict,
    };
}

/// An incident's first durable write.
pub(super) fn create(
    store: &Store,
    incident: &mut Incident,
    on_demand: Option<&str>,
) -> Result<IncidentHandle, reports::Error> {
    set_verdict(incident, on_demand);
    store.create(incident)
}

/// Every later durable write: an update, or the final one (`finish`: complete=true, report.md).
pub(super) fn write(
    handle: &mut IncidentHandle,
    incident: &mut Incident,
    finish: bool,
    on_demand: Option<&str>,
) -> Result<(), reports::Error> {
    set_verdict(incident, on_demand);
    if finish {
        handle.finish(incident)
    } else {
        handle.update(incident)
    }
}

/// Why a durable write failed, in words for the log and the incident's timeline.
pub(super) fn write_failure_reason(err: &reports::Error) -> String {
    let errno = match err {
        reports::Error::Io { source, .. } => source.raw_os_error(),
        _ => None,
    };
    match errno {
        Some(libc::ENOSPC) => "the output filesystem was full".to_string(),
        Some(libc::EDQUOT) => "the output filesystem's quota was exceeded".to_string(),
        Some(libc::EROFS) => "the output filesystem was read-only".to_string(),
        _ => format!("writing failed: {err}"),
    }
}

/// An on-demand incident's final write.
pub(super) fn finish_on_demand(
    pid: i32,
    handle: &mut IncidentHandle,
    incident: &mut Incident,
    reason: &str,
    out: &mut Vec<CaptureEvent>,
) {
    let path = handle.path().to_path_buf();
    match write(handle, incident, true, Some(reason)) {
        Ok(()) => out.push(CaptureEvent::Completed {
            pid,
            path,
            verdict: incident.verdict.clone(),
            killed: None,
        }),
        Err(err) => out.push(CaptureEvent::Failed {
            pid,
            message: format!("cannot finish the incident: {err}"),
        }),
    }
}
