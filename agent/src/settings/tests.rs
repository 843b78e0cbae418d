use super::*;
use crate::watch::{CaptureSettings, WatchConfig};
use capture::ProcRoot;

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
    assert_eq!(built.watch, plain.watch);
    assert_eq!(built.watch, settings);
    assert_eq!(built.kill_on_wedge, plain.kill_on_wedge);
    assert_eq!(built.pods_log_dir, PathBuf::from(defaults::PODS_LOG_DIR));
    assert_eq!(built.node_root, PathBuf::from(defaults::NODE_ROOT));
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

/// Every definition of both groups, in definition order.
fn definitions() -> impl Iterator<Item = &'static Definition> {
    WatchOptions::DEFINITIONS
        .iter()
        .chain(AgentOptions::DEFINITIONS)
}

fn is_shared(key: &str) -> bool {
    WatchOptions::KEYS.contains(&key)
}

/// The agent's flag for `key` (None: config only).
fn agent_flag(key: &str) -> Option<clap::Arg> {
    crate::cli::command()
        .find_subcommand("agent")
        .unwrap()
        .get_arguments()
        .find(|a| a.get_id() == key)
        .cloned()
}

/// A test hook: a flag hidden from `--help`, left out of the docs table and the example config.
fn is_hidden(key: &str) -> bool {
    agent_flag(key).is_some_and(|a| a.is_hide_set())
}

/// Every setting at its default, as the config file writes it (a setting without a default: null).
fn default_config() -> serde_json::Value {
    Settings {
        watch: WatchSettings::default(),
        agent: AgentOptions::default().resolve(),
    }
    .to_config()
}

/// A value for a setting other than its default, as (flag arguments, none when it is config only; config
/// JSON value), found from the setting's own definition (its flag, its type) so that a setting added later is
/// covered without touching this test. A setting without a default gets a value of its type.
fn a_changed_value(
    def: &Definition,
    default: &serde_json::Value,
) -> (Vec<String>, serde_json::Value) {
    let arg = agent_flag(def.key);
    let flag = arg.as_ref().map(|a| format!("--{}", a.get_long().unwrap()));
    // The flag and its value; nothing for a config-only setting.
    let with_flag = |value: &str| match &flag {
        Some(flag) => vec![flag.clone(), value.to_string()],
        None => Vec::new(),
    };
    if let Some(arg) = &arg {
        if arg.get_num_args().is_some_and(|n| n.max_values() == 0) {
            // A switch sets the value its default is not.
            return (
                flag.into_iter().collect(),
                serde_json::Value::Bool(!default.as_bool().unwrap()),
            );
        }
        let names: Vec<String> = arg
            .get_possible_values()
            .iter()
            .map(|v| v.get_name().to_string())
            .collect();
        if let Some(other) = names.iter().find(|n| serde_json::json!(n) != *default) {
            return (with_flag(other), serde_json::json!(other));
        }
    }
    match default {
        serde_json::Value::Number(n) if n.is_u64() => {
            let v = n.as_u64().unwrap() + 2;
            (with_flag(&v.to_string()), v.into())
        }
        serde_json::Value::Number(n) => {
            let v = n.as_f64().unwrap() + 1.5;
            (with_flag(&v.to_string()), v.into())
        }
        serde_json::Value::String(s) => {
            let v = format!("{s}/changed");
            (with_flag(&v), v.into())
        }
        serde_json::Value::Array(_) => (with_flag("/changed"), serde_json::json!(["/changed"])),
        serde_json::Value::Null => {
            let v = match (def.kind)().as_str() {
                "path" => "/changed",
                "`IP:PORT`" => "127.0.0.1:9464",
                kind => panic!("{}: no value of type {kind} to set it to", def.key),
            };
            (with_flag(v), v.into())
        }
        other => panic!("{}: no changed value for {other}", def.key),
    }
}

