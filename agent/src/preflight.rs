//! Checks made before watching starts, shared by `run`, `selftest`, `doctor` and the agent: can the
//! incident directory be written, which capabilities that limit the capture are missing.

use std::path::Path;

use capture::ProcRoot;

use crate::exit::{ExitCode, Failure};

/// Check that `dir` can be written (create and remove a file), with a clear error.
pub fn check_writable(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).map_err(|err| {
        Failure::new(
            ExitCode::ERROR,
            format!(
                "output directory {} cannot be created: {err}",
                dir.display()
            ),
        )
    })?;
    let probe = dir.join(format!(".write-test-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|err| {
            Failure::new(
                ExitCode::ERROR,
                format!("output directory {} is not writable: {err}", dir.display()),
            )
        })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Capability numbers (linux/capability.h).
pub const CAP_SYS_PTRACE: u32 = 19;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_SYSLOG: u32 = 34;

/// Capabilities that limit capture and are missing from our effective set, with what each costs.
pub fn missing_capabilities(proc_root: &ProcRoot) -> Vec<(&'static str, &'static str)> {
    let me = std::process::id() as i32;
    let Ok(status) = proc_root.read_task_status(me, me) else {
        return Vec::new();
    };
    let eff = status.cap_eff.unwrap_or(0);
    let mut missing = Vec::new();
    if eff & (1u64 << CAP_SYS_ADMIN) == 0 {
        missing.push((
            "CAP_SYS_ADMIN",
            "kernel stacks (task stack files) will not be captured",
        ));
    }
    if eff & (1u64 << CAP_SYS_PTRACE) == 0 {
        missing.push((
            "CAP_SYS_PTRACE",
            "syscall, wchan and fd links of other users' processes will not be readable",
        ));
    }
    if eff & (1u64 << CAP_SYSLOG) == 0 {
        missing.push((
            "CAP_SYSLOG",
            "the kernel log cannot be read when kernel.dmesg_restrict=1",
        ));
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_under_a_file_is_not_writable_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        check_writable(&dir.path().join("new/sub")).unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let err = check_writable(&file.join("sub")).unwrap_err();
        assert!(err.to_string().contains("cannot be created"), "{err}");
        assert_eq!(crate::exit::code_for(&err), ExitCode::ERROR);
        // The probe file is gone again.
        assert_eq!(
            std::fs::read_dir(dir.path().join("new/sub"))
                .unwrap()
                .count(),
            0
        );
    }
}
