//! `wedge-capture capture`: a one-shot, decoded snapshot of every thread of a process.

use std::path::PathBuf;

use anyhow::Context;
use capture::{snapshot_process, Arch, ProcRoot, ProcessSnapshot, SnapshotOptions};

use crate::exit::{ExitCode, Failure};

pub use crate::cli::OutputFormat as Format;

/// Flags of `wedge-capture capture`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Reads stat for every thread, then wchan, syscall, stack and fd links for threads in D
(or for all with --all-threads). Never reads cmdline, environ or maps, so it cannot hang
on the wedged process. When threads are in D it adds the wait graph: every lock they wait
for, who holds it (the kernel's blocker records through a BPF task iterator; a running
holder named from about a second of samples when no record names one) and the chain it
leads to (--no-wait-graph: not). Given several --proc-root trees (a recording, one tree per
sample in time order, each with a `monotonic` file beside it), the first is the snapshot
and all are the samples. For threads in D inside an NVIDIA ioctl it decodes the struct at the
ioctl's pointer (RM control command and its locks, alloc class, UVM command), read from
<pid>/mem in a sacrificial child with a deadline (--no-ioctl-arguments: never). /proc/<tid>/stack needs CAP_SYS_ADMIN; without it the stack is left
empty and a note says so.

Formats: markdown (a view read at a glance: D threads first, a table, stacks in code blocks), json
(the contract other tools parse: `pid`, `threads[]` with `tid`, `comm`, `state`, `wchan`,
`syscall`, `ioctl`, `stack`, `site`), text (plain, for a terminal).

Examples:
  wedge-capture capture --pid 81234
  wedge-capture capture --pid 81234 --format json > snapshot.json
  wedge-capture capture --pid 4100 --proc-root ./recorded-proc --arch aarch64
  wedge-capture capture --pid 1059 --proc-root rec/0/proc --proc-root rec/1/proc")]
pub struct Args {
    /// Process to capture.
    #[arg(long, value_name = "PID")]
    pub pid: i32,
    /// Only this thread, read in full whatever its state.
    #[arg(long, value_name = "TID")]
    pub tid: Option<i32>,
    /// Read wchan/syscall/stack for every thread, not only those in D (--tid reads its one thread in full).
    #[arg(long, conflicts_with = "tid")]
    pub all_threads: bool,
    /// Output format.
    #[arg(long, value_name = "FORMAT", default_value = "markdown",
          value_parser = crate::cli::formats(&[Format::Markdown, Format::Json, Format::Text]))]
    pub format: Format,
    /// A directory laid out like /proc (a recorded snapshot from another machine). Repeated: recorded
    /// samples in time order (the wait graph's samples; the first is the snapshot).
    #[arg(long, value_name = "DIR")]
    pub proc_root: Vec<PathBuf>,
    /// Do not build the wait graph (who holds what the threads in D wait for).
    #[arg(long)]
    pub no_wait_graph: bool,
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
    let roots: Vec<ProcRoot> = args.proc_root.iter().map(ProcRoot::new).collect();
    let root = roots.first().cloned().unwrap_or_default();
    for r in roots.iter().chain(std::iter::once(&root)) {
        if !r.is_dir() {
            return Err(
                Failure::new(ExitCode::ERROR, format!("proc root {r} is not a directory")).into(),
            );
        }
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
    let graph = if args.no_wait_graph || !snap.threads.iter().any(|t| t.state == "D") {
        None
    } else {
        Some(wait_graph(
            &roots,
            &args.proc_root,
            &root,
            args.pid,
            opts.arch,
        ))
    };
    // Issue 38: the kernel's record names the lock a site's stack could not.
    if let Some(Ok(g)) = &graph {
        capture::wait_graph::refine_with_graph(&mut snap.threads, g);
    }
    print!("{}", render_with_graph(args.format, &snap, graph.as_ref())?);
    Ok(ExitCode::OK)
}

/// The wait graph of `pid`: live (the kernel's records, then samples), or from recorded trees (one per
/// sample; each one's time from a `monotonic` file beside it, else one second apart). A failure is the
/// graph's own note, never the capture's.
fn wait_graph(
    roots: &[ProcRoot],
    dirs: &[PathBuf],
    root: &ProcRoot,
    pid: i32,
    arch: capture::Arch,
) -> Result<capture::wait_graph::WaitGraph, String> {
    if roots.len() > 1 {
        let series: Vec<(ProcRoot, u64)> = roots
            .iter()
            .enumerate()
            .zip(dirs)
            .map(|((k, r), dir)| {
                (
                    r.clone(),
                    recorded_monotonic_ns(dir).unwrap_or(k as u64 * 1_000_000_000),
                )
            })
            .collect();
        return capture::wait_graph::live::capture_series(
            &series,
            pid,
            Err("a recorded proc tree: no kernel records"),
            arch,
        )
        .map_err(|e| e.to_string());
    }
    // No settings here but the test hook's default (its environment variable).
    let refuse = crate::settings::WatchSettings::default().refuse_blocker_field;
    crate::watch::stages::wait_graph::graph_of(root, pid, None, refuse)
}

/// `<tree>/../monotonic` (seconds, as the recording script writes it) in ns.
fn recorded_monotonic_ns(dir: &std::path::Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.parent()?.join("monotonic")).ok()?;
    let s: f64 = text.trim().parse().ok()?;
    (s.is_finite() && s >= 0.0).then_some((s * 1e9) as u64)
}

/// The snapshot in `format`, and the wait graph after it (JSON: its `wait_graph` key).
fn render_with_graph(
    format: Format,
    snap: &ProcessSnapshot,
    graph: Option<&Result<capture::wait_graph::WaitGraph, String>>,
) -> anyhow::Result<String> {
    use capture::wait_graph::render as wg;
    let mut out = render(format, snap)?;
    let Some(graph) = graph else {
        return Ok(out);
    };
    match format {
        Format::Json => {
            let mut value = serde_json::to_value(snap).context("serializing the snapshot")?;
            value["wait_graph"] = match graph {
                Ok(g) => serde_json::to_value(g).context("serializing the wait graph")?,
                Err(why) => serde_json::json!({ "not_captured": why }),
            };
            out = serde_json::to_string_pretty(&value).context("serializing the snapshot")?;
            out.push('\n');
        }
        Format::Markdown => {
            out.push_str("\n## Wait graph\n\n");
            match graph {
                Ok(g) => {
                    if let Some(s) = wg::sentence(g, None, &|_| None) {
                        out.push_str(&format!("**{s}**\n\n"));
                    }
                    out.push_str(&wg::markdown(g, &|_| None));
                }
                Err(why) => {
                    out.push_str(&format!("not captured: {}\n", capture::escape::inline(why)))
                }
            }
        }
        Format::Text => match graph {
            Ok(g) => out.push_str(&wg::text(g)),
            Err(why) => out.push_str(&format!(
                "wait graph not captured: {}\n",
                capture::escape::one_line(why)
            )),
        },
    }
    Ok(out)
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
                    // Asleep too: a thread caught in D (paging the binary in, under load) gets wchan and
                    // syscall lines, which this test does not count.
                    Ok(s) if s.threads[0].comm == comm && s.threads[0].state.starts_with('S') => {
                        Some(s)
                    }
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
