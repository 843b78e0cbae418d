//! Helpers shared by the integration test modules.

use std::path::{Path, PathBuf};

use capture::frozen_fs::FrozenFs;

/// The `wedge-capture` binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_wedge-capture")
}

/// `limit` stretched by `WEDGE_TEST_TIME_SCALE` (a factor, default 1): an emulated CPU (the aarch64 VM of
/// tests/aarch64/, TCG) runs everything many times slower, and a bound meant for a loaded 2-core machine
/// would fail there for no other reason. Only waits for the agent are stretched, never the agent's own deadlines.
pub fn scaled(limit: std::time::Duration) -> std::time::Duration {
    let factor = std::env::var("WEDGE_TEST_TIME_SCALE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|f| f.is_finite() && *f >= 1.0)
        .unwrap_or(1.0);
    limit.mul_f64(factor)
}

/// CI=true: tests that need root, loop devices or cgroups must run, and fail when they cannot set up.
pub fn in_ci() -> bool {
    breadcrumb::in_ci()
}

/// A mounted (not yet frozen) ext4, or None (skip) when this machine cannot make one outside CI.
pub fn frozen_fs_or_skip(test: &str) -> Option<FrozenFs> {
    FrozenFs::for_test(test)
}

/// Incident directories (those holding an incident.json) under `out`, sorted (oldest first).
pub fn incident_dirs(out: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .map(|entries| {
            entries
                .flatten()
                // Dot names are the store's staging and ring directories: a new incident is assembled
                // in `.tmp-*` and renamed into place, so reading one races with that rename.
                .filter(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
                .map(|e| e.path())
                .filter(|p| p.join("incident.json").exists())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// A FIFO at `path` with exactly `mode` (the umask aside): opening it for reading blocks until a writer
/// comes, which is how these tests put a thread to sleep on demand.
pub fn mkfifo(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(mode)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Lets every reader of `fifo` through (their `open` returns once a writer appears, then they read EOF).
pub fn release_fifo(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo);
}
