//! `wedge-capture capture`: a one-shot, decoded snapshot of every thread of a process.

use std::path::PathBuf;

use anyhow::Context;
use capture::{snapshot_process, Arch, ProcRoot, ProcessSnapshot, SnapshotOptions};

use crate::exit::{ExitCode, Failure};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A view a person reads at a glance: D threads first, a table, stacks in code blocks.
    // `md` is what `report show --format` calls the same thing.
    #[value(alias = "md")]
    Markdown,
    /// The JSON contract (`pid`, `threads[]` with `tid`, `comm`, `state`, `wchan`, `syscall`, `ioctl`,
    /// `stack`, `site`) that other tools parse.
    Json,
    /// Plain text for a terminal.
    Text,
}

/// Flags of `wedge-capture capture`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Reads stat for every thread, then wchan, syscall, stack and fd links for threads in D
(or for all with --all-threads). Never reads cmdline, environ or maps, so it cannot hang
on the wedged process. For threads in D inside an NVIDIA ioctl it decodes the struct at the
ioctl's pointer (RM control command and its locks, alloc class, UVM command), read from
<pid>/mem in a sacrificial child with a deadline (--no-ioctl-arguments: never). /proc/<tid>/stack needs CAP_SYS_ADMIN; without it the stack is left
empty and a note says so.

Examples:
  wedge-capture capture --pid 81234
  wedge-capture capture --pid 81234 --format json > snapshot.json
  wedge-capture capture --pid 4100 --proc-root ./recorded-proc --arch aarch64

Exit codes: 0 captured, 4 no such process (or thread), 1 other errors.")]
pub struct Args {
    /// Process to capture.
    #[arg(long, value_name = "PID")]
    pub pid: i32,
    /// Only this thread, read in full whatever its state.
    #[arg(long, value_name = "TID")]
    pub tid: Option<i32>,
    /// Read wchan/syscall/stack for every thread, not only those in D.
    #[arg(long)]
    pub all_threads: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// A directory laid out like /proc (a recorded snapshot from another machine).
    #[arg(long, value_name = "DIR")]
    pub proc_root: Option<PathBuf>,
    /// Decode the NVIDIA ioctl argument (RM/UVM struct at the ioctl's pointer) of every thread in an
    /// ioctl, not only of threads in D (those are decoded by default). Read from <proc root>/<pid>/mem
    /// in a sacrificial child with the probe deadline.
    #[arg(long)]
    pub ioctl_arguments: bool,
    /// Never read <proc root>/<pid>/mem: no ioctl argument decoded, not even for threads in D.
    #[arg(long, conflicts_with = "ioctl_arguments")]
    pub no_ioctl_arguments: bool,
    /// Syscall ABI of the target: x86_64 or aarch64 (default: this machine's).
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<Arch>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = args.proc_root.map(ProcRoot::new).unwrap_or_default();
    if !root.is_dir() {
        return Err(Failure::new(
            ExitCode::ERROR,
            format!("proc root {root} is not a directory"),
        )
        .into());
    }
    let opts = SnapshotOptions {
        all_threads: args.all_threads,
        only_tid: args.tid,
        arch: args.arch.unwrap_or_else(Arch::host),
        ..SnapshotOptions::default()
    };
    let mut snap = match snapshot_process(&root, args.pid, &opts) {
        Ok(s) => s,
        Err(e @ capture::Error::NoSuchProcess { .. }) => {
            return Err(Failure::new(ExitCode::NO_TARGET, e.to_string()).into())
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("capturing pid {}", args.pid))),
    };
    if let Some(tid) = args.tid {
        if snap.threads.iter().all(|t| t.gone) {
            return Err(Failure::new(
                ExitCode::NO_TARGET,
                format!("no thread {tid} in process {}", args.pid),
            )
            .into());
        }
    }
    // Threads in D by default: the sacrificial child bounds the read, and the argument is what names the
    // RM control or UVM command a wedged thread is in.
    if !args.no_ioctl_arguments {
        let mut runner = crate::probe::ProbeRunner::default();
        crate::watch::stages::ioctl_argument::read_ioctl_arguments(
            &mut runner,
            &root,
            args.pid,
            &mut snap,
            !args.ioctl_arguments,
        );
    }
    print!("{}", render(args.format, &snap)?);
    Ok(ExitCode::OK)
}

/// The snapshot in `format`. Comms, wchans and paths are the target's to choose: the Markdown and text views
/// escape them (`capture::escape`), JSON by its own quoting.
fn render(format: Format, snap: &ProcessSnapshot) -> anyhow::Result<String> {
    Ok(match format {
        Format::Markdown => capture::render::markdown(snap),
        Format::Text => capture::render::text(snap),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(snap).context("serializing the snapshot")?;
            s.push('\n');
            s
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bug of issue 25: a process named `<b>…` with ESC, a pipe, backticks and a newline in its comm was
    /// printed raw by `capture --format markdown` (and the ESC by `--format text`). A real process, named by the
    /// symlink it was started through.
    #[test]
    fn a_hostile_comm_is_escaped_in_markdown_and_text() {
        let dir = tempfile::tempdir().unwrap();
        let comm = "<b>\x1b[2J|`x`\n#";
        assert!(comm.len() <= 15);
        let link = dir.path().join(comm);
        std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
        let mut child = std::process::Command::new(&link).arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        // Up to 5 s: under a loaded test run the exec through the symlink can take a while.
        let snap = (0..500)
            .find_map(|_| {
                let snap = snapshot_process(&ProcRoot::default(), pid, &SnapshotOptions::default());
                match snap {
                    Ok(s) if s.threads[0].comm == comm => Some(s),
                    _ => {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        None
                    }
                }
            })
            .expect("the child took its comm");
        let _ = child.kill();
        let _ = child.wait();

        let md = render(Format::Markdown, &snap).unwrap();
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| {pid} |")))
            .unwrap();
        // The comm cell exactly; the rest of the row depends on where the thread happened to be.
        // A code span fenced past its backticks, the newline written out, the pipe escaped for the table.
        assert!(
            row.starts_with(&format!("| {pid} | ``<b>\\e[2J\\|`x`\\n#`` | ")),
            "{row}"
        );
        assert!(
            !capture::escape::outside_code_spans(&md).contains("<b>") && !md.contains('\x1b'),
            "{md}"
        );
        assert!(
            !md.lines().any(|l| l.starts_with('#') && l.len() == 1),
            "{md}"
        );
        let txt = render(Format::Text, &snap).unwrap();
        assert!(!txt.contains('\x1b'), "{txt:?}");
        assert!(txt.contains("<b>\\e[2J|`x`\\n#"), "{txt}");
        assert_eq!(txt.lines().count(), 2, "{txt}");
        let json: serde_json::Value =
            serde_json::from_str(&render(Format::Json, &snap).unwrap()).unwrap();
        assert_eq!(json["threads"][0]["comm"], comm);
    }
}
