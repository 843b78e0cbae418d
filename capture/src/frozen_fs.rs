//! A real D-state fixture: a small ext4 image, loop-mounted in a temp dir, frozen with `fsfreeze -f`.
//! A thread that writes to it (or changes inode flags) sleeps uninterruptibly in
//! `percpu_rwsem_wait` (superblock write protection) until the filesystem is thawed.
//!
//! Used by capture's tests, the agent's integration tests and `wedge-capture selftest`. Needs root
//! (losetup, mount, fsfreeze). Dropping a [`FrozenFs`] thaws, unmounts and detaches the loop device,
//! also when a test panics.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::proc_root::ProcRoot;

const IMAGE_BYTES: u64 = 16 * 1024 * 1024;

fn run(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| {
        Error::Fixture(format!(
            "cannot run {cmd}: {e} (install e2fsprogs/util-linux/mount)"
        ))
    })?;
    if !out.status.success() {
        return Err(Error::Fixture(format!(
            "{cmd} {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A loop-mounted ext4 filesystem that can be frozen and thawed.
#[derive(Debug)]
pub struct FrozenFs {
    dir: Option<tempfile::TempDir>,
    mountpoint: PathBuf,
    loop_device: Option<String>,
    mounted: bool,
    frozen: bool,
}

impl FrozenFs {
    /// Why this fixture cannot run here, if it cannot (not root).
    pub fn unavailable_reason() -> Option<String> {
        if !nix::unistd::geteuid().is_root() {
            return Some("needs root (CAP_SYS_ADMIN for losetup, mount and fsfreeze)".into());
        }
        None
    }

    /// For tests: a mounted (not yet frozen) ext4, or None (skip, with a line on stderr) when
    /// this machine cannot make one. Under `CI=true` (or `CI=1`) such tests must run, so a
    /// failure to set up panics instead.
    pub fn for_test(test: &str) -> Option<FrozenFs> {
        match FrozenFs::new() {
            Ok(fs) => Some(fs),
            Err(err) if breadcrumb::in_ci() => {
                panic!("{test}: CI=true but the frozen filesystem cannot be set up: {err}")
            }
            Err(err) => {
                eprintln!("skipping {test}: {err}");
                None
            }
        }
    }

    /// Makes the image, attaches a loop device and mounts it (not yet frozen).
    pub fn new() -> Result<FrozenFs> {
        if let Some(why) = Self::unavailable_reason() {
            return Err(Error::Fixture(why));
        }
        let dir = tempfile::Builder::new()
            .prefix("wedge-capture-frozen-")
            .tempdir()
            .map_err(|e| Error::Fixture(format!("temp dir: {e}")))?;
        let image = dir.path().join("fs.img");
        let mountpoint = dir.path().join("mnt");
        std::fs::create_dir(&mountpoint).map_err(|e| Error::Fixture(format!("mkdir: {e}")))?;
        File::create(&image)
            .and_then(|f| f.set_len(IMAGE_BYTES))
            .map_err(|e| Error::Fixture(format!("image: {e}")))?;
        let mut fs = FrozenFs {
            dir: Some(dir),
            mountpoint,
            loop_device: None,
            mounted: false,
            frozen: false,
        };
        let image_s = image.to_string_lossy().into_owned();
        run("mkfs.ext4", &["-q", "-F", &image_s])?;
        // Loop devices may need the module; harmless when built in.
        let _ = Command::new("modprobe").arg("loop").output();
        let dev = run("losetup", &["--find", "--show", &image_s])?;
        fs.loop_device = Some(dev.clone());
        run(
            "mount",
            &["-t", "ext4", &dev, &fs.mountpoint.to_string_lossy()],
        )?;
        fs.mounted = true;
        Ok(fs)
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// Creates (or truncates) a file on the filesystem; do this before freezing.
    pub fn create_file(&self, name: &str, contents: &[u8]) -> Result<PathBuf> {
        let path = self.mountpoint.join(name);
        std::fs::write(&path, contents)
            .map_err(|e| Error::Fixture(format!("{}: {e}", path.display())))?;
        Ok(path)
    }

    pub fn freeze(&mut self) -> Result<()> {
        if !self.frozen {
            run("fsfreeze", &["-f", &self.mountpoint.to_string_lossy()])?;
            self.frozen = true;
        }
        Ok(())
    }

    pub fn thaw(&mut self) -> Result<()> {
        if self.frozen {
            run("fsfreeze", &["-u", &self.mountpoint.to_string_lossy()])?;
            self.frozen = false;
        }
        Ok(())
    }
}

impl Drop for FrozenFs {
    fn drop(&mut self) {
        if self.frozen {
            if let Err(e) = self.thaw() {
                eprintln!("frozen_fs: thaw failed: {e}");
            }
        }
        if self.mounted {
            let mp = self.mountpoint.to_string_lossy().into_owned();
            // A process still holding a file open keeps the mount busy: detach it lazily then.
            if run("umount", &[&mp]).is_err() {
                if let Err(e) = run("umount", &["-l", &mp]) {
                    eprintln!("frozen_fs: umount failed: {e}");
                }
            }
            self.mounted = false;
        }
        if let Some(dev) = self.loop_device.take() {
            if let Err(e) = run("losetup", &["-d", &dev]) {
                eprintln!("frozen_fs: losetup -d {dev} failed: {e}");
            }
        }
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}

/// How the blocked thread is made to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockingCall {
    /// `ioctl(fd, FS_IOC_SETFLAGS, &flags)`: blocks in `mnt_want_write_file` on a frozen fs.
    SetFlags,
    /// `write(2)` of one byte: blocks in `file_start_write` / `sb_start_write`.
    Write,
}

/// A thread of the current process blocked (or about to block) on a frozen filesystem.
#[derive(Debug)]
pub struct BlockedThread {
    pub tid: i32,
    handle: Option<JoinHandle<std::io::Result<()>>>,
}

impl BlockedThread {
    /// Waits for the call to return (after the filesystem is thawed) and reports its result.
    pub fn join(mut self) -> std::io::Result<()> {
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("blocked thread panicked")),
            None => Ok(()),
        }
    }
}

nix::ioctl_read!(fs_ioc_getflags, b'f', 1, libc::c_long);
nix::ioctl_write_ptr!(fs_ioc_setflags, b'f', 2, libc::c_long);

fn blocking_call(file: &File, call: BlockingCall) -> std::io::Result<()> {
    match call {
        BlockingCall::SetFlags => {
            let mut flags: libc::c_long = 0;
            let fd = file.as_raw_fd();
            // SAFETY: `fd` is an open descriptor owned by `file` for the whole call, and `flags` is a
            // valid, writable c_long, which is what FS_IOC_GETFLAGS/SETFLAGS read and write.
            unsafe {
                fs_ioc_getflags(fd, &mut flags).map_err(std::io::Error::from)?;
                fs_ioc_setflags(fd, &flags).map_err(std::io::Error::from)?;
            }
            Ok(())
        }
        BlockingCall::Write => {
            use std::io::Write;
            let mut f = file;
            f.write_all(b"x")
        }
    }
}

/// Spawns a (non-main) thread named `name` that opens `path` (on a filesystem about to be, or already,
/// frozen) and makes `call` on it. Returns once the thread has the file open; the thread then blocks
/// until the filesystem is thawed. Use [`wait_for_state`] to see it reach `D`.
pub fn spawn_blocked_thread(path: &Path, call: BlockingCall, name: &str) -> Result<BlockedThread> {
    let (tx, rx) = mpsc::channel();
    let path = path.to_path_buf();
    let handle = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path);
            let file = match file {
                Ok(f) => f,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return Err(e);
                }
            };
            let _ = tx.send(Ok(nix::unistd::gettid().as_raw()));
            blocking_call(&file, call)
        })
        .map_err(|e| Error::Fixture(format!("spawn: {e}")))?;
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(tid)) => Ok(BlockedThread {
            tid,
            handle: Some(handle),
        }),
        Ok(Err(e)) => Err(Error::Fixture(format!("open: {e}"))),
        Err(_) => Err(Error::Fixture("blocked thread did not start".into())),
    }
}

