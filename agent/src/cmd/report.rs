//! `wedge-capture report list|show|bundle`: read the incident store that the watchdog writes.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use reports::layout::{DEFAULT_DIR, INCIDENT_FILE};
use reports::store::{IncidentSummary, Store};

use crate::cli::{self, OutputFormat};
use crate::exit::{ExitCode, Failure};

#[derive(Debug, clap::Subcommand)]
pub enum ReportCommand {
    /// List incidents, newest first: id, state (complete, partial, in progress), pid, size and verdict.
    #[command(after_help = "\
A partial incident is one whose writer was interrupted (or is still writing: `in progress`);
everything it holds is valid and readable.

Examples:
  wedge-capture report list
  wedge-capture report list --out ./incidents --format json")]
    List(ListArgs),
    /// Print one incident: Markdown to paste into a bug thread, or its JSON.
    #[command(after_help = "\
ID is a directory name from `report list` (e.g. 20261202T113400Z-gpu01-4242) or `latest`.

The Markdown never exceeds 65,536 characters (a GitHub comment's limit); when sections
were shortened it says so, and the full data stays in incident.json (--format json prints
it exactly as stored).

Examples:
  wedge-capture report show latest
  wedge-capture report show 20261202T113400Z-gpu01-4242 --format json | jq .verdict")]
    Show(ShowArgs),
    /// Write a .tar.gz of one incident (incident.json, report.md, ring.bin, samples) to attach to a bug.
    #[command(after_help = "\
The archive is written atomically (mode 0600) and holds the incident directory without
temp files, markers or symlinks; files and directories keep their own modes (0600/0700)
and are dated at the incident's detection time. An incident directory that is itself a
symlink is refused, and a failed bundle leaves no file behind.

--public drops or masks what identifies the host or other tenants, in every file: the host
name (the archive's directory becomes <time>-scrubbed-<pid>), the boot id, other processes
of the host-wide D-state census (comm, cgroup), kernel-log lines about other processes, GPU
serial numbers and UUIDs, and nvidia-smi's process list; report.md says at its top what
was scrubbed. The watched process's own data stays: review before posting.

Examples:
  wedge-capture report bundle latest
  wedge-capture report bundle 20261202T113400Z-gpu01-4242 --output /tmp/wedge.tar.gz
  wedge-capture report bundle latest --public        # for a public issue: scrubbed")]
    Bundle(BundleArgs),
}

/// The incident store, shared by every `report` subcommand: `--out`, as on `run` and `agent`
/// (`--dir`, its old name, stays as a hidden alias).
#[derive(Debug, clap::Args)]
pub struct OutArg {
    /// Incident store (the directory `wedge-capture agent`, `run` and `selftest` write).
    #[arg(long, alias = "dir", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub out: OutArg,
    /// Output format: text (a table, verdicts cut at a word), or json (one array of summaries, whole).
    #[arg(long, value_name = "FORMAT", default_value = "text",
          value_parser = cli::formats(&[OutputFormat::Text, OutputFormat::Json]))]
    pub format: OutputFormat,
    /// Old spelling of `--format json`.
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
}

impl ListArgs {
    fn json(&self) -> bool {
        cli::chosen(self.format, self.json) == OutputFormat::Json
    }
}

/// `report show --format`: markdown (for a GitHub bug thread: verdict, per-thread tables, timeline,
/// details) or json (incident.json exactly as stored).
pub use crate::cli::OutputFormat as ShowFormat;

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// Incident id (directory name) or `latest`.
    #[arg(value_name = "ID")]
    pub id: String,
    #[command(flatten)]
    pub out: OutArg,
    /// Output format: markdown (for a bug thread), or json (incident.json exactly as stored).
    #[arg(long, value_name = "FORMAT", default_value = "markdown",
          value_parser = cli::formats(&[OutputFormat::Markdown, OutputFormat::Json]))]
    pub format: ShowFormat,
}

#[derive(Debug, clap::Args)]
pub struct BundleArgs {
    /// Incident id (directory name) or `latest`.
    #[arg(value_name = "ID")]
    pub id: String,
    #[command(flatten)]
    pub out: OutArg,
    /// Output file [default: ./<ID>.tar.gz; with --public ./<time>-scrubbed-<pid>.tar.gz].
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Scrub for a public issue: drop or mask the host name, boot id, other processes' data and GPU
    /// serials/UUIDs (report.md says what).
    #[arg(long)]
    pub public: bool,
}

