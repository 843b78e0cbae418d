//! Files the target names, opened as the target sees them: inside its root ([`Root`], `openat2` with
//! `RESOLVE_IN_ROOT`), never under `/proc`, `/sys` or `/dev` ([`refused_path`]) nor on a pseudo filesystem
//! ([`pseudo_filesystem`]), regular files only ([`open_named`]); an ELF file only when it is the very file the
//! maps show (`is_mapped_file`).

use std::path::Path;

use crate::user_frame::FileId;

/// Pseudo filesystems (`statfs.f_type`) whose files are the kernel's or another process's state, never a
/// program's source or code: a target naming one wants the agent to read it.
const PSEUDO_FILESYSTEMS: &[(i64, &str)] = &[
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x1cd1, "devpts"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpf"),
    (0x6265_6570, "configfs"),
    (0x6165_676c, "pstore"),
    (0xde5e_81e4, "efivarfs"),
    (0xf97c_ff8c, "selinuxfs"),
    (0x4341_5d53, "smackfs"),
    (0x6573_5543, "fusectl"),
    (0x1980_0202, "mqueue"),
    (0x4249_4e4d, "binfmt_misc"),
    (0x6e73_6673, "nsfs"),
    (0x0904_1934, "anon_inodefs"),
];

/// overlayfs's `statfs.f_type`.
const OVERLAYFS_MAGIC: i64 = 0x794c_7630;

/// The pseudo filesystem a `statfs.f_type` names, if it is one.
pub fn pseudo_filesystem(f_type: i64) -> Option<&'static str> {
    PSEUDO_FILESYSTEMS
        .iter()
        .find(|(magic, _)| *magic == f_type)
        .map(|(_, name)| *name)
}

/// Top-level directories whose files are never a program's: `/proc`, `/sys`, `/dev` (after `.` and `..`
/// are taken lexically, as `RESOLVE_IN_ROOT` takes them at the root).
const REFUSED_TREES: &[&str] = &["proc", "sys", "dev"];

/// Why `path` (absolute, inside the process's root) is refused before it is opened, or None.
pub fn refused_path(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    let top = parts.first()?;
    REFUSED_TREES.contains(top).then(|| {
        format!(
            "refused: a path under /{top} (the kernel's and other processes' files, never a program's source \
             or code)"
        )
    })
}

/// What the process named: the rules differ in one point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// A Python source file (`co_filename`): a symlink is followed (inside the root), as the interpreter did.
    Source,
    /// A file of the maps: the maps show the file itself, so a symlink in its place is not it.
    MappedElf,
}

/// The process's root directory (`/proc/<pid>/root`), under which every file it names is opened: opened by
/// path, or handed to the helper as an open directory (the agent opens it before the helper takes the
/// target's credentials, which cannot always open it: a uid-0 target with capabilities is not traceable by a
/// uid-0 helper without any).
#[derive(Debug)]
pub struct Root(std::fs::File);

impl Root {
    pub fn open(path: &Path) -> std::result::Result<Root, String> {
        let dir = std::fs::File::open(path)
            .map_err(|err| format!("cannot open the process's root: {err}"))?;
        Root::checked(dir)
    }

    /// An open directory (an `O_PATH` one will do).
    pub fn from_fd(fd: std::os::fd::OwnedFd) -> std::result::Result<Root, String> {
        Root::checked(std::fs::File::from(fd))
    }

    fn checked(dir: std::fs::File) -> std::result::Result<Root, String> {
        let meta = dir
            .metadata()
            .map_err(|err| format!("cannot stat the process's root: {err}"))?;
        if !meta.is_dir() {
            return Err("the process's root is not a directory".to_string());
        }
        Ok(Root(dir))
    }
}

