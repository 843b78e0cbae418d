//! The ring-directory target source: the writer of every ring file in a watched directory is a target,
//! once the kernel confirms the header's claim ([`trust`](super::trust)).
//!
//! Files come from inotify (created, renamed in, rewritten) and from listing passes (at start, when a
//! directory is watched anew, after an inotify overflow, every 10 s without inotify). Both feed one
//! first-in-first-out queue of files to examine. Costs stay bounded per scan whatever the directory
//! holds, and no entry can be hidden by what surrounds it:
//! - a pass reads at most [`LISTED_PER_SCAN`] directory entries per scan through one open directory
//!   stream that the next scan continues (a cursor), and pauses while [`MAX_PENDING`] files wait;
//! - at most [`RING_READS_PER_SCAN`] reads (ring headers, `/proc` files, fd stats) are spent on queued
//!   files per scan; a file not decided goes to the back of the queue;
//! - refused files are remembered by identity ([`Rejected`]) and examined again only when they change,
//!   and logged once, rate-limited ([`RejectionLog`]); nothing of their content is logged.
//!
//! So a directory of E entries, R of them named `*.ring`, is listed in at most ⌈E / LISTED_PER_SCAN⌉
//! scans, and a ring queued behind Q files is examined within about ⌈Q / RING_READS_PER_SCAN⌉ scans
//! (one read per junk file; a forged header that names a live process costs a few more): a wedged
//! writer behind 50,000 junk entries becomes a target within a few dozen scans (docs/agent.md).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capture::untrusted::FileIdentity;
use capture::ProcRoot;

use super::files::{open_ring, printable_path};
use super::is_ring_name;
use super::trust::{Budget, Claim, Rejected, RejectionLog, Verdict, Verifier};

/// Scans a ring file whose header is not readable yet is retried (a writer still initialising it).
const RING_RETRIES: u8 = 5;
/// Most reads (ring headers, `/proc` files, fd stats) spent on ring files per scan; the rest of the
/// queued files wait for the next scan, so a directory of hostile files cannot stall a scan.
pub const RING_READS_PER_SCAN: usize = 2048;
/// Most directory entries (of any name) a listing pass reads per scan.
pub const LISTED_PER_SCAN: usize = 16_384;
/// A listing pass pauses while this many files wait to be examined.
pub const MAX_PENDING: usize = 4 * RING_READS_PER_SCAN;
/// Most files queued at all (inotify may queue past [`MAX_PENDING`]; beyond this an event only asks
/// for a listing pass, which finds the file later): memory stays bounded.
pub const MAX_QUEUED: usize = 65_536;

/// A ring file whose writer is alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingWriter {
    pub pid: i32,
    pub start: u64,
}

/// The ring-directory selector: inotify on each directory, resumable listing passes, ring headers
/// read once per file.
pub struct RingWatch {
    dirs: Vec<PathBuf>,
    inotify: Option<inotify::Inotify>,
    watching: HashSet<PathBuf>,
    /// Watch descriptor → directory.
    wds: HashMap<inotify::WatchDescriptor, PathBuf>,
    /// Directory → (device, inode) of what is watched: a directory removed and made again is another
    /// inode, which the old watch never reports on.
    inodes: HashMap<PathBuf, (u64, u64)>,
    /// Directories whose problem was already logged (logged again only after it was fixed).
    warned: HashSet<PathBuf>,
    last_attempt: Option<Instant>,
    /// Files to examine (new, changed, or waiting for a namespace walk or for budget), and the order
    /// they are examined in (each key of `pending` once, first in first out: a file waits at most for
    /// the ones queued before it).
    pending: HashMap<PathBuf, Pending>,
    queue: VecDeque<PathBuf>,
    /// The listing pass in progress, if any (see [`Listing`]).
    listing: Option<Listing>,
    /// Listing passes completed (for tests and the docs' bound).
    passes: u64,
    /// Directory entries read by the last scan's slice of a pass.
    listed_last_scan: usize,
    writers: HashMap<PathBuf, RingWriter>,
    /// Believes a header's claims only when the kernel confirms them.
    verifier: Verifier,
    /// Files refused, by identity: not examined again until they change.
    rejected: Rejected,
    rejections: RejectionLog,
    /// A listing pass is wanted (at start, when a directory is watched anew, after an inotify
    /// overflow, every 10 s without inotify); one in progress finishes first, then another starts.
    full_rescan: bool,
    buffer: Vec<u8>,
}

