use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::model::MAX_PROBE_OUTPUT;
use super::stuck::StuckChild;
use super::*;

fn fifo(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("no-writer.fifo");
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    path
}

#[test]
fn reads_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("version");
    std::fs::write(&path, b"NVRM version: test 1.2.3\n").unwrap();
    let mut runner = ProbeRunner::new(Duration::from_secs(2), 4);
    let out = runner.run_all(&[Probe::read_file("v", path, "x")]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].status, ProbeStatus::Ok, "{:?}", out[0]);
    assert_eq!(out[0].output, "NVRM version: test 1.2.3\n");
}

#[test]
fn missing_file_fails_with_the_errno() {
    let mut runner = ProbeRunner::default();
    let out = runner.run_all(&[Probe::read_file(
        "v",
        PathBuf::from("/nonexistent/wedge-capture-test"),
        "x",
    )]);
    assert_eq!(out[0].status, ProbeStatus::Failed);
    assert!(out[0].detail.contains("No such file"), "{}", out[0].detail);
}

#[test]
fn a_hanging_read_times_out_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = fifo(dir.path());
    let good = dir.path().join("good");
    std::fs::write(&good, b"fine").unwrap();
    let mut runner = ProbeRunner::new(Duration::from_millis(300), 4);
    let started = Instant::now();
    let out = runner.run_all(&[
        Probe::read_file("stuck", path, "the RM lock is probably held"),
        Probe::read_file("good", good, "x"),
    ]);
    let elapsed = started.elapsed();
    // A FIFO open never returns by itself: ending at all is the deadline at work (slack for a loaded CI).
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_eq!(out[0].status, ProbeStatus::TimedOut);
    assert_eq!(
        out[0].detail,
        "timed out after 300 ms: the RM lock is probably held"
    );
    // Opening a FIFO sleeps interruptibly: SIGKILL ends it and it is reaped.
    assert_eq!(out[0].killed, Some(true));
    assert_eq!(out[1].status, ProbeStatus::Ok);
    assert_eq!(runner.stuck_count(), 0);
}

#[test]
fn a_stop_request_ends_a_hanging_probe_long_before_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let path = fifo(dir.path());
    let mut runner = ProbeRunner::new(Duration::from_secs(30), 4);
    let stop = Arc::new(AtomicBool::new(false));
    runner.set_cancel(stop.clone());
    let setter = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::SeqCst);
        })
    };
    let started = Instant::now();
    let out = runner.run_all(&[Probe::read_file("stuck", path.clone(), "x")]);
    let elapsed = started.elapsed();
    setter.join().unwrap();
    // The deadline is 30 s: anything near it means the request was not seen.
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert_eq!(out[0].status, ProbeStatus::Failed, "{:?}", out[0]);
    assert!(
        out[0].detail.starts_with("interrupted after ")
            && out[0].detail.contains("a stop was requested"),
        "{}",
        out[0].detail
    );
    assert_eq!(out[0].killed, Some(true));
    assert_eq!(runner.stuck_count(), 0);
    // Once stopping, later probes are not started at all.
    let out = runner.run_all(&[Probe::read_file("later", path, "x")]);
    assert_eq!(out[0].status, ProbeStatus::Skipped);
    assert!(
        out[0].detail.contains("stop was requested"),
        "{}",
        out[0].detail
    );
}