/// The kernel's `struct open_how` (openat2's ABI, 24 bytes; libc's is non-exhaustive, so not buildable here).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Opens the absolute `path` as the process whose root is `root` (`/proc/<pid>/root`) sees it: `openat2` with
/// `RESOLVE_IN_ROOT`, so a symlink inside a container (`libfoo.so -> /etc/shadow`) resolves inside the
/// container's root, never the host's (a kernel without `openat2`, < 5.6, gets no read at all), and
/// `RESOLVE_NO_MAGICLINKS`. Opened non-blocking (a FIFO or a device planted at a library's path never blocks
/// the open), with `O_NOFOLLOW` for a mapped file; kept only when it is a regular file on a filesystem that
/// is not a pseudo one, and its path is not under `/proc`, `/sys` or `/dev`. The error text says why.
pub fn open_named(
    root: &Root,
    path: &str,
    named: Named,
) -> std::result::Result<std::fs::File, String> {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd};

    let relative = path
        .strip_prefix('/')
        .ok_or("refused: not an absolute path inside the process's root")?;
    if let Some(why) = refused_path(path) {
        return Err(why);
    }
    let relative = CString::new(relative).map_err(|_| "refused: the path holds a NUL byte")?;
    let mut flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;
    if named == Named::MappedElf {
        flags |= libc::O_NOFOLLOW;
    }
    let how = OpenHow {
        flags: flags as u64,
        mode: 0,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2 with a directory fd we own, a NUL-terminated path and an `open_how` of the size we pass.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.0.as_raw_fd(),
            relative.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::ELOOP) if named == Named::MappedElf => {
                "refused: a symbolic link (the maps name the mapped file itself; a link at that path now \
                 is not it)"
                    .to_string()
            }
            Some(libc::EACCES) | Some(libc::EPERM) => {
                format!("not read: {err}, with the process's own rights")
            }
            _ => format!("cannot open: {err}"),
        });
    }
    let fd = i32::try_from(fd).map_err(|_| "openat2 returned an impossible fd")?;
    // SAFETY: the fd was just returned by openat2 and is owned by nobody else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let meta = file
        .metadata()
        .map_err(|err| format!("cannot stat the opened file: {err}"))?;
    if !meta.is_file() {
        return Err("refused: not a regular file".to_string());
    }
    if let Some(name) = pseudo_filesystem(filesystem_type(&file)?) {
        return Err(format!(
            "refused: a file of the {name} pseudo filesystem (the kernel's state, never a program's)"
        ));
    }
    Ok(file)
}

/// `fstatfs(2)`'s `f_type` of an open file.
fn filesystem_type(file: &std::fs::File) -> std::result::Result<i64, String> {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on an fd we own, writing into the struct we pass.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut stat) } != 0 {
        return Err(format!(
            "cannot tell the opened file's filesystem: {}",
            std::io::Error::last_os_error()
        ));
    }
    #[allow(clippy::unnecessary_cast)] // `f_type`'s C type differs between architectures
    Ok(stat.f_type as i64)
}

/// Whether `file` (opened by `path`) is one the maps show for it: same device and inode, or, on an overlay
/// filesystem, the same inode number. This kernel (6.18, verified) prints an overlayfs file's own device and
/// inode in the maps, which is what `fstat` on it gives; older kernels print the underlying layer's device,
/// while overlayfs reports the layer's inode number under its own device when the layers share one
/// filesystem: the inode alone then says it. Files are read with the process's rights anyway; this only
/// makes sure the file is the one it runs.
pub(super) fn is_mapped_file(
    file: &std::fs::File,
    mapped: &[FileId],
) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = file
        .metadata()
        .map_err(|err| format!("cannot stat the opened file: {err}"))?;
    let opened = FileId {
        major: libc::major(meta.dev()),
        minor: libc::minor(meta.dev()),
        inode: meta.ino(),
    };
    if mapped.contains(&opened) {
        return Ok(());
    }
    if mapped.iter().any(|m| m.inode == opened.inode) && filesystem_type(file)? == OVERLAYFS_MAGIC {
        return Ok(());
    }
    let shown: Vec<String> = mapped.iter().map(FileId::to_string).collect();
    Err(if shown.is_empty() {
        "refused: the maps show no device and inode for this path, so the file cannot be checked to be \
         the one the process maps"
            .to_string()
    } else {
        format!(
            "refused: not the file the process maps (the maps show {}; the path now names {opened})",
            shown.join(", ")
        )
    })
}
