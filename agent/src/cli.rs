//! The command line, defined once. Each subcommand's flags live in its `cmd::<name>::Args`; the defaults
//! `--help` shows for `run` and `agent` come from [`crate::settings`] ([`command`] adds them), and the exit
//! codes every `--help` ends with from [`crate::exit::CODES`].
//!
//! One grammar for every subcommand: `--format` takes the one [`OutputFormat`] (each subcommand accepts the
//! subset it can print, through [`formats`]; `md` and `--json` stay as hidden old spellings), `--out DIR` is
//! always the incident store (written by `run`, `agent`, `selftest`; read by `report`, `npd-check`,
//! `doctor`), `--output FILE` a file written.

use std::ffi::OsString;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::cmd;
use crate::exit;
use crate::settings;

/// Capture the evidence of a GPU driver wedge while the machine is still wedged.
///
/// A thread stuck in an uninterruptible driver call (state D) cannot be killed or inspected from
/// inside its container. wedge-capture reads it from the host, without ever blocking on it:
/// where the kernel is stuck (/proc wchan, syscall, stack, decoded ioctl) and, through the
/// breadcrumb ring, which driver call the worker made.
#[derive(Debug, Parser)]
#[command(
    name = "wedge-capture",
    version,
    propagate_version = true,
    max_term_width = 110
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One-shot snapshot of every thread of a process, decoded (returns at once).
    Capture(cmd::capture::Args),
    /// Decode an ioctl request word (`_IOC` fields, NVIDIA RM/UVM and Linux names).
    DecodeIoctl(cmd::decode_ioctl::Args),
    /// Where each task of a pasted hung-task log, sysrq dump or /proc/<tid>/stack is stuck (the live classifier).
    Explain(cmd::explain::Args),
    /// Read breadcrumb ring files.
    #[command(subcommand)]
    Ring(cmd::ring::RingCommand),
    /// List, show and bundle incident reports.
    #[command(subcommand)]
    Report(cmd::report::ReportCommand),
    /// Chunked bulk upload of f32 tensors, with a breadcrumb around every driver call.
    Upload(cmd::upload::Args),
    /// Run a command and watch every thread of it and its descendants; capture any wedge.
    Run(cmd::run::Args),
    /// Demonstrate a real capture end to end on a frozen loop-mounted filesystem (the README's main command).
    Selftest(cmd::selftest::Args),
    /// Check privileges, kernel settings and drivers that limit what can be captured, with fixes.
    Doctor(cmd::doctor::Args),
    /// The host daemon: find GPU workers by comm, cgroup, /dev/nvidia* fds or ring files; capture wedges.
    Agent(cmd::agent::Args),
    /// node-problem-detector plugin: exit 1 a wedge is going on, 0 none, 2 unknown (see --help).
    NpdCheck(cmd::npd_check::Args),
    /// Helpers run by selftest, tests and benchmarks (not a stable interface).
    #[command(subcommand, hide = true)]
    Internal(cmd::selftest::InternalCommand),
}

/// What a subcommand prints: the one value set of every `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Plain text for a terminal.
    Text,
    /// Markdown to paste into a bug thread.
    // `md`: the old spelling of `report show --format`.
    #[value(alias = "md")]
    Markdown,
    /// JSON for programs.
    Json,
}

/// The `--format` value parser of a subcommand that prints `allowed`: the one [`OutputFormat`], its help and
/// errors listing only what this subcommand can print.
pub fn formats(allowed: &'static [OutputFormat]) -> impl TypedValueParser<Value = OutputFormat> {
    let values: Vec<PossibleValue> = allowed
        .iter()
        .filter_map(ValueEnum::to_possible_value)
        .collect();
    PossibleValuesParser::new(values).map(|name: String| {
        // What PossibleValuesParser accepted (a name or an alias) is one of `allowed`.
        OutputFormat::from_str(&name, false).unwrap_or(OutputFormat::Text)
    })
}