/// A listing pass: the directories in turn, each read through one open directory stream that
/// continues where the previous scan stopped (at most [`LISTED_PER_SCAN`] entries per scan, and none
/// while [`MAX_PENDING`] files wait), so a directory of any size is listed whole, a bounded slice per
/// scan, and every entry is reached whatever its position.
struct Listing {
    /// Index in `dirs` of the directory being listed.
    dir: usize,
    entries: Option<std::fs::ReadDir>,
}

/// A ring file waiting to be decided.
#[derive(Debug, Clone)]
struct Pending {
    /// Header reads left (a writer may still be initialising the file).
    tries: u8,
    /// Once read: the header's claim, the file's (dev, inode), the namespace-walk count then, and the
    /// entry's identity before the read (what a refusal remembers: a later rewrite is examined again).
    examined: Option<Examined>,
}

#[derive(Debug, Clone, Copy)]
struct Examined {
    claim: Claim,
    file: (u64, u64),
    seen_at_walk: u64,
    identity: FileIdentity,
}

impl Pending {
    fn new(tries: u8) -> Pending {
        Pending {
            tries,
            examined: None,
        }
    }
}

impl RingWatch {
    pub fn new(dirs: Vec<PathBuf>, me: i32) -> RingWatch {
        RingWatch {
            dirs,
            inotify: None,
            watching: HashSet::new(),
            wds: HashMap::new(),
            inodes: HashMap::new(),
            warned: HashSet::new(),
            last_attempt: None,
            pending: HashMap::new(),
            queue: VecDeque::new(),
            listing: None,
            passes: 0,
            listed_last_scan: 0,
            writers: HashMap::new(),
            verifier: Verifier::new(me),
            rejected: Rejected::default(),
            rejections: RejectionLog::default(),
            full_rescan: true,
            buffer: vec![0; 16 * 1024],
        }
    }

