//! The kernel log, read from `/dev/kmsg` without ever blocking.
//!
//! `/dev/kmsg` hands out one record per `read`. Opened with `O_NONBLOCK` a read returns `EAGAIN` at the
//! end of the buffer instead of waiting for new messages, and `EPIPE` when records were overwritten under
//! us. [`read_around`] is the only code that touches the device; [`crate::parse::kmsg`] decodes records.

use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
pub use crate::parse::kmsg::{classify, KmsgRecord, KmsgWindow};
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
        .map_err(|e| classify_io(path, e, NEEDS))
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
            Err(err) if scanned == 0 => return Err(classify_io(path, err, NEEDS)),
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
}
