//! `wedge-fuzz <target|all> --iterations N --seed S`: run the deterministic fuzzer (docs/fuzzing.md).
//! Exit status 0: no panic and no execution over its heap budget; 1: some; 2: bad usage.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use wedge_fuzz::engine::{self, RunOptions};
use wedge_fuzz::targets::{self, TARGETS};

#[derive(Parser)]
#[command(
    name = "wedge-fuzz",
    about = "Fuzz every hostile input wedge-capture parses"
)]
struct Cli {
    /// A target (`list` prints them) or `all`.
    target: String,
    /// Executions per target.
    #[arg(long, default_value_t = 100_000)]
    iterations: u64,
    /// RNG seed: the same seed and corpus give the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where inputs that panic or exceed the heap budget are written.
    #[arg(long, default_value = "target/fuzz-crashes")]
    crash_dir: PathBuf,
    /// Run one saved input once instead (the panic, if any, is printed): `--replay FILE`.
    #[arg(long)]
    replay: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.target == "list" {
        for t in TARGETS {
            println!("{}", t.name);
        }
        return ExitCode::SUCCESS;
    }
    let chosen: Vec<_> = if cli.target == "all" {
        TARGETS.iter().collect()
    } else {
        match targets::find(&cli.target) {
            Some(t) => vec![t],
            None => {
                eprintln!(
                    "wedge-fuzz: no target {:?} (try `wedge-fuzz list`)",
                    cli.target
                );
                return ExitCode::from(2);
            }
        }
    };
    if let Some(path) = &cli.replay {
        let [target] = chosen.as_slice() else {
            eprintln!("wedge-fuzz: --replay needs one target");
            return ExitCode::from(2);
        };
        return match engine::replay(target, path) {
            Ok(outcome) => {
                println!("{}: {outcome:?}", target.name);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("wedge-fuzz: {}: {e}", path.display());
                ExitCode::from(2)
            }
        };
    }
    let options = RunOptions {
        iterations: cli.iterations,
        seed: cli.seed,
        crash_dir: cli.crash_dir,
        max_saved: 16,
    };
    let mut clean = true;
    for target in chosen {
        let report = engine::run(target, &options);
        println!("{}", report.line());
        for path in &report.saved {
            println!("  saved {}", path.display());
        }
        clean &= report.clean();
    }
    targets::cleanup();
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
