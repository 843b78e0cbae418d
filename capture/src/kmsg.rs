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
pub use crate::parse::kmsg::{boot_end_usec, classify, is_boot_line, KmsgRecord, KmsgWindow};
use crate::parse::kmsg::{parse_record, select};
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

#[cfg(test)]
mod tests {
    use super::*;

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