#[test]
fn stuck_children_cost_their_own_target_and_tenant_only() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    std::fs::write(&good, b"fine").unwrap();
    let base = ProbeRunner::new(Duration::from_secs(2), 2);
    // Stand-ins for children stuck in D: live children of ours that never exit by themselves.
    let mut sleepers = Vec::new();
    for _ in 0..3 {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        base.stuck.push(StuckChild {
            pid: child.id() as i32,
            name: "py-spy-41".into(),
            target: 41,
            tenant: "uid:65534".into(),
        });
        sleepers.push(child);
    }
    let probe = [Probe::read_file("good", good, "x")];
    let mut hostile = base.for_target(41, "uid:65534");
    let out = hostile.run_all(&probe);
    assert_eq!(out[0].status, ProbeStatus::Skipped);
    assert!(out[0].detail.contains("per process"), "{}", out[0].detail);
    assert_eq!(hostile.stuck_pids().len(), 3);
    // Another process of the same tenant: its own bound is untouched, the tenant is under its 2 x 4.
    let mut sibling = base.for_target(42, "uid:65534");
    assert_eq!(sibling.run_all(&probe)[0].status, ProbeStatus::Ok);
    // Another tenant's process is never affected.
    let mut victim = base.for_target(7, "uid:1000");
    assert_eq!(victim.run_all(&probe)[0].status, ProbeStatus::Ok);
    assert!(victim.stuck_pids().is_empty());
    assert_eq!(base.stuck_children().pids().len(), 3);
    for mut child in sleepers {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

#[test]
fn reads_each_subdirectory() {
    let dir = tempfile::tempdir().unwrap();
    for gpu in ["0000:01:00.0", "0000:02:00.0"] {
        std::fs::create_dir(dir.path().join(gpu)).unwrap();
        std::fs::write(
            dir.path().join(gpu).join("information"),
            format!("Model: test {gpu}\n"),
        )
        .unwrap();
    }
    let mut runner = ProbeRunner::default();
    let out = runner.run_all(&[Probe {
        name: "gpus".into(),
        kind: ProbeKind::ReadEachSubdir {
            dir: dir.path().to_path_buf(),
            file_name: "information".into(),
        },
        timeout_meaning: "x".into(),
    }]);
    assert_eq!(out[0].status, ProbeStatus::Ok, "{:?}", out[0]);
    assert!(out[0]
        .output
        .contains("==> 0000:01:00.0 <==\nModel: test 0000:01:00.0\n"));
    assert!(out[0].output.contains("Model: test 0000:02:00.0"));
}

#[test]
fn commands_run_and_time_out() {
    let mut runner = ProbeRunner::new(Duration::from_millis(300), 4);
    let out = runner.run_all(&[
        Probe {
            name: "echo".into(),
            kind: ProbeKind::Command {
                program: "sh".into(),
                args: vec!["-c".into(), "echo out; echo err >&2".into()],
                confinement: Confinement::default(),
            },
            timeout_meaning: "x".into(),
        },
        Probe {
            name: "sleep".into(),
            kind: ProbeKind::Command {
                program: "sleep".into(),
                args: vec!["30".into()],
                confinement: Confinement::default(),
            },
            timeout_meaning: "slow".into(),
        },
        Probe {
            name: "missing".into(),
            kind: ProbeKind::Command {
                program: "wedge-capture-no-such-program".into(),
                args: vec![],
                confinement: Confinement::default(),
            },
            timeout_meaning: "x".into(),
        },
    ]);
    assert_eq!(out[0].status, ProbeStatus::Ok, "{:?}", out[0]);
    assert!(out[0].output.contains("out") && out[0].output.contains("err"));
    assert_eq!(out[1].status, ProbeStatus::TimedOut);
    assert_eq!(out[1].killed, Some(true));
    assert_eq!(out[2].status, ProbeStatus::Failed);
}

fn as_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        assert!(
            !breadcrumb::in_ci(),
            "switching credentials needs root; CI runs as root"
        );
        eprintln!("skipped: not root");
    }
    root
}

/// `sh -c script` under `confinement`; its output.
fn confined_sh(script: &str, confinement: Confinement) -> ProbeOutcome {
    let mut runner = ProbeRunner::new(Duration::from_secs(10), 4);
    runner
        .run_all(&[Probe {
            name: "confined".into(),
            kind: ProbeKind::Command {
                program: "sh".into(),
                args: vec!["-c".into(), script.into()],
                confinement,
            },
            timeout_meaning: "x".into(),
        }])
        .remove(0)
}

const SHOW_RIGHTS: &str = "id -u; id -g; id -G; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' \
    /proc/self/status; ulimit -v; ulimit -d; ulimit -c; wc -c < /proc/$$/environ; \
    readlink /proc/self/fd/0";