/// `expected` (a setting's config value) is what `settings` resolved `key` to, and what reaches the places
/// that use it: the capture path for every shared setting (it carries them whole), and the parts the
/// daemon builds for the agent's own.
fn assert_arrives(key: &str, settings: &Settings, expected: &serde_json::Value, how: &str) {
    let json = |value: serde_json::Result<serde_json::Value>| value.unwrap();
    assert_eq!(
        settings.to_config()[key],
        *expected,
        "{key} from {how}: resolved"
    );
    let capture = settings.capture_settings(ProcRoot::default());
    if is_shared(key) {
        let reached = json(serde_json::to_value(WatchOptions::from(&capture.watch)));
        assert_eq!(reached[key], *expected, "{key} from {how}: capture path");
    }
    let watch_loop = settings.watch.watch_config();
    let selection = settings.selection();
    let sources = settings.source_settings();
    let used = match key {
        "interval" => json(serde_json::to_value(watch_loop.interval.as_secs_f64())),
        "threshold" => json(serde_json::to_value(
            watch_loop.tracker.threshold.as_secs_f64(),
        )),
        "samples" => json(serde_json::to_value(watch_loop.tracker.samples)),
        "match_cgroup" => json(serde_json::to_value(&selection.cgroup)),
        "match_comm" => json(serde_json::to_value(
            selection
                .comm
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>(),
        )),
        "gpu" => json(serde_json::to_value(selection.gpu)),
        "ring_dir" => {
            assert_eq!(capture.ring_dirs, selection.ring_dirs, "{key} from {how}");
            json(serde_json::to_value(&selection.ring_dirs))
        }
        "taskstats" => json(serde_json::to_value(watch_loop.scan.taskstats)),
        "task_iter" => json(serde_json::to_value(watch_loop.scan.task_iter)),
        "proc_events" => json(serde_json::to_value(sources.proc_events)),
        "gpu_rescan" => json(serde_json::to_value(sources.gpu_rescan.as_secs_f64())),
        "max_targets" => json(serde_json::to_value(sources.max_targets)),
        "pods_log_dir" => json(serde_json::to_value(&capture.pods_log_dir)),
        "node_root" => json(serde_json::to_value(&capture.node_root)),
        _ => return,
    };
    assert_eq!(used, *expected, "{key} from {how}: where it is used");
}

/// Every setting, with or without a default, shared or the agent's own, set to a value other than its
/// default from its flag (`run`'s and the agent's) and from its config key, resolves to that value and reaches
/// where it is used. Iterates the definitions: a new setting is tested by being defined.
#[test]
fn every_setting_reaches_where_it_is_used_from_flag_and_from_config() {
    let defaults = default_config();
    let mut tested = 0;
    for def in definitions() {
        let key = def.key;
        let (argv, expected) = a_changed_value(def, &defaults[key]);
        assert_ne!(expected, defaults[key], "{key}");
        // Something to watch, unless the setting is the selector itself.
        let mut file = serde_json::json!({ key: expected.clone() });
        if key != "gpu" {
            file["gpu"] = true.into();
        }
        let from_file = from_text(&file.to_string(), &Options::default())
            .unwrap_or_else(|e| panic!("{key}: config {file}: {e}"));
        assert_arrives(key, &from_file, &expected, "config");
        tested += 1;
        if argv.is_empty() {
            continue; // config only (resample_every)
        }
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut agent_argv = if key == "gpu" { vec![] } else { vec!["--gpu"] };
        agent_argv.extend(&argv);
        let from_flag = from_text("{}", &flags(&agent_argv))
            .unwrap_or_else(|e| panic!("{key}: agent {agent_argv:?}: {e}"));
        assert_arrives(key, &from_flag, &expected, "agent flag");
        if is_shared(key) {
            let run = run_settings(&argv).unwrap();
            let capture = run.capture_settings(ProcRoot::default(), &[]);
            let reached = serde_json::to_value(WatchOptions::from(&capture.watch)).unwrap();
            assert_eq!(reached[key], expected, "run {argv:?}: capture path");
        }
    }
    assert_eq!(tested, config_keys().count());
}