    /// Forget watches whose directory is gone or was replaced (one stat per directory per scan).
    fn check_watched(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let stale: Vec<PathBuf> = self
            .watching
            .iter()
            .filter(|dir| {
                let now = std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()));
                now.is_none() || now != self.inodes.get(*dir).copied()
            })
            .cloned()
            .collect();
        for dir in stale {
            self.watching.remove(&dir);
            self.inodes.remove(&dir);
            let wds: Vec<inotify::WatchDescriptor> = self
                .wds
                .iter()
                .filter(|(_, d)| **d == dir)
                .map(|(wd, _)| wd.clone())
                .collect();
            for wd in wds {
                self.wds.remove(&wd);
                if let Some(inotify) = self.inotify.as_mut() {
                    let _ = inotify.watches().remove(wd);
                }
            }
            self.last_attempt = None;
        }
    }

    /// Watch every directory not watched yet (retried every 10 s while one is missing).
    fn ensure_watches(&mut self, notes: &mut Vec<String>) {
        self.check_watched();
        if self.watching.len() == self.dirs.len() {
            return;
        }
        if self
            .last_attempt
            .is_some_and(|at| at.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        self.last_attempt = Some(Instant::now());
        if self.inotify.is_none() {
            match inotify::Inotify::init() {
                Ok(inotify) => self.inotify = Some(inotify),
                Err(err) => {
                    notes.push(format!(
                        "warning: inotify unavailable ({err}): ring directories are re-listed every 10 s instead"
                    ));
                    // Without inotify, a periodic full listing does the same job.
                    self.full_rescan = true;
                    return;
                }
            }
        }
        let Some(inotify) = self.inotify.as_mut() else {
            return;
        };
        for dir in &self.dirs {
            if self.watching.contains(dir) {
                continue;
            }
            if !dir.is_dir() {
                if let Err(err) = super::create_ring_dir(dir) {
                    if self.warned.insert(dir.clone()) {
                        notes.push(format!(
                            "warning: ring directory {} does not exist and cannot be created: {err} (retrying every 10 s)",
                            dir.display()
                        ));
                    }
                    continue;
                }
                notes.push(format!(
                    "created ring directory {} (mode {:o}: any worker may create its ring there)",
                    dir.display(),
                    super::RING_DIR_MODE
                ));
            }
            use inotify::WatchMask;
            let mask = WatchMask::MOVED_TO
                | WatchMask::CREATE
                | WatchMask::CLOSE_WRITE
                | WatchMask::DELETE
                | WatchMask::MOVED_FROM
                | WatchMask::ONLYDIR;
            match inotify.watches().add(dir, mask) {
                Ok(wd) => {
                    use std::os::unix::fs::MetadataExt;
                    if let Ok(meta) = std::fs::metadata(dir) {
                        self.inodes.insert(dir.clone(), (meta.dev(), meta.ino()));
                    }
                    self.warned.remove(dir);
                    self.wds.insert(wd, dir.clone());
                    self.watching.insert(dir.clone());
                    // Files that appeared before the watch existed.
                    self.full_rescan = true;
                    notes.push(format!("watching ring directory {}", dir.display()));
                }
                Err(err) => {
                    if self.warned.insert(dir.clone()) {
                        notes.push(format!(
                            "warning: cannot watch ring directory {}: {err} (retrying every 10 s)",
                            dir.display()
                        ));
                    }
                }
            }
        }
    }

    /// Collect new and removed files from inotify (never blocks).
    fn drain_events(&mut self) {
        let Some(inotify) = self.inotify.as_mut() else {
            if self
                .last_attempt
                .is_none_or(|at| at.elapsed() >= Duration::from_secs(10))
            {
                self.full_rescan = true;
            }
            return;
        };
        // Queued after the events are read (new or rewritten files).
        let mut fresh = Vec::new();
        // Bounded: at most 64 buffers of events per scan; the rest waits for the next scan.
        for _ in 0..64 {
            let events = match inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                Err(_) => break, // WouldBlock: nothing more now.
            };
            let mut any = false;
            for event in events {
                any = true;
                if event.mask.contains(inotify::EventMask::Q_OVERFLOW) {
                    self.full_rescan = true;
                    continue;
                }
                if event.mask.contains(inotify::EventMask::IGNORED) {
                    // The directory was removed or unmounted: watch it again when it is back.
                    if let Some(dir) = self.wds.remove(&event.wd) {
                        self.watching.remove(&dir);
                        self.inodes.remove(&dir);
                        self.last_attempt = None;
                    }
                    continue;
                }
                let (Some(name), Some(dir)) = (event.name, self.wds.get(&event.wd)) else {
                    continue;
                };
                if !is_ring_name(name) {
                    continue;
                }
                let path = dir.join(name);
                if event
                    .mask
                    .intersects(inotify::EventMask::DELETE | inotify::EventMask::MOVED_FROM)
                {
                    self.writers.remove(&path);
                    self.rejected.forget(&path);
                    // Still queued: looked at afresh in its turn (and dropped then if still gone).
                    if let Some(entry) = self.pending.get_mut(&path) {
                        entry.examined = None;
                    }
                } else if !self.writers.contains_key(&path) {
                    // New or rewritten: read again (a changed identity is examined afresh).
                    fresh.push(path);
                }
            }
            if !any {
                break;
            }
        }
        for path in fresh {
            self.enqueue(path, RING_RETRIES, true);
        }
    }

    /// Queue `path` for examination (at the back of the queue if it is not queued yet); `fresh`: a new or
    /// rewritten file, looked at afresh even if it was queued. With [`MAX_QUEUED`] files queued a new
    /// one is not queued: a listing pass will find it.
    fn enqueue(&mut self, path: PathBuf, tries: u8, fresh: bool) {
        if let Some(entry) = self.pending.get_mut(&path) {
            if fresh {
                *entry = Pending::new(tries.max(entry.tries));
            }
            return;
        }
        if self.pending.len() >= MAX_QUEUED {
            self.full_rescan = true;
            return;
        }
        self.pending.insert(path.clone(), Pending::new(tries));
        self.queue.push_back(path);
    }

    /// One scan's slice of the listing pass: starts a pass when one is wanted, then reads at most
    /// [`LISTED_PER_SCAN`] directory entries, and none while [`MAX_PENDING`] files wait to be
    /// examined (the pass continues at the next scan, where it stopped).
    fn list_some(&mut self) {
        self.listed_last_scan = 0;
        if self.listing.is_none() {
            if !self.full_rescan {
                return;
            }
            self.full_rescan = false;
            self.last_attempt = self.last_attempt.or(Some(Instant::now()));
            self.rejected.begin_pass();
            self.listing = Some(Listing {
                dir: 0,
                entries: None,
            });
        }
        let mut listed = 0;
        while listed < LISTED_PER_SCAN && self.pending.len() < MAX_PENDING {
            let Some(listing) = self.listing.as_mut() else {
                return;
            };
            let Some(dir) = self.dirs.get(listing.dir) else {
                // Every directory listed: the pass is complete.
                self.listing = None;
                self.passes += 1;
                self.rejected.end_pass();
                return;
            };
            if listing.entries.is_none() {
                match std::fs::read_dir(dir) {
                    Ok(entries) => listing.entries = Some(entries),
                    Err(_) => {
                        listing.dir += 1;
                        continue;
                    }
                }
            }
            let next = listing.entries.as_mut().and_then(|entries| entries.next());
            let entry = match next {
                Some(Ok(entry)) => entry,
                // The end of this directory (or an error reading it): the next one.
                Some(Err(_)) | None => {
                    listing.entries = None;
                    listing.dir += 1;
                    continue;
                }
            };
            listed += 1;
            self.listed_last_scan = listed;
            if !is_ring_name(&entry.file_name()) {
                continue;
            }
            let path = entry.path();
            if self.writers.contains_key(&path) {
                continue;
            }
            self.rejected.listed(&path);
            self.enqueue(path, 1, false);
        }
    }

    /// Resolve pending files to live writers (within this scan's budget); forget writers that exited.
    pub fn refresh(&mut self, root: &ProcRoot, notes: &mut Vec<String>) {
        self.ensure_watches(notes);
        self.drain_events();
        self.list_some();
        self.verifier.begin_scan();
        if self.verifier.namespaces.walk_due() {
            self.verifier.namespaces.walk(root);
        }
        let mut budget = Budget::new(RING_READS_PER_SCAN);
        // Files not decided this scan go to the back of the queue, after the ones not reached.
        let mut again = Vec::new();
        for _ in 0..self.queue.len() {
            if budget.is_spent() {
                break;
            }
            let Some(path) = self.queue.pop_front() else {
                break;
            };
            let Some(mut entry) = self.pending.remove(&path) else {
                continue;
            };
            let examined = match entry.examined {
                Some(examined) => examined,
                None => {
                    let (identity, unchanged) = self.rejected.unchanged(&path);
                    let Some(identity) = identity else {
                        continue; // Gone since it was listed.
                    };
                    if unchanged {
                        continue;
                    }
                    if !budget.spend(1) {
                        // Its turn is not over: first at the next scan.
                        self.pending.insert(path.clone(), entry);
                        self.queue.push_front(path);
                        break;
                    }
                    match examine(&path) {
                        Ok((claim, file)) => {
                            let examined = Examined {
                                claim,
                                file,
                                seen_at_walk: self.verifier.namespaces.walks(),
                                identity,
                            };
                            entry.examined = Some(examined);
                            examined
                        }
                        Err((why, retry)) => {
                            if retry && entry.tries > 1 {
                                entry.tries -= 1;
                                self.pending.insert(path.clone(), entry);
                                again.push(path);
                            } else {
                                self.reject(path, identity, &why, notes);
                            }
                            continue;
                        }
                    }
                }
            };
            let verdict = self.verifier.verify(
                root,
                &examined.claim,
                examined.file,
                examined.seen_at_walk,
                &mut budget,
            );
            self.settle(path, entry, examined, verdict, &mut again, notes);
        }
        self.queue.extend(again);
        if let Some(summary) = self.rejections.summary(Instant::now()) {
            notes.push(summary);
        }
        self.writers
            .retain(|_, w| process_start(root, w.pid) == Some(w.start));
    }

    /// What one verification decided for a pending file: a writer adopted, another try later, or a refusal.
    fn settle(
        &mut self,
        path: PathBuf,
        entry: Pending,
        examined: Examined,
        verdict: Verdict,
        again: &mut Vec<PathBuf>,
        notes: &mut Vec<String>,
    ) {
        match verdict {
            Verdict::Writer(writer) => {
                notes.push(format!(
                    "ring {}: writer is pid {} (a target while it lives)",
                    printable_path(&path),
                    writer.pid
                ));
                self.rejected.forget(&path);
                self.writers.insert(
                    path,
                    RingWriter {
                        pid: writer.pid,
                        start: writer.start,
                    },
                );
            }
            Verdict::Later => {
                self.pending.insert(path.clone(), entry);
                again.push(path);
            }
            Verdict::Refused(why) => {
                if why.is_stale() {
                    // A writer that already exited: an old ring, not a target, nothing to log.
                    self.rejected.remember(path, examined.identity);
                } else {
                    self.reject(path, examined.identity, &why.to_string(), notes);
                }
            }
        }
    }

    /// Remember a refused file by identity; log it once (rate-limited), never its content.
    fn reject(
        &mut self,
        path: PathBuf,
        identity: FileIdentity,
        why: &str,
        notes: &mut Vec<String>,
    ) {
        if let Some(line) = self.rejections.reject(&path, || {
            format!("ring {} ignored: {why}", printable_path(&path))
        }) {
            notes.push(line);
        }
        self.rejected.remember(path, identity);
    }
}