#[test]
fn a_confined_command_runs_with_the_targets_ids_and_no_capability() {
    if !as_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = confined_sh(
        SHOW_RIGHTS,
        Confinement {
            credentials: Some(capture::parse::credentials::Credentials {
                uid: 65534,
                gid: 65533,
                groups: vec![65532, 65531],
            }),
            root_dir: Some(dir.path().to_path_buf()),
            address_space_limit: Some(1 << 30),
            data_limit: Some(256 << 20),
        },
    );
    assert_eq!(out.status, ProbeStatus::Ok, "{out:?}");
    let lines: Vec<&str> = out.output.lines().collect();
    assert_eq!(lines[..2], ["65534", "65533"], "{}", out.output);
    let mut groups: Vec<&str> = lines[2].split(' ').collect();
    groups.sort_unstable();
    assert_eq!(groups, ["65531", "65532", "65533"], "{}", out.output);
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            out.output.contains(&format!("{cap}:\t0000000000000000")),
            "{cap}: {}",
            out.output
        );
    }
    assert!(out.output.contains("NoNewPrivs:\t1"), "{}", out.output);
    // ulimit's units are KiB; no core file, ever; nothing of the agent's environment.
    let tail = &lines[lines.len() - 5..];
    assert_eq!(
        tail[..4],
        [
            (1u64 << 20).to_string().as_str(),
            (256u64 << 10).to_string().as_str(),
            "0",
            "0"
        ],
        "{}",
        out.output
    );
    // The root directory handed over as standard input, opened before the switch.
    assert_eq!(tail[4], dir.path().display().to_string(), "{}", out.output);
}

/// A uid-0 target's helper is root as a file owner only: no capability, and exec as root gives none back.
#[test]
fn a_uid_0_targets_helper_keeps_uid_0_without_any_capability() {
    if !as_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("other-users-file");
    std::fs::write(&secret, "not for root without CAP_DAC_OVERRIDE\n").unwrap();
    std::os::unix::fs::chown(&secret, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let script = format!("{SHOW_RIGHTS}; cat {} || echo refused", secret.display());
    let out = confined_sh(
        &script,
        Confinement {
            credentials: Some(capture::parse::credentials::Credentials::default()),
            ..Confinement::default()
        },
    );
    assert_eq!(out.status, ProbeStatus::Ok, "{out:?}");
    assert!(out.output.starts_with("0\n0\n0\n"), "{}", out.output);
    for cap in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            out.output.contains(&format!("{cap}:\t0000000000000000")),
            "{cap}: {}",
            out.output
        );
    }
    // Another user's 0600 file: root without CAP_DAC_OVERRIDE cannot read it.
    assert!(out.output.trim_end().ends_with("refused"), "{}", out.output);
    assert!(!out.output.contains("not for root"), "{}", out.output);
    assert!(out.output.contains("/dev/null"), "{}", out.output);
}

/// Limits alone (py-spy's): the child keeps the agent's ids, with the address-space limit.
#[test]
fn a_memory_limit_alone_keeps_the_agents_ids() {
    let out = confined_sh(
        "id -u; ulimit -v; ulimit -c",
        Confinement {
            address_space_limit: Some(512 << 20),
            ..Confinement::default()
        },
    );
    assert_eq!(out.status, ProbeStatus::Ok, "{out:?}");
    // SAFETY: geteuid has no arguments and cannot fail.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(
        out.output,
        format!("{uid}\n{}\n0\n", 512 << 10),
        "{}",
        out.output
    );
    // A program that wants more than the limit fails in the child, never in the agent.
    let out = confined_sh(
        "exec python3 -c 'b = bytearray(1 << 30)'",
        Confinement {
            address_space_limit: Some(256 << 20),
            ..Confinement::default()
        },
    );
    assert_eq!(out.status, ProbeStatus::Failed, "{out:?}");
    assert!(out.output.contains("MemoryError"), "{}", out.output);
}

#[test]
fn output_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    std::fs::write(&path, vec![b'x'; MAX_PROBE_OUTPUT * 3]).unwrap();
    let mut runner = ProbeRunner::default();
    let out = runner.run_all(&[Probe::read_file("big", path, "x")]);
    assert_eq!(out[0].output.len(), MAX_PROBE_OUTPUT);
    assert!(out[0].output_truncated);
}

#[test]
fn human_durations() {
    assert_eq!(human_duration(Duration::from_secs(2)), "2 s");
    assert_eq!(human_duration(Duration::from_millis(250)), "250 ms");
    assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
}
