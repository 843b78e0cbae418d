//! Integration test: a real wedged process whose command line holds every secret form issue 13 found leaking;
//! the agent's incident (every file it wrote) and its log hold none of them, and the harmless arguments beside
//! them survive.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::agent::{link_as, unique_comm, wait_in_d, wait_incident, Agent, Helper, TempDir, FAST};
use crate::util::frozen_fs_or_skip;

/// A secret that is easy to find anywhere: the form's number inside a token no harmless text holds.
fn secret(n: u32) -> String {
    format!("Zq{n:02}x9f8e7d6c")
}

/// The 20 forms of issue 13's defect 9, one argv for all (each form starts with the command it belongs to), and
/// the secret of each.
fn hostile_argv() -> (Vec<String>, Vec<String>) {
    let s = secret;
    let ghp = format!("ghp_{}AAAAAAAAAAAAAAAAAAAAAAAA", s(20));
    let words: Vec<String> = vec![
        "curl".into(),
        "-H".into(),
        format!("Authorization: Bearer {}", s(1)),
        "https://api.example/x".into(),
        "curl".into(),
        "--header".into(),
        format!("X-Api-Key: {}", s(2)),
        "curl".into(),
        "-u".into(),
        format!("alice:{}", s(17)),
        "wget".into(),
        format!("https://api.example/v1/x?access_token={}&page=2", s(15)),
        "notify".into(),
        format!("https://hooks.slack.com/services/T000/B000/{}", s(16)),
        "app".into(),
        format!("--pw={}", s(5)),
        format!("--privkey={}", s(6)),
        format!("--jwt={}", s(7)),
        format!("--session={}", s(8)),
        format!("--creds={}", s(9)),
        "--bearer".into(),
        s(10),
        format!("--oauth2={}", s(11)),
        format!("--tok={}", s(12)),
        "--license".into(),
        s(13),
        format!("--db-password:{}", s(14)),
        "--token".into(),
        format!("--{}", s(21)),
        "--max-tokens".into(),
        "128".into(),
        "mysql".into(),
        "-u".into(),
        "root".into(),
        "-p".into(),
        s(3),
        "db".into(),
        "mysql".into(),
        format!("-p{}", s(4)),
        "mysql".into(),
        "-h".into(),
        format!("alice:{}@db.example", s(19)),
        "echo".into(),
        ghp,
        "sshpass".into(),
        "-p".into(),
        s(18),
        "ssh".into(),
        "-p".into(),
        "2222".into(),
        "host".into(),
    ];
    let secrets = [
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
    ]
    .map(s)
    .to_vec();
    (words, secrets)
}

fn all_files(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            all_files(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path.display().to_string(), bytes));
        }
    }
}

#[test]
fn no_secret_of_a_wedged_command_line_reaches_the_incident_or_the_log() {
    let Some(mut fs) = frozen_fs_or_skip("redaction") else {
        return;
    };
    let dir = TempDir::new("redact");
    let file = fs.create_file("target", b"x").unwrap();
    fs.freeze().unwrap();
    // `sh -c 'printf x > "$0"' FILE ARGS…`: the open for writing blocks (D) on the frozen filesystem, and every
    // argument stays in the process's command line.
    let comm = unique_comm("r");
    let shell = link_as(dir.path(), &comm, Path::new("/bin/sh"));
    let (words, secrets) = hostile_argv();
    let child = Command::new(&shell)
        .args(["-c", "printf x > \"$0\""])
        .arg(&file)
        .args(&words)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut helper = Helper { child };
    wait_in_d(helper.pid(), Duration::from_secs(5));

    let out = dir.path().join("incidents");
    let pattern = format!("^{comm}$");
    let mut args = vec!["--out", out.to_str().unwrap()];
    args.extend_from_slice(FAST);
    args.extend_from_slice(&["--match-comm", &pattern]);
    let mut agent = Agent::start(dir.path(), &args, &[]);
    let incident = wait_incident(&mut agent, &out, helper.pid(), Duration::from_secs(20));
    let (code, took, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(
        took < Duration::from_secs(2),
        "SIGTERM took {took:?} (limit 2 s)"
    );

    // The command line was captured (else there would be nothing to leak and the test would prove nothing).
    let cmdline: Vec<String> = incident["process"]["cmdline"]
        .as_array()
        .expect("no command line captured")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(cmdline.len(), words.len() + 4, "{cmdline:?}");
    for kept in [
        "--max-tokens",
        "128",
        "2222",
        "https://api.example/x",
        "alice:[REDACTED]",
    ] {
        assert!(
            cmdline.iter().any(|a| a == kept),
            "{kept:?} lost: {cmdline:?}"
        );
    }

    let mut files = Vec::new();
    all_files(&out.join(incident["id"].as_str().unwrap()), &mut files);
    let names: Vec<&String> = files.iter().map(|(name, _)| name).collect();
    assert!(
        names.iter().any(|name| name.ends_with("report.md")),
        "{names:?}"
    );
    files.push(("agent log".into(), log.into_bytes()));
    for (name, bytes) in &files {
        let text = String::from_utf8_lossy(bytes);
        let leaked: Vec<&String> = secrets
            .iter()
            .filter(|s| text.contains(s.as_str()))
            .collect();
        assert!(leaked.is_empty(), "{name} holds {leaked:?}");
    }

    fs.thaw().unwrap();
    assert!(
        helper.wait_exit(Duration::from_secs(10)).is_some(),
        "the shell did not finish after the thaw"
    );
}
