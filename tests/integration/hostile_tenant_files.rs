//! Integration tests of issue 35 (item 2, and item 3's bounds on the symbolizer): a hostile tenant names the files
//! the capture reads, and gets nothing it could not read itself.
//!
//! The tenant is an unprivileged worker (uid 65534, no groups, through `setpriv`), a real CPython process whose
//! threads sit in D without any privilege: a `posix_spawn` (or a hand-made `clone(CLONE_VM|CLONE_VFORK)`) whose
//! child opens a FIFO nobody writes, so the parent waits in `kernel_clone` until the test writes it. The agent
//! (root) captures it with py-spy and the symbolizer; the tests then read incident.json, report.md and the
//! `report bundle --public` archive for the secrets.
//!
//! - the innermost Python frame's `co_filename` names `/etc/shadow`, another root process's
//!   `/proc/<pid>/environ`, a 0600 file in a 0700 root directory (one worker each, and one naming a file of its
//!   own, which is read: the refusals are the rights, not a broken reader);
//! - the pc lies in a mapping of a deleted file whose path `x.so (deleted)` is now a symlink to a root-only ELF;
//! - the pc lies in a mapped ELF whose section headers claim 1.1 GiB of symbol tables (a sparse file): it is
//!   refused by its size, and the candidates after it (libc) still resolve.
//!
//! Each needs root (the agent's side), setpriv and py-spy: skipped with a message without them, except with
//! CI=true, where they must run. The two machine-code cases are x86_64 only.

use std::fs::Permissions;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
#[cfg(target_arch = "x86_64")]
use std::{fs::File, os::unix::fs::FileExt};

use capture::ProcRoot;

use crate::agent::{link_as, unique_comm, wait_incident, Agent, TempDir, FAST};
use crate::util::{bin, in_ci};

/// The unprivileged tenant's uid and gid (`nobody`).
#[cfg(target_arch = "x86_64")]
const NOBODY: u32 = 65534;

/// The line every wedging thread runs, compiled under the file name the test wants its frame to name: line 1
/// of "that file" is a `posix_spawn` (through ctypes, which lets the GIL go: the other threads wedge too)
/// whose child opens the FIFO nobody writes before it can exec.
const SPAWN_LINE: &str =
    "libc.posix_spawn(ctypes.byref(pid), b'/bin/true', actions, None, argv, envp)";

/// The worker: one thread per file name given (the tests give one), each wedged at line 1 of "that file" (its
/// text read from stdin).
const NAMING_WORKER: &str = r#"
import ctypes, sys, threading
fifo, names = sys.argv[1], sys.argv[2:]
SRC = sys.stdin.read()
libc = ctypes.CDLL(None, use_errno=True)
def wedge(name):
    actions = ctypes.create_string_buffer(512)  # posix_spawn_file_actions_t, with room to spare
    libc.posix_spawn_file_actions_init(actions)
    libc.posix_spawn_file_actions_addopen(actions, 0, fifo.encode(), 0, 0)
    scope = {"libc": libc, "ctypes": ctypes, "pid": ctypes.c_int(), "actions": actions,
             "argv": (ctypes.c_char_p * 2)(b"true", None), "envp": (ctypes.c_char_p * 1)(None)}
    exec(compile(SRC, name, "exec"), scope)