/// The format chosen: `--json` (the old spelling, hidden, conflicting with `--format`) or `--format`.
pub fn chosen(format: OutputFormat, json: bool) -> OutputFormat {
    if json {
        OutputFormat::Json
    } else {
        format
    }
}

/// Subcommands whose flags default to [`settings`] constants (they are `Option`s: "not given" must stay
/// visible to the resolution, so clap cannot fill the default in itself).
const SETTINGS_COMMANDS: &[&str] = &["run", "agent"];

/// The clap command, with each settings default appended to its flag's help and the exit codes to the end
/// of each subcommand's help.
pub fn command() -> clap::Command {
    let defaults = settings::flag_defaults();
    let mut command = with_exit_codes(Cli::command(), "");
    for name in SETTINGS_COMMANDS {
        command = command.mut_subcommand(name, |mut sub| {
            for (flag, value) in &defaults {
                let Some(id) = sub
                    .get_arguments()
                    .find(|arg| arg.get_long() == Some(flag.as_str()))
                    .map(|arg| arg.get_id().clone())
                else {
                    continue;
                };
                sub = sub.mut_arg(id, |arg| {
                    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                    let long = arg.get_long_help().map(|h| h.to_string());
                    let arg = arg.help(format!("{help} [default: {value}]"));
                    match long {
                        Some(long) => arg.long_help(format!("{long} [default: {value}]")),
                        None => arg,
                    }
                });
            }
            sub
        });
    }
    command
}

/// `command` with [`exit::help`] of each visible leaf subcommand (`path`: its name under `wedge-capture`) at
/// the end of its help, after its examples.
fn with_exit_codes(mut command: clap::Command, path: &str) -> clap::Command {
    let names: Vec<String> = command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| sub.get_name().to_string())
        .collect();
    for name in &names {
        let sub_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path} {name}")
        };
        command = command.mut_subcommand(name, |sub| with_exit_codes(sub, &sub_path));
    }
    let codes = if names.is_empty() {
        match exit::help(path) {
            Some(codes) => codes,
            None => return command,
        }
    } else {
        exit::GROUP_HELP.to_string()
    };
    let append = |before: Option<&clap::builder::StyledStr>| match before {
        Some(text) => format!("{}\n\n{codes}", text.to_string().trim_end()),
        None => codes.clone(),
    };
    let after = append(command.get_after_help());
    let after_long = command.get_after_long_help().map(|long| append(Some(long)));
    command = command.after_help(after);
    if let Some(long) = after_long {
        command = command.after_long_help(long);
    }
    command
}

/// How errors reach stderr: `wedge-capture: error: …`, or, for an agent that logs JSON (`--log-format json`,
/// or `"log_format": "json"` in its --config file), one JSON log line from the very first, a usage error
/// included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorStyle {
    Plain,
    Json,
}

impl ErrorStyle {
    /// From the raw arguments, before they are parsed (a usage error must come out in the same form).
    pub fn of_args(argv: &[OsString]) -> ErrorStyle {
        let args: Vec<&str> = argv.iter().skip(1).filter_map(|a| a.to_str()).collect();
        if args.first() != Some(&"agent") {
            return ErrorStyle::Plain;
        }
        let value_of = |flag: &str| {
            let mut found = None;
            for (i, arg) in args.iter().enumerate() {
                if *arg == "--" {
                    break;
                }
                if *arg == flag {
                    found = args.get(i + 1).copied();
                } else if let Some(value) = arg.strip_prefix(flag).and_then(|v| v.strip_prefix('='))
                {
                    found = Some(value);
                }
            }
            found
        };
        let json = match value_of("--log-format") {
            Some(format) => format == "json",
            None => value_of("--config").is_some_and(config_logs_json),
        };
        if json {
            ErrorStyle::Json
        } else {
            ErrorStyle::Plain
        }
    }

