//! The kernel log, read from `/dev/kmsg` without ever blocking.
//!
//! `/dev/kmsg` hands out one record per `read`. Opened with `O_NONBLOCK` a read returns `EAGAIN` at the
//! end of the buffer instead of waiting for new messages, and `EPIPE` when records were overwritten under
//! us. [`read_around`] is the only code that touches the device; [`crate::parse::kmsg`] decodes records.

use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::parse::kmsg::{parse_record, select, KmsgRecord, KmsgWindow};
use crate::proc_root::classify_io;

/// The kernel log device (not under the proc root).
pub const KMSG_PATH: &str = "/dev/kmsg";

/// What a refused open of the device needs.
const NEEDS: &str = "CAP_SYSLOG when kernel.dmesg_restrict=1";

/// The records kept around an event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KmsgCapture {
    pub records: Vec<KmsgRecord>,
    /// Records read in all (window or not).
    pub scanned: u64,
    /// Records the kernel overwrote while we read (EPIPE) or malformed ones.
    pub lost: u64,
}

/// Opens the device without blocking (what `doctor` checks: the open is where `dmesg_restrict` refuses).
pub fn open(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| refused(path, e))
}

/// EACCES/EPERM name the privilege; anything else (no such device) is plain I/O, never "gone".
fn refused(path: &Path, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => classify_io(path, e, NEEDS),
        _ => Error::Io {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

/// Read the whole kernel log buffer from `path` without blocking and keep what `window` asks for.
///
/// Errors only when the device cannot be opened (EPERM with `kernel.dmesg_restrict=1` and no CAP_SYSLOG).
pub fn read_around(path: &Path, window: &KmsgWindow) -> Result<KmsgCapture> {
    use std::io::Read;
    let mut file = open(path)?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut scanned = 0u64;
    let mut lost = 0u64;
    let mut parsed = Vec::new();
    // A bounded number of reads: a log that grows as fast as we read cannot keep us here.
    for _ in 0..200_000 {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                scanned += 1;
                match parse_record(&buf[..n]) {
                    Ok(record) => parsed.push(record),
                    Err(_) => lost += 1,
                }
                // Keep memory bounded while reading: select as we go in large batches.
                if parsed.len() >= 8192 {
                    parsed = select(parsed, window);
                }
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) if err.raw_os_error() == Some(libc::EPIPE) => {
                lost += 1;
                continue;
            }
            Err(err) if scanned == 0 => return Err(refused(path, err)),
            Err(_) => break,
        }
    }
    Ok(KmsgCapture {
        records: select(parsed, window),
        scanned,
        lost,
    })
}

/// Follows the kernel log from where it stood when opened: each [`Follower::poll`] returns the records printed
/// since the last one, each exactly once (the open file keeps the kernel's read position: nothing is re-read,
/// whatever the ring holds). Never blocks; records overwritten before a poll are counted in `lost`.
#[derive(Debug)]
pub struct Follower {
    file: std::fs::File,
    buf: Vec<u8>,
    /// The highest sequence number returned (a record at or below it is never returned again).
    last_seq: Option<u64>,
    /// Records the kernel overwrote before we read them, or malformed ones.
    pub lost: u64,
}

/// The most records one [`Follower::poll`] reads (a flood waits for the next poll, never holds the caller).
pub const MAX_POLL_RECORDS: usize = 10_000;

/// Where a [`Follower`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowFrom {
    /// After the last record in the ring now: nothing printed before the open is returned.
    End,
    /// At the oldest record the ring still holds.
    Start,
    /// After the record with this sequence number (records at or below it are skipped): where an earlier
    /// follower of the same boot stopped.
    After(u64),
}

impl Follower {
    /// Open `path` and start at its end: records already in the ring are not returned (a restarted agent must
    /// not count them twice).
    pub fn open_at_end(path: &Path) -> Result<Follower> {
        Follower::open(path, FollowFrom::End)
    }

