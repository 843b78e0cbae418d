use crate::exit::{ExitCode, Failure};

#[derive(Debug, clap::Subcommand)]
pub enum RingCommand {
    /// Print the records of a ring file and the calls still in flight.
    Dump(DumpArgs),
}

#[derive(Debug, clap::Args)]
pub struct DumpArgs {}

pub fn run(_cmd: RingCommand) -> anyhow::Result<ExitCode> {
    Err(Failure::new(ExitCode::ERROR, "not built yet").into())
}