pub fn run(cmd: ReportCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ReportCommand::List(args) => list(args),
        ReportCommand::Show(args) => show(args),
        ReportCommand::Bundle(args) => bundle(args),
    }
}

fn open(dir: &Path) -> anyhow::Result<Store> {
    Store::open_read_only(dir).map_err(|err| Failure::new(ExitCode::ERROR, err.to_string()).into())
}

/// `latest` → the newest incident's id; anything else unchanged.
fn resolve_id(store: &Store, id: &str) -> anyhow::Result<String> {
    if id != "latest" {
        return Ok(id.to_string());
    }
    let newest = store.list()?.into_iter().next();
    match newest {
        Some(summary) => Ok(summary.id),
        None => Err(Failure::new(
            ExitCode::ERROR,
            format!("no incidents in {}", store.dir().display()),
        )
        .into()),
    }
}

fn not_found_hint(err: reports::Error, dir: &Path) -> anyhow::Error {
    match err {
        reports::Error::NotFound { .. } | reports::Error::InvalidId(_) => Failure::new(
            ExitCode::ERROR,
            format!(
                "{err}; `wedge-capture report list --out {}` shows the ids",
                dir.display()
            ),
        )
        .into(),
        other => other.into(),
    }
}

fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let dir = &args.out.out;
    let summaries = match Store::open_read_only(dir) {
        Ok(store) => store.list()?,
        // A host that never had a wedge has no directory yet: that is an empty list, not an error.
        Err(reports::Error::NoStore { .. }) => {
            if !args.json() {
                eprintln!("no incidents: {} does not exist yet", dir.display());
            }
            Vec::new()
        }
        Err(err) => return Err(err.into()),
    };
    let mut out = String::new();
    if args.json() {
        out = serde_json::to_string_pretty(&summaries)?;
        out.push('\n');
    } else if summaries.is_empty() {
        if dir.exists() {
            eprintln!("no incidents in {}", dir.display());
        }
    } else {
        out = table(&summaries, dir);
    }
    write_stdout(out.as_bytes())?;
    Ok(ExitCode::OK)
}

fn state(s: &IncidentSummary) -> &'static str {
    if s.error.is_some() {
        "unreadable"
    } else if s.in_progress {
        "in progress"
    } else if s.complete {
        "complete"
    } else {
        "partial"
    }
}

fn table(summaries: &[IncidentSummary], dir: &Path) -> String {
    let id_width = summaries
        .iter()
        .map(|s| s.id.len())
        .max()
        .unwrap_or(2)
        .max(2);
    let mut out = format!(
        "{} incident{} in {}\n{:<id_width$}  {:<11}  {:>8}  {:>9}  VERDICT\n",
        summaries.len(),
        if summaries.len() == 1 { "" } else { "s" },
        dir.display(),
        "ID",
        "STATE",
        "PID",
        "SIZE"
    );
    for s in summaries {
        let verdict = match &s.error {
            Some(err) => err.clone(),
            None => s.verdict.clone(),
        };
        // Clipped first, then made terminal-safe: a comm with ESC or a newline is shown escaped, never raw.
        let verdict = clip_at_word(&verdict.replace(['\n', '\r'], " "), VERDICT_CHARS);
        let verdict = capture::escape::controls(&verdict);
        out.push_str(&format!(
            "{:<id_width$}  {:<11}  {:>8}  {:>9}  {}\n",
            s.id,
            state(s),
            s.pid,
            reports::text::bytes(s.bytes),
            verdict
        ));
    }
    out
}

/// The most characters of a verdict a `report list` row shows (`report show` has it whole).
const VERDICT_CHARS: usize = 140;

/// `text` cut to at most `max` characters at a word boundary, with `…` where it was cut; a single word longer
/// than `max` is cut inside it (nothing else fits).
fn clip_at_word(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    // Room for the ellipsis.
    let head: String = text.chars().take(max - 1).collect();
    let next_is_space = text.chars().nth(max - 1).is_some_and(char::is_whitespace);
    let cut = if next_is_space {
        head.as_str()
    } else {
        match head.rfind(char::is_whitespace) {
            Some(space) if space > 0 => &head[..space],
            _ => head.as_str(),
        }
    };
    let cut = cut.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | ':'));
    format!("{cut}…")
}