threads = [threading.Thread(target=wedge, args=(n,), name="w%d" % i) for i, n in enumerate(names)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"#;

/// x86_64 machine code, called as `stub(fifo_path, child_stack_top, word1, word2)`: pushes the two words (so
/// they sit at the blocked thread's sp, where the candidate scan reads), then `clone(CLONE_VM | CLONE_VFORK |
/// SIGCHLD)` onto the given stack; the child opens the FIFO (blocking: nobody writes it) and exits; the
/// parent waits in D until then, with its pc right after this `syscall`, inside the mapped file.
#[cfg(target_arch = "x86_64")]
const CLONE_STUB: &[u8] = &[
    0x51, // push rcx
    0x52, // push rdx
    0x49, 0x89, 0xf9, // mov r9, rdi (the path, for the child)
    0xb8, 0x38, 0x00, 0x00, 0x00, // mov eax, 56 (clone)
    0xbf, 0x11, 0x41, 0x00, 0x00, // mov edi, CLONE_VM | CLONE_VFORK | SIGCHLD
    0x31, 0xd2, // xor edx, edx
    0x45, 0x31, 0xd2, // xor r10d, r10d
    0x45, 0x31, 0xc0, // xor r8d, r8d
    0x0f, 0x05, // syscall
    0x48, 0x85, 0xc0, // test rax, rax
    0x74, 0x03, // je child
    0x5a, // pop rdx
    0x59, // pop rcx
    0xc3, // ret
    0xb8, 0x01, 0x01, 0x00, 0x00, // child: mov eax, 257 (openat)
    0xbf, 0x9c, 0xff, 0xff, 0xff, // mov edi, AT_FDCWD
    0x4c, 0x89, 0xce, // mov rsi, r9
    0x31, 0xd2, // xor edx, edx (O_RDONLY)
    0x0f, 0x05, // syscall
    0xb8, 0x3c, 0x00, 0x00, 0x00, // mov eax, 60 (exit)
    0x31, 0xff, // xor edi, edi
    0x0f, 0x05, // syscall
];

/// The file offset of the stub (the `.text` of the generated ELF files).
#[cfg(target_arch = "x86_64")]
const TEXT_OFFSET: u64 = 0x1000;

/// The worker for the machine-code cases: maps `path` (r-x, its first two pages), optionally replaces the
/// path by a symlink at `path (deleted)` to `secret`, and calls the stub with two words pointing into libc
/// (`getpid + 1`, `getppid + 1`).
#[cfg(target_arch = "x86_64")]
const STUB_WORKER: &str = r#"
import ctypes, os, sys
path, fifo, secret = sys.argv[1], sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(path, os.O_RDONLY)
base = libc.mmap(None, 0x2000, 5, 2, fd, 0)  # PROT_READ|PROT_EXEC, MAP_PRIVATE
if base in (None, ctypes.c_void_p(-1).value):
    raise SystemExit("mmap failed: errno %d" % ctypes.get_errno())
os.close(fd)
if secret != "-":
    os.unlink(path)
    os.symlink(secret, path + " (deleted)")
stack = ctypes.create_string_buffer(1 << 16)
top = (ctypes.addressof(stack) + (1 << 16) - 64) & ~15
words = [ctypes.cast(libc.getpid, ctypes.c_void_p).value + 1, ctypes.cast(libc.getppid, ctypes.c_void_p).value + 1]
stub = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(base + 0x1000)
print("wedging", flush=True)
stub(fifo.encode(), top, words[0], words[1])
"#;

/// What every case needs: root, setpriv, py-spy and a Python `nobody` can run. None (skip) without them,
/// never with CI=true.
struct Tools {
    python: PathBuf,
}

fn tools(test: &str) -> Option<Tools> {
    let skip = |why: &str| {
        assert!(!in_ci(), "{test}: {why} (needed with CI=true)");
        eprintln!("skipped {test}: {why}");
        None
    };
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return skip("not root");
    }
    if !Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return skip("no setpriv (util-linux)");
    }
    let on_path = |name: &str| {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
    };
    if on_path("py-spy").is_none() {
        return skip("no py-spy (pip install py-spy)");
    }
    // The interpreter itself, where `nobody` can run it (a pyenv build under /root is not).
    let candidates = [
        crate::episode::python(),
        Some(PathBuf::from("/usr/bin/python3")),
    ];
    let python = candidates.into_iter().flatten().find(|python| {
        as_nobody(python)
            .args(["-c", "import ctypes, threading"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    match python {
        Some(python) => Some(Tools { python }),
        None => skip("no python3 that uid 65534 can run"),
    }
}

/// `program` run as uid/gid 65534 with no supplementary group and no capability.
fn as_nobody(program: &Path) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(program);
    command
}

/// A value no file or process of the machine holds by chance.
fn nonce(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{tag}{:x}{nanos:08x}", std::process::id())
}

/// A wedged worker: released and reaped on drop.
struct Worker {
    child: Child,
    fifo: PathBuf,
}

impl Worker {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Wait until `count` of its threads are in D.
    fn wait_in_d(&mut self, count: usize, limit: Duration) {
        let root = ProcRoot::default();
        let until = Instant::now() + limit;
        loop {
            let in_d = root
                .tasks(self.pid())
                .unwrap_or_default()
                .iter()
                .filter(|&&tid| {
                    root.read_task_stat(self.pid(), tid)
                        .is_ok_and(|stat| stat.state == 'D')
                })
                .count();
            if in_d >= count {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut stderr) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
                }
                panic!("the worker exited ({status}) before {count} threads were in D: {err}");
            }
            assert!(
                Instant::now() < until,
                "only {in_d} of the worker's threads in D"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        crate::util::release_fifo(&self.fifo);
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            crate::util::release_fifo(&self.fifo);
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent (root) watching `comm` until it wrote a complete incident for each of `pids`: each incident, and
/// its directory under `out`.
fn capture(dir: &TempDir, comm: &str, pids: &[i32]) -> Vec<(serde_json::Value, PathBuf)> {
    let out = dir.path().join("incidents");
    let out_arg = out.to_str().unwrap().to_string();
    let pattern = format!("^{comm}$");
    let mut args: Vec<&str> = vec!["--out", &out_arg, "--match-comm", &pattern];
    args.extend_from_slice(FAST);
    let mut agent = Agent::start(dir.path(), &args, &[]);
    let incidents: Vec<(serde_json::Value, PathBuf)> = pids
        .iter()
        .map(|&pid| {
            let incident = wait_incident(&mut agent, &out, pid, Duration::from_secs(90));
            let id = incident["id"].as_str().unwrap().to_string();
            (incident, out.join(id))
        })
        .collect();
    let (code, _, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
    incidents
}

/// Every byte an operator could hand out: incident.json, report.md, and the `report bundle --public` archive
/// (uncompressed).
struct Outputs {
    incident_json: String,
    report_md: String,
    public_archive: Vec<u8>,
}

fn outputs(incident_dir: &Path) -> Outputs {
    let out = incident_dir.parent().unwrap();
    let id = incident_dir.file_name().unwrap().to_str().unwrap();
    let archive = out.join("public.tar.gz");
    let bundled = Command::new(bin())
        .args(["report", "bundle", id, "--public", "--out"])
        .arg(out)
        .arg("-o")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(
        bundled.status.success(),
        "{}",
        String::from_utf8_lossy(&bundled.stderr)
    );
    let unpacked = Command::new("gzip")
        .arg("-dc")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(unpacked.status.success());
    Outputs {
        incident_json: std::fs::read_to_string(incident_dir.join("incident.json")).unwrap(),
        report_md: std::fs::read_to_string(incident_dir.join("report.md")).unwrap(),
        public_archive: unpacked.stdout,
    }
}

impl Outputs {
    /// Panics when `secret` is in any of them, naming where.
    fn assert_absent(&self, what: &str, secret: &str) {
        assert!(
            secret.len() >= 8,
            "{what}: too short to look for: {secret:?}"
        );
        for (name, text) in [
            ("incident.json", self.incident_json.as_bytes()),
            ("report.md", self.report_md.as_bytes()),
            ("the public bundle", &self.public_archive[..]),
        ] {
            assert!(
                !text.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{what} ({secret:?}) is in {name}"
            );
        }
    }

    fn public_contains(&self, text: &str) -> bool {
        self.public_archive
            .windows(text.len())
            .any(|w| w == text.as_bytes())
    }
}

/// The judged thread whose innermost Python frame names `file`.
fn frame_naming<'a>(incident: &'a serde_json::Value, file: &str) -> &'a serde_json::Value {
    incident["wedged_threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["python_stack"].as_array()?.first())
        .find(|f| f["file"] == file)
        .unwrap_or_else(|| panic!("no judged thread's innermost frame names {file}: {incident}"))
}

/// The resolve-symbols probe entry.
fn symbolizer_probe(incident: &serde_json::Value) -> &serde_json::Value {
    incident["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["name"]
                .as_str()
                .unwrap_or_default()
                .starts_with("resolve-symbols")
        })
        .unwrap_or_else(|| panic!("no resolve-symbols probe: {incident}"))
}

#[test]
fn a_worker_naming_host_files_as_its_source_gets_none_of_their_text() {
    let test = "hostile_tenant_files source lines";
    let Some(tools) = tools(test) else {
        return;
    };
    let dir = TempDir::new("hostile-source");
    std::fs::set_permissions(dir.path(), Permissions::from_mode(0o755)).unwrap();
    let fifo = dir.path().join("nobody-writes.fifo");
    crate::util::mkfifo(&fifo, 0o666);

    // The secrets, each in a file the worker's uid cannot read.
    let mut secrets: Vec<(String, String, &str)> = Vec::new(); // (path the frame names, text, what)
    let shadow = std::fs::read_to_string("/etc/shadow").ok();
    let shadow_line = shadow
        .as_deref()
        .and_then(|s| s.lines().next())
        .map(|l| l.trim().to_string())
        .filter(|l| l.len() >= 8);
    match shadow_line {
        Some(line) => secrets.push(("/etc/shadow".into(), line, "/etc/shadow's first line")),
        None => assert!(!in_ci(), "{test}: no /etc/shadow line to plant"),
    }
    let env_secret = nonce("environ-secret-");
    let mut root_process = Command::new("sleep")
        .arg("600")
        .env_clear()
        .env("WEDGE_TENANT_SECRET", &env_secret)
        .spawn()
        .unwrap();
    secrets.push((
        format!("/proc/{}/environ", root_process.id()),
        env_secret,
        "another root process's environ",
    ));
    let private = dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, Permissions::from_mode(0o700)).unwrap();
    let private_file = private.join("secret.txt");
    let private_secret = nonce("private-secret-");
    std::fs::write(&private_file, format!("{private_secret}\nsecond line\n")).unwrap();
    std::fs::set_permissions(&private_file, Permissions::from_mode(0o600)).unwrap();
    secrets.push((
        private_file.display().to_string(),
        private_secret,
        "a 0600 file in a 0700 directory",
    ));
    // And one file the worker may read: its line is read (the refusals above are rights, not a broken reader).
    let own = dir.path().join("own_code.py");
    std::fs::write(&own, format!("{SPAWN_LINE}\n")).unwrap();
    std::fs::set_permissions(&own, Permissions::from_mode(0o644)).unwrap();

    // One worker per file (an incident reads the source line of the thread it judged first).
    let comm = unique_comm("s");
    let python = link_as(dir.path(), &comm, &tools.python);
    let script = dir.path().join("worker.py");
    std::fs::write(&script, NAMING_WORKER).unwrap();
    std::fs::set_permissions(&script, Permissions::from_mode(0o644)).unwrap();
    let mut names: Vec<String> = secrets.iter().map(|(p, _, _)| p.clone()).collect();
    names.push(own.display().to_string());
    let mut workers: Vec<Worker> = names
        .iter()
        .map(|name| {
            let mut child = as_nobody(&python)
                .arg(&script)
                .arg(&fifo)
                .arg(name)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(SPAWN_LINE.as_bytes()).unwrap();
            drop(stdin);
            Worker {
                child,
                fifo: fifo.clone(),
            }
        })
        .collect();
    for worker in &mut workers {
        worker.wait_in_d(1, Duration::from_secs(20));
    }
    let pids: Vec<i32> = workers.iter().map(Worker::pid).collect();
    let incidents = capture(&dir, &comm, &pids);
    drop(workers);
    let _ = root_process.kill();
    let _ = root_process.wait();

    for (name, (incident, incident_dir)) in names.iter().zip(&incidents) {
        // The file was asked for: the judged thread's innermost frame names it, at line 1.
        let frame = frame_naming(incident, name);
        assert_eq!(frame["line"], 1, "{name}: {frame}");
        let outputs = outputs(incident_dir);
        for (_, secret, what) in &secrets {
            outputs.assert_absent(what, secret);
        }
        let probe = symbolizer_probe(incident);
        assert!(
            probe["name"]
                .as_str()
                .unwrap()
                .contains("as uid 65534 gid 65534 groups [], no capabilities"),
            "{probe}"
        );
        // Whatever line was read stays out of the public bundle.
        assert!(
            !outputs.public_contains(SPAWN_LINE),
            "{name}: source text in the public bundle"
        );
        match secrets.iter().find(|(path, _, _)| path == name) {
            Some((path, _, what)) => {
                assert!(frame["code"].is_null(), "{what}: {frame}");
                let why = frame["code_not_captured"].as_str().unwrap_or_default();
                eprintln!("{what}: {why}");
                if path.starts_with("/proc/") {
                    assert!(why.starts_with("refused: a path under /proc"), "{frame}");
                } else {
                    assert!(
                        why.contains("Permission denied")
                            && why.contains("with the process's own rights"),
                        "{what}: the incident does not say why the line was not read: {frame}"
                    );
                }
            }
            None => {
                // The worker's own file is read, with its rights: the refusals are rights, not a broken reader.
                assert_eq!(frame["code"], SPAWN_LINE, "{frame}");
                assert!(
                    outputs.public_contains("source text is never public"),
                    "the public report.md does not say the source line was left out"
                );
            }
        }
    }
}

/// Writes an ELF64 shared object: `text` at [`TEXT_OFFSET`] (one r-x PT_LOAD over the first two pages), a GNU
/// build id, and a `.symtab` whose entry 1 is the function `symbol` over the text; the table is
/// `symtab_entries` long, the entries past the first two being zeros of a sparse file.
#[cfg(target_arch = "x86_64")]
fn write_elf(path: &Path, text: &[u8], symbol: &str, build_id: &[u8; 20], symtab_entries: u64) {
    fn put(buf: &mut Vec<u8>, at: usize, bytes: &[u8]) {
        if buf.len() < at + bytes.len() {
            buf.resize(at + bytes.len(), 0);
        }
        buf[at..at + bytes.len()].copy_from_slice(bytes);
    }
    let strtab: Vec<u8> = [&b"\0"[..], symbol.as_bytes(), b"\0"].concat();
    let shstrtab: &[u8] = b"\0.text\0.note.gnu.build-id\0.strtab\0.shstrtab\0.symtab\0";
    let (name_text, name_note, name_strtab, name_shstrtab, name_symtab) = (1u32, 7, 26, 34, 44);
    let strtab_at = 0x2000u64;
    let shstrtab_at = strtab_at + strtab.len() as u64;
    let symtab_at = 0x3000u64;
    let symtab_size = 24 * symtab_entries.max(2);
    let shoff = (symtab_at + symtab_size + 7) & !7;

    let mut head = Vec::new();
    let mut ehdr = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
    ehdr.resize(16, 0);
    ehdr.extend_from_slice(&3u16.to_le_bytes()); // ET_DYN
    ehdr.extend_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    ehdr.extend_from_slice(&1u32.to_le_bytes());
    ehdr.extend_from_slice(&0u64.to_le_bytes()); // entry
    ehdr.extend_from_slice(&64u64.to_le_bytes()); // phoff
    ehdr.extend_from_slice(&shoff.to_le_bytes());
    ehdr.extend_from_slice(&0u32.to_le_bytes());
    for v in [64u16, 56, 2, 64, 6, 4] {
        ehdr.extend_from_slice(&v.to_le_bytes());
    }
    put(&mut head, 0, &ehdr);
    let phdr = |kind: u32, flags: u32, offset: u64, size: u64, align: u64| {
        let mut p = Vec::new();
        p.extend_from_slice(&kind.to_le_bytes());
        p.extend_from_slice(&flags.to_le_bytes());
        for v in [offset, offset, offset, size, size, align] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        p
    };
    put(&mut head, 64, &phdr(1, 5, 0, 0x2000, 0x1000));
    put(&mut head, 120, &phdr(4, 4, 0x100, 36, 4));
    let mut note = Vec::new();
    for v in [4u32, 20, 3] {
        note.extend_from_slice(&v.to_le_bytes());
    }
    note.extend_from_slice(b"GNU\0");
    note.extend_from_slice(build_id);
    put(&mut head, 0x100, &note);
    put(&mut head, TEXT_OFFSET as usize, text);
    put(&mut head, 0x2000 - 1, &[0]);
    put(&mut head, strtab_at as usize, &strtab);
    put(&mut head, shstrtab_at as usize, shstrtab);
    let mut symbols = vec![0u8; 24];
    symbols.extend_from_slice(&1u32.to_le_bytes()); // st_name
    symbols.extend_from_slice(&[0x12, 0]); // STB_GLOBAL | STT_FUNC, st_other
    symbols.extend_from_slice(&1u16.to_le_bytes()); // .text
    symbols.extend_from_slice(&TEXT_OFFSET.to_le_bytes());
    symbols.extend_from_slice(&0x1000u64.to_le_bytes());
    put(&mut head, symtab_at as usize, &symbols);

    let shdr = |name: u32,
                kind: u32,
                flags: u64,
                addr: u64,
                offset: u64,
                size: u64,
                link: u32,
                info: u32,
                align: u64,
                entsize: u64| {
        let mut s = Vec::new();
        s.extend_from_slice(&name.to_le_bytes());
        s.extend_from_slice(&kind.to_le_bytes());
        for v in [flags, addr, offset, size] {
            s.extend_from_slice(&v.to_le_bytes());
        }
        s.extend_from_slice(&link.to_le_bytes());
        s.extend_from_slice(&info.to_le_bytes());
        s.extend_from_slice(&align.to_le_bytes());
        s.extend_from_slice(&entsize.to_le_bytes());
        s
    };
    let mut sections = vec![0u8; 64];
    sections.extend(shdr(
        name_text,
        1,
        6,
        TEXT_OFFSET,
        TEXT_OFFSET,
        0x1000,
        0,
        0,
        16,
        0,
    ));
    sections.extend(shdr(name_note, 7, 2, 0x100, 0x100, 36, 0, 0, 4, 0));
    sections.extend(shdr(
        name_strtab,
        3,
        0,
        0,
        strtab_at,
        strtab.len() as u64,
        0,
        0,
        1,
        0,
    ));
    sections.extend(shdr(
        name_shstrtab,
        3,
        0,
        0,
        shstrtab_at,
        shstrtab.len() as u64,
        0,
        0,
        1,
        0,
    ));
    sections.extend(shdr(
        name_symtab,
        2,
        0,
        0,
        symtab_at,
        symtab_size,
        3,
        1,
        8,
        24,
    ));

    let file = File::create(path).unwrap();
    file.set_len(shoff + sections.len() as u64).unwrap();
    file.write_all_at(&head, 0).unwrap();
    file.write_all_at(&sections, shoff).unwrap();
}

/// Starts the stub worker as `nobody` on `mapped` (see [`STUB_WORKER`]); `secret`: the symlink's target, or
/// None to keep the file.
#[cfg(target_arch = "x86_64")]
fn stub_worker(
    dir: &TempDir,
    python: &Path,
    comm: &str,
    mapped: &Path,
    secret: Option<&Path>,
) -> Worker {
    let fifo = dir.path().join("stub.fifo");
    crate::util::mkfifo(&fifo, 0o666);
    let script = dir.path().join("stub_worker.py");
    std::fs::write(&script, STUB_WORKER).unwrap();
    std::fs::set_permissions(&script, Permissions::from_mode(0o644)).unwrap();
    let program = link_as(dir.path(), comm, python);
    let child = as_nobody(&program)
        .arg(&script)
        .arg(mapped)
        .arg(&fifo)
        .arg(secret.map_or_else(|| "-".into(), |s| s.display().to_string()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut worker = Worker { child, fifo };
    worker.wait_in_d(1, Duration::from_secs(20));
    worker
}

/// The judged thread's user frame (there is one judged thread).
#[cfg(target_arch = "x86_64")]
fn user_frame(incident: &serde_json::Value) -> &serde_json::Value {
    &incident["wedged_threads"][0]["user_frame"]
}

/// The candidate at the blocked thread's sp (the stub pushed `getpid + 1` there).
#[cfg(target_arch = "x86_64")]
fn first_candidate(incident: &serde_json::Value) -> &serde_json::Value {
    let frame = user_frame(incident);
    frame["candidates"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["stack_offset"] == 0))
        .unwrap_or_else(|| panic!("no candidate at sp: {frame}"))
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_symlink_planted_at_a_deleted_mappings_path_gets_none_of_the_root_only_elf() {
    let test = "hostile_tenant_files deleted mapping";
    let Some(tools) = tools(test) else {
        return;
    };
    let dir = TempDir::new("hostile-deleted");
    std::fs::set_permissions(dir.path(), Permissions::from_mode(0o755)).unwrap();
    // The tenant's own directory, where it maps its file and plants the symlink.
    let own = dir.path().join("tenant");
    std::fs::create_dir(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(NOBODY), Some(NOBODY)).unwrap();
    let mapped = own.join("x.so");
    write_elf(&mapped, CLONE_STUB, "tenant_stub", &[7; 20], 2);
    std::os::unix::fs::chown(&mapped, Some(NOBODY), Some(NOBODY)).unwrap();
    // The root-only ELF: a unique symbol over the pc's offset and a unique build id.
    let private = dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, Permissions::from_mode(0o700)).unwrap();
    let secret = private.join("secret.so");
    let symbol = nonce("root_only_fn_");
    let mut build_id = [0u8; 20];
    for (slot, byte) in build_id.iter_mut().zip(nonce("").bytes().cycle()) {
        *slot = byte;
    }
    write_elf(&secret, &[0xc3; 64], &symbol, &build_id, 2);
    std::fs::set_permissions(&secret, Permissions::from_mode(0o600)).unwrap();
    let build_id_hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();

    let comm = unique_comm("d");
    let worker = stub_worker(&dir, &tools.python, &comm, &mapped, Some(&secret));
    let (incident, incident_dir) = capture(&dir, &comm, &[worker.pid()]).remove(0);
    drop(worker);

    let frame = user_frame(&incident);
    let deleted = format!("{} (deleted)", mapped.display());
    assert_eq!(frame["path"], deleted.as_str(), "{frame}");
    let outputs = outputs(&incident_dir);
    outputs.assert_absent("the root-only ELF's symbol", &symbol);
    outputs.assert_absent("the root-only ELF's build id", &build_id_hex);
    assert!(
        frame["symbol"].is_null() && frame["build_id"].is_null(),
        "{frame}"
    );
    let why = frame["symbol_not_captured"].as_str().unwrap_or_default();
    assert!(why.contains("refused"), "{frame}");
    // The files the worker may read are read with its rights: libc, at the candidate it pushed.
    let candidate = first_candidate(&incident);
    assert!(
        candidate["symbol"]
            .as_str()
            .is_some_and(|s| s.contains("getpid+0x1")),
        "{candidate}"
    );
}

#[cfg(target_arch = "x86_64")]
#[test]
fn one_huge_elf_is_refused_by_its_size_and_the_other_files_still_resolve() {
    let test = "hostile_tenant_files huge ELF";
    let Some(tools) = tools(test) else {
        return;
    };
    let dir = TempDir::new("hostile-huge");
    std::fs::set_permissions(dir.path(), Permissions::from_mode(0o755)).unwrap();
    // 48 M symbols (1.1 GiB of .symtab, as the issue's 1.2 GB library), sparse: a few KiB of disk.
    let huge = dir.path().join("huge.so");
    let entries = 48 << 20;
    write_elf(&huge, CLONE_STUB, "huge_stub", &[9; 20], entries);
    std::fs::set_permissions(&huge, Permissions::from_mode(0o644)).unwrap();

    let comm = unique_comm("h");
    let worker = stub_worker(&dir, &tools.python, &comm, &huge, None);
    let (incident, _) = capture(&dir, &comm, &[worker.pid()]).remove(0);
    drop(worker);

    let frame = user_frame(&incident);
    assert_eq!(frame["path"], huge.to_str().unwrap(), "{frame}");
    // The files after the pc's (which is asked first) still resolve: libc, at the candidate the worker pushed
    // at sp (before: the symbolizer spent its whole deadline on the huge file, and resolved nothing) …
    let candidate = first_candidate(&incident);
    assert!(
        candidate["symbol"]
            .as_str()
            .is_some_and(|s| s.contains("getpid+0x1")),
        "{frame}"
    );
    // … because the huge file is refused by its size, named, without reading its tables.
    let why = frame["symbol_not_captured"].as_str().unwrap_or_default();
    assert!(
        why.contains("1.1 GiB of symbol tables") && why.contains("over the cap of 64 MiB per file"),
        "{frame}"
    );
    let probe = symbolizer_probe(&incident);
    assert_eq!(probe["outcome"], "ok", "{probe}");
}
