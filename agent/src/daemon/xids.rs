//! The kernel log's Xid and SXid lines counted once each (`wedge_capture_xid_total`), across restarts of the
//! agent: where the count stopped is kept in the incident store (`.xid-follow`: the boot id and the sequence
//! number of the last kernel log record read), so a restarted agent counts what the kernel printed while it was
//! down and nothing twice. Without that file (the first start) counting begins at the end of the ring: lines
//! from before the agent was installed are not counted. On another boot, counting begins at the oldest record
//! the ring holds (the new boot's lines, printed before the agent started).

use std::path::{Path, PathBuf};

use capture::kmsg::{FollowFrom, Follower};

use super::metrics::Metrics;

/// The state file in the incident store (a dot name: the store skips it).
pub const STATE_FILE: &str = ".xid-follow";

/// Where to start, from the state file's text and this boot's id (pure).
pub fn follow_from(state: Option<&str>, boot_id: Option<&str>) -> FollowFrom {
    let Some(state) = state else {
        return FollowFrom::End;
    };
    let mut words = state.split_whitespace();
    let (Some(saved_boot), Some(seq)) = (words.next(), words.next()) else {
        return FollowFrom::End;
    };
    let Ok(seq) = seq.parse::<u64>() else {
        return FollowFrom::End;
    };
    match boot_id {
        Some(boot) if boot == saved_boot => FollowFrom::After(seq),
        Some(_) => FollowFrom::Start,
        None => FollowFrom::End,
    }
}

pub struct XidCounter {
    follower: Follower,
    state: PathBuf,
    boot_id: Option<String>,
    /// The sequence number last written to the state file.
    saved: Option<u64>,
}

impl XidCounter {
    /// Follow `kmsg` from where the state file in `store` says.
    pub fn open(kmsg: &Path, store: &Path, boot_id: Option<String>) -> Result<XidCounter, String> {
        let state = store.join(STATE_FILE);
        // Bounded: the file is two words; anything longer is not ours.
        let text = capture::untrusted::read(
            &state,
            capture::untrusted::Limits {
                max_len: 256,
                owner: None,
            },
        )
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned());
        let from = follow_from(text.as_deref(), boot_id.as_deref());
        let follower = Follower::open(kmsg, from).map_err(|e| e.to_string())?;
        Ok(XidCounter {
            follower,
            state,
            saved: match from {
                FollowFrom::After(seq) => Some(seq),
                _ => None,
            },
            boot_id,
        })
    }

    /// Count the Xid lines printed since the last poll; the state is saved when one was counted (or the first
    /// time a record was read). Returns a save error for the log.
    pub fn poll(&mut self, metrics: &mut Metrics) -> Result<(), String> {
        let mut counted = false;
        for record in self.follower.poll() {
            if let Some(event) = capture::xid::parse_xid_line(record.message.as_bytes()) {
                metrics.xid(&event);
                counted = true;
            }
        }
        if counted || (self.saved.is_none() && self.follower.last_seq().is_some()) {
            self.save()?;
        }
        Ok(())
    }

    /// Write where counting stands (temp file + rename): called after counting and at a clean stop.
    pub fn save(&mut self) -> Result<(), String> {
        let (Some(boot), Some(seq)) = (self.boot_id.as_deref(), self.follower.last_seq()) else {
            return Ok(());
        };
        if self.saved == Some(seq) {
            return Ok(());
        }
        let temp = self.state.with_file_name(format!("{STATE_FILE}.tmp"));
        std::fs::write(&temp, format!("{boot} {seq}\n"))
            .and_then(|()| std::fs::rename(&temp, &self.state))
            .map_err(|e| format!("cannot write {}: {e}", self.state.display()))?;
        self.saved = Some(seq);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_counting_starts() {
        assert_eq!(follow_from(None, Some("b1")), FollowFrom::End);
        assert_eq!(
            follow_from(Some("b1 42\n"), Some("b1")),
            FollowFrom::After(42)
        );
        assert_eq!(follow_from(Some("b0 42\n"), Some("b1")), FollowFrom::Start);
        assert_eq!(follow_from(Some("b1 x"), Some("b1")), FollowFrom::End);
        assert_eq!(follow_from(Some(""), Some("b1")), FollowFrom::End);
        assert_eq!(follow_from(Some("b1 42"), None), FollowFrom::End);
    }
}
