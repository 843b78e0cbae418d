//! Issue 35 items 3 (bounded memory and disk per incident) and 5 (npd-check truth), played by a hostile
//! tenant with real processes. A thread sits in D without privilege: the tenant `posix_spawn`s with a file
//! action that opens a FIFO nobody writes (vfork: the caller waits in D at `kernel_clone` until the child
//! execs). The tenants are Python processes run through a symlink whose name is their comm.
//!
//! - [`an_agent_in_a_512m_cgroup_survives_four_max_size_rings`]: one wedged process holds 4 rings of 2^20
//!   slots (sparse; one full of 2^20 open calls); the agent, in a 512 MiB memory cgroup without swap, is
//!   never OOM-killed, completes the incident, its peak RSS (VmHWM) stays far under 512 MiB, and the
//!   incident takes ≤ 64 MiB: the ring copies ≤ 16 MiB, the biggest one a valid smaller ring that
//!   `ring dump` reads with its call in flight.
//! - [`five_hostile_processes_cannot_push_the_store_past_its_quota`]: five such processes of one cgroup
//!   against a store already holding other tenants' young incidents: every incident ≤ 64 MiB, the store
//!   within its 2 GiB quota, the tenant's own older incidents removed first (the other tenants' kept), and
//!   what was removed is in the log and in dropped.json.
//! - npd-check's truth and the benches: hostile_tenant_npd.rs.
//!
//! Tests that need root skip with a message, except with CI=true, where they must run.

use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use breadcrumb::format::{self, lane, slot};
use breadcrumb::identity::ProcessIdentity;
use breadcrumb::{Args, Call, RingClock, Writer, WriterOptions};
use capture::ProcRoot;

use crate::agent::{link_as, unique_comm, wait_in_d, Agent, TempDir, FAST};
use crate::util::{bin, in_ci};

/// Root, or skip (CI=true: fail).
pub(crate) fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(!in_ci(), "{test}: CI=true but not root");
    eprintln!("skipping {test}: needs root (cgroups, other tenants' processes)");
    false
}

/// The Python interpreter itself (not a shim that forks it), or skip (CI=true: fail).
pub(crate) fn python_or_skip(test: &str) -> Option<PathBuf> {
    let found = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if found.is_none() {
        assert!(!in_ci(), "{test}: CI=true but python3 is missing");
        eprintln!("skipping {test}: python3 is missing");
    }
    found
}

/// Opens the rings it is told, then sits in D: vfork (`posix_spawn` with a file action) of a child that
/// opens a FIFO nobody writes. argv: fifo, then ring paths (opened once a line arrives on stdin).
pub(crate) const HOLD_RINGS_AND_WEDGE: &str = r#"
import os, sys
fifo, rings = sys.argv[1], sys.argv[2:]
sys.stdin.readline()
held = [os.open(r, os.O_RDONLY) for r in rings]
os.posix_spawn('/bin/true', ['true'], {}, file_actions=[(os.POSIX_SPAWN_OPEN, 0, fifo, os.O_RDONLY, 0)])
"#;

/// The main thread exits (`pthread_exit`: the leader becomes a zombie, the process lives on) while another
/// thread, once it sees the leader gone, sits in D the same way. argv: fifo.
pub(crate) const ZOMBIE_LEADER_AND_WEDGE: &str = r#"
import ctypes, os, sys, threading, time
fifo = sys.argv[1]
def wedge():
    while open('/proc/self/stat').read().rsplit(')', 1)[1].split()[0] != 'Z':
        time.sleep(0.01)
    os.posix_spawn('/bin/true', ['true'], {}, file_actions=[(os.POSIX_SPAWN_OPEN, 0, fifo, os.O_RDONLY, 0)])
threading.Thread(target=wedge).start()
time.sleep(0.2)
ctypes.CDLL(None).pthread_exit(None)
"#;

/// A tenant process (Python through a symlink named `comm`); on drop the FIFO is opened (its vfork child
/// execs, the wedge ends) and it is killed.
pub(crate) struct Tenant {
    child: Child,
    fifo: PathBuf,
}

