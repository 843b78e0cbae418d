//! `wedge-capture explain [FILE|-]`: where each task of a pasted kernel log or stack is stuck, in the words of a
//! live capture. The parsing and classification are `capture::explain` (pure); this reads the input, bounded,
//! and prints.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use capture::explain;

use crate::exit::{ExitCode, Failure};

pub use crate::cli::OutputFormat as Format;

/// Flags of `wedge-capture explain`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Reads what people paste into bug threads and prints, per task, its name, pid, the cleaned stack and
the site, classified exactly as a live capture classifies /proc/<tid>/stack:
  - a hung-task report from dmesg or journalctl -k (\"INFO: task NAME:PID blocked for more than N
    seconds.\" and its Call Trace, with timestamps, `?` frames, <TASK> markers, module lists);
  - a sysrq-w or sysrq-t dump of many tasks; a soft-lockup trace (its RIP/pc is the top frame);
  - crash `bt`, drgn stack traces, a syzbot report (`file.c:N` locations, `[inline]` frames), 32-bit
    arm `A from B` lines;
  - a bare /proc/<tid>/stack copy, or the stacks of a wedge-capture report;
  - NVIDIA `NVRM: Xid` and NVSwitch `SXid` lines: each with what it means and what to do
    (docs/xid.md), tied to the paste's tasks by the pid or name the driver printed.
Lines may carry what log viewers and bug trackers add: ISO times, `> ` quotes, level columns, raw
/dev/kmsg headers. `?` frames and scheduler frames are dropped before classification (a stack of
guesses only is read from its first wait, with a note); frames above an interrupt entry are the
interrupt's. A frame that does not parse is skipped and noted.

Input that is not a kernel log (binary, no task or stack found, larger than 16 MiB): the reason,
exit 1.

Examples:
  journalctl -k -b -1 | wedge-capture explain
  wedge-capture explain hung-task.txt --format json
  sudo cat /proc/1234/stack | wedge-capture explain -")]
pub struct Args {
    /// The text to read; `-` or nothing reads standard input.
    #[arg(value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// markdown (default) or json (`tasks[]`, each `task`, `pid`, `stack`, `site`).
    #[arg(long, value_name = "FORMAT", default_value = "markdown",
          value_parser = crate::cli::formats(&[Format::Markdown, Format::Json]))]
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
        // Not among `formats` above: clap refuses it.
        Format::Text => print!("{}", explain::markdown(&explained)),
    }
    Ok(ExitCode::OK)
}

#[cfg(test)]
mod tests {
    use capture::explain;
    use capture::explained_task::ExplainedTask;
    use capture::testing::FakeProc;
    use capture::{snapshot_process, SnapshotOptions, ThreadSnapshot};
    use reports::model::{Incident, Sample, WedgedThread};

    /// A live capture of the fixture's task: a fake /proc tree with its cleaned stack.
    fn live_thread(task: &ExplainedTask, pid: i32) -> ThreadSnapshot {
        let tree = FakeProc::new();
        let comm = match (&task.workqueue, task.task.starts_with("kworker/")) {
            (Some(q), true) => format!("{}+{}", task.task, q.split_whitespace().next().unwrap()),
            _ if task.task.starts_with('(') => "pasted".to_string(),
            _ => task.task.clone(),
        };
        let stack: String = capture::render::stack_text(&task.stack)
            .lines()
            .map(|l| format!("[<0>] {l}\n"))
            .collect();
        let (ppid, flags, syscall) = if task.kernel_thread {
            (2, 0x0020_8040, "0 0x0 0x0 0x0 0x0 0x0 0x0 0x0 0x0\n")
        } else {
            (1, 0x0040_0100, "-1 0x7ffd00000000 0x7f0000001000\n")
        };
        let wchan = task
            .stack
            .first()
            .map(|f| capture::site::frame_name::base_name(&f.function).to_string())
            .unwrap_or_else(|| "0".into());
        tree.process(pid).comm(&comm).ppid(ppid).flags(flags);
        tree.task(pid, pid)
            .comm(&comm)
            .state('D')
            .ppid(ppid)
            .flags(flags)
            .wchan(&wchan)
            .syscall(syscall)
            .stack(&stack);
        let snap = snapshot_process(&tree.root(), pid, &SnapshotOptions::default()).unwrap();
        snap.threads.into_iter().next().unwrap()
    }

    /// Issue 28: the stack of an incident's report.md, pasted back into `explain`, gives the site the live
    /// capture gave — for every recorded public trace.
    #[test]
    fn a_reports_stacks_pasted_back_give_the_same_sites() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../capture/tests/data/traces");
        let mut checked = 0;
        for (i, entry) in std::fs::read_dir(dir).unwrap().enumerate() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let body: String = text
                .lines()
                .filter(|l| !l.starts_with("# "))
                .map(|l| format!("{l}\n"))
                .collect();
            let explained = explain::explain(body.as_bytes()).unwrap();
            let task = explained
                .tasks
                .iter()
                .find(|t| !t.stack.is_empty())
                .unwrap();
            let pid = 7000 + i as i32;
            let thread = live_thread(task, pid);
            let live_site = thread.site.clone().expect("a live site");
            let mut incident = Incident::new(pid);
            incident.wedged_threads.push(WedgedThread {
                tid: pid,
                comm: thread.comm.clone(),
                at_detection: Some(thread.clone()),
                ..WedgedThread::default()
            });
            let mut sample = Sample::default();
            sample.snapshot.pid = pid;
            sample.snapshot.threads.push(thread);
            incident.samples.push(sample);
            let md = reports::render::markdown(&incident);
            let pasted = explain::explain(md.as_bytes())
                .unwrap_or_else(|e| panic!("{}: {e}\n{md}", path.display()));
            let sites: Vec<_> = pasted
                .tasks
                .iter()
                .filter(|t| t.pid == Some(pid) && !t.stack.is_empty())
                .map(|t| t.site.clone().unwrap_or_default())
                .collect();
            assert!(
                !sites.is_empty(),
                "{}: no stack found in\n{md}",
                path.display()
            );
            for site in sites {
                assert_eq!(site, live_site, "{}", path.display());
            }
            checked += 1;
        }
        assert!(checked >= 30);
    }
}

#[cfg(test)]
mod command_tests {
    use super::*;

    #[test]
    fn a_file_that_is_no_kernel_log_exits_1_and_a_trace_exits_0() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.bin");
        std::fs::write(&junk, [0u8, 159, 146, 150, 0, 1, 2]).unwrap();
        let err = run(Args {
            input: Some(junk),
            format: Format::Json,
        })
        .unwrap_err();
        assert_eq!(crate::exit::code_for(&err), ExitCode::ERROR);
        assert!(err.to_string().contains("binary data"), "{err}");
        let trace = dir.path().join("trace.txt");
        std::fs::write(&trace, "[<0>] request_wait_answer+0x1/0x2 [fuse]\n[<0>] fuse_simple_request+0x1/0x2 [fuse]\n[<0>] fuse_lookup+0x1/0x2 [fuse]\n").unwrap();
        let code = run(Args {
            input: Some(trace),
            format: Format::Markdown,
        })
        .unwrap();
        assert_eq!(code, ExitCode::OK);
        let missing = run(Args {
            input: Some(dir.path().join("absent")),
            format: Format::Markdown,
        })
        .unwrap_err();
        assert!(missing.to_string().contains("absent"), "{missing}");
    }
}
