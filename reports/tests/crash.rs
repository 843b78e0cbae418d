//! Crash consistency: a writer process is SIGKILLed at random instants, hundreds of times; after every kill, every
//! incident directory parses (complete or partial), no file is torn, and no temp file is visible under a real name.
//!
//! The writer is this same test binary, re-executed with `WEDGE_CRASH_CHILD_DIR` set (the test-binary re-exec
//! trick): it writes incidents in a loop until it is killed. `WEDGE_CRASH_ITERATIONS` sets the number of kills
//! (default 300), `WEDGE_CRASH_SEED` replays a run, `WEDGE_CRASH_MAX_DELAY_MS` bounds the random delay before most kills (one in five waits up to 5×).

mod common;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reports::layout::{INCIDENT_FILE, MARKER_FILE, REPORT_FILE};
use reports::model::{Incident, Sample, Timestamp};
use reports::store::read::read_incident;
use reports::{Retention, Store};

const CHILD_ENV: &str = "WEDGE_CRASH_CHILD_DIR";
const TEST_NAME: &str = "writer_killed_at_random_points_never_leaves_a_torn_file";

/// A self-checking payload: `WCP1` + length + FNV-1a of the body, then the body.
fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(len);
    let mut x = seed | 1;
    for _ in 0..len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        body.push(x as u8);
    }
    let mut out = b"WCP1".to_vec();
    out.extend_from_slice(&(len as u64).to_le_bytes());
    out.extend_from_slice(&fnv(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

fn check_payload(path: &Path) -> Result<(), String> {
    let bytes = fs::read(path).map_err(|e| e.to_string())?;
    if bytes.len() < 20 || &bytes[..4] != b"WCP1" {
        return Err(format!(
            "{}: bad header ({} bytes)",
            path.display(),
            bytes.len()
        ));
    }
    let len = u64::from_le_bytes(bytes[4..12].try_into().unwrap()) as usize;
    let sum = u64::from_le_bytes(bytes[12..20].try_into().unwrap());
    let body = &bytes[20..];
    if body.len() != len || fnv(body) != sum {
        return Err(format!(
            "{}: torn payload ({} of {len} bytes)",
            path.display(),
            body.len()
        ));
    }
    Ok(())
}

/// The writer loop of the child: incidents with several updates, raw files, and a finish; retention removes old
/// ones meanwhile, so removals are killed too.
fn child_writer(dir: &Path) -> ! {
    let store = Store::open(
        dir,
        Retention {
            max_incidents: Some(6),
            ..Retention::UNLIMITED
        },
    )
    .expect("open store");
    let mut n: u64 = u64::from(std::process::id()) << 20;
    loop {
        n += 1;
        let mut inc = common::incident();
        inc.id.clear();
        inc.complete = false;
        inc.process.pid = (n % 1_000_000) as i32;
        inc.detected_at = Timestamp::now();
        let mut handle = store.create(&inc).expect("create");
        handle
            .write_file("ring.bin", &payload(n, 1000 + (n as usize * 7919) % 60_000))
            .expect("ring");
        for k in 0..3u64 {
            inc.samples.push(Sample {
                taken_at: Timestamp::now(),
                snapshot: common::snapshot(k),
                ..Sample::default()
            });
            handle.update(&inc).expect("update");
            handle
                .write_file(
                    &format!("samples/{k:04}-stack.txt"),
                    &payload(n ^ k, 500 + k as usize * 3000),
                )
                .expect("sample");
        }
        handle.finish(&inc).expect("finish");
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Default, Debug)]
struct Seen {
    complete: usize,
    partial: usize,
    temp_files: usize,
}

/// Everything a reader can see after a kill must be whole.
fn verify(dir: &Path, seen: &mut Seen) -> Result<(), String> {
    let store = match Store::open_read_only(dir) {
        Ok(store) => store,
        // Killed before it opened the store (a first kill within microseconds): nothing written, nothing torn.
        Err(reports::Error::NoStore { .. }) => return Ok(()),
        Err(err) => return Err(err.to_string()),
    };
    for summary in store.list().map_err(|e| e.to_string())? {
        if let Some(err) = summary.error {
            return Err(format!("{}: {err}", summary.id));
        }
        if summary.in_progress {
            return Err(format!(
                "{}: in progress although its writer is dead",
                summary.id
            ));
        }
        let inc: Incident =
            read_incident(&summary.path.join(INCIDENT_FILE)).map_err(|e| e.to_string())?;
        if inc.id != summary.id {
            return Err(format!("{}: incident.json says id {}", summary.id, inc.id));
        }
        if inc.complete {
            seen.complete += 1;
            if !summary.path.join(REPORT_FILE).exists() || !summary.path.join("ring.bin").exists() {
                return Err(format!("{}: complete but a part is missing", summary.id));
            }
        } else {
            seen.partial += 1;
        }
        verify_files(&summary.path, &summary.path, seen)?;
    }
    Ok(())
}

fn verify_files(root: &Path, dir: &Path, seen: &mut Seen) -> Result<(), String> {
    for entry in fs::read_dir(dir).map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        let path = entry.path();
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| "non-UTF-8 name".to_string())?;
        if entry.file_type().map_err(|e| e.to_string())?.is_dir() {
            verify_files(root, &path, seen)?;
            continue;
        }
        if name.starts_with(".tmp-") {
            seen.temp_files += 1;
            continue;
        }
        match name.as_str() {
            MARKER_FILE => {}
            INCIDENT_FILE => {} // parsed by the caller
            REPORT_FILE => {
                let md = fs::read_to_string(&path).map_err(|e| e.to_string())?;
                if !md.starts_with("**Verdict:**") || !md.ends_with("</sub>\n") {
                    return Err(format!(
                        "{}: torn report.md ({} bytes)",
                        path.display(),
                        md.len()
                    ));
                }
            }
            _ => check_payload(&path)?,
        }
    }
    let _ = root;
    Ok(())
}

