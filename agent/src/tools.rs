//! The one place that finds the external tools the agent uses: programs on `PATH` (py-spy, nvidia-smi,
//! python3) and libraries the dynamic loader can load (libcuda, libcupti). `doctor` reports what these find,
//! and the capture stages and probes run what they find, so the two can never disagree. (The injection library
//! and the libcupti that `run --inject=cupti` hands to it are searched for on disk by [`crate::inject_env`],
//! which looks up `python3` here.)
//!
//! Finding never runs anything: a found program is run later, as a probe with a deadline.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The NVIDIA management tool run as a probe (`nvidia-smi -q`).
pub const NVIDIA_SMI: &str = "nvidia-smi";
/// The names libcuda is loaded by, most specific first.
pub const LIBCUDA_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];
/// The names libcupti is loaded by, most generic first (the loader's choice of version, then known ones).
pub const LIBCUPTI_NAMES: &[&str] = &[
    "libcupti.so",
    "libcupti.so.13",
    "libcupti.so.12",
    "libcupti.so.11.8",
];

/// First executable `name` on this process's `PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    find_executable_in(&std::env::var_os("PATH")?, name)
}

/// First executable `name` in the directories of `search_path` (a `PATH`-style list).
pub fn find_executable_in(search_path: &OsStr, name: &str) -> Option<PathBuf> {
    std::env::split_paths(search_path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable_file(candidate))
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A program setting (`--py-spy`): a path (with a `/`) as given when it exists, a bare name looked up on
/// `PATH`.
pub fn find_program(setting: &Path) -> Option<PathBuf> {
    if setting.components().count() > 1 || setting.is_absolute() {
        return setting.is_file().then(|| setting.to_path_buf());
    }
    find_in_path(setting.to_str()?)
}

/// py-spy, for the Python stacks of CPython targets: `setting` is `--py-spy` (a path or a bare name).
pub fn py_spy(setting: &Path) -> Option<PathBuf> {
    find_program(setting)
}

/// nvidia-smi on `PATH`.
pub fn nvidia_smi() -> Option<PathBuf> {
    find_in_path(NVIDIA_SMI)
}

/// The first of `names` the dynamic loader loads (dlopen, then dlclose at once; no symbol is used).
pub fn loadable<'a>(names: &[&'a str]) -> Option<&'a str> {
    names.iter().copied().find(|candidate| {
        let Ok(c) = std::ffi::CString::new(*candidate) else {
            return false;
        };
        // SAFETY: dlopen with a NUL-terminated name; the handle is closed right away and no symbol is used.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return false;
        }
        // SAFETY: `handle` came from dlopen above.
        unsafe { libc::dlclose(handle) };
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn py_spy_is_found_by_path_or_on_path() {
        assert_eq!(py_spy(Path::new("/nonexistent/py-spy")), None);
        assert_eq!(py_spy(Path::new("wedge-capture-no-such-py-spy")), None);
        let sh = py_spy(Path::new("sh")).expect("sh on PATH");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(py_spy(&sh), Some(sh.clone()));
    }

    #[test]
    fn only_executable_files_are_found_in_a_search_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plain"), b"").unwrap();
        std::fs::create_dir(dir.path().join("a-dir")).unwrap();
        let search = dir.path().as_os_str();
        assert_eq!(find_executable_in(search, "plain"), None);
        assert_eq!(find_executable_in(search, "a-dir"), None);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.path().join("plain"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        assert_eq!(
            find_executable_in(search, "plain"),
            Some(dir.path().join("plain"))
        );
    }

    #[test]
    fn the_loader_finds_libc_and_not_a_made_up_library() {
        assert_eq!(loadable(&["libwedge-no-such.so"]), None);
        assert_eq!(
            loadable(&["libwedge-no-such.so", "libc.so.6"]),
            Some("libc.so.6")
        );
    }
}