/// What the daemon's reload (`daemon::reload`) re-applies from the new settings: the selection, the source
/// settings, the watch loop's config, the ring directories, the two rate limits, the textfile directory and the
/// log format, as one text to compare.
fn reapplied(s: &Settings) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
        s.selection(),
        s.source_settings(),
        s.watch.watch_config(),
        s.agent.ring_dir,
        s.agent.rate_limit,
        s.agent.on_demand_rate_limit,
        s.agent.textfile_dir,
        s.agent.log_format
    )
}

/// The reload's lists are the definitions' `=> Restart`: a reload that changes such a setting names it
/// and keeps the running value; one that changes any other setting applies it, to something the daemon's
/// reload re-applies.
#[test]
fn a_reload_keeps_exactly_the_settings_defined_to_need_a_restart() {
    let defaults = default_config();
    let base = serde_json::json!({ "match_cgroup": ["base"] });
    let old = from_text(&base.to_string(), &Options::default()).unwrap();
    let mut restart = 0;
    for def in definitions() {
        let (_, changed) = a_changed_value(def, &defaults[def.key]);
        let mut file = base.clone();
        file[def.key] = changed;
        let new = from_text(&file.to_string(), &Options::default()).unwrap();
        let named = old.needs_restart(&new);
        let kept = old.reloaded(new.clone());
        match def.reload {
            Reload::Restart => {
                restart += 1;
                assert_eq!(named, vec![def.key]);
                assert_eq!(kept, old, "{}", def.key);
            }
            Reload::Live => {
                assert!(named.is_empty(), "{}: {named:?}", def.key);
                assert_eq!(kept, new, "{}", def.key);
                // A setting declared live must reach something the reload applies; one that only reaches what
                // is built once (the capture path) would silently keep its old value.
                assert_ne!(
                    reapplied(&old),
                    reapplied(&new),
                    "{} is declared `=> Live` but nothing the reload re-applies carries it: declare it \
                     `=> Restart`, or apply it in daemon::reload (and add it to `reapplied`)",
                    def.key
                );
            }
        }
    }
    assert!(restart > 0);
}

/// A setting's default as the docs table shows it.
fn default_text(def: &Definition, defaults: &serde_json::Value) -> String {
    if !def.has_default {
        return "off".into();
    }
    let shown: std::collections::HashMap<_, _> = WatchOptions::help_defaults()
        .into_iter()
        .chain(AgentOptions::help_defaults())
        .collect();
    match (shown.get(def.key), &defaults[def.key]) {
        (Some(text), _) => format!("`{text}`"),
        (None, serde_json::Value::String(s)) => format!("`{s}`"),
        (None, value) => format!("`{value}`"),
    }
}

/// The docs' key table (docs/agent.md), from the definitions.
fn settings_table() -> String {
    let defaults = default_config();
    let mut table = String::from(
        "| key | flag | type | default | reload | meaning |\n|---|---|---|---|---|---|\n",
    );
    for def in definitions().filter(|d| !is_hidden(d.key)) {
        let flag = match agent_flag(def.key) {
            Some(arg) if is_shared(def.key) => {
                format!("`--{}` (also `run`)", arg.get_long().unwrap())
            }
            Some(arg) => format!("`--{}`", arg.get_long().unwrap()),
            None => "config only".into(),
        };
        let meaning = def
            .help
            .iter()
            .map(|line| line.trim())
            .collect::<Vec<_>>()
            .join(" ")
            .replace('|', "\\|");
        table.push_str(&format!(
            "| `{}` | {flag} | {} | {} | {} | {meaning} |\n",
            def.key,
            (def.kind)(),
            default_text(def, &defaults),
            def.reload.word(),
        ));
    }
    table
}

