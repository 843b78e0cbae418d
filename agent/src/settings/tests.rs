use super::*;

fn from_text(text: &str, flags: &Options) -> Result<Settings, String> {
    Settings::resolve(Options::from_config(text.as_bytes())?.overlaid(flags.clone()))
}

fn flags(argv: &[&str]) -> Options {
    let mut full = vec!["wedge-capture", "agent"];
    full.extend_from_slice(argv);
    match <crate::cli::Cli as clap::Parser>::try_parse_from(full)
        .unwrap()
        .command
    {
        crate::cli::Command::Agent(args) => Options {
            watch: args.watch,
            agent: args.agent,
        },
        other => panic!("not agent: {other:?}"),
    }
}

fn run_settings(argv: &[&str]) -> Result<WatchSettings, crate::exit::Failure> {
    let mut full = vec!["wedge-capture", "run"];
    full.extend_from_slice(argv);
    full.extend_from_slice(&["--", "true"]);
    match <crate::cli::Cli as clap::Parser>::try_parse_from(full)
        .unwrap()
        .command
    {
        crate::cli::Command::Run(args) => args.watch_settings(),
        other => panic!("not run: {other:?}"),
    }
}

#[test]
fn the_default_settings_build_the_default_loop_and_capture() {
    let settings = WatchSettings::default();
    settings.validate().unwrap();
    let watch = settings.watch_config();
    let default = WatchConfig::default();
    assert_eq!(watch.interval, default.interval);
    assert_eq!(watch.tracker, default.tracker);
    let built = settings.capture_settings(ProcRoot::default(), &[]);
    let plain = CaptureSettings::new(ProcRoot::default());
    assert_eq!(built.probe_timeout, plain.probe_timeout);
    assert_eq!(built.resample_every, plain.resample_every);
    assert_eq!(built.nvidia_smi, plain.nvidia_smi);
    assert_eq!(built.kill_on_wedge, plain.kill_on_wedge);
}

#[test]
fn settings_that_cannot_work_are_refused_by_name() {
    for (change, needle) in [
        (
            (|s: &mut WatchSettings| s.interval = Duration::ZERO) as fn(&mut WatchSettings),
            "interval",
        ),
        (|s| s.samples = 0, "samples"),
        (|s| s.out = PathBuf::new(), "out: empty path"),
        (|s| s.extra_probe = vec![PathBuf::new()], "extra_probe"),
    ] {
        let mut settings = WatchSettings::default();
        change(&mut settings);
        let err = settings.validate().unwrap_err();
        assert!(err.contains(needle), "{err}");
    }
}

#[test]
fn the_help_defaults_are_the_constants() {
    let defaults: std::collections::HashMap<_, _> = flag_defaults().into_iter().collect();
    assert_eq!(defaults["threshold"], "30s");
    assert_eq!(defaults["interval"], "1s");
    assert_eq!(
        crate::duration::parse_duration(&defaults["rate-limit"]).unwrap(),
        defaults::RATE_LIMIT
    );
    // Switches say what they do; they show no default.
    assert!(!defaults.contains_key("gpu") && !defaults.contains_key("nvidia-smi"));
}

#[test]
fn a_full_config_parses() {
    let s = from_text(
        r#"{"out": "/srv/inc", "match_comm": ["^python", "train"], "match_cgroup": ["libpod-"],
            "gpu": true, "ring_dir": "/run/rings", "interval": "500ms", "threshold": 20,
            "samples": 4, "rate_limit": "5m", "gpu_rescan": 2.5, "probe_timeout": "3s",
            "nvidia_smi": false, "max_targets": 100, "log_format": "json",
            "metrics_listen": "127.0.0.1:9464"}"#,
        &Options::default(),
    )
    .unwrap();
    assert_eq!(s.watch.out, PathBuf::from("/srv/inc"));
    assert_eq!(s.agent.match_comm, vec!["^python", "train"]);
    assert_eq!(s.agent.ring_dir, vec![PathBuf::from("/run/rings")]);
    assert_eq!(s.watch.interval, Duration::from_millis(500));
    assert_eq!(s.watch.threshold, Duration::from_secs(20));
    assert_eq!(s.agent.rate_limit, Duration::from_secs(300));
    assert_eq!(s.agent.gpu_rescan, Duration::from_millis(2500));
    assert!(!s.watch.nvidia_smi);
    assert_eq!(s.agent.log_format, LogFormat::Json);
    assert_eq!(
        s.agent.metrics_listen,
        Some("127.0.0.1:9464".parse().unwrap())
    );
}

