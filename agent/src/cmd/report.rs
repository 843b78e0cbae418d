use crate::exit::{ExitCode, Failure};

#[derive(Debug, clap::Subcommand)]
pub enum ReportCommand {
    /// List incidents in the output directory, newest first.
    List,
}

pub fn run(_cmd: ReportCommand) -> anyhow::Result<ExitCode> {
    Err(Failure::new(ExitCode::ERROR, "not built yet").into())
}
