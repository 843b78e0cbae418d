//! The harness of `run`'s wedge tests: a wedge on a frozen filesystem ([`Wedge`]) and the
//! `wedge-capture run` that watches it ([`WedgeRun`], a builder), so a test states only the
//! flags it is about; plus starting a `wedge-capture` with its output in files ([`start`]) and
//! waiting for it with a limit ([`wait_limited`]).
//!
//! ```ignore
//! let Some(mut wedge) = Wedge::new("my_test", "my-dir") else { return };
//! let done = wedge.run().threshold("2").interval("0.5").exit_after("1").finish(LIMIT);
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capture::frozen_fs::FrozenFs;

use crate::util::{bin, frozen_fs_or_skip};

/// `--threshold` of a [`WedgeRun`] that does not set one, in seconds.
pub(crate) const DEFAULT_THRESHOLD: &str = "1";
/// `--interval` of a [`WedgeRun`] that does not set one, in seconds.
pub(crate) const DEFAULT_INTERVAL: &str = "0.25";

/// A fresh scratch directory under the system temp dir, unique to this process and call.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "wedge-capture-it-{name}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(crate) struct Finished {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) elapsed: Duration,
}

/// A started `wedge-capture` whose stdout and stderr go to files: a pipe would stay open as long
/// as the (unkillable) helper it passed them to.
pub(crate) struct Started {
    pub(crate) child: Child,
    started: Instant,
    stdout: PathBuf,
    stderr: PathBuf,
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(crate) fn start(command: &mut Command) -> Started {
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = std::env::temp_dir().join(format!(
        "wedge-capture-it-output-{}-{id}",
        std::process::id()
    ));
    let stdout = base.with_extension("stdout");
    let stderr = base.with_extension("stderr");
    let started = Instant::now();
    let child = command
        .stdout(Stdio::from(std::fs::File::create(&stdout).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&stderr).unwrap()))
        .spawn()
        .unwrap();
    Started {
        child,
        started,
        stdout,
        stderr,
    }
}