    /// Open `path` and start where `from` says.
    pub fn open(path: &Path, from: FollowFrom) -> Result<Follower> {
        let file = self::open(path)?;
        if from == FollowFrom::End {
            // SAFETY: lseek(2) on a descriptor this function owns; /dev/kmsg takes SEEK_END as "after the last
            // record". A regular file (tests) seeks to its end the same way.
            let rc =
                unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&file), 0, libc::SEEK_END) };
            if rc < 0 {
                return Err(Error::Io {
                    path: path.to_path_buf(),
                    source: io::Error::last_os_error(),
                });
            }
        }
        Ok(Follower {
            file,
            buf: vec![0u8; 16 * 1024],
            last_seq: match from {
                FollowFrom::After(seq) => Some(seq),
                _ => None,
            },
            lost: 0,
        })
    }

    /// The sequence number of the last record returned (or skipped as already seen), if any.
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    /// The records printed since the last poll (at most [`MAX_POLL_RECORDS`]), oldest first.
    pub fn poll(&mut self) -> Vec<KmsgRecord> {
        use std::io::Read;
        let mut out = Vec::new();
        while out.len() < MAX_POLL_RECORDS {
            match self.file.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => match parse_record(&self.buf[..n]) {
                    Ok(record) if self.last_seq.is_none_or(|last| record.seq > last) => {
                        self.last_seq = Some(record.seq);
                        out.push(record);
                    }
                    Ok(_) => {}
                    Err(_) => self.lost += 1,
                },
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) if err.raw_os_error() == Some(libc::EPIPE) => self.lost += 1,
                // EAGAIN: nothing new; anything else: try again at the next poll.
                Err(_) => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real /dev/kmsg: what was there before the open is not returned, a line written after it is, once.
    #[test]
    fn the_follower_returns_each_new_record_once() {
        let mut follower = match Follower::open_at_end(Path::new(KMSG_PATH)) {
            Ok(f) => f,
            Err(err) => {
                assert!(
                    !breadcrumb::in_ci(),
                    "CI=true but /dev/kmsg cannot be opened: {err}"
                );
                eprintln!("skipping: /dev/kmsg not readable here: {err}");
                return;
            }
        };
        let tag = format!("wedge-capture follower test {}", std::process::id());
        match std::fs::write(KMSG_PATH, format!("<6>{tag}\n")) {
            Ok(()) => {}
            Err(err) => {
                eprintln!("skipping: /dev/kmsg not writable here: {err}");
                return;
            }
        }
        let mut seen = Vec::new();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !seen.iter().any(|r: &KmsgRecord| r.message == tag) {
            assert!(std::time::Instant::now() < until, "{tag:?} never came");
            seen.extend(follower.poll());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(seen.iter().filter(|r| r.message == tag).count() == 1);
        assert!(
            follower.poll().iter().all(|r| r.message != tag),
            "returned twice"
        );
        // A fresh follower starts after it.
        let mut fresh = Follower::open_at_end(Path::new(KMSG_PATH)).unwrap();
        assert!(fresh.poll().iter().all(|r| r.message != tag));
    }

    #[test]
    fn reads_the_real_device_without_blocking() {
        let window = KmsgWindow {
            since_usec: 0,
            max_recent: 50,
            max_flagged_before: 10,
        };
        let started = std::time::Instant::now();
        match read_around(Path::new(KMSG_PATH), &window) {
            Ok(capture) => assert!(capture.records.len() <= 60),
            Err(err) => eprintln!("skipping: /dev/kmsg not readable here: {err}"),
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn a_missing_device_is_an_io_error_naming_it() {
        let window = KmsgWindow {
            since_usec: 0,
            max_recent: 1,
            max_flagged_before: 1,
        };
        let err = read_around(Path::new("/nonexistent/kmsg"), &window).unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound),
            "{err:?}"
        );
        assert!(err.to_string().starts_with("/nonexistent/kmsg: "), "{err}");
    }

    #[test]
    fn records_of_a_regular_file_are_read_and_the_malformed_counted() {
        // A regular file hands out its bytes in one read: one record, then end of file.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg");
        std::fs::write(&path, b"6,1,100,-;NVRM: Xid (PCI:0000:01:00): 79\n").unwrap();
        let window = KmsgWindow {
            since_usec: 0,
            max_recent: 10,
            max_flagged_before: 10,
        };
        let capture = read_around(&path, &window).unwrap();
        assert_eq!((capture.scanned, capture.lost), (1, 0));
        assert_eq!(capture.records[0].flag.as_deref(), Some("xid"));
        std::fs::write(&path, b"garbage").unwrap();
        let capture = read_around(&path, &window).unwrap();
        assert_eq!((capture.scanned, capture.lost), (1, 1));
        assert!(capture.records.is_empty());
    }
}
