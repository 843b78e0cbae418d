//! `.tar.gz` of one incident ([`crate::Store::bundle_with`]): the incident directory under its id, every member
//! dated at the incident's time, optionally scrubbed for a public issue ([`crate::scrub`]).
//!
//! Members keep their own permission bits (0600 files, 0700 directories) but carry no owner names, and their
//! mtime is the incident's detection time (its `detected_at`, else the time in its id): the archive says when
//! the wedge happened, and two bundles of the same incident are byte-identical.

use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use capture::error::Rejection;
use capture::untrusted::{self, Limits};

use crate::durable;
use crate::error::{Error, Result};
use crate::layout::{INCIDENT_FILE, MAX_BUNDLED_FILE_BYTES, REPORT_FILE};
use crate::model::Incident;
use crate::scrub::{self, Scrubbed};
use crate::store::read::read_incident_bytes;

/// Largest single file a public bundle scrubs (it is read whole into memory to be scrubbed).
pub const MAX_SCRUBBED_FILE_BYTES: u64 = 256 << 20;

/// How to bundle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BundleOptions {
    /// Drop or mask the host's and other tenants' data ([`crate::scrub`]).
    pub public: bool,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct Bundled {
    /// Size of the archive in bytes.
    pub bytes: u64,
    /// The directory name inside the archive (the id; scrubbed with `public`).
    pub root: String,
    /// What `public` scrubbed.
    pub scrubbed: Option<scrub::Summary>,
}

/// The id a public bundle of `incident` uses (for a default file name before writing it).
pub fn public_id(src: &Path) -> Result<String> {
    Ok(scrub::scrub(&load(src)?).id)
}

fn load(src: &Path) -> Result<Incident> {
    let path = src.join(INCIDENT_FILE);
    let bytes = read_incident_bytes(&path)?;
    serde_json::from_slice(&bytes).map_err(|source| Error::Parse { path, source })
}

/// Write the archive of the incident directory `src` (named `id`) to `out`, atomically, mode `file_mode`.
pub(crate) fn write(
    src: &Path,
    id: &str,
    out: &Path,
    file_mode: u32,
    options: &BundleOptions,
) -> Result<Bundled> {
    let out_dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let out_name = out
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::InvalidName {
            name: out.display().to_string(),
            why: "the bundle path needs a UTF-8 file name",
        })?;
    // A public bundle needs the incident to know what to scrub; a plain one only wants its time.
    let incident = if options.public {
        Some(load(src)?)
    } else {
        load(src).ok()
    };
    let scrubbed = incident
        .as_ref()
        .filter(|_| options.public)
        .map(scrub::scrub);
    let mtime = incident
        .as_ref()
        .and_then(|i| i.detected_at.wall.or(i.episode.started_at.wall))
        .map(|t| t.timestamp().max(0) as u64)
        .or_else(|| time_of_id(id))
        .unwrap_or(0);
    let root = scrubbed.as_ref().map_or(id.to_string(), |s| s.id.clone());
    // Dropped on any error below, the temp file is removed.
    let file = durable::AtomicFile::create(&out_dir, out_name, file_mode)?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    let mut walk = Walk {
        tar: &mut tar,
        mtime,
        scrubbed: scrubbed.as_ref(),
    };
    walk.dir(src, Path::new(&root), true)?;
    let gz = tar.into_inner().map_err(Error::io("write", out))?;
    let file = gz.finish().map_err(Error::io("write", out))?;
    file.commit()?;
    Ok(Bundled {
        bytes: fs::metadata(out).map(|m| m.len()).unwrap_or(0),
        root,
        scrubbed: scrubbed.map(|s| s.summary),
    })
}

/// The time in an id (`20261202T113400Z-…`), seconds since the epoch.
fn time_of_id(id: &str) -> Option<u64> {
    let stamp = id.split('-').next()?;
    let time = chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%SZ").ok()?;
    u64::try_from(time.and_utc().timestamp()).ok()
}

