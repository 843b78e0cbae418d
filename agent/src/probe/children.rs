//! The sacrificial children: a `fork` whose child makes raw system calls only (read a file, every
//! subdirectory's file, a process's memory) or a spawned program, each writing into a pipe the runner polls.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use super::confine::{ConfinedExec, Confinement};
use super::model::{Probe, ProbeKind, MAX_PROBE_OUTPUT};

/// Start the probe's child. Returns its pid and the read end of its output pipe.
pub(super) fn spawn(probe: &Probe) -> Result<(i32, OwnedFd), String> {
    match &probe.kind {
        ProbeKind::ReadFile(path) => {
            let path = CString::new(path.as_os_str().as_bytes())
                .map_err(|_| "path contains a NUL byte".to_string())?;
            fork_reader(|out| child_read_file(&path, out))
        }
        ProbeKind::ReadEachSubdir { dir, file_name } => {
            let dir_c = CString::new(dir.as_os_str().as_bytes())
                .map_err(|_| "path contains a NUL byte".to_string())?;
            let dir_bytes = dir.as_os_str().as_bytes().to_vec();
            let file_name = file_name.as_bytes().to_vec();
            fork_reader(|out| child_read_each_subdir(&dir_c, &dir_bytes, &file_name, out))
        }
        ProbeKind::Command {
            program,
            args,
            confinement,
        } => spawn_command(program, args, confinement),
        ProbeKind::ReadMem {
            path,
            offset,
            len,
            follow_xfer,
        } => {
            let path = CString::new(path.as_os_str().as_bytes())
                .map_err(|_| "path contains a NUL byte".to_string())?;
            let (offset, len, follow_xfer) = (*offset, (*len).min(MEM_READ_MAX), *follow_xfer);
            fork_reader(move |out| child_read_mem(&path, offset, len, follow_xfer, out))
        }
    }
}

/// Largest region one mem probe reads (the driver's own ioctl size limit, NV_ABSOLUTE_MAX_IOCTL_SIZE).
pub const MEM_READ_MAX: usize = capture::decode::nvidia::MAX_XFER_PARAMS;

/// Child side: pread `len` bytes at `offset` of `fd` into `buf`, retrying short reads; the count read
/// (0 past the end) or the errno of the first failure.
fn child_pread(fd: RawFd, buf: &mut [u8], offset: u64) -> Result<usize, i32> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reading into the unfilled tail of a stack buffer.
        let n = unsafe {
            libc::pread(
                fd,
                buf[got..].as_mut_ptr().cast(),
                buf.len() - got,
                (offset + got as u64) as libc::off_t,
            )
        };
        if n == 0 {
            break;
        }
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return if got > 0 { Ok(got) } else { Err(e) };
        }
        got += n as usize;
    }
    Ok(got)
}

/// Child side: write `bytes` as one line of lowercase hex. No allocation.
fn child_write_hex(out: RawFd, bytes: &[u8]) -> bool {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut line = [0u8; 512];
    for chunk in bytes.chunks(line.len() / 2) {
        for (i, b) in chunk.iter().enumerate() {
            line[2 * i] = DIGITS[usize::from(b >> 4)];
            line[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
        }
        if !child_write_all(out, &line[..2 * chunk.len()]) {
            return false;
        }
    }
    child_write_all(out, b"\n")
}

/// Child side of [`ProbeKind::ReadMem`]. Returns 0 or the errno of the first failed read (what was read
/// before it is already written).
fn child_read_mem(path: &CString, offset: u64, len: usize, follow_xfer: bool, out: RawFd) -> i32 {
    // SAFETY: open with a NUL-terminated path; the fd is closed at _exit.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return errno();
    }
    let mut buf = [0u8; MEM_READ_MAX];
    let got = match child_pread(fd, &mut buf[..len], offset) {
        Ok(got) => got,
        Err(e) => return e,
    };
    if !child_write_hex(out, &buf[..got]) {
        return libc::EPIPE;
    }
    if !follow_xfer || got < capture::decode::nvidia::XFER_SIZE {
        return 0;
    }
    let Some((ptr, inner_len)) = capture::decode::nvidia::xfer_inner_read(&buf[..got]) else {
        return 0;
    };
    match child_pread(fd, &mut buf[..inner_len], ptr) {
        Ok(got) => {
            if child_write_hex(out, &buf[..got]) {
                0
            } else {
                libc::EPIPE
            }
        }
        Err(e) => e,
    }
}

