//! Exit codes, documented in README.md ("Exit codes"). Keep the two in step.

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