/// Opens a ring file (no symlink followed, nothing but a regular file) and reads its header: the claim
/// and the file's (dev, inode). The error says what is wrong, never what the file holds, and whether a
/// later read may succeed (a writer still initialising the file).
fn examine(path: &Path) -> Result<(Claim, (u64, u64)), (String, bool)> {
    let file = open_ring(path).map_err(|err| match err {
        capture::Error::Untrusted { why, .. } => (why.to_string(), false),
        capture::Error::Io { source, .. } => (source.to_string(), false),
        other => (other.to_string(), false),
    })?;
    let header = breadcrumb::read_header(file.file()).map_err(|err| (err.to_string(), true))?;
    let identity = file.identity();
    Ok((Claim::of(&header), (identity.dev, identity.ino)))
}

/// A process's start time (`stat` field 22), if it exists.
fn process_start(root: &ProcRoot, pid: i32) -> Option<u64> {
    root.read_stat(pid).ok().map(|s| s.starttime)
}

impl RingWatch {
    /// The live writers found so far: ring path → writer.
    pub fn writers(&self) -> impl Iterator<Item = (&PathBuf, &RingWriter)> {
        self.writers.iter()
    }

    /// Ring files with a live writer.
    #[cfg(test)]
    pub fn writer_count(&self) -> usize {
        self.writers.len()
    }