/// Polls `/proc/<pid>/task/<tid>/stat` until the thread is in `state` or `timeout` passes.
pub fn wait_for_state(
    root: &ProcRoot,
    pid: i32,
    tid: i32,
    state: char,
    timeout: Duration,
) -> Result<()> {
    let start = Instant::now();
    loop {
        let seen = root.read_task_stat(pid, tid)?.state;
        if seen == state {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(Error::Fixture(format!(
                "thread {tid} stayed in {seen}, not {state}, for {timeout:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In-process: a helper thread blocks in FS_IOC_SETFLAGS on the frozen fs, reaches D, and
    /// completes after thaw. (The cross-process capture test is in tests/dstate.rs.)
    #[test]
    fn setflags_blocks_in_d_until_thaw() {
        let Some(mut fs) = FrozenFs::for_test("setflags_blocks_in_d_until_thaw") else {
            return;
        };
        let path = fs.create_file("victim", b"hello").unwrap();
        fs.freeze().unwrap();
        let t = spawn_blocked_thread(&path, BlockingCall::SetFlags, "setflags-victim").unwrap();
        let me = std::process::id() as i32;
        let root = ProcRoot::default();
        wait_for_state(&root, me, t.tid, 'D', Duration::from_secs(10)).unwrap();
        // Still D a moment later: it is really waiting for the thaw.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(root.read_task_stat(me, t.tid).unwrap().state, 'D');
        assert_eq!(
            root.read_wchan(me, t.tid).unwrap().as_deref(),
            Some("percpu_rwsem_wait")
        );
        fs.thaw().unwrap();
        t.join().unwrap();
    }
}
