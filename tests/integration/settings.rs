//! Integration tests: the settings are defined once and the flags agree across commands — `--out` is
//! the incident directory everywhere, `run` writes nothing outside it, the agent's effective defaults are
//! the shared ones.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::agent::TempDir;
use crate::util::{bin, frozen_fs_or_skip};

/// What a finished command printed.
struct Finished {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run `command` to completion, killing it past `limit` (then the test fails). Its output goes to files
/// in `dir`, not pipes: a wedged worker inherits them and would keep a pipe open long after `run` exits.
fn finish(command: &mut Command, dir: &Path, limit: Duration) -> Finished {
    let (stdout, stderr) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "did not exit within {limit:?}: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Finished {
        code: status.code(),
        stdout: std::fs::read_to_string(&stdout).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr).unwrap_or_default(),
    }
}

impl std::fmt::Debug for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\nstdout: {}\nstderr: {}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn report_list(out: &Path, flag: &str) -> serde_json::Value {
    let output = Command::new(bin())
        .args(["report", "list", "--format", "json", flag])
        .arg(out)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn run_without_a_wedge_leaves_nothing_outside_out_and_no_ring_folder() {
    let parent = TempDir::new("settings-clean");
    let side = TempDir::new("settings-side");
    let out = parent.path().join("incidents");
    let seen = side.path().join("ring-dir");
    let output = finish(
        Command::new(bin())
            .args(["run", "--no-nvidia-smi", "--out"])
            .arg(&out)
            .args([
                "--",
                "sh",
                "-c",
                "printf %s \"$WEDGE_CAPTURE_RING_DIR\" > \"$1\"",
                "sh",
            ])
            .arg(&seen),
        side.path(),
        Duration::from_secs(20),
    );
    assert_eq!(output.code, Some(0), "{output:?}");
    let ring_dir = PathBuf::from(std::fs::read_to_string(&seen).unwrap());
    assert!(
        ring_dir.starts_with(out.join(".rings")),
        "the command's ring directory {} is not inside --out {}",
        ring_dir.display(),
        out.display()
    );
    assert_eq!(
        names(parent.path()),
        ["incidents"],
        "run wrote beside --out"
    );
    // Nothing captured: the per-run ring directory and the folder holding it are gone again.
    assert!(!out.join(".rings").exists(), "{:?}", names(&out));
}

#[test]
fn a_captured_wedge_keeps_its_rings_inside_out_where_the_store_does_not_list_them() {
    let Some(mut fs) = frozen_fs_or_skip(
        "a_captured_wedge_keeps_its_rings_inside_out_where_the_store_does_not_list_them",
    ) else {
        return;
    };
    let file = fs.create_file("target", b"x").unwrap();
    fs.freeze().unwrap();
    let parent = TempDir::new("settings-wedge");
    let side = TempDir::new("settings-wedge-side");
    let out = parent.path().join("incidents");
    let mut command = Command::new(bin());
    command
        .arg("run")
        .args(crate::agent::FAST)
        .args(["--exit-after", "0.5", "--no-nvidia-smi", "--out"])
        .arg(&out)
        .args(["--", bin(), "internal", "wedge-helper", "--path"])
        .arg(&file);
    let output = finish(&mut command, side.path(), Duration::from_secs(30));
    fs.thaw().unwrap();
    assert_eq!(output.code, Some(3), "{output:?}");
    assert_eq!(
        names(parent.path()),
        ["incidents"],
        "run wrote beside --out"
    );
    // The ring the worker wrote is kept with the incident directory, in the dot folder.
    let rings = out.join(".rings");
    let runs = names(&rings);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(
        names(&rings.join(&runs[0]))
            .iter()
            .any(|n| n.ends_with(".ring")),
        "{:?}",
        names(&rings.join(&runs[0]))
    );
    // `report` reads the same directory through --out (and through the old --dir): one incident, the
    // ring folder is not one.
    for flag in ["--out", "--dir"] {
        let listed = report_list(&out, flag);
        let listed = listed.as_array().unwrap();
        assert_eq!(listed.len(), 1, "{flag}: {listed:?}");
        assert!(!listed[0]["id"].as_str().unwrap().starts_with('.'));
    }
    let pid = report_list(&out, "--out")[0]["pid"].as_i64().unwrap();
    let bundle = parent.path().join("bundle.tar.gz");
    let output = Command::new(bin())
        .args(["report", "bundle", "latest", "--out"])
        .arg(&out)
        .arg("-o")
        .arg(&bundle)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(bundle.exists());
    // The helper finishes after the thaw; let it go before the filesystem does (FrozenFs unmounts on drop).
    let gone_by = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < gone_by {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_agent_and_run_share_their_defaults() {
    let output = Command::new(bin())
        .args(["agent", "--check-config", "--gpu"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let settings: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(settings["threshold"], 30.0);
    assert_eq!(settings["interval"], 1.0);
    assert_eq!(settings["samples"], 3);
    assert_eq!(settings["probe_timeout"], 2.0);
    assert_eq!(settings["out"], "/var/lib/wedge-capture/incidents");
    // The help of both commands shows those same defaults.
    for command in ["run", "agent"] {
        let output = Command::new(bin())
            .args([command, "--help"])
            .output()
            .unwrap();
        // Help text is wrapped to the terminal width: compare with the wrapping undone.
        let help = String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(help.contains("[default: 30s]"), "{command}: {help}");
        assert!(
            help.contains("[default: /var/lib/wedge-capture/incidents]"),
            "{command}: {help}"
        );
    }
    // Same validation for the same flag: --samples 0 is refused by both, as a usage error.
    for argv in [
        &["run", "--samples", "0", "--", "true"][..],
        &["agent", "--gpu", "--samples", "0", "--check-config"][..],
    ] {
        let output = Command::new(bin()).args(argv).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{argv:?}: {output:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("samples"));
    }
}