#[test]
fn writer_killed_at_random_points_never_leaves_a_torn_file() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child_writer(Path::new(&dir));
    }
    let iterations = env_u64("WEDGE_CRASH_ITERATIONS", 300);
    let max_delay_ms = env_u64("WEDGE_CRASH_MAX_DELAY_MS", 50).max(1);
    let seed = env_u64(
        "WEDGE_CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1,
    );
    eprintln!("crash test: {iterations} kills, seed {seed} (WEDGE_CRASH_SEED to replay)");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("incidents");
    let exe = std::env::current_exe().unwrap();
    let mut seen = Seen::default();
    let started = Instant::now();
    let mut max_temp = 0;

    for i in 0..iterations {
        let mut child = Command::new(&exe)
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        // Microsecond resolution so kills land anywhere inside a write, fsync or rename; one kill in five waits
        // longer so that some writers get to finish incidents (and die between or inside later ones).
        let range_us = if rng.next() % 5 == 4 {
            max_delay_ms * 5000
        } else {
            max_delay_ms * 1000
        };
        let delay = Duration::from_micros(rng.next() % range_us);
        std::thread::sleep(delay);
        if let Ok(Some(status)) = child.try_wait() {
            panic!("writer exited by itself at kill {i}: {status} (run it alone to see why)");
        }
        child.kill().unwrap();
        child.wait().unwrap();

        let before = seen.temp_files;
        if let Err(err) = verify(&dir, &mut seen) {
            panic!("after kill {i} (delay {delay:?}, seed {seed}): {err}");
        }
        // Each writer cleans up after the one before it: leftovers never pile up.
        max_temp = max_temp.max(seen.temp_files - before);
    }
    eprintln!(
        "crash test: {seen:?} over {iterations} kills in {:?}",
        started.elapsed()
    );
    assert!(
        max_temp <= 4,
        "temp files pile up ({max_temp} after one kill): dead writers are not cleaned up"
    );
    if iterations >= 100 {
        // The kills really landed mid-capture and between captures.
        assert!(
            seen.partial > 0,
            "no kill left a partial incident: {seen:?}"
        );
        assert!(seen.complete > 0, "no incident was ever finished: {seen:?}");
    }
}