impl Tenant {
    /// `script` with `args` after the FIFO, optionally moved into `cgroup` (its `cgroup.procs`) before exec.
    pub(crate) fn spawn(
        dir: &Path,
        program: &Path,
        script: &str,
        args: &[&Path],
        cgroup_procs: Option<&Path>,
    ) -> Tenant {
        let fifo = dir.join(format!("fifo-{}", unique_comm("f")));
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let mut command = Command::new(program);
        command
            .arg("-c")
            .arg(script)
            .arg(&fifo)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(procs) = cgroup_procs {
            join_cgroup_at_exec(&mut command, procs);
        }
        Tenant {
            child: command.spawn().unwrap(),
            fifo,
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Let the script go on (it opens its rings and wedges).
    pub(crate) fn go(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Tenant {
    fn drop(&mut self) {
        // A reader-writer open of a FIFO never blocks, and releases the vfork child blocked opening it.
        let _ = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.fifo);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Move the child into the cgroup whose `cgroup.procs` is `procs` before it execs.
pub(crate) fn join_cgroup_at_exec(command: &mut Command, procs: &Path) {
    let procs = std::ffi::CString::new(procs.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: only async-signal-safe calls (open, write, close) on memory prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if written != 1 {
                return Err(err);
            }
            Ok(())
        });
    }
}

/// A ring of the largest size (2^20 slots in 4096 lanes) claiming `pid` as its writer, created sparse.
pub(crate) fn max_ring(path: &Path, pid: i32) -> Writer {
    let root = ProcRoot::default();
    let identity = ProcessIdentity {
        pid: pid as u32,
        start_time_ticks: root.read_stat(pid).unwrap().starttime,
        ..ProcessIdentity::current()
    };
    let options = WriterOptions {
        slot_count: format::MAX_SLOT_COUNT,
        lane_count: format::MAX_LANE_COUNT,
        clock: RingClock::Monotonic,
    };
    let writer = Writer::create_with(path, &options, &identity).unwrap();
    assert_eq!(
        std::fs::metadata(path).unwrap().len(),
        format::MAX_RING_BYTES
    );
    writer
}

/// Fills every slot of a max-size ring with a valid enter that never exits, each from its own thread id: the
/// most a reader can be made to keep (2^20 records, 2^20 calls in flight).
pub(crate) fn fill_with_open_calls(path: &Path) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let lanes = format::MAX_LANE_COUNT as usize;
    let lane_slots = (format::MAX_SLOT_COUNT / format::MAX_LANE_COUNT) as usize;
    let header = format::HEADER_SIZE as u64;
    let slots_at = header + u64::from(format::LANE_ENTRY_SIZE) * lanes as u64;
    let now = breadcrumb::identity::monotonic_ns();
    let mut lane_table = vec![0u8; format::LANE_ENTRY_SIZE as usize * lanes];
    let mut chunk = vec![0u8; lane_slots * format::SLOT_SIZE as usize];
    for l in 0..lanes {
        let entry = &mut lane_table[l * format::LANE_ENTRY_SIZE as usize..];
        entry[lane::HEAD..lane::HEAD + 8].copy_from_slice(&(lane_slots as u64).to_le_bytes());
        for p in 0..lane_slots {
            let s = &mut chunk[p * format::SLOT_SIZE as usize..][..format::SLOT_SIZE as usize];
            let put = |s: &mut [u8], at: usize, bytes: &[u8]| {
                s[at..at + bytes.len()].copy_from_slice(bytes)
            };
            put(s, slot::SEQ, &(2 * p as u64 + 2).to_le_bytes());
            put(
                s,
                slot::MONOTONIC_NS,
                &(now + (l * lane_slots + p) as u64).to_le_bytes(),
            );
            put(
                s,
                slot::TID,
                &(1_000_000 + (l * lane_slots + p) as u32).to_le_bytes(),
            );
            s[slot::KIND] = format::KIND_ENTER;
            s[slot::LABEL_LEN] = 4;
            put(s, slot::CALL_ID, &Call::CuCtxSynchronize.id().to_le_bytes());
            put(
                s,
                slot::REF_INDEX,
                &(((l as u64) << 32) | p as u64).to_le_bytes(),
            );
            put(s, slot::LABEL, b"spam");
        }
        file.write_all_at(&chunk, slots_at + (l * chunk.len()) as u64)
            .unwrap();
    }
    file.write_all_at(&lane_table, header).unwrap();
}

/// The label of the call in flight the tenant's first ring shows.
pub(crate) const IN_FLIGHT_LABEL: &str = "tenant call in flight";

/// A tenant holding 4 max-size rings (ring 1 with one call in flight and a few closed ones, the others empty
/// and sparse — ring 4 full of open calls when `full`), wedged in D.
pub(crate) fn tenant_with_four_rings(
    dir: &Path,
    program: &Path,
    cgroup_procs: Option<&Path>,
    full: bool,
) -> (Tenant, Vec<PathBuf>) {
    let rings: Vec<PathBuf> = (1..=4)
        .map(|n| dir.join(format!("{}-{n}.ring", unique_comm("r"))))
        .collect();
    let args: Vec<&Path> = rings.iter().map(|p| p.as_path()).collect();
    let mut tenant = Tenant::spawn(dir, program, HOLD_RINGS_AND_WEDGE, &args, cgroup_procs);
    for (n, path) in rings.iter().enumerate() {
        let writer = max_ring(path, tenant.pid());
        if n == 0 {
            for chunk in 0..8 {
                let token = writer.enter(
                    Call::CuMemcpyHtoD_v2,
                    &Args::default(),
                    &format!("chunk {chunk}"),
                );
                writer.exit(token, 0);
            }
            let _open = writer.enter(Call::CuCtxSynchronize, &Args::default(), IN_FLIGHT_LABEL);
        }
    }
    if full {
        fill_with_open_calls(&rings[3]);
    }
    tenant.go();
    wait_in_d(tenant.pid(), Duration::from_secs(10));
    (tenant, rings)
}

/// Bytes of regular files under `dir` (their length, as the store's retention counts them).
pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.is_dir() {
            total += dir_bytes(&entry.path());
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    total
}

/// The incident directory whose incident.json has id `id`.
pub(crate) fn incident_dir(out: &Path, incident: &serde_json::Value) -> PathBuf {
    out.join(incident["id"].as_str().unwrap())
}

/// A memory cgroup for the agent: cgroup v2 (`memory.max`, `memory.swap.max` = 0) where the memory
/// controller is there, else v1 (`memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`) under this test's
/// own memory cgroup. Processes moved back to the parent and removed on drop.
pub(crate) struct MemoryCgroup {
    path: PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    fn new(name: &str, limit: u64) -> Result<MemoryCgroup, String> {
        let mountinfo =
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let mut v2_root = None;
        let mut v1_memory = None;
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let point = left.split_whitespace().nth(4).map(PathBuf::from);
            let mut fields = right.split_whitespace();
            match fields.next() {
                Some("cgroup2") => v2_root = point,
                Some("cgroup")
                    if fields
                        .nth(1)
                        .is_some_and(|o| o.split(',').any(|o| o == "memory")) =>
                {
                    v1_memory = point
                }
                _ => {}
            }
        }
        let v2_has_memory = v2_root.as_ref().is_some_and(|root| {
            std::fs::read_to_string(root.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        });
        let write = |path: PathBuf, value: &str| {
            std::fs::write(&path, value).map_err(|e| format!("{}: {e}", path.display()))
        };
        if let (true, Some(root)) = (v2_has_memory, v2_root) {
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory");
            let path = root.join(name);
            std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let cgroup = MemoryCgroup { path, v2: true };
            write(cgroup.path.join("memory.max"), &limit.to_string())?;
            if cgroup.path.join("memory.swap.max").exists() {
                write(cgroup.path.join("memory.swap.max"), "0")?;
            }
            return Ok(cgroup);
        }
        let Some(mount) = v1_memory else {
            return Err("no memory cgroup controller (v2 or v1)".into());
        };
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let own = own
            .lines()
            .find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                controllers
                    .split(',')
                    .any(|c| c == "memory")
                    .then(|| path.to_string())
            })
            .ok_or("no v1 memory cgroup in /proc/self/cgroup")?;
        let path = mount.join(own.trim_start_matches('/')).join(name);
        std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let cgroup = MemoryCgroup { path, v2: false };
        write(
            cgroup.path.join("memory.limit_in_bytes"),
            &limit.to_string(),
        )?;
        if cgroup.path.join("memory.memsw.limit_in_bytes").exists() {
            write(
                cgroup.path.join("memory.memsw.limit_in_bytes"),
                &limit.to_string(),
            )?;
        }
        Ok(cgroup)
    }

