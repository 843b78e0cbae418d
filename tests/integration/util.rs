//! Helpers shared by the integration test modules.

use capture::frozen_fs::FrozenFs;

/// The `wedge-capture` binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_wedge-capture")
}

/// CI=true: tests that need root, loop devices or cgroups must run, and fail when they cannot set up.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A mounted (not yet frozen) ext4, or None (skip) when this machine cannot make one outside CI.
pub fn frozen_fs_or_skip(test: &str) -> Option<FrozenFs> {
    FrozenFs::for_test(test)
}
