//! The agent under the restrictions it ships with (issue 27), without systemd: the unit's
//! `RestrictAddressFamilies=` as a seccomp filter (what systemd installs: `socket(2)` of another family fails with
//! EAFNOSUPPORT), its `ProtectSystem=strict` + `ReadWritePaths=` as a private mount namespace whose `/` is read-only
//! except the unit's writable paths; and `NODE_NAME` naming incidents in a UTS namespace with another host name.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::agent::{link_as, unique_comm, wait_incident, Agent, TempDir};
use crate::util::{bin, in_ci};

const UNIT: &str = include_str!("../../systemd/wedge-capture.service");

/// The values of `key=` lines of the unit, split at whitespace (`-` prefixes of optional paths removed).
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .flat_map(|v| v.split_whitespace())
        .map(|v| v.trim_start_matches('-').to_string())
        .collect()
}

fn family(name: &str) -> u32 {
    match name {
        "AF_UNIX" => libc::AF_UNIX as u32,
        "AF_INET" => libc::AF_INET as u32,
        "AF_INET6" => libc::AF_INET6 as u32,
        "AF_NETLINK" => libc::AF_NETLINK as u32,
        "AF_PACKET" => libc::AF_PACKET as u32,
        other => panic!("family {other} unknown to the test"),
    }
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// A classic-BPF seccomp program equivalent to `RestrictAddressFamilies=<families>`: `socket(2)` with another
/// family returns EAFNOSUPPORT, everything else is allowed; another architecture's syscalls kill (as
/// `SystemCallArchitectures=native`).
fn address_family_filter(families: &[u32]) -> Vec<libc::sock_filter> {
    const LD_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let n = families.len();
    // Layout: 0 ld arch, 1 jeq arch, 2 ld nr, 3 jeq socket, 4 ld args[0], 5.. one jeq per family,
    // then errno (5+n), allow (6+n), kill (7+n). Jumps count from the next instruction.
    let (errno_at, allow_at, kill_at) = (5 + n, 6 + n, 7 + n);
    let mut prog = vec![
        op(LD_ABS, 0, 0, 4),
        op(JEQ, 0, (kill_at - 2) as u8, AUDIT_ARCH),
        op(LD_ABS, 0, 0, 0),
        op(JEQ, 0, (allow_at - 4) as u8, libc::SYS_socket as u32),
        // args[0], low 32 bits (little endian): the family.
        op(LD_ABS, 0, 0, 16),
    ];
    for (i, f) in families.iter().enumerate() {
        prog.push(op(JEQ, (allow_at - (5 + i + 1)) as u8, 0, *f));
    }
    assert_eq!(prog.len(), errno_at);
    prog.push(op(
        RET,
        0,
        0,
        libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32,
    ));
    prog.push(op(RET, 0, 0, libc::SECCOMP_RET_ALLOW));
    prog.push(op(RET, 0, 0, libc::SECCOMP_RET_KILL_PROCESS));
    assert_eq!(prog.len(), kill_at + 1);
    prog
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;

fn check(ret: libc::c_long) -> std::io::Result<()> {
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Arrange for `command` to run as under the unit: a private mount namespace with `/` read-only except `writable`
/// (ProtectSystem=strict + ReadWritePaths=), no new privileges, and the address-family filter.
fn confine(command: &mut Command, writable: &[PathBuf], families: &[u32]) {
    // Everything the child needs is built here: after fork only async-signal-safe calls are allowed.
    let writable: Vec<CString> = writable
        .iter()
        .map(|p| CString::new(p.as_os_str().as_encoded_bytes()).unwrap())
        .collect();
    let root = CString::new("/").unwrap();
    let filter = address_family_filter(families);
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: the closure runs in the forked child before exec and makes only raw syscalls on data prepared
    // above (no allocation, no locks); every pointer passed outlives the call.
    unsafe {
        command.pre_exec(move || {
            check(libc::unshare(libc::CLONE_NEWNS) as libc::c_long)?;
            let none = std::ptr::null();
            check(libc::mount(
                none,
                root.as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                none.cast(),
            ) as libc::c_long)?;
            check(libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                root.as_ptr(),
                AT_RECURSIVE,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            ))?;
            for path in &writable {
                check(libc::mount(
                    path.as_ptr(),
                    path.as_ptr(),
                    none,
                    libc::MS_BIND,
                    none.cast(),
                ) as libc::c_long)?;
                // A bind remount without MS_RDONLY: this mount alone becomes writable again.
                check(libc::mount(
                    none,
                    path.as_ptr(),
                    none,
                    libc::MS_REMOUNT | libc::MS_BIND,
                    none.cast(),
                ) as libc::c_long)?;
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long)?;
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            check(libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
                0,
                0,
            ) as libc::c_long)
        });
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn root_or_skip(test: &str) -> bool {
    if is_root() {
        return true;
    }
    assert!(!in_ci(), "{test}: needs root under CI=true");
    eprintln!("{test}: skipped: needs root (mount and UTS namespaces)");
    false
}

/// Start `wedge-capture agent ARGS` prepared by `setup`, stderr to a log file in `dir`.
fn start(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    setup: impl FnOnce(&mut Command),
) -> Agent {
    let log = dir.join(format!("agent-{}.log", unique_comm("l")));
    let mut command = Command::new(bin());
    command
        .arg("agent")
        .args(["--log-format", "plain", "--no-nvidia-smi"])
        .args(args)
        // Only what the test gives: a NODE_NAME of the environment would rename every incident.
        .env_remove("NODE_NAME")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
    setup(&mut command);
    Agent {
        child: command.spawn().unwrap(),
        log,
    }
}

/// The body of `GET path` on `addr`, if it answered 200.
fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The unit's writable paths mapped under `root` (the test cannot write the real /var/lib).
fn mapped(root: &Path, unit_paths: &[String]) -> Vec<PathBuf> {
    unit_paths
        .iter()
        .map(|p| root.join(p.trim_start_matches('/')))
        .collect()
}

#[test]
fn the_shipped_unit_restrictions_still_serve_metrics_and_the_textfile() {
    let test = "sandbox unit";
    if !root_or_skip(test) {
        return;
    }
    let families: Vec<u32> = unit_values(UNIT, "RestrictAddressFamilies")
        .iter()
        .map(|f| family(f))
        .collect();
    let writable = unit_values(UNIT, "ReadWritePaths");
    assert!(
        writable
            .iter()
            .any(|p| p == "/var/lib/node_exporter/textfile_collector"),
        "{writable:?}"
    );
    let dir = TempDir::new("sandbox");
    let root = dir.path().join("root");
    let rw = mapped(&root, &writable);
    for path in &rw {
        std::fs::create_dir_all(path).unwrap();
    }
    let state = root.join("var/lib/wedge-capture");
    let textfile = root.join("var/lib/node_exporter/textfile_collector");
    let out = state.join("incidents");
    let args = [
        "--match-comm",
        "^wc-no-such-comm$",
        "--interval",
        "200ms",
        "--metrics-listen",
        "127.0.0.1:0",
        "--out",
        out.to_str().unwrap(),
        "--textfile-dir",
        textfile.to_str().unwrap(),
    ];

    // As shipped: /metrics answers, the textfile is written, the read-only rest stays untouched.
    let mut agent = start(dir.path(), &args, &[], |c| confine(c, &rw, &families));
    let log = agent.wait_log("serving metrics on http://", 1, Duration::from_secs(10));
    let addr = log
        .split("serving metrics on http://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    // The endpoint opens just before the first scan, whose figures it then serves.
    let mut body = String::new();
    for _ in 0..200 {
        body = http_get(&addr, "/metrics").expect("GET /metrics under the unit's restrictions");
        if body.contains("wedge_capture_build_info") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(body.contains("wedge_capture_build_info"), "{body}");
    let prom = textfile.join("wedge_capture.prom");
    for _ in 0..100 {
        if prom.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&prom)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", prom.display(), agent.log()));
    assert!(text.contains("wedge_capture_wedged_threads"), "{text}");
    assert!(!agent.log().contains("cannot write"), "{}", agent.log());
    let (code, _, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");

    // The filter is real: without AF_INET/AF_INET6 (the unit before issue 27) the bind is refused, and the error
    // names the setting to change.
    let old: Vec<u32> = families
        .iter()
        .copied()
        .filter(|f| *f != libc::AF_INET as u32 && *f != libc::AF_INET6 as u32)
        .collect();
    let mut agent = start(dir.path(), &args, &[], |c| confine(c, &rw, &old));
    let status = (0..200).find_map(|_| {
        std::thread::sleep(Duration::from_millis(50));
        agent.child.try_wait().unwrap()
    });
    let log = agent.log();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{log}");
    assert!(
        log.contains("Address family not supported") && log.contains("RestrictAddressFamilies="),
        "{log}"
    );

    // The read-only rest is real: with only the state directory writable (the textfile dir not in
    // ReadWritePaths) the textfile cannot be written, and the warning says which setting to change.
    let mut agent = start(dir.path(), &args, &[], |c| confine(c, &rw[..1], &families));
    let log = agent.wait_log("cannot write", 1, Duration::from_secs(10));
    assert!(
        log.contains("Read-only file system") && log.contains("ReadWritePaths="),
        "{log}"
    );
    let (code, _, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
}

/// UTS namespace with another host name, for `command`.
fn other_hostname(command: &mut Command, name: &'static str) {
    // SAFETY: raw syscalls on a static name in the forked child before exec; nothing is allocated.
    unsafe {
        command.pre_exec(move || {
            check(libc::unshare(libc::CLONE_NEWUTS) as libc::c_long)?;
            check(libc::sethostname(name.as_ptr().cast(), name.len()) as libc::c_long)
        });
    }
}

#[test]
fn node_name_names_the_incident_in_a_uts_namespace_with_another_host_name() {
    let test = "sandbox node name";
    if !root_or_skip(test) {
        return;
    }
    let dir = TempDir::new("nodename");
    let comm = unique_comm("n");
    let mut target = Command::new(link_as(dir.path(), &comm, Path::new("/bin/sleep")))
        .arg("60")
        .spawn()
        .unwrap();
    let pattern = format!("^{comm}$");
    for (env, want) in [(Some("gpu-node-x"), "gpu-node-x"), (None, "pod-hostname-7")] {
        let out = dir.path().join(format!("incidents-{want}"));
        let args = [
            "--match-comm",
            &pattern,
            "--interval",
            "100ms",
            "--out",
            out.to_str().unwrap(),
        ];
        let env: Vec<(&str, &str)> = env.map(|v| ("NODE_NAME", v)).into_iter().collect();
        let mut agent = start(dir.path(), &args, &env, |c| {
            other_hostname(c, "pod-hostname-7")
        });
        agent.wait_log(
            &format!("watching pid {}", target.id()),
            1,
            Duration::from_secs(10),
        );
        agent.signal(libc::SIGUSR1);
        let incident = wait_incident(
            &mut agent,
            &out,
            target.id() as i32,
            Duration::from_secs(10),
        );
        assert_eq!(incident["host"]["hostname"], want, "{}", incident["id"]);
        let id = incident["id"].as_str().unwrap();
        assert!(id.contains(&format!("-{want}-{}", target.id())), "{id}");
        let (code, _, log) = agent.terminate();
        assert_eq!(code, Some(0), "{log}");
    }
    let _ = target.kill();
    let _ = target.wait();
}

/// `doctor --json` run through `wrapper` (e.g. `unshare -p -f`): exit code and checks by name.
fn doctor(wrapper: &[&str], args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut command = Command::new(wrapper.first().copied().unwrap_or(bin()));
    if !wrapper.is_empty() {
        command.args(&wrapper[1..]).arg(bin());
    }
    let out = command
        .arg("doctor")
        .args(["--format", "json"])
        .args(args)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{wrapper:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let mut by_name = serde_json::Map::new();
    for check in report["checks"].as_array().unwrap() {
        by_name.insert(check["name"].as_str().unwrap().to_string(), check.clone());
    }
    (out.status.code(), serde_json::Value::Object(by_name))
}

#[test]
fn doctor_reports_what_a_fleet_node_lacks() {
    if !root_or_skip("doctor fleet") {
        return;
    }
    let dir = TempDir::new("doctor");
    let ring = dir.path().join("rings");
    std::fs::create_dir(&ring).unwrap();
    let missing_out = dir.path().join("no-such-dir/incidents");
    let missing_textfile = dir.path().join("no-textfile-dir");
    let args = [
        "--out",
        missing_out.to_str().unwrap(),
        "--textfile-dir",
        missing_textfile.to_str().unwrap(),
        "--ring-dir",
        ring.to_str().unwrap(),
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    // On the host: the pid namespace is the host's, the port binds.
    let (_, checks) = doctor(&[], &args);
    assert_eq!(checks["host-pid-namespace"]["status"], "ok", "{checks}");
    assert_eq!(checks["metrics-port"]["status"], "ok", "{checks}");
    // A missing directory is not "writable".
    assert_eq!(
        checks["output-dir"]["status"], "warn",
        "{}",
        checks["output-dir"]
    );
    assert!(checks["output-dir"]["detail"]
        .as_str()
        .unwrap()
        .contains("does not exist"));
    assert_eq!(
        checks["textfile-dir"]["status"], "fail",
        "{}",
        checks["textfile-dir"]
    );
    // 0755 (what std creates here): non-root workers cannot create rings.
    std::fs::set_permissions(&ring, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (code, checks) = doctor(&[], &args);
    assert_eq!(
        checks["ring-dir"]["status"], "warn",
        "{}",
        checks["ring-dir"]
    );
    assert_eq!(code, Some(1), "a failed check exits 1");

    // A pod without hostPID: its own pid namespace.
    let (_, checks) = doctor(&["unshare", "--pid", "--fork"], &args);
    assert_eq!(
        checks["host-pid-namespace"]["status"], "fail",
        "{}",
        checks["host-pid-namespace"]
    );
    assert!(checks["host-pid-namespace"]["fix"]
        .as_str()
        .unwrap()
        .contains("hostPID"));

    // The busy-process shortcut: loaded as root here; refused, with the capability named, without
    // CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN (a container that was not granted them).
    let (_, checks) = doctor(&[], &args);
    assert_eq!(
        checks["task-iter"]["status"], "ok",
        "{}",
        checks["task-iter"]
    );
    let (_, checks) = doctor(
        &[
            "setpriv",
            "--inh-caps=-bpf,-perfmon,-sys_admin",
            "--bounding-set=-bpf,-perfmon,-sys_admin",
        ],
        &args,
    );
    assert_eq!(
        checks["task-iter"]["status"], "warn",
        "{}",
        checks["task-iter"]
    );
    assert!(
        checks["task-iter"]["detail"]
            .as_str()
            .unwrap()
            .contains("needs CAP_BPF and CAP_PERFMON"),
        "{}",
        checks["task-iter"]
    );

    // With exactly the shipped unit's capabilities (CapabilityBoundingSet): the shortcuts that need
    // privileges work (CAP_SYS_ADMIN grants what CAP_BPF and CAP_PERFMON would).
    let caps: Vec<String> = unit_values(UNIT, "CapabilityBoundingSet")
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let only = format!("-all,{}", caps.join(","));
    let (_, checks) = doctor(
        &[
            "setpriv",
            &format!("--inh-caps={only}"),
            &format!("--bounding-set={only}"),
        ],
        &args,
    );
    for name in ["task-iter", "taskstats"] {
        assert_eq!(
            checks[name]["status"], "ok",
            "unit caps {only}: {}",
            checks[name]
        );
    }

    // /dev/kmsg that cannot be read (dmesg_restrict=1 without CAP_SYSLOG) is reported.
    let restricted =
        std::fs::read_to_string("/proc/sys/kernel/dmesg_restrict").is_ok_and(|v| v.trim() == "1");
    if restricted {
        let (_, checks) = doctor(
            &["setpriv", "--inh-caps=-syslog", "--bounding-set=-syslog"],
            &args,
        );
        assert_eq!(checks["kmsg"]["status"], "warn", "{}", checks["kmsg"]);
        assert!(checks["kmsg"]["detail"]
            .as_str()
            .unwrap()
            .contains("no kernel log"));
    }
}