    /// Ring files refused since start (each version of a file counted once).
    #[cfg(test)]
    pub fn rejected_total(&self) -> u64 {
        self.rejections.total()
    }

    /// Files waiting to be examined.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Refused files remembered by identity.
    #[cfg(test)]
    pub fn remembered(&self) -> usize {
        self.rejected.len()
    }

    /// Listing passes completed.
    #[cfg(test)]
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// Directory entries the last scan read.
    #[cfg(test)]
    pub fn listed_last_scan(&self) -> usize {
        self.listed_last_scan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capture::testing::FakeProc;

    /// A fake `/proc/<pid>` for ring verification: stat (ppid 1, start), `ns/pid`, NSpid, fd links.
    fn fake_writer(root: &Path, pid: i32, start: u64, ns: u64, fds: &[&Path]) {
        FakeProc::at(root)
            .process(pid)
            .comm(&format!("w{pid}"))
            .start(start)
            .pid_ns(ns)
            .fds(fds);
    }

    fn ring_with_identity(path: &Path, pid: u32, start: u64, ns: u64) -> breadcrumb::Writer {
        let identity = breadcrumb::identity::ProcessIdentity {
            pid,
            start_time_ticks: start,
            pidns_inode: ns,
            ..breadcrumb::identity::ProcessIdentity::current()
        };
        breadcrumb::Writer::create_with(
            path,
            &breadcrumb::WriterOptions {
                slot_count: 16,
                ..breadcrumb::WriterOptions::default()
            },
            &identity,
        )
        .unwrap()
    }

    const NS: u64 = 4_026_531_836;

    /// The ring watch as the agent drives it: one refresh per scan, the live writers' pids.
    struct Source {
        watch: RingWatch,
        notes: Vec<String>,
    }

    impl Source {
        fn targets(&mut self, root: &ProcRoot) -> Vec<i32> {
            self.watch.refresh(root, &mut self.notes);
            let mut pids: Vec<i32> = self.watch.writers().map(|(_, w)| w.pid).collect();
            pids.sort_unstable();
            pids.dedup();
            pids
        }

        fn take_notes(&mut self) -> Vec<String> {
            std::mem::take(&mut self.notes)
        }

        fn ring_counts(&self) -> (u64, usize) {
            (self.watch.rejected_total(), self.watch.pending())
        }
    }

    fn ring_source(rings: &Path) -> Source {
        Source {
            watch: RingWatch::new(vec![rings.to_path_buf()], std::process::id() as i32),
            notes: Vec::new(),
        }
    }

    #[test]
    fn a_ring_file_makes_its_writer_a_target() {
        let dir = tempfile::tempdir().unwrap();
        let rings = dir.path().join("rings");
        std::fs::create_dir_all(&rings).unwrap();
        let root = dir.path().join("proc");
        let me = std::process::id() as i32;
        fake_writer(&root, me, 10, NS, &[]);
        fake_writer(&root, 1, 1, NS, &[&rings.join("x.ring")]);
        fake_writer(
            &root,
            4242,
            777,
            NS,
            &[&rings.join("x.ring"), &rings.join("y.ring")],
        );
        fake_writer(&root, 4343, 888, NS, &[]);
        let proc_root = ProcRoot::new(&root);
        let mut source = ring_source(&rings);
        assert!(source.targets(&proc_root).is_empty());

        let writer = ring_with_identity(&rings.join("x.ring"), 4242, 777, NS);
        assert_eq!(
            source.targets(&proc_root),
            vec![4242],
            "{:?}",
            source.take_notes()
        );
        // Claims the kernel does not confirm: the forged pid-1 header, pid 1 with its real
        // start time (it holds x.ring), a real process that does not hold the file, and this process.
        let forged = [
            ("forged.ring", 1, 0, 0),
            ("init.ring", 1, 1, NS),
            ("other.ring", 4343, 888, NS),
            ("me.ring", me as u32, 10, NS),
        ];
        let _forged: Vec<_> = forged
            .iter()
            .map(|(name, pid, start, ns)| ring_with_identity(&rings.join(name), *pid, *start, *ns))
            .collect();
        assert_eq!(source.targets(&proc_root), vec![4242]);
        let notes = source.take_notes().join("\n");
        for (name, why) in [
            ("forged.ring", "no writer start time"),
            ("init.ring", "pid 1"),
            ("other.ring", "does not hold this file open"),
            ("me.ring", "this agent"),
        ] {
            assert!(
                notes.lines().any(|l| l.contains(name) && l.contains(why)),
                "{name}: {notes}"
            );
        }
        std::fs::remove_file(writer.path()).unwrap();
        source.targets(&proc_root);
        assert_eq!(source.watch.writer_count(), 0);

        // Garbage, a FIFO and a symlink to a secret: refused, never blocking, nothing of them logged.
        std::fs::write(rings.join("junk.ring"), b"root:*:19000:hunter2").unwrap();
        nix::unistd::mkfifo(
            &rings.join("x.ring"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        // A name chosen to forge log lines (a newline, an escape sequence): escaped in the log.
        use std::os::unix::ffi::OsStrExt;
        let odd = rings.join(std::ffi::OsStr::from_bytes(b"\x1b[31mz\nfake line.ring"));
        nix::unistd::mkfifo(&odd, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"WEDGERNG hunter2 secret").unwrap();
        std::os::unix::fs::symlink(&secret, rings.join("s.ring")).unwrap();
        for _ in 0..=RING_RETRIES {
            assert!(source.targets(&proc_root).is_empty());
        }
        let notes = source.take_notes().join("\n");
        assert!(notes.contains("x.ring ignored: is a FIFO"), "{notes}");
        assert!(
            notes.contains("s.ring ignored: is a symbolic link"),
            "{notes}"
        );
        assert!(
            notes.contains("junk.ring ignored: not a breadcrumb ring"),
            "{notes}"
        );
        assert!(
            !notes.contains("hunter2") && !notes.contains("root:"),
            "{notes}"
        );
        assert!(examine(&rings.join("junk.ring")).is_err_and(|(_, retry)| retry));
        assert!(examine(&rings.join("x.ring")).is_err_and(|(_, retry)| !retry));
        let (rejected, pending) = source.ring_counts();
        assert_eq!((rejected, pending), (8, 0), "{notes}");

        // The directory removed and made again (a tmpfiles run, a remount): watched again.
        std::fs::remove_dir_all(&rings).unwrap();
        source.targets(&proc_root);
        source.targets(&proc_root);
        assert!(rings.is_dir(), "{:?}", source.take_notes());
        let writer = ring_with_identity(&rings.join("y.ring"), 4242, 777, NS);
        assert_eq!(
            source.targets(&proc_root),
            vec![4242],
            "{:?}",
            source.take_notes()
        );
        drop(writer);
    }

    #[test]
    fn thousands_of_foreign_rings_are_bounded_per_scan_and_quiet() {
        let dir = tempfile::tempdir().unwrap();
        let rings = dir.path().join("rings");
        std::fs::create_dir_all(&rings).unwrap();
        let root = dir.path().join("proc");
        let me = std::process::id() as i32;
        fake_writer(&root, me, 10, NS, &[]);
        let template = rings.join("template.ring.tmp");
        drop(ring_with_identity(&template, 7, 1234, 99));
        let mut bytes = std::fs::read(&template).unwrap();
        std::fs::remove_file(&template).unwrap();
        let count = RING_READS_PER_SCAN + 952;
        for n in 0..count {
            // Each in its own (absent) pid namespace.
            bytes[breadcrumb::format::header::PIDNS_INODE..][..8]
                .copy_from_slice(&(1_000_000 + n as u64).to_le_bytes());
            std::fs::write(rings.join(format!("{n}.ring")), &bytes).unwrap();
        }
        let proc_root = ProcRoot::new(&root);
        let mut source = ring_source(&rings);
        source.targets(&proc_root);
        let (_, pending) = source.ring_counts();
        assert!(pending > 0 && pending <= count, "{pending}");
        let mut scans = 1;
        while source.ring_counts().1 > 0 {
            assert!(scans < 10, "still {} pending", source.ring_counts().1);
            std::thread::sleep(crate::rings::trust::MIN_WALK_INTERVAL / 4);
            assert!(source.targets(&proc_root).is_empty());
            scans += 1;
        }
        let notes = source.take_notes();
        assert!(notes.len() < 5, "{notes:?}");
        assert!(source.watch.remembered() == count);
    }

    /// Renames `ring` (a fresh name each time) until it is listed after `fraction` of the directory's
    /// `*.ring` entries: a listing that stops early, or reads in one go from the start, misses it.
    pub(crate) fn place_late(dir: &Path, ring: &Path, fraction: f64) -> PathBuf {
        let mut path = ring.to_path_buf();
        for attempt in 0..200 {
            let names: Vec<PathBuf> = std::fs::read_dir(dir)
                .unwrap()
                .flatten()
                .filter(|e| is_ring_name(&e.file_name()))
                .map(|e| e.path())
                .collect();
            let at = names.iter().position(|p| *p == path).unwrap();
            if at as f64 >= fraction * names.len() as f64 {
                return path;
            }
            let next = dir.join(format!("late-{attempt}.ring"));
            std::fs::rename(&path, &next).unwrap();
            path = next;
        }
        panic!("could not place {} late in the listing", ring.display());
    }

    /// Issue 26: a directory with tens of thousands of junk entries (most not rings, thousands of
    /// `*.ring` junk) and one real ring listed near the end: found within the bound, each scan reading
    /// at most LISTED_PER_SCAN entries and keeping at most MAX_QUEUED files queued.
    #[test]
    fn a_ring_behind_junk_is_found_within_the_bound_at_a_bounded_cost_per_scan() {
        let dir = tempfile::tempdir().unwrap();
        let rings = dir.path().join("rings");
        std::fs::create_dir_all(&rings).unwrap();
        let root = dir.path().join("proc");
        fake_writer(&root, std::process::id() as i32, 10, NS, &[]);
        let other_entries = LISTED_PER_SCAN + 100;
        let junk_rings = 2 * RING_READS_PER_SCAN + 7;
        for n in 0..other_entries {
            std::fs::write(rings.join(format!("junk-{n}")), b"").unwrap();
        }
        for n in 0..junk_rings {
            std::fs::write(rings.join(format!("junk-{n}.ring")), b"").unwrap();
        }
        let writer = ring_with_identity(&rings.join("w.ring"), 4242, 777, NS);
        let path = place_late(&rings, writer.path(), 0.8);
        fake_writer(&root, 4242, 777, NS, &[&path]);
        let proc_root = ProcRoot::new(&root);
        let mut source = ring_source(&rings);
        let entries = other_entries + junk_rings + 1;
        let bound =
            entries.div_ceil(LISTED_PER_SCAN) + (junk_rings + 1).div_ceil(RING_READS_PER_SCAN) + 2;
        let mut scans = 0;
        while source.targets(&proc_root) != vec![4242] {
            scans += 1;
            assert!(source.watch.listed_last_scan() <= LISTED_PER_SCAN);
            assert!(source.watch.pending() <= MAX_QUEUED);
            assert!(
                scans <= bound,
                "not found within {bound} scans: {:?}",
                source.take_notes()
            );
        }
        // The pass completes, and the junk is remembered, not examined again at the next pass.
        while source.watch.passes() == 0 || source.watch.pending() > 0 {
            source.targets(&proc_root);
        }
        assert_eq!(source.watch.remembered(), junk_rings);
        let (rejected, _) = source.ring_counts();
        source.watch.full_rescan = true;
        for _ in 0..bound {
            source.targets(&proc_root);
        }
        assert_eq!(
            source.ring_counts().0,
            rejected,
            "unchanged junk is not examined again"
        );
        assert!(source.watch.passes() >= 2);
        assert_eq!(source.targets(&proc_root), vec![4242]);
    }
}