#[test]
fn the_example_config_is_valid() {
    let text = include_str!("../../../systemd/agent.example.json");
    let s = from_text(text, &Options::default()).unwrap();
    assert!(!s.agent.match_comm.is_empty() || s.agent.gpu || !s.agent.ring_dir.is_empty());
}

#[test]
fn command_line_wins() {
    let cli = flags(&[
        "--match-comm",
        "^worker$",
        "--interval",
        "250ms",
        "--out",
        "/tmp/x",
        "--no-nvidia-smi",
    ]);
    let s = from_text(
        r#"{"match_comm": ["python"], "interval": 2, "gpu": true}"#,
        &cli,
    )
    .unwrap();
    assert_eq!(s.agent.match_comm, vec!["^worker$"]);
    assert_eq!(s.watch.interval, Duration::from_millis(250));
    assert_eq!(s.watch.out, PathBuf::from("/tmp/x"));
    assert!(s.agent.gpu && !s.watch.nvidia_smi);
    // Defaults.
    assert_eq!(s.watch.threshold, Duration::from_secs(30));
    assert_eq!(s.watch.samples, 3);
}

#[test]
fn bad_configs_are_refused_with_a_reason() {
    let none = Options::default();
    for (text, needle) in [
        (r#"{"match_comm": ["("]}"#, "match_comm"),
        (
            r#"{"match_comm": ["x"], "intervall": 1}"#,
            "unknown field `intervall`",
        ),
        (
            r#"{"gpu": true, "ring_dirs": ["/x"]}"#,
            "unknown field `ring_dirs`",
        ),
        (r#"{}"#, "nothing to watch"),
        (r#"{"gpu": true, "interval": 0}"#, "interval"),
        (r#"{"gpu": true, "threshold": "soon"}"#, "threshold"),
        (r#"{"match_cgroup": [""]}"#, "empty substring"),
        (r#"{"gpu": "yes"}"#, "gpu: invalid type"),
        ("not json", "expected"),
        ("[1, 2]", "expected a JSON object"),
        (r#"{"gpu": true, "samples": 0}"#, "samples"),
        (r#"{"gpu": true, "samples": -1}"#, "samples"),
        (r#"{"gpu": true, "out": ""}"#, "out: empty path"),
        (r#"{"gpu": true, "ring_dir": ""}"#, "ring_dir: empty path"),
        (
            r#"{"gpu": true, "ring_dir": ["/run/rings", ""]}"#,
            "ring_dir: empty path",
        ),
        (
            r#"{"match_comm": [""]}"#,
            "empty pattern would match every process",
        ),
        (
            r#"{"match_comm": ["^python", ".*"]}"#,
            "matches the empty string",
        ),
        (r#"{"match_comm": ["x?"]}"#, "matches the empty string"),
        (r#"{"match_comm": ["^"]}"#, "matches the empty string"),
        (r#"{"match_comm": ["(|a)"]}"#, "matches the empty string"),
        (
            r#"{"gpu": true, "on_demand_rate_limit": "often"}"#,
            "on_demand_rate_limit",
        ),
        (
            r#"{"gpu": true, "metrics_listen": "localhost"}"#,
            "metrics_listen: invalid socket address syntax (give IP:PORT",
        ),
        (r#"{"gpu": true, "log_format": "xml"}"#, "log_format"),
    ] {
        let err = from_text(text, &none).unwrap_err();
        assert!(err.contains(needle), "{text}: {err}");
    }
}

#[test]
fn empty_paths_on_the_command_line_are_refused_too() {
    // clap already refuses `--out ''`; whatever builds options by other means is refused at resolution.
    let file = r#"{"gpu": true, "out": "/srv/inc"}"#;
    let mut cli = Options::default();
    cli.watch.out = Some(PathBuf::new());
    assert!(from_text(file, &cli)
        .unwrap_err()
        .contains("out: empty path"));
    let mut cli = Options::default();
    cli.agent.ring_dir = Some(vec![PathBuf::from("/run/rings"), PathBuf::new()]);
    assert!(from_text(file, &cli)
        .unwrap_err()
        .contains("ring_dir: empty path"));
    assert!(from_text(file, &flags(&["--match-comm", "a*"]))
        .unwrap_err()
        .contains("matches the empty string"));
}

#[test]
fn a_config_that_is_no_regular_file_or_too_large_is_refused_without_blocking() {
    let none = Options::default();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("agent.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // An ordinary open would block here forever (no writer).
    let err = Settings::load(Some(&fifo), &none).unwrap_err();
    assert!(err.contains("not a regular file"), "{err}");
    let big = dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; MAX_CONFIG_BYTES as usize + 1]).unwrap();
    let err = Settings::load(Some(&big), &none).unwrap_err();
    assert!(err.contains("larger than"), "{err}");
    // A symlink to a good config (how ConfigMaps are mounted) is followed.
    let good = dir.path().join("real.json");
    std::fs::write(&good, r#"{"gpu": true}"#).unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    assert!(Settings::load(Some(&link), &none).unwrap().agent.gpu);
    let err = Settings::load(Some(&dir.path().join("missing.json")), &none).unwrap_err();
    assert!(err.contains("missing.json"), "{err}");
}

#[test]
fn patterns_that_need_a_character_are_accepted() {
    for pattern in ["^python", "train", "^a*b$", "x+", "^(py|tr)", "[.]"] {
        let text = format!(r#"{{"match_comm": ["{pattern}"]}}"#);
        assert!(from_text(&text, &Options::default()).is_ok(), "{pattern}");
    }
}

#[test]
fn on_demand_rate_limit_defaults_to_a_minute_and_can_be_set() {
    let s = from_text(r#"{"gpu": true}"#, &Options::default()).unwrap();
    assert_eq!(s.agent.on_demand_rate_limit, Duration::from_secs(60));
    let s = from_text(
        r#"{"gpu": true, "on_demand_rate_limit": "5m"}"#,
        &Options::default(),
    )
    .unwrap();
    assert_eq!(s.agent.on_demand_rate_limit, Duration::from_secs(300));
    let s = from_text(
        r#"{"gpu": true, "on_demand_rate_limit": 30}"#,
        &flags(&["--on-demand-rate-limit", "0"]),
    )
    .unwrap();
    assert_eq!(s.agent.on_demand_rate_limit, Duration::ZERO);
}

#[test]
fn reload_reports_what_needs_a_restart() {
    let a = from_text(r#"{"gpu": true}"#, &Options::default()).unwrap();
    let b = from_text(
        r#"{"gpu": true, "out": "/elsewhere", "interval": 3}"#,
        &Options::default(),
    )
    .unwrap();
    assert_eq!(a.needs_restart(&b), vec!["out"]);
    let kept = a.reloaded(b);
    assert_eq!(kept.watch.out, a.watch.out);
    assert_eq!(kept.watch.interval, Duration::from_secs(3));
}

/// `--check-config` prints a config file: every key it prints is one the file takes, and reading it
/// back gives the same settings, whatever was set and from where.
#[test]
fn the_printed_settings_are_a_config_that_means_the_same() {
    for (file, cli) in [
        (r#"{"gpu": true}"#, &[][..]),
        (
            r#"{"match_comm": ["^python"], "ring_dir": "/run/r", "resample_every": "45s",
                "metrics_listen": "[::1]:9464", "textfile_dir": "/var/lib/tf", "nvidia_smi": false,
                "log_format": "journal", "interval": 0.25}"#,
            &[
                "--threshold",
                "7s",
                "--max-targets",
                "9",
                "--extra-probe",
                "/dev/null",
            ][..],
        ),
    ] {
        let settings = from_text(file, &flags(cli)).unwrap();
        let printed = serde_json::to_string_pretty(&settings.to_config()).unwrap();
        let again = from_text(&printed, &Options::default()).unwrap();
        assert_eq!(again, settings, "{printed}");
        let keys: Vec<String> = settings
            .to_config()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys.len(), config_keys().count(), "{keys:?}");
    }
}

/// A value for `key` other than its default, as (flag arguments, config JSON value), found from the
/// setting's own definition so that a setting added later is covered without touching this test.
fn a_changed_value(key: &str, default: &serde_json::Value) -> (Vec<String>, serde_json::Value) {
    let flag = format!("--{}", key.replace('_', "-"));
    let command = crate::cli::command();
    let run = command.find_subcommand("run").unwrap();
    let arg = run
        .get_arguments()
        .find(|a| a.get_id() == key)
        .unwrap_or_else(|| panic!("`run` has no flag for the shared setting {key}"));
    let switch = arg.get_num_args().is_some_and(|n| n.max_values() == 0);
    if switch {
        let long = format!("--{}", arg.get_long().unwrap());
        // A switch sets the value its default is not.
        return (
            vec![long],
            serde_json::Value::Bool(!default.as_bool().unwrap()),
        );
    }
    match default {
        serde_json::Value::Number(n) if n.is_u64() => {
            let v = n.as_u64().unwrap() + 2;
            (vec![flag, v.to_string()], v.into())
        }
        serde_json::Value::Number(n) => {
            let v = n.as_f64().unwrap() + 1.5;
            (vec![flag, v.to_string()], v.into())
        }
        serde_json::Value::String(s) => {
            let v = format!("{s}/changed");
            (vec![flag, v.clone()], v.into())
        }
        serde_json::Value::Array(_) => (
            vec![flag, "/changed".into()],
            serde_json::json!(["/changed"]),
        ),
        other => panic!("{key}: no changed value for {other}"),
    }
}

/// Every setting `run` and `agent` share reaches both from its flag, and the agent from its config key,
/// with the same meaning. Iterates the definitions: a new shared setting is tested by being defined.
#[test]
fn every_shared_setting_reaches_run_and_agent_from_flag_and_from_config() {
    let defaults = serde_json::to_value(WatchOptions::from(&WatchSettings::default())).unwrap();
    for &key in WatchOptions::KEYS {
        if <WatchOptions as clap::Args>::augment_args(clap::Command::new("probe"))
            .get_arguments()
            .all(|a| a.get_id() != key)
        {
            continue; // config only (resample_every): covered below through the agent's file
        }
        let (argv, expected) = a_changed_value(key, &defaults[key]);
        assert_ne!(expected, defaults[key], "{key}");
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let from_run =
            serde_json::to_value(WatchOptions::from(&run_settings(&argv).unwrap())).unwrap();
        assert_eq!(from_run[key], expected, "run {argv:?}");
        let mut agent_argv = vec!["--gpu"];
        agent_argv.extend(&argv);
        let from_flag = from_text("{}", &flags(&agent_argv)).unwrap().to_config();
        assert_eq!(from_flag[key], expected, "agent {argv:?}");
        let file = serde_json::json!({ "gpu": true, key: expected.clone() }).to_string();
        let from_file = from_text(&file, &Options::default()).unwrap().to_config();
        assert_eq!(from_file[key], expected, "agent config {file}");
    }
    let from_file = from_text(
        r#"{"gpu": true, "resample_every": 45}"#,
        &Options::default(),
    )
    .unwrap();
    assert_eq!(from_file.watch.resample_every, Duration::from_secs(45));
}

#[test]
fn no_config_key_is_defined_twice() {
    let mut keys: Vec<&str> = config_keys().collect();
    let all = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), all);
}
