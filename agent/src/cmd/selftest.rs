use crate::exit::{ExitCode, Failure};

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    Err(Failure::new(ExitCode::ERROR, "not built yet").into())
}