struct Walk<'a, W: std::io::Write> {
    tar: &'a mut tar::Builder<W>,
    mtime: u64,
    scrubbed: Option<&'a Scrubbed>,
}

impl<W: std::io::Write> Walk<'_, W> {
    /// Append `src` (a real directory, not a symlink) as `name`, with the modes of the incident's own files and
    /// directories. Symlinks, FIFOs, devices and hidden names (temps, the marker) are left out; every file is
    /// opened through [`capture::untrusted`], so nothing outside the incident can be pulled in.
    fn dir(&mut self, src: &Path, name: &Path, top: bool) -> Result<()> {
        let meta = fs::symlink_metadata(src).map_err(Error::io("stat", src))?;
        if !meta.is_dir() {
            return Err(Error::Untrusted {
                path: src.to_path_buf(),
                why: if meta.file_type().is_symlink() {
                    Rejection::Symlink
                } else {
                    Rejection::NotRegular("not a directory")
                },
            });
        }
        let mut header = self.header(&meta);
        self.tar
            .append_data(&mut header, name, std::io::empty())
            .map_err(Error::io("bundle", src))?;
        let mut entries: Vec<_> = fs::read_dir(src)
            .map_err(Error::io("read directory", src))?
            .flatten()
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let file_name = entry.file_name();
            let Some(file_str) = file_name.to_str().filter(|n| !n.starts_with('.')) else {
                continue;
            };
            // The entry's own type: a symlink is never followed.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                self.dir(&path, &name.join(&file_name), false)?;
            } else if kind.is_file() {
                let member = (top).then_some(file_str);
                self.file(&path, &name.join(&file_name), member)?;
            }
        }
        Ok(())
    }

    /// One file; `top_name` is its name when it sits directly in the incident directory.
    fn file(&mut self, path: &Path, name: &Path, top_name: Option<&str>) -> Result<()> {
        let limit = if self.scrubbed.is_some() {
            MAX_SCRUBBED_FILE_BYTES
        } else {
            MAX_BUNDLED_FILE_BYTES
        };
        let file = untrusted::open(path, Limits::max_len(limit))
            .map_err(|err| Error::from_untrusted(err, path))?;
        let meta = file.file().metadata().map_err(Error::io("stat", path))?;
        let mut header = self.header(&meta);
        let Some(scrubbed) = self.scrubbed else {
            // Exactly the size in the header: store files are replaced by rename, never rewritten in place.
            return self
                .tar
                .append_data(&mut header, name, file.file().take(meta.len()))
                .map_err(Error::io("bundle", path));
        };
        let bytes = match top_name {
            Some(INCIDENT_FILE) => {
                let mut json =
                    serde_json::to_vec_pretty(&scrubbed.incident).map_err(Error::Serialize)?;
                json.push(b'\n');
                json
            }
            Some(REPORT_FILE) => {
                let report = crate::render::markdown(&scrubbed.incident);
                format!("{}{}", scrubbed.summary.note(), scrubbed.text(&report)).into_bytes()
            }
            _ => {
                let mut raw = Vec::with_capacity(meta.len() as usize);
                file.file()
                    .take(meta.len())
                    .read_to_end(&mut raw)
                    .map_err(Error::io("read", path))?;
                scrubbed.bytes(&raw)
            }
        };
        header.set_size(bytes.len() as u64);
        header.set_cksum();
        self.tar
            .append_data(&mut header, name, bytes.as_slice())
            .map_err(Error::io("bundle", path))
    }

    /// A header without owner names (reproducible bundles), dated at the incident, with the file's own
    /// permission bits: 0600 files and 0700 directories stay so when unpacked.
    fn header(&self, meta: &fs::Metadata) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_metadata_in_mode(meta, tar::HeaderMode::Deterministic);
        header.set_mode(meta.mode() & 0o7777);
        header.set_mtime(self.mtime);
        header
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_of_an_id_is_its_utc_stamp() {
        assert_eq!(
            time_of_id("20261202T113400Z-gpu01-4242"),
            Some(1_796_211_240)
        );
        assert_eq!(time_of_id("garbage"), None);
    }
}