const TABLE_BEGIN: &str = "<!-- settings table: generated from agent/src/settings/mod.rs by settings::tests::the_docs_table_is_the_definitions; regenerate with UPDATE_SETTINGS_DOCS=1 cargo test -p wedge-capture --lib settings -->\n";
const TABLE_END: &str = "<!-- end of the generated settings table -->\n";

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// `path` holds `generated`, or (UPDATE_SETTINGS_DOCS=1) is rewritten to.
fn check_generated(path: &str, current: &str, generated: &str) {
    if current == generated {
        return;
    }
    if std::env::var_os("UPDATE_SETTINGS_DOCS").is_some() {
        std::fs::write(repo_file(path), generated).unwrap();
        return;
    }
    panic!(
        "{path} does not match the settings' definitions; regenerate it with \
         UPDATE_SETTINGS_DOCS=1 cargo test -p wedge-capture --lib settings\n--- now\n{current}\n--- generated\n{generated}"
    );
}

/// docs/agent.md's key table is the definitions': every key (but the hidden test hooks), its flag, type,
/// default, reload behaviour and help.
#[test]
fn the_docs_table_is_the_definitions() {
    let docs = std::fs::read_to_string(repo_file("docs/agent.md")).unwrap();
    let begin = docs
        .find(TABLE_BEGIN)
        .expect("docs/agent.md: the table's begin marker")
        + TABLE_BEGIN.len();
    let end = begin
        + docs[begin..]
            .find(TABLE_END)
            .expect("docs/agent.md: the table's end marker");
    let generated = format!("{}{}{}", &docs[..begin], settings_table(), &docs[end..]);
    check_generated("docs/agent.md", &docs, &generated);
}

/// A setting that is off unless given (no default, `false`, `[]`): the example may show it turned on.
fn off_by_default(def: &Definition, defaults: &serde_json::Value) -> bool {
    !def.has_default
        || defaults[def.key] == serde_json::json!(false)
        || defaults[def.key] == serde_json::json!([])
}

const EXAMPLE_CONFIG: &str = "systemd/agent.example.json";

/// The example config: the keys it has, in definition order, every setting missing from it added at its
/// default (null: off), the hidden test hooks left out.
fn example_config(current: &serde_json::Map<String, serde_json::Value>) -> String {
    let defaults = default_config();
    let lines: Vec<String> = definitions()
        .filter(|d| !is_hidden(d.key))
        .map(|def| {
            let value = current.get(def.key).cloned().unwrap_or_else(|| {
                match ((def.kind)().as_str(), default_text(def, &defaults)) {
                    ("duration", text) if def.has_default => text.trim_matches('`').into(),
                    _ => defaults[def.key].clone(),
                }
            });
            format!("  {}: {}", serde_json::json!(def.key), value)
        })
        .collect();
    format!("{{\n{}\n}}\n", lines.join(",\n"))
}

/// systemd/agent.example.json is valid, every key in it is a setting, every setting (but the hidden test
/// hooks) is in it, at its default unless it is off by default (then the example may turn it on).
#[test]
fn the_example_config_has_every_setting_at_its_default() {
    let text = std::fs::read_to_string(repo_file(EXAMPLE_CONFIG)).unwrap();
    let settings = from_text(&text, &Options::default()).unwrap();
    assert!(
        !settings.agent.match_comm.is_empty()
            || settings.agent.gpu
            || !settings.agent.ring_dir.is_empty()
    );
    let current: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
    check_generated(EXAMPLE_CONFIG, &text, &example_config(&current));
    // What is checked below is the file as it is now (rewritten above under UPDATE_SETTINGS_DOCS=1).
    let text = std::fs::read_to_string(repo_file(EXAMPLE_CONFIG)).unwrap();
    let current: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
    let defaults = default_config();
    let printed = settings.to_config();
    for def in definitions() {
        if is_hidden(def.key) {
            assert!(
                !current.contains_key(def.key),
                "{}: a test hook in the example",
                def.key
            );
            continue;
        }
        assert!(
            current.contains_key(def.key),
            "{} is missing from the example",
            def.key
        );
        if !off_by_default(def, &defaults) {
            assert_eq!(
                printed[def.key], defaults[def.key],
                "{}: not its default",
                def.key
            );
        }
    }
}

#[test]
fn no_config_key_is_defined_twice() {
    let mut keys: Vec<&str> = config_keys().collect();
    let all = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), all);
}
