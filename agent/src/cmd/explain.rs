//! `wedge-capture explain [FILE|-]`: where each task of a pasted kernel log or stack is stuck, in the words of a
//! live capture. The parsing and classification are `capture::explain` (pure); this reads the input, bounded,
//! and prints.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use capture::explain;

use crate::exit::{ExitCode, Failure};

/// Output format of `explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Markdown,
    Json,
}

/// Flags of `wedge-capture explain`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Reads what people paste into bug threads and prints, per task, its name, pid, the cleaned stack and
the site, classified exactly as a live capture classifies /proc/<tid>/stack:
  - a hung-task report from dmesg or journalctl -k (\"INFO: task NAME:PID blocked for more than N
    seconds.\" and its Call Trace, with timestamps, `?` frames, <TASK> markers, module lists);
  - a sysrq-w or sysrq-t dump of many tasks; a soft-lockup trace (its RIP/pc is the top frame);
  - a bare /proc/<tid>/stack copy, or the stacks of a wedge-capture report.
`?` frames and scheduler frames are dropped before classification; interrupt frames are not the
task's. A frame that does not parse is skipped and noted.

Examples:
  journalctl -k -b -1 | wedge-capture explain
  wedge-capture explain hung-task.txt --format json
  sudo cat /proc/1234/stack | wedge-capture explain -

Input that is not a kernel log (binary, no task or stack found, larger than 16 MiB): the reason,
exit 1.")]
pub struct Args {
    /// The text to read; `-` or nothing reads standard input.
    #[arg(value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// markdown (default) or json (`tasks[]`, each `task`, `pid`, `stack`, `site`).
    #[arg(long, value_enum, default_value = "markdown")]
    pub format: Format,
}

/// Reads at most one byte more than `capture::explain` accepts, so a larger input is refused, not truncated.
fn read_bounded(mut r: impl Read) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    r.by_ref()
        .take(explain::MAX_INPUT as u64 + 1)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let bytes = match args.input.as_deref() {
        None => read_bounded(std::io::stdin().lock()).context("reading standard input")?,
        Some(p) if p.as_os_str() == "-" => {
            read_bounded(std::io::stdin().lock()).context("reading standard input")?
        }
        Some(p) => {
            let f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
            read_bounded(f).with_context(|| format!("reading {}", p.display()))?
        }
    };
    let explained = explain::explain(&bytes)
        .map_err(|e| Failure::new(ExitCode::ERROR, format!("explain: {e}")))?;
    match args.format {
        Format::Markdown => print!("{}", explain::markdown(&explained)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&explained)?),
    }
    Ok(ExitCode::OK)
}
