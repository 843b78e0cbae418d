//! Reading an incident back: incident.json whole ([`read_incident`]), its bytes ([`read_incident_bytes`], for the
//! bundle), its head alone ([`read_incident_head`]: trigger and episode from the first bytes), and the few fields a
//! listing or the quota needs (`SummaryFields`). Every read goes through [`capture::untrusted`]: a regular file
//! (no FIFO, no symlink), at most [`MAX_INCIDENT_JSON_BYTES`].

use std::path::Path;

use capture::error::Rejection;
use capture::untrusted::{self, Limits};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::layout::MAX_INCIDENT_JSON_BYTES;
use crate::model::{EpisodeStatus, Incident, Timestamp, Trigger};

/// Read and parse one incident.json: a regular file (no FIFO, no symlink), bounded in size.
pub fn read_incident(path: &Path) -> Result<Incident> {
    read_json(path)
}

/// The few fields `list` shows: parsing only these skips building samples and stacks.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct SummaryFields {
    pub(super) complete: bool,
    pub(super) trigger: Trigger,
    pub(super) verdict: String,
    pub(super) detected_at: Timestamp,
    pub(super) process: SummaryProcess,
    pub(super) host: SummaryHost,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct SummaryProcess {
    pub(super) pid: i32,
    pub(super) start_time: Option<u64>,
    pub(super) cgroup: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct SummaryHost {
    pub(super) hostname: String,
}

/// The bytes of an incident.json: a regular file of at most [`MAX_INCIDENT_JSON_BYTES`], opened without following
/// a symlink or blocking on a FIFO.
pub fn read_incident_bytes(path: &Path) -> Result<Vec<u8>> {
    let limits = Limits::max_len(MAX_INCIDENT_JSON_BYTES);
    untrusted::read(path, limits).map_err(|err| untrusted_error(err, path))
}

fn untrusted_error(err: capture::Error, path: &Path) -> Error {
    match err {
        capture::Error::Untrusted {
            why: Rejection::TooLarge { len, limit },
            ..
        } => Error::TooLarge {
            path: path.to_path_buf(),
            size: len,
            limit,
        },
        capture::Error::Io { source, .. } => Error::io("open", path)(source),
        err => Error::from_untrusted(err, path),
    }
}

/// What an incident.json says its episode is: its first fields, `trigger` and `episode` (status and why its
/// outcome is unknown: nothing else of it is parsed).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct IncidentHead {
    pub trigger: Trigger,
    pub episode: EpisodeHead,
}

/// [`IncidentHead::episode`]: the two fields of [`crate::model::Episode`] that say whether it goes on.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct EpisodeHead {
    pub status: EpisodeStatus,
    pub outcome_unknown: Option<String>,
}

/// Prefixes of an incident.json tried for its head before the whole file is read.
const HEAD_PREFIXES: [usize; 2] = [4 << 10, 64 << 10];

/// The head of an incident.json ([`IncidentHead`]) read from as short a prefix of the file as holds it (the store
/// writes `trigger` and `episode` before the samples, so 4 KiB nearly always do), else from the whole file (same
/// checks as [`read_incident`]). A reader that judges thousands of incidents by their episode (npd-check) reads
/// this, not each whole incident. The rest of the file is not checked: a file whose head is readable but whose
/// tail is corrupt still gives its head.
pub fn read_incident_head(path: &Path) -> Result<IncidentHead> {
    let file = untrusted::open(path, Limits::max_len(MAX_INCIDENT_JSON_BYTES))
        .map_err(|err| untrusted_error(err, path))?;
    for prefix in HEAD_PREFIXES {
        if prefix as u64 >= file.len() {
            break;
        }
        let bytes = file
            .read_prefix(prefix)
            .map_err(|err| untrusted_error(err, path))?;
        if let Some(head) = head_of_prefix(&bytes) {
            return Ok(head);
        }
    }
    let bytes = file.read_all().map_err(|err| untrusted_error(err, path))?;
    match head_of_prefix(&bytes) {
        Some(head) => Ok(head),
        None => serde_json::from_slice(&bytes).map_err(|source| Error::Parse {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The head from the first bytes of an incident.json: `Some` once both fields were read, or the whole object was
/// (absent fields default); `None` when the bytes end first or do not parse.
fn head_of_prefix(bytes: &[u8]) -> Option<IncidentHead> {
    use serde::de::{IgnoredAny, MapAccess, Visitor};

    #[derive(Default)]
    struct Seen {
        trigger: Option<Trigger>,
        episode: Option<EpisodeHead>,
        whole: bool,
    }
    struct HeadVisitor<'a>(&'a mut Seen);
    impl<'de> Visitor<'de> for HeadVisitor<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an incident object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "trigger" => self.0.trigger = Some(map.next_value()?),
                    "episode" => self.0.episode = Some(map.next_value()?),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                if self.0.episode.is_some() {
                    // Stop here: the rest of the bytes may be cut anywhere (the parser's complaint about
                    // the unfinished object is ignored). The store writes `trigger` before `episode`: a file
                    // without one before it has none (schema 1: a wedge).
                    return Ok(());
                }
            }
            self.0.whole = true;
            Ok(())
        }
    }
    let mut seen = Seen::default();
    let mut parser = serde_json::Deserializer::from_slice(bytes);
    let _ = serde::Deserializer::deserialize_map(&mut parser, HeadVisitor(&mut seen));
    let done = seen.whole || seen.episode.is_some();
    done.then(|| IncidentHead {
        trigger: seen.trigger.unwrap_or_default(),
        episode: seen.episode.unwrap_or_default(),
    })
}

pub(super) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = read_incident_bytes(path)?;
    serde_json::from_slice(&bytes).map_err(|source| Error::Parse {
        path: path.to_path_buf(),
        source,
    })
}