fn make_pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array we pass.
    let ret = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if ret != 0 {
        return Err(format!(
            "cannot create a pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: both fds were just created by pipe2 and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Fork a child that runs `body(write_fd)` and exits with its return value.
///
/// `body` must only make async-signal-safe calls (raw system calls, no allocation): the parent may have
/// other threads, and the child inherits none of them (nor any lock they held).
fn fork_reader(body: impl FnOnce(RawFd) -> i32) -> Result<(i32, OwnedFd), String> {
    let (read_end, write_end) = make_pipe()?;
    // SAFETY: the child branch only calls `body` (raw system calls on stack buffers) and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("cannot fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // Keep only the output pipe (as stdout): any other pipe write end inherited from a concurrent probe
        // would delay that probe's EOF until this child exits.
        // SAFETY: dup2/close_range/close are raw system calls on fds of this child.
        unsafe {
            if libc::dup2(write_end.as_raw_fd(), libc::STDOUT_FILENO) < 0 {
                libc::_exit(libc::EBADF);
            }
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
                for fd in 3..4096 {
                    libc::close(fd);
                }
            }
        }
        let code = body(libc::STDOUT_FILENO);
        // SAFETY: terminate the child at once, without running Rust or libc exit handlers.
        unsafe { libc::_exit(code) }
    }
    drop(write_end);
    Ok((pid, read_end))
}

fn spawn_command(
    program: &str,
    args: &[String],
    confinement: &Confinement,
) -> Result<(i32, OwnedFd), String> {
    use std::os::unix::process::CommandExt;

    let (read_end, write_end) = make_pipe()?;
    let write_err = write_end
        .try_clone()
        .map_err(|err| format!("cannot duplicate a pipe: {err}"))?;
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(write_end))
        .stderr(std::process::Stdio::from(write_err));
    if *confinement != Confinement::default() {
        let plan = ConfinedExec::prepare(program, args, confinement)?;
        // SAFETY: the closure runs in the forked child before exec; `ConfinedExec::apply` makes raw system calls
        // only, on memory prepared here in the parent (no allocation, no lock), as `pre_exec` requires.
        unsafe {
            command.pre_exec(move || plan.apply());
        }
    }
    let child = command
        .spawn()
        .map_err(|err| format!("cannot start {program}: {err}"))?;
    // The `Child` handle is dropped without waiting: we reap the pid ourselves, without blocking.
    Ok((child.id() as i32, read_end))
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Child side: write all of `bytes` to `out`. Raw system calls only.
fn child_write_all(out: RawFd, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writing from a valid slice to an fd the child owns.
        let n = unsafe { libc::write(out, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// Child side: copy the file at `path` to `out`. Returns 0 or the errno of the failure.
fn child_read_file(path: &CString, out: RawFd) -> i32 {
    // SAFETY: open with a NUL-terminated path; the fd is closed at _exit.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return errno();
    }
    child_copy_fd(fd, out)
}

fn child_copy_fd(fd: RawFd, out: RawFd) -> i32 {
    let mut buf = [0u8; 8192];
    let mut total = 0usize;
    loop {
        // SAFETY: reading into a stack buffer of the given length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 {
            return 0;
        }
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return e;
        }
        if !child_write_all(out, &buf[..n as usize]) {
            return libc::EPIPE;
        }
        total += n as usize;
        if total > MAX_PROBE_OUTPUT {
            return 0;
        }
    }
}

/// Format a small number into `buf` without allocating; returns the digits.
fn child_itoa(mut value: u32, buf: &mut [u8; 12]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 || i == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Child side: for every entry of `dir`, write `==> entry <==` and the contents of `dir/entry/file_name`.
fn child_read_each_subdir(dir_c: &CString, dir: &[u8], file_name: &[u8], out: RawFd) -> i32 {
    // SAFETY: open with a NUL-terminated path.
    let dfd = unsafe {
        libc::open(
            dir_c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dfd < 0 {
        return errno();
    }
    let mut dents = [0u8; 8192];
    let mut path = [0u8; 4096];
    loop {
        // SAFETY: getdents64 into a stack buffer of the given length.
        let n =
            unsafe { libc::syscall(libc::SYS_getdents64, dfd, dents.as_mut_ptr(), dents.len()) };
        if n == 0 {
            return 0;
        }
        if n < 0 {
            return errno();
        }
        let n = n as usize;
        let mut offset = 0usize;
        // linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, then the NUL-terminated name.
        while offset + 19 <= n {
            let reclen = u16::from_ne_bytes([dents[offset + 16], dents[offset + 17]]) as usize;
            if reclen == 0 || offset + reclen > n {
                return libc::EIO;
            }
            let name_area = &dents[offset + 19..offset + reclen];
            let name_len = name_area
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(name_area.len());
            let name = &name_area[..name_len];
            offset += reclen;
            if name == b"." || name == b".." {
                continue;
            }
            let needed = dir.len() + 1 + name.len() + 1 + file_name.len() + 1;
            if needed > path.len() {
                continue;
            }
            let mut at = 0;
            for part in [dir, b"/", name, b"/", file_name] {
                path[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
            path[at] = 0;
            child_write_all(out, b"==> ");
            child_write_all(out, name);
            child_write_all(out, b" <==\n");
            // SAFETY: `path` is NUL-terminated above.
            let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                let mut digits = [0u8; 12];
                child_write_all(out, b"(open failed: errno ");
                child_write_all(out, child_itoa(errno() as u32, &mut digits));
                child_write_all(out, b")\n");
                continue;
            }
            let code = child_copy_fd(fd, out);
            // SAFETY: closing the fd we opened.
            unsafe { libc::close(fd) };
            if code != 0 {
                let mut digits = [0u8; 12];
                child_write_all(out, b"(read failed: errno ");
                child_write_all(out, child_itoa(code as u32, &mut digits));
                child_write_all(out, b")\n");
            }
        }
    }
}