fn show(args: ShowArgs) -> anyhow::Result<ExitCode> {
    let dir = &args.out.out;
    let store = open(dir)?;
    let id = resolve_id(&store, &args.id)?;
    let incident = store.load(&id).map_err(|err| not_found_hint(err, dir))?;
    match args.format {
        // Text is not among `formats` above: clap refuses it.
        ShowFormat::Markdown | ShowFormat::Text => {
            write_stdout(reports::render::markdown(&incident).as_bytes())?
        }
        ShowFormat::Json => {
            // The stored bytes, so that fields from a newer writer are not dropped; `load` above proved they parse.
            let path = store.path_of(&id)?.join(INCIDENT_FILE);
            let mut bytes = reports::store::read::read_incident_bytes(&path)
                .with_context(|| format!("read {}", path.display()))?;
            if !bytes.ends_with(b"\n") {
                bytes.push(b'\n');
            }
            write_stdout(&bytes)?;
        }
    }
    Ok(ExitCode::OK)
}

fn bundle(args: BundleArgs) -> anyhow::Result<ExitCode> {
    let dir = &args.out.out;
    let store = open(dir)?;
    let id = resolve_id(&store, &args.id)?;
    let src = store.path_of(&id).map_err(|err| not_found_hint(err, dir))?;
    let options = reports::bundle::BundleOptions {
        public: args.public,
    };
    let output = match args.output {
        Some(output) => output,
        // The public name must not carry the host name either.
        None if args.public => PathBuf::from(format!(
            "{}.tar.gz",
            reports::bundle::public_id(&src).with_context(|| format!("read incident {id}"))?
        )),
        None => PathBuf::from(format!("{id}.tar.gz")),
    };
    let bundled = store
        .bundle_with(&id, &output, &options)
        .with_context(|| format!("bundle incident {id} into {}", output.display()))?;
    let mut line = format!(
        "{} ({})\n",
        output.display(),
        reports::text::bytes(bundled.bytes)
    );
    if let Some(summary) = &bundled.scrubbed {
        line.push_str(&format!(
            "scrubbed: host name, boot id, {} other D-state process(es), {} kernel-log line(s), {} GPU \
             identifier(s); review report.md before posting\n",
            summary.other_dstate_tasks, summary.kernel_log_lines, summary.gpu_identifiers
        ));
    }
    write_stdout(line.as_bytes())?;
    Ok(ExitCode::OK)
}

/// Write to stdout; a closed pipe (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("write to stdout"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_cuts_verdicts_at_a_word_with_an_ellipsis() {
        let verdict = "thread 4243 (trainer) has been in D for 2 h 03 min in ioctl FS_IOC_SETFLAGS on \
                       /dev/nvidiactl; breadcrumb: selftest ioctl FS_IOC_SETFLAGS() in flight for 7380 s";
        let cut = clip_at_word(verdict, 60);
        assert!(cut.chars().count() <= 60, "{cut}");
        assert!(cut.ends_with('…'), "{cut}");
        let kept = cut.trim_end_matches('…');
        // Every word kept is a whole word of the verdict, and the next one starts where the cut is.
        assert!(verdict.starts_with(kept), "{cut}");
        assert!(
            verdict[kept.len()..].starts_with(' '),
            "cut mid-word: {cut}"
        );
        // Short verdicts are untouched; one word longer than the room is cut inside it (nothing else fits).
        assert_eq!(clip_at_word("short verdict", 60), "short verdict");
        assert_eq!(
            clip_at_word(&"x".repeat(80), 10),
            format!("{}…", "x".repeat(9))
        );
        // The table uses it.
        let summary = IncidentSummary {
            id: "20261202T113400Z-gpu01-4242".into(),
            path: PathBuf::from("/x/20261202T113400Z-gpu01-4242"),
            detected_at: None,
            pid: 4242,
            hostname: "gpu01".into(),
            verdict: verdict.repeat(2),
            complete: true,
            in_progress: false,
            bytes: 4096,
            error: None,
        };
        let table = table(&[summary], Path::new("/x"));
        let row = table.lines().nth(2).unwrap();
        let shown = row.split("  ").last().unwrap();
        assert!(
            shown.ends_with('…') && shown.chars().count() <= VERDICT_CHARS,
            "{row}"
        );
        assert!(
            verdict.repeat(2).starts_with(shown.trim_end_matches('…')),
            "{row}"
        );
    }
}