    fn procs(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// `oom_kill` of memory.events (v2) or memory.oom_control (v1).
    fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(self.path.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The cgroup's peak memory (page cache included): memory.peak (v2) or memory.max_usage_in_bytes (v1).
    fn peak(&self) -> Option<u64> {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.path.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let parent = self.path.parent().unwrap().join("cgroup.procs");
        if let Ok(procs) = std::fs::read_to_string(self.procs()) {
            for pid in procs.lines() {
                let _ = std::fs::write(&parent, pid);
            }
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A plain cgroup v2 (no controller) to put tenants in: their process tree for the store's quota.
pub(crate) struct TreeCgroup {
    path: PathBuf,
    /// The cgroup path as /proc/<pid>/cgroup shows it.
    name: String,
}

impl TreeCgroup {
    fn new(name: &str) -> Result<TreeCgroup, String> {
        let mountinfo =
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let root = mountinfo
            .lines()
            .filter_map(|l| l.split_once(" - "))
            .find(|(_, right)| right.split_whitespace().next() == Some("cgroup2"))
            .and_then(|(left, _)| left.split_whitespace().nth(4).map(PathBuf::from))
            .ok_or("no cgroup2 hierarchy mounted")?;
        // Beside this test's own cgroup (a cgroup v2 with processes cannot have children that do).
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let own = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .ok_or("no cgroup v2 line in /proc/self/cgroup")?
            .to_string();
        let parent = Path::new(&own).parent().unwrap_or(Path::new("/"));
        let name = parent.join(name).to_string_lossy().into_owned();
        let path = root.join(name.trim_start_matches('/'));
        std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(TreeCgroup { path, name })
    }

    fn procs(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }
}

impl Drop for TreeCgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.path).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// VmHWM of `pid` in KiB.
pub(crate) fn vm_hwm_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Wait for a complete incident of `pid`, failing early if the agent died.
pub(crate) fn complete_incident(
    agent: &mut Agent,
    out: &Path,
    pid: i32,
    limit: Duration,
) -> serde_json::Value {
    crate::agent::wait_incident(agent, out, pid, limit)
}

/// Issue 35: 4 valid 2^20-slot rings (36 KB of the tenant's disk) drove the agent to 535 MB: OOM-killed
/// under the shipped MemoryMax=512M, and again at every restart (adoption re-read the rings).
#[test]
pub(crate) fn an_agent_in_a_512m_cgroup_survives_four_max_size_rings() {
    let test = "an agent in a 512M cgroup survives four max-size rings";
    if !root_or_skip(test) {
        return;
    }
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("bounds-mem");
    let comm = unique_comm("m");
    let program = link_as(dir.path(), &comm, &python);
    let (tenant, rings) = tenant_with_four_rings(dir.path(), &program, None, true);
    let held: u64 = rings
        .iter()
        .map(|r| std::fs::metadata(r).unwrap().blocks() * 512)
        .sum();
    let cgroup = MemoryCgroup::new(&format!("wc-bounds-{}", std::process::id()), 512 << 20)
        .unwrap_or_else(|why| panic!("{test}: cannot make a 512M memory cgroup: {why}"));
    let out = dir.path().join("incidents");
    let pattern = format!("^{comm}$");
    let mut args = vec!["--out", out.to_str().unwrap(), "--match-comm", &pattern];
    args.extend_from_slice(FAST);
    let mut agent = start_agent_in(dir.path(), &args, &cgroup.procs());
    let incident = complete_incident(&mut agent, &out, tenant.pid(), Duration::from_secs(90));
    let hwm = vm_hwm_kib(agent.pid());
    let peak = cgroup.peak();
    eprintln!(
        "{test}: rings {} MiB on disk; agent VmHWM {} MiB; cgroup peak {:?} MiB (page cache included)",
        held >> 20,
        hwm >> 10,
        peak.map(|p| p >> 20)
    );
    assert_eq!(
        cgroup.oom_kills(),
        0,
        "the agent was OOM-killed:\n{}",
        agent.log()
    );
    assert!(
        hwm < 192 << 10,
        "agent peak RSS {hwm} KiB: not far under 512 MiB"
    );

    // The agent dies before it finishes the capture (as the OOM killer made it on 1e849ad): the next one
    // adopts the episode, reads the rings again for the capture's rest, and stays bounded too.
    agent.child.kill().unwrap();
    agent.child.wait().unwrap();
    let json = incident_dir(&out, &incident).join("incident.json");
    let mut unfinished: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    unfinished["complete"] = false.into();
    std::fs::write(&json, serde_json::to_vec_pretty(&unfinished).unwrap()).unwrap();
    let mut again = start_agent_in(dir.path(), &args, &cgroup.procs());
    again.wait_log("episode taken up", 1, Duration::from_secs(30));
    let incident = complete_incident(&mut again, &out, tenant.pid(), Duration::from_secs(90));
    let hwm_again = vm_hwm_kib(again.pid());
    let oom_kills = cgroup.oom_kills();
    let (code, _, log) = again.terminate();
    eprintln!(
        "{test}: the agent that adopted the episode: VmHWM {} MiB; oom_kill {oom_kills}",
        hwm_again >> 10
    );
    assert_eq!(oom_kills, 0, "the agent was OOM-killed:\n{log}");
    assert_eq!(code, Some(0), "{log}");
    assert!(
        hwm_again < 192 << 10,
        "adopting agent peak RSS {hwm_again} KiB"
    );

    // The incident: all four rings read, the call in flight found, the copies within their budget.
    let ring = &incident["ring"];
    assert!(
        ring["in_flight"]
            .as_array()
            .is_some_and(|calls| calls.iter().any(|c| c["label"] == IN_FLIGHT_LABEL)),
        "the first ring is the one with the call in flight: {ring}"
    );
    let extra = incident["extra_rings"].as_array().unwrap();
    assert_eq!(extra.len(), 3, "{}", incident["not_captured"]);
    let full = extra
        .iter()
        .find(|r| r["records_omitted"].as_u64().unwrap_or(0) > 0)
        .expect("the full ring");
    assert_eq!(
        full["in_flight"].as_array().unwrap().len() as u64
            + full["in_flight_omitted"].as_u64().unwrap(),
        u64::from(format::MAX_SLOT_COUNT),
        "every open call counted"
    );
    let path = incident_dir(&out, &incident);
    let copies: u64 = ["ring.bin", "ring-2.bin", "ring-3.bin", "ring-4.bin"]
        .iter()
        .map(|name| std::fs::metadata(path.join(name)).map_or(0, |m| m.len()))
        .sum();
    let total = dir_bytes(&path);
    eprintln!(
        "{test}: incident {} MiB, ring copies {} MiB",
        total >> 20,
        copies >> 20
    );
    assert!(copies <= 16 << 20, "ring copies take {copies} bytes");
    assert!(total <= 64 << 20, "the incident takes {total} bytes");
    // Ring 1: 8 closed calls and the open one (17 records) in one lane; cut to the lane's newest.
    let note = ring["copy_note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("newest ") && note.contains(" of 17 records kept"),
        "{note}"
    );
    let said = incident["not_captured"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| {
            n["what"] == "ring copy" && n["why"].as_str().unwrap().starts_with("ring.bin: newest")
        });
    assert!(said, "{}", incident["not_captured"]);
    // The cut copy is a ring `ring dump` reads, with its call in flight.
    let dump = Command::new(bin())
        .args(["ring", "dump", "--format", "json"])
        .arg(path.join("ring.bin"))
        .output()
        .unwrap();
    assert!(dump.status.success(), "{dump:?}");
    let dumped: serde_json::Value = serde_json::from_slice(&dump.stdout).unwrap();
    assert!(
        dumped["in_flight"]
            .as_array()
            .is_some_and(|calls| calls.iter().any(|c| c["label"] == IN_FLIGHT_LABEL)),
        "{}",
        dumped["in_flight"]
    );
    drop(tenant);
    drop(cgroup);
}

/// `Agent::start` with the agent moved into the cgroup of `procs` before it execs.
pub(crate) fn start_agent_in(dir: &Path, args: &[&str], procs: &Path) -> Agent {
    let log = dir.join(format!("agent-{}.log", unique_comm("l")));
    let mut command = Command::new(bin());
    command
        .arg("agent")
        .args(["--log-format", "plain", "--no-nvidia-smi"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
    join_cgroup_at_exec(&mut command, procs);
    Agent {
        child: command.spawn().unwrap(),
        log,
    }
}

/// Issue 35: without a limit, 5 such processes wrote 2.6 GB to the store in 11 s and retention removed
/// nothing (wedges younger than 24 h were protected).
#[test]
pub(crate) fn five_hostile_processes_cannot_push_the_store_past_its_quota() {
    use reports::model::Incident;
    use reports::retention::Retention;
    use reports::store::Store;
    let test = "five hostile processes cannot push the store past its quota";
    if !root_or_skip(test) {
        return;
    }
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("bounds-quota");
    let out = dir.path().join("incidents");
    let quota = Retention::DEFAULT.max_total_bytes.unwrap();
    let tree = TreeCgroup::new(&format!("wc-bounds-tenant-{}", std::process::id()))
        .unwrap_or_else(|why| panic!("{test}: cannot make the tenant's cgroup: {why}"));
    // A store within 1 MiB of its quota, all young (detected now): 31 other tenants' incidents, each in its own
    // cgroup, of 62 MiB; and two earlier incidents of the tenant's own cgroup that fill the rest. Any incident of
    // the tenant takes the store over its quota.
    let store = Store::open(&out, Retention::UNLIMITED).unwrap();
    let young = |n: i32, cgroup: String| {
        let mut incident = Incident::new(40_000 + n);
        incident.process.cgroup = Some(cgroup);
        let mut handle = store.create(&incident).unwrap();
        handle.finish(&incident).unwrap();
        (handle.id().to_string(), handle.path().join("ring.bin"))
    };
    let others: Vec<(String, PathBuf)> = (0..31)
        .map(|n| young(n, format!("/other-tenant-{n}.scope")))
        .collect();
    let earlier: Vec<(String, PathBuf)> = (31..33).map(|n| young(n, tree.name.clone())).collect();
    drop(store);
    for (_, evidence) in &others {
        std::fs::File::create(evidence)
            .unwrap()
            .set_len(62 << 20)
            .unwrap();
    }
    let rest = (quota - (1 << 20)).saturating_sub(dir_bytes(&out)) / 2;
    for (_, evidence) in &earlier {
        std::fs::File::create(evidence)
            .unwrap()
            .set_len(rest)
            .unwrap();
    }
    let others: Vec<String> = others.into_iter().map(|(id, _)| id).collect();

    let comm = unique_comm("q");
    let program = link_as(dir.path(), &comm, &python);
    let tenants: Vec<Tenant> = (0..5)
        .map(|_| tenant_with_four_rings(dir.path(), &program, Some(&tree.procs()), false).0)
        .collect();
    let pattern = format!("^{comm}$");
    let mut args = vec!["--out", out.to_str().unwrap(), "--match-comm", &pattern];
    args.extend_from_slice(FAST);
    let mut agent = Agent::start(dir.path(), &args, &[]);
    // Each tenant's incident completes, or the quota removed it (dropped.json names it).
    let until = Instant::now() + Duration::from_secs(120);
    let settled = |pid: i32| {
        let done = crate::agent::incidents_for(&out, pid)
            .iter()
            .any(|i| i["complete"] == true);
        let dropped = std::fs::read_to_string(out.join("dropped.json"))
            .unwrap_or_default()
            .contains(&format!("-{pid}\""));
        done || dropped
    };
    while !tenants.iter().all(|t| settled(t.pid())) {
        if let Some(status) = agent.child.try_wait().unwrap() {
            panic!("{test}: the agent exited ({status}):\n{}", agent.log());
        }
        assert!(
            Instant::now() < until,
            "{test}: not settled:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A last look after the captures' final writes.
    std::thread::sleep(Duration::from_millis(500));
    let total = dir_bytes(&out);
    let (code, _, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
    eprintln!(
        "{test}: store {} MiB (quota {} MiB)",
        total >> 20,
        quota >> 20
    );
    assert!(
        total <= quota,
        "the store takes {total} bytes, over its {quota}-byte quota:\n{log}"
    );
    // Each tenant incident within the per-incident budget.
    for tenant in &tenants {
        for incident in crate::agent::incidents_for(&out, tenant.pid()) {
            let bytes = dir_bytes(&incident_dir(&out, &incident));
            assert!(
                bytes <= 64 << 20,
                "incident of pid {} takes {bytes} bytes",
                tenant.pid()
            );
        }
    }
    // The other tenants' incidents are all there: the tenant's own older ones went first.
    for id in &others {
        assert!(
            out.join(id).join("incident.json").exists(),
            "{id} was removed:\n{log}"
        );
    }
    assert!(
        earlier.iter().any(|(id, _)| !out.join(id).exists()),
        "none of the tenant's earlier incidents was removed:\n{log}"
    );
    // What was removed is said: in the log, and in dropped.json.
    let dropped: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("dropped.json")).expect("dropped.json"))
            .unwrap();
    let entries = dropped["dropped"].as_array().unwrap();
    assert!(!entries.is_empty());
    for line in log
        .lines()
        .filter(|l| l.contains("retention removed") || l.contains("removed by retention"))
    {
        eprintln!("{test}: agent: {line}");
    }
    let tree_name = format!("cgroup:{}", tree.name);
    for entry in entries {
        assert_eq!(entry["reason"]["limit"], "quota", "{entry}");
        assert_eq!(entry["tree"], tree_name.as_str(), "{entry}");
        assert!(
            log.contains(&format!(
                "retention removed wedge incident {}",
                entry["id"].as_str().unwrap()
            )),
            "{log}"
        );
    }
    drop(tenants);
    drop(tree);
}