    /// Print `message`, the error that ends the process with `code`.
    pub fn print(self, message: &str, code: exit::ExitCode) {
        match self {
            ErrorStyle::Plain => eprintln!("wedge-capture: error: {message}"),
            ErrorStyle::Json => crate::daemon::log::Logger::new(settings::LogFormat::Json).event(
                crate::daemon::log::Level::Error,
                message,
                serde_json::json!({ "exit_code": code.0 }),
            ),
        }
    }
}

/// Whether a config file asks for JSON logs (`"log_format": "json"`); an unreadable or invalid one does not
/// (the agent then refuses it, in plain words).
fn config_logs_json(path: &str) -> bool {
    // Read as the agent reads it: bounded, and never blocking on a FIFO put in its place.
    settings::read_config(std::path::Path::new(path)).is_ok_and(|bytes| {
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .is_ok_and(|config| config["log_format"] == "json")
    })
}

/// Parse the process's arguments (exit with clap's message and code on a usage error).
pub fn parse() -> Cli {
    parse_from(std::env::args_os().collect())
}

/// Parse `argv`; a usage error exits with clap's code, its message as [`ErrorStyle::of_args`] says.
pub fn parse_from(argv: Vec<OsString>) -> Cli {
    let style = ErrorStyle::of_args(&argv);
    let parsed = command()
        .try_get_matches_from(argv)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    match parsed {
        Ok(cli) => cli,
        Err(err) if style == ErrorStyle::Json && err.use_stderr() => {
            // clap's first paragraph says what is wrong; the usage lines after it are for a terminal.
            let text = err.to_string();
            let first = text.split("\n\n").next().unwrap_or_default();
            let message = first.trim().trim_start_matches("error: ");
            let code = exit::ExitCode(u8::try_from(err.exit_code()).unwrap_or(2));
            style.print(message, code);
            std::process::exit(err.exit_code());
        }
        Err(err) => err.exit(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_shows_the_settings_defaults() {
        for (name, flags) in [
            (
                "run",
                &["threshold", "interval", "samples", "probe-timeout", "out"][..],
            ),
            (
                "agent",
                &[
                    "threshold",
                    "rate-limit",
                    "gpu-rescan",
                    "max-targets",
                    "out",
                ][..],
            ),
        ] {
            let mut command = command();
            let help = command
                .find_subcommand_mut(name)
                .unwrap()
                .render_help()
                .to_string();
            for flag in flags {
                let line = help
                    .lines()
                    .skip_while(|l| !l.contains(&format!("--{flag} ")))
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ");
                assert!(line.contains("[default: "), "{name} --{flag}: {line}");
            }
            assert!(help.contains("[default: 30s]"), "{name}: {help}");
        }
    }

    #[test]
    fn markdown_has_the_same_names_on_capture_and_report_show() {
        for name in ["md", "markdown"] {
            let cli = Cli::try_parse_from([
                "wedge-capture",
                "report",
                "show",
                "latest",
                "--format",
                name,
            ])
            .unwrap();
            let Command::Report(cmd::report::ReportCommand::Show(args)) = cli.command else {
                panic!("not report show");
            };
            assert_eq!(args.format, OutputFormat::Markdown, "{name}");
            let cli =
                Cli::try_parse_from(["wedge-capture", "capture", "--pid", "1", "--format", name])
                    .unwrap();
            let Command::Capture(args) = cli.command else {
                panic!("not capture");
            };
            assert_eq!(args.format, OutputFormat::Markdown, "{name}");
        }
    }

    #[test]
    fn report_takes_out_and_still_reads_dir() {
        for flag in ["--out", "--dir"] {
            let cli =
                Cli::try_parse_from(["wedge-capture", "report", "list", flag, "/srv/x"]).unwrap();
            let Command::Report(cmd::report::ReportCommand::List(args)) = cli.command else {
                panic!("not report list");
            };
            assert_eq!(args.out.out, std::path::PathBuf::from("/srv/x"), "{flag}");
        }
        let mut command = command();
        let help = command
            .find_subcommand_mut("report")
            .unwrap()
            .find_subcommand_mut("list")
            .unwrap()
            .render_help()
            .to_string();
        assert!(help.contains("--out") && !help.contains("--dir"), "{help}");
    }

    #[test]
    fn run_refuses_unknown_flags_before_the_command_and_passes_the_commands_own() {
        let err =
            Cli::try_parse_from(["wedge-capture", "run", "--bogus", "--", "true"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
        let err = Cli::try_parse_from(["wedge-capture", "run", "--bogus", "true"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
        for argv in [
            &["wedge-capture", "run", "--", "sh", "-c", "x", "--bogus"][..],
            &["wedge-capture", "run", "sh", "-c", "x", "--bogus"][..],
        ] {
            let Command::Run(args) = Cli::try_parse_from(argv).unwrap().command else {
                panic!("not run: {argv:?}");
            };
            assert_eq!(args.command, ["sh", "-c", "x", "--bogus"], "{argv:?}");
        }
        // A command whose name starts with a hyphen needs `--`, as with any program.
        let Command::Run(args) = Cli::try_parse_from(["wedge-capture", "run", "--", "--x"])
            .unwrap()
            .command
        else {
            panic!("not run");
        };
        assert_eq!(args.command, ["--x"]);
    }

    /// Every visible subcommand that takes no subcommand, with its path (`report show`), from a built tree.
    fn leaves(command: &clap::Command, path: &str) -> Vec<(String, clap::Command)> {
        let mut out = Vec::new();
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
            if sub.get_name() == "help" {
                continue;
            }
            let sub_path = format!("{path} {}", sub.get_name()).trim().to_string();
            if sub.has_subcommands() {
                out.extend(leaves(sub, &sub_path));
            } else {
                out.push((sub_path, sub.clone()));
            }
        }
        out
    }

    /// The tree as a user gets it, built (settings propagated), at clap's width without a terminal.
    fn built() -> clap::Command {
        let mut command = command().term_width(DEFAULT_HELP_WIDTH);
        command.build();
        command
    }

    /// clap's help width when stdout is not a terminal (and what `max_term_width` allows a wide one).
    const DEFAULT_HELP_WIDTH: usize = 100;

    #[test]
    fn every_format_flag_takes_the_one_output_format() {
        let one = clap::builder::ValueParser::new(clap::value_parser!(OutputFormat)).type_id();
        let names: Vec<String> = OutputFormat::value_variants()
            .iter()
            .filter_map(|f| f.to_possible_value())
            .map(|v| v.get_name().to_string())
            .collect();
        let mut with_format = 0;
        for (path, sub) in leaves(&built(), "") {
            for arg in sub.get_arguments() {
                let long = arg.get_long().unwrap_or_default();
                // `--json` survives only as the hidden old spelling of `--format json`.
                assert!(
                    long != "json" || arg.is_hide_set(),
                    "{path}: a visible --json"
                );
                if long != "format" {
                    continue;
                }
                with_format += 1;
                assert!(
                    arg.get_value_parser().type_id() == one,
                    "{path} --format: not cli::OutputFormat"
                );
                let values: Vec<String> = arg
                    .get_possible_values()
                    .iter()
                    .map(|v| v.get_name().to_string())
                    .collect();
                assert!(
                    !values.is_empty() && values.iter().all(|v| names.contains(v)),
                    "{path} --format {values:?}"
                );
                // Each value it lists parses, `md` wherever markdown does, and the old `--json` (where kept)
                // means json and cannot be given with --format.
                let argv = |extra: &[&str]| {
                    let mut argv = vec!["wedge-capture".to_string()];
                    argv.extend(path.split(' ').map(str::to_string));
                    argv.extend(required_args(&path).iter().map(|a| a.to_string()));
                    argv.extend(extra.iter().map(|a| a.to_string()));
                    if path == "run" {
                        argv.extend(["--", "true"].map(String::from));
                    }
                    argv
                };
                for value in &values {
                    Cli::try_parse_from(argv(&["--format", value]))
                        .unwrap_or_else(|e| panic!("{path} --format {value}: {e}"));
                }
                if values.iter().any(|v| v == "markdown") {
                    Cli::try_parse_from(argv(&["--format", "md"]))
                        .unwrap_or_else(|e| panic!("{path} --format md: {e}"));
                }
                for refused in names.iter().filter(|n| !values.contains(n)) {
                    let err = Cli::try_parse_from(argv(&["--format", refused])).unwrap_err();
                    assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue, "{path}");
                }
                if sub.get_arguments().any(|a| a.get_long() == Some("json")) {
                    Cli::try_parse_from(argv(&["--json"])).unwrap();
                    let err =
                        Cli::try_parse_from(argv(&["--json", "--format", &values[0]])).unwrap_err();
                    assert_eq!(
                        err.kind(),
                        clap::error::ErrorKind::ArgumentConflict,
                        "{path}"
                    );
                }
            }
        }
        // capture, decode-ioctl, explain, ring dump, report list/show, upload, run, selftest, doctor.
        assert!(with_format >= 10, "{with_format} subcommands with --format");
    }

    /// `--out DIR` is the incident store wherever it appears (written or read), `--output FILE` a file written.
    #[test]
    fn out_is_the_incident_store_and_output_a_file() {
        let mut outs = Vec::new();
        for (path, sub) in leaves(&built(), "") {
            for arg in sub.get_arguments() {
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                let names = arg.get_value_names().unwrap_or_default();
                match arg.get_long() {
                    Some("out") => {
                        assert!(
                            help.starts_with("Incident store") || help.contains("incident store"),
                            "{path}: {help}"
                        );
                        assert_eq!(names, ["DIR"], "{path}");
                        outs.push(path.clone());
                    }
                    Some("output") => assert_eq!(names, ["FILE"], "{path}"),
                    _ => {}
                }
            }
        }
        for writer_or_reader in [
            "run",
            "agent",
            "selftest",
            "report list",
            "report show",
            "report bundle",
            "npd-check",
            "doctor",
        ] {
            assert!(
                outs.iter().any(|p| p == writer_or_reader),
                "{writer_or_reader}: no --out"
            );
        }
    }

    /// Positional arguments a subcommand needs to parse at all.
    fn required_args(path: &str) -> &'static [&'static str] {
        match path {
            "capture" => &["--pid", "1"],
            "decode-ioctl" => &["0x5401"],
            "ring dump" => &["ring.bin"],
            "report show" | "report bundle" => &["latest"],
            _ => &[],
        }
    }

    #[test]
    fn groups_end_with_where_the_exit_codes_are() {
        let mut root = built();
        let mut helps = vec![root.render_long_help().to_string()];
        for group in ["ring", "report"] {
            helps.push(
                root.find_subcommand_mut(group)
                    .unwrap()
                    .render_long_help()
                    .to_string(),
            );
        }
        for help in helps {
            assert!(help.trim_end().ends_with(exit::GROUP_HELP), "{help}");
        }
    }

    #[test]
    fn every_help_ends_with_its_exit_codes() {
        let leaves = leaves(&built(), "");
        for (path, mut sub) in leaves.clone() {
            let codes = exit::help(&path).unwrap_or_else(|| panic!("{path}: no exit codes"));
            for help in [
                sub.render_help().to_string(),
                sub.render_long_help().to_string(),
            ] {
                let at = help
                    .rfind("\nExit codes")
                    .unwrap_or_else(|| panic!("{path}: no exit codes in\n{help}"));
                let tail = help[at..].trim();
                // Nothing after them (no blank line, so no further section), and exactly them.
                assert!(
                    !tail.contains("\n\n"),
                    "{path}: help goes on after the exit codes:\n{tail}"
                );
                let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
                assert_eq!(words(tail), words(&codes), "{path}");
                for (code, _) in exit::CODES.iter().find(|(p, _)| *p == path).unwrap().1 {
                    assert!(
                        tail.contains(&format!("\n  {code} ")),
                        "{path}: exit code {code}"
                    );
                }
            }
        }
        // And the table names no subcommand that does not exist.
        for (path, _) in exit::CODES {
            assert!(
                leaves.iter().any(|(p, _)| p == path),
                "exit::CODES: no subcommand {path}"
            );
        }
    }

    #[test]
    fn help_examples_are_whole_commands() {
        const PROGRAMS: &[&str] = &[
            "wedge-capture",
            "sudo",
            "kubectl",
            "journalctl",
            "systemctl",
        ];
        let mut checked = 0;
        for (path, mut sub) in leaves(&built(), "") {
            let help = sub.render_long_help().to_string();
            let examples: Vec<&str> = help
                .lines()
                .skip_while(|l| *l != "Examples:")
                .skip(1)
                .take_while(|l| !l.trim().is_empty())
                .collect();
            assert!(!examples.is_empty(), "{path}: no examples in\n{help}");
            // The examples come last, right before the exit codes.
            let after: Vec<&str> = help
                .lines()
                .skip_while(|l| *l != "Examples:")
                .skip(1 + examples.len())
                .filter(|l| !l.trim().is_empty())
                .take(1)
                .collect();
            assert!(
                after.first().is_some_and(|l| l.starts_with("Exit codes")),
                "{path}: {after:?}"
            );
            let mut continued = false;
            let mut command = String::new();
            for line in examples {
                if continued {
                    // A continuation the example asks for (`\` at the end of the line before), indented.
                    assert!(line.starts_with("      "), "{path}: continuation {line:?}");
                } else {
                    let first = line.strip_prefix("  ").and_then(|l| l.split(' ').next());
                    assert!(
                        !line.starts_with("   ") && first.is_some_and(|p| PROGRAMS.contains(&p)),
                        "{path}: example line wrapped or not a command: {line:?}"
                    );
                    command.clear();
                }
                command.push_str(line.trim_end().trim_end_matches('\\'));
                command.push(' ');
                continued = line.trim_end().ends_with('\\');
                if !continued {
                    parse_example(&path, &command);
                    checked += 1;
                }
            }
            assert!(!continued, "{path}: the last example ends with a backslash");
        }
        assert!(checked >= 30, "{checked} examples");
    }

    /// The `wedge-capture …` part of an example parses as it is written.
    fn parse_example(path: &str, example: &str) {
        // The segment of a pipeline that runs wedge-capture, without a redirection or a comment.
        let Some(segment) = example
            .split(" | ")
            .find(|s| s.split_whitespace().any(|w| w == "wedge-capture"))
        else {
            return;
        };
        let segment = segment.split(" #").next().unwrap_or(segment);
        let segment = segment.split(" > ").next().unwrap_or(segment);
        let words = shell_words(segment);
        // `kubectl -n wedge-capture exec …`: the program is the word followed by this subcommand's name.
        let name = path.split(' ').next().unwrap_or_default();
        let Some(start) = words
            .windows(2)
            .position(|w| w[0] == "wedge-capture" && w[1] == name)
        else {
            // Another program's command (`systemctl reload wedge-capture`); not one of ours.
            let ours = words.iter().find(|w| *w != "sudo");
            assert!(
                ours.is_none_or(|w| w != "wedge-capture"),
                "{path}: example of another subcommand: {example}"
            );
            return;
        };
        let argv = &words[start..];
        if let Err(err) = Cli::try_parse_from(argv) {
            panic!("{path}: example does not parse: {example}\n{err}");
        }
    }

    /// Words of a shell command line: whitespace-separated, single and double quotes kept together.
    fn shell_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut quote = None;
        let mut in_word = false;
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => word.push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    in_word = true;
                }
                (None, c) if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut word));
                        in_word = false;
                    }
                }
                (None, c) => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
        assert!(quote.is_none(), "unbalanced quotes: {line}");
        if in_word {
            words.push(word);
        }
        words
    }
}