/// Wait for the command at most `limit`; kill it (and fail) past that.
pub(crate) fn wait_limited(mut run: Started, limit: Duration) -> Finished {
    let limit = crate::util::scaled(limit);
    loop {
        if let Some(status) = run.child.try_wait().unwrap() {
            let elapsed = run.started.elapsed();
            let stdout = std::fs::read_to_string(&run.stdout).unwrap_or_default();
            let stderr = std::fs::read_to_string(&run.stderr).unwrap_or_default();
            let _ = std::fs::remove_file(&run.stdout);
            let _ = std::fs::remove_file(&run.stderr);
            return Finished {
                code: status.code(),
                stdout,
                stderr,
                elapsed,
            };
        }
        if run.started.elapsed() > limit {
            let _ = run.child.kill();
            let _ = run.child.wait();
            panic!(
                "wedge-capture did not exit within {limit:?}; stderr: {}",
                std::fs::read_to_string(&run.stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A frozen filesystem holding a file whose writer blocks in D, and the directories a test
/// writes to. The scratch directory is left in place on failure (for a look); a passing test
/// removes it.
pub(crate) struct Wedge {
    pub(crate) fs: FrozenFs,
    /// The file on the frozen filesystem: the wedge helper's write to it blocks in D.
    pub(crate) file: PathBuf,
    /// This test's scratch directory.
    pub(crate) scratch: PathBuf,
    /// `scratch/incidents`, what the test hands to `--out`.
    pub(crate) out: PathBuf,
}

impl Wedge {
    /// The frozen filesystem and a fresh scratch directory `name`; `None` (skipped, with a
    /// message) where test `test` cannot run (never with CI=true: it fails instead).
    pub(crate) fn new(test: &str, name: &str) -> Option<Wedge> {
        let mut fs = frozen_fs_or_skip(test)?;
        let file = fs.create_file("target", b"x").unwrap();
        fs.freeze().unwrap();
        let scratch = temp_dir(name);
        let out = scratch.join("incidents");
        Some(Wedge {
            fs,
            file,
            scratch,
            out,
        })
    }

    /// A `run` watching the wedge helper that writes to [`Wedge::file`].
    pub(crate) fn run(&self) -> WedgeRun<'_> {
        WedgeRun::new(&self.out, &self.file)
    }

    /// Removes the scratch directory (the end of a passing test).
    pub(crate) fn remove_scratch(&self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

impl<'a> WedgeRun<'a> {
    /// A run whose incidents go to `out`, watching the wedge helper that writes to `file`.
    pub(crate) fn new(out: &'a Path, file: &'a Path) -> WedgeRun<'a> {
        WedgeRun {
            out,
            file,
            threshold: DEFAULT_THRESHOLD.into(),
            interval: DEFAULT_INTERVAL.into(),
            exit_after: None,
            flags: Vec::new(),
            wrapper: Vec::new(),
            helper_args: Vec::new(),
        }
    }
}

/// `wedge-capture run --threshold T --interval I [--exit-after E] --no-nvidia-smi [flags…]
/// --out <out> -- [wrapper…] wedge-capture internal wedge-helper --path <file>
/// [helper args…]`.
pub(crate) struct WedgeRun<'a> {
    out: &'a Path,
    file: &'a Path,
    threshold: String,
    interval: String,
    exit_after: Option<String>,
    flags: Vec<OsString>,
    wrapper: Vec<OsString>,
    helper_args: Vec<OsString>,
}

impl WedgeRun<'_> {
    /// `--threshold` (seconds; default [`DEFAULT_THRESHOLD`]).
    pub(crate) fn threshold(mut self, seconds: &str) -> Self {
        self.threshold = seconds.into();
        self
    }

    /// `--interval` (seconds; default [`DEFAULT_INTERVAL`]).
    pub(crate) fn interval(mut self, seconds: &str) -> Self {
        self.interval = seconds.into();
        self
    }

    /// `--exit-after` (seconds); without it `run` stays while the command lives.
    pub(crate) fn exit_after(mut self, seconds: &str) -> Self {
        self.exit_after = Some(seconds.into());
        self
    }

    /// More `run` flags, before `--out`.
    pub(crate) fn args<S: AsRef<std::ffi::OsStr>>(mut self, flags: &[S]) -> Self {
        self.flags
            .extend(flags.iter().map(|f| f.as_ref().to_os_string()));
        self
    }

    /// A command that runs the wedge helper (`unshare --pid --fork`, …).
    pub(crate) fn wrapped_in(mut self, wrapper: &[&str]) -> Self {
        self.wrapper.extend(wrapper.iter().map(OsString::from));
        self
    }

    /// More wedge-helper arguments, after `--path`.
    pub(crate) fn helper_args<S: AsRef<std::ffi::OsStr>>(mut self, args: &[S]) -> Self {
        self.helper_args
            .extend(args.iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// The full `wedge-capture` argument list.
    fn argv(&self) -> Vec<OsString> {
        let mut argv: Vec<OsString> = ["run", "--threshold", &self.threshold]
            .into_iter()
            .chain(["--interval", &self.interval])
            .map(OsString::from)
            .collect();
        if let Some(exit_after) = &self.exit_after {
            argv.extend(["--exit-after", exit_after].map(OsString::from));
        }
        argv.push("--no-nvidia-smi".into());
        argv.extend(self.flags.iter().cloned());
        argv.extend(["--out".into(), self.out.as_os_str().to_os_string()]);
        argv.push("--".into());
        argv.extend(self.wrapper.iter().cloned());
        argv.extend([bin(), "internal", "wedge-helper", "--path"].map(OsString::from));
        argv.push(self.file.as_os_str().to_os_string());
        argv.extend(self.helper_args.iter().cloned());
        argv
    }

    pub(crate) fn start(self) -> Started {
        start(Command::new(bin()).args(self.argv()))
    }

    /// Starts the run and waits for it to exit, at most `limit`.
    pub(crate) fn finish(self, limit: Duration) -> Finished {
        wait_limited(self.start(), limit)
    }
}

#[test]
fn a_wedge_run_spells_out_every_flag_in_order() {
    let argv_of = |run: WedgeRun<'_>| -> Vec<String> {
        run.argv()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    };
    // Only the paths are used: no frozen filesystem needed.
    let (out, file) = ("/tmp/it/incidents", "/mnt/frozen/target");
    let run = || WedgeRun::new(Path::new(out), Path::new(file));
    assert_eq!(
        argv_of(run()),
        [
            "run",
            "--threshold",
            "1",
            "--interval",
            "0.25",
            "--no-nvidia-smi",
            "--out",
            out,
            "--",
            bin(),
            "internal",
            "wedge-helper",
            "--path",
            file
        ]
    );
    let custom = run()
        .threshold("2")
        .interval("0.5")
        .exit_after("1")
        .args(&["--format", "json"])
        .wrapped_in(&["unshare", "--pid"])
        .helper_args(&[Path::new("/x")]);
    assert_eq!(
        argv_of(custom),
        [
            "run",
            "--threshold",
            "2",
            "--interval",
            "0.5",
            "--exit-after",
            "1",
            "--no-nvidia-smi",
            "--format",
            "json",
            "--out",
            out,
            "--",
            "unshare",
            "--pid",
            bin(),
            "internal",
            "wedge-helper",
            "--path",
            file,
            "/x"
        ]
    );
}
