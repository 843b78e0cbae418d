//! Exit codes, documented in README.md ("Exit codes"). Keep the two in step. What each subcommand may exit
//! with is said once, in [`CODES`]; every `--help` ends with it ([`help`], appended by `cli::command`).

use std::fmt;

/// A process exit status with a meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitCode(pub u8);

impl ExitCode {
    /// Everything asked for was done.
    pub const OK: ExitCode = ExitCode(0);
    /// A runtime error: I/O, a corrupt or hostile input file, an unwritable output directory.
    pub const ERROR: ExitCode = ExitCode(1);
    /// Bad command-line usage (clap's own code).
    pub const USAGE: ExitCode = ExitCode(2);
    /// A wedge was captured and the wedged process was still alive (unkillable) when we exited.
    pub const WEDGED: ExitCode = ExitCode(3);
    /// The target process does not exist (or vanished before anything could be read).
    pub const NO_TARGET: ExitCode = ExitCode(4);
    /// A privilege needed for the request is missing; the message names the capability.
    pub const NO_PRIVILEGE: ExitCode = ExitCode(5);
    /// The CUDA driver (libcuda) is missing or unusable.
    pub const NO_DRIVER: ExitCode = ExitCode(6);
    /// `run`: the command exists but cannot be executed.
    pub const NOT_EXECUTABLE: ExitCode = ExitCode(126);
    /// `run`: the command was not found.
    pub const NOT_FOUND: ExitCode = ExitCode(127);
}

/// An error that knows which exit code it should produce. Anything else exits with [`ExitCode::ERROR`].
#[derive(Debug)]
pub struct Failure {
    pub code: ExitCode,
    pub message: String,
}

impl Failure {
    pub fn new(code: ExitCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// The exit code for an error returned by a subcommand.
pub fn code_for(err: &anyhow::Error) -> ExitCode {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<Failure>().map(|f| f.code))
        .unwrap_or(ExitCode::ERROR)
}

/// The exit codes of each subcommand (its path under `wedge-capture`), in the order `--help` lists them.
pub const CODES: &[(&str, &[(u8, &str)])] = &[
    ("capture", &[(0, "captured"), (4, "no such process (or thread)"), (1, "other errors"), (2, USAGE_TEXT)]),
    ("decode-ioctl", &[(0, "decoded"), (1, "--arg too short for the struct, or another error"), (2, USAGE_TEXT)]),
    ("explain", &[(0, "explained"), (1, "the input is no kernel log (binary, no task or stack found, over 16 MiB)"), (2, USAGE_TEXT)]),
    ("ring dump", &[(0, "read"), (1, "missing, unreadable, corrupt or hostile file (the message says which)"), (2, USAGE_TEXT)]),
    ("report list", &[(0, "listed (none is an empty list)"), (1, "the store or an incident unreadable"), (2, USAGE_TEXT)]),
    ("report show", &[(0, "printed"), (1, "unknown id, missing store or unreadable incident"), (2, USAGE_TEXT)]),
    ("report bundle", &[(0, "written"), (1, "unknown id, refused or unreadable incident, or an I/O error"), (2, USAGE_TEXT)]),
    ("upload", &[(0, "uploaded (and verified)"), (1, "an error, a verify mismatch included"), (2, USAGE_TEXT), (6, "no usable CUDA driver (--backend host runs without a GPU)")]),
    ("run", &[
        (0, "CMD exited 0; any other status of CMD is passed on (128+N when a signal N killed it)"),
        (3, "a wedge was captured and CMD was still alive --exit-after later (or at the first SIGINT/SIGTERM after it)"),
        (1, "an error, a wedge whose incident could never be written included (a LOST: line names it)"),
        (2, USAGE_TEXT),
        (126, "CMD cannot be executed"),
        (127, "CMD not found"),
    ]),
    ("selftest", &[(0, "passed"), (1, "failed (the message says what)"), (2, USAGE_TEXT), (5, "not root: the wedge was not captured (it says what it could check)")]),
    ("doctor", &[(0, "no check failed"), (1, "a check failed"), (2, "bad usage or an invalid --config")]),
    ("agent", &[
        (0, "stopped by SIGTERM/SIGINT; --check-config: the configuration is valid"),
        (2, "bad usage or an invalid configuration (systemd does not restart it)"),
        (1, "other errors (the incident store not writable, --metrics-listen not bindable…)"),
    ]),
    ("npd-check", &[
        (1, "a wedge episode is going on: `open` or `still_wedged_at_exit`, and its process (same pid and start time, \
             read from /proc/<pid>/stat only) still exists"),
        (0, "none: every episode resolved, closed, or its process is gone"),
        (2, "unknown: no store at --out, the store a symlink or not a directory, the store or an incident \
             unreadable, corrupt or not a regular file, an episode nobody watches last written longer ago than \
             --max-age (default 1h), or the time budget (--budget, 0.8 s) ran out before every incident was \
             judged and no wedge was found; bad usage too"),
    ]),
];

/// The end of the help of a command with subcommands (`wedge-capture`, `ring`, `report`): what every one
/// shares, and where the rest is.
pub const GROUP_HELP: &str =
    "Exit codes: 0 done, 1 an error, 2 bad usage; each subcommand's --help lists all of its own.";

/// What usage errors (clap's) mean in every table.
const USAGE_TEXT: &str = "bad usage (an unknown flag, a bad value, flags that cannot go together)";

/// The exit codes of subcommand `path` as `--help` ends with them; `None` for a subcommand [`CODES`] lacks.
pub fn help(path: &str) -> Option<String> {
    let (_, codes) = CODES.iter().find(|(name, _)| *name == path)?;
    let mut text = String::from(if path == "npd-check" {
        "Exit codes (node-problem-detector's plugin protocol: 0 = False, 1 = True, other = Unknown):"
    } else {
        "Exit codes:"
    });
    let code_width = codes
        .iter()
        .map(|(code, _)| code.to_string().len())
        .max()
        .unwrap_or(1);
    let indent = 2 + code_width + 2;
    for (code, meaning) in *codes {
        // Wrapped here, under the meaning, before clap would wrap it under the code.
        let mut line = format!("\n  {code:<code_width$} ");
        let mut width = line.len() - 1;
        for word in meaning.split_whitespace() {
            if width + 1 + word.chars().count() > HELP_TEXT_WIDTH {
                line.push_str(&format!("\n{:indent$}", ""));
                width = indent;
            } else {
                line.push(' ');
                width += 1;
            }
            line.push_str(word);
            width += word.chars().count();
        }
        text.push_str(&line);
    }
    Some(text)
}

/// Columns the exit codes are wrapped at: within clap's help width without a terminal (100).
const HELP_TEXT_WIDTH: usize = 96;
