//! `wedge-capture ring`: read breadcrumb ring files (format: docs/breadcrumb-ring.md).

use std::fmt::Write as _;
use std::path::PathBuf;

use breadcrumb::{
    read_ring_from_file, Args as CallArgs, ReadOptions, Record, RecordKind, RingSnapshot,
};
use capture::untrusted::{self, Limits};

use crate::exit::{ExitCode, Failure};

#[derive(Debug, clap::Subcommand)]
pub enum RingCommand {
    /// Print the records of a ring file and the calls still in flight.
    Dump(DumpArgs),
}

pub use crate::cli::OutputFormat as Format;

/// Flags of `wedge-capture ring dump`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Reads the ring from outside the worker (two pread copies, every slot validated), so it works
on a ring whose writer is wedged in D, stopped or dead. A call 'in flight' was entered and
never exited: for a wedged worker, that is the driver call it is stuck in. Ages are shown
only when the ring was written on this boot (same boot id). An incident's copy of a ring
(ring.bin beside its incident.json) is a picture of the capture: its ages are counted to the
capture's read of the ring, the same on every look and in the report, on any boot.

The file is opened like every file from a directory others can write: a symbolic link is
never followed, a FIFO, socket or device is refused without being opened, and an error says
what is wrong with the file, never what it holds.

Examples:
  wedge-capture ring dump /run/wedge-capture/rings/81234-5501234.ring
  wedge-capture ring dump worker.ring --format json --last 200
  wedge-capture ring dump ring.bin --strict --owner 1000")]
pub struct DumpArgs {
    /// The ring file.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Output format: text (header, calls in flight, then the last records), or json (one object:
    /// `header`, `in_flight[]`, `records[]` (the last N), counters).
    #[arg(long, value_name = "FORMAT", default_value = "text",
          value_parser = crate::cli::formats(&[Format::Text, Format::Json]))]
    pub format: Format,
    /// How many of the newest records to print (0: only the header and calls in flight) [default: 32].
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
    /// Print every record in the ring (instead of --last).
    #[arg(long, conflicts_with = "last")]
    pub all: bool,
    /// Refuse a file not owned by --owner (default: our effective uid). Symlinks are refused
    /// whatever the mode.
    #[arg(long)]
    pub strict: bool,
    /// Owner uid required with --strict.
    #[arg(long, value_name = "UID", requires = "strict")]
    pub owner: Option<u32>,
}

/// Records `ring dump` prints without --last or --all.
const DEFAULT_LAST: usize = 32;

pub fn run(cmd: RingCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        RingCommand::Dump(args) => dump(args),
    }
}

fn dump(args: DumpArgs) -> anyhow::Result<ExitCode> {
    print!("{}", dump_output(&args)?);
    Ok(ExitCode::OK)
}

/// What `ring dump` prints.
fn dump_output(args: &DumpArgs) -> anyhow::Result<String> {
    let options = ReadOptions::default();
    let limits = Limits {
        max_len: options.max_file_bytes,
        // SAFETY: geteuid has no preconditions and cannot fail.
        owner: args
            .strict
            .then(|| args.owner.unwrap_or_else(|| unsafe { libc::geteuid() })),
    };
    let read = untrusted::open(&args.path, limits)
        .map_err(|err| err.to_string())
        .and_then(|file| read_ring_from_file(file.file(), &options).map_err(|e| e.to_string()));
    let mut snapshot = read.map_err(|message| {
        let shown = args.path.display().to_string();
        let message = if message.contains(&shown) {
            format!("cannot read ring: {message}")
        } else {
            format!("cannot read ring {shown}: {message}")
        };
        Failure::new(ExitCode::ERROR, message)
    })?;
    let captured = capture_clock(&args.path);
    if let Some(clock) = &captured {
        clock.apply(&mut snapshot);
    }
    let count = if args.all {
        snapshot.records.len()
    } else {
        args.last.unwrap_or(DEFAULT_LAST)
    };
    let output = match args.format {
        Format::Json => render_json(&args.path, &snapshot, count, captured.as_ref())?,
        // Markdown is not among `formats` above: clap refuses it.
        Format::Text | Format::Markdown => {
            let mut text = render_text(&args.path, &snapshot, count);
            if let Some(clock) = &captured {
                // Right under the path: whoever reads ages must know what they count to.
                let at = text.find('\n').map_or(text.len(), |i| i + 1);
                text.insert_str(at, &format!("  {}\n", clock.describe()));
            }
            text
        }
    };
    Ok(output)
}

/// The capture an incident's ring copy pictures: the reader's clock when the capture read the ring.
#[derive(Debug, Clone, PartialEq)]
pub struct CaptureClock {
    /// The incident directory's incident.json that names the copy.
    pub incident: PathBuf,
    /// CLOCK_MONOTONIC of the capture's read (the writer's clock when `same_boot`).
    pub monotonic_ns: u64,
    pub wall: Option<chrono::DateTime<chrono::Utc>>,
    /// Whether the capture ran on the ring writer's boot (its ages mean something only then).
    pub same_boot: Option<bool>,
}

impl CaptureClock {
    /// Ages counted to the capture instead of to now: a copy shows the same ages on every look.
    pub fn apply(&self, snapshot: &mut RingSnapshot) {
        snapshot.same_boot = self.same_boot;
        snapshot.reader_monotonic_ns = Some(self.monotonic_ns);
        let valid = self.same_boot == Some(true);
        for call in &mut snapshot.in_flight {
            call.age_ns = valid
                .then(|| self.monotonic_ns.checked_sub(call.entered_monotonic_ns))
                .flatten();
        }
    }

    fn describe(&self) -> String {
        let wall = self
            .wall
            .map(|w| format!(" at {}", w.format("%Y-%m-%dT%H:%M:%S%.3fZ")))
            .unwrap_or_default();
        format!(
            "copy of a ring in incident {}: ages at the capture's read{wall}",
            self.incident.display()
        )
    }
}

/// When `path` is a ring copy named by the incident.json beside it (`ring.bin`, `ring-2.bin` …), the clock of
/// the capture that read the ring; else `None` (a live ring: ages count to now).
pub fn capture_clock(path: &std::path::Path) -> Option<CaptureClock> {
    let name = path.file_name()?.to_str()?;
    let incident_path = path.parent()?.join(reports::layout::INCIDENT_FILE);
    // Bounded and checked like every incident read; a directory without one is no incident.
    let incident = reports::store::read::read_incident(&incident_path).ok()?;
    let excerpt = incident
        .ring
        .iter()
        .chain(&incident.extra_rings)
        .find(|ring| ring.copy.as_deref() == Some(name))?;
    Some(CaptureClock {
        incident: incident_path.parent()?.to_path_buf(),
        monotonic_ns: excerpt.read_at.monotonic_ns?,
        wall: excerpt.read_at.wall,
        same_boot: excerpt.same_boot,
    })
}

fn render_json(
    path: &std::path::Path,
    snapshot: &RingSnapshot,
    count: usize,
    captured: Option<&CaptureClock>,
) -> anyhow::Result<String> {
    let value = serde_json::json!({
        "path": path,
        "ages_at_capture": captured.map(|c| serde_json::json!({
            "incident": c.incident,
            "monotonic_ns": c.monotonic_ns,
            "wall": c.wall,
        })),
        "header": snapshot.header,
        "same_boot": snapshot.same_boot,
        "reader_monotonic_ns": snapshot.reader_monotonic_ns,
        "records_in_ring": snapshot.records.len(),
        "torn_slots": snapshot.torn_slots,
        "invalid_slots": snapshot.invalid_slots,
        "in_flight": snapshot.in_flight,
        "records": snapshot.last(count),
    });
    let mut text = serde_json::to_string_pretty(&value)?;
    text.push('\n');
    Ok(text)
}

/// Text view: what a person looks at first (the call in flight) comes first.
pub fn render_text(path: &std::path::Path, snapshot: &RingSnapshot, count: usize) -> String {
    let header = &snapshot.header;
    let mut out = String::new();
    let created = i64::try_from(header.created_realtime_ns)
        .ok()
        .map(chrono::DateTime::from_timestamp_nanos)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| "?".into());
    let boot = match snapshot.same_boot {
        Some(true) => "this boot",
        Some(false) => "ANOTHER boot: ages unknown",
        None => "boot unknown: ages not computed",
    };
    let _ = writeln!(out, "ring {}", path.display());
    let _ = writeln!(
        out,
        "  writer pid {} (start {} ticks, pid ns inode {}), created {created}",
        header.writer_pid, header.start_time_ticks, header.pidns_inode
    );
    let _ = writeln!(out, "  boot id {} ({boot})", header.boot_id);
    let lanes = if header.lane_count > 1 {
        format!(" in {} lanes", header.lane_count)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  format v{}: {} slots{lanes} x {} B; head {}; {} records, {} torn, {} invalid, {} dropped",
        header.version,
        header.slot_count,
        header.slot_size,
        header.head,
        snapshot.records.len(),
        snapshot.torn_slots,
        snapshot.invalid_slots,
        header.dropped
    );
    if header.counter_kind != 0 {
        let _ = writeln!(
            out,
            "  timestamps: {} at {} Hz, converted to {}",
            breadcrumb::counter::counter_name(header.counter_kind).unwrap_or("counter"),
            header.counter_hz,
            header.clock
        );
    }
    if let Some(status) = &header.status {
        let _ = writeln!(
            out,
            "  writer status (code {}): {status}",
            header.status_code
        );
    }
    out.push('\n');
    if snapshot.in_flight.is_empty() {
        out.push_str("IN FLIGHT: none (every call recorded in the ring returned)\n");
    } else {
        let _ = writeln!(
            out,
            "IN FLIGHT ({} entered, never exited):",
            snapshot.in_flight.len()
        );
        for call in &snapshot.in_flight {
            let age = call
                .age_ns
                .map(|ns| format!(" for {}", human_duration(ns)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  tid {:<7} {}{age}  seq {}  {}{}",
                call.tid,
                call_text(&call.call, &call.args, &call.label),
                record_id(call.lane, call.seq),
                label_beside(&call.call, &call.label),
                format_args(&call.args)
            );
        }
    }
    let shown = snapshot.last(count);
    if !shown.is_empty() {
        let newest = snapshot.records.last().map(|r| r.monotonic_ns).unwrap_or(0);
        let _ = writeln!(
            out,
            "\nLAST {} RECORDS (oldest first; time relative to the newest record):",
            shown.len()
        );
        for record in shown {
            out.push_str(&record_line(record, newest));
            out.push('\n');
        }
    }
    out
}

/// A record's index; in a version-2 ring's own lanes, `lane:index` (lane 0, the shared lane, and
/// version 1 rings show the bare index).
fn record_id(lane: u32, seq: u64) -> String {
    if lane == 0 {
        seq.to_string()
    } else {
        format!("{lane}:{seq}")
    }
}

fn record_line(record: &Record, newest_ns: u64) -> String {
    let before = newest_ns.saturating_sub(record.monotonic_ns);
    let when = format!("-{:.3} ms", before as f64 / 1e6);
    match record.kind {
        RecordKind::Enter => format!(
            "  {:>10} {:>14}  tid {:<7} enter {}  {}{}",
            record_id(record.lane, record.seq),
            when,
            record.tid,
            call_text(&record.call, &record.args, &record.label),
            label_beside(&record.call, &record.label),
            format_args(&record.args)
        ),
        RecordKind::Exit => format!(
            "  {:>10} {:>14}  tid {:<7} exit  {} -> {} (enter seq {})",
            record_id(record.lane, record.seq),
            when,
            record.tid,
            capture::escape::controls(reports::text::call_name(&record.call, &record.label)),
            record.result.unwrap_or_default(),
            record
                .enter_seq
                .map(|s| record_id(record.enter_lane.unwrap_or(record.lane), s))
                .unwrap_or_else(|| "?".into())
        ),
    }
}

/// The one name of a call (`reports::text::call_text`: what report.md and the verdict say) and its label
/// beside it when the label is not already the name, escaped for a terminal (a label is the writer's text).
fn call_text(call: &str, args: &CallArgs, label: &str) -> String {
    capture::escape::controls(&reports::text::call_text(call, args, label)).into_owned()
}

fn label_beside(call: &str, label: &str) -> String {
    if reports::text::label_beside(call, label).is_empty() {
        String::new()
    } else {
        format!("{label:?} ")
    }
}

fn format_args(args: &CallArgs) -> String {
    let mut parts = Vec::new();
    if args.bytes != 0 {
        parts.push(format!("bytes={}", args.bytes));
    }
    if args.ptr != 0 {
        parts.push(format!("ptr={:#x}", args.ptr));
    }
    if args.ptr2 != 0 {
        parts.push(format!("ptr2={:#x}", args.ptr2));
    }
    if args.stream != 0 {
        parts.push(format!("stream={:#x}", args.stream));
    }
    if args.chunk_count != 0 || args.chunk != 0 {
        parts.push(format!("chunk={}/{}", args.chunk, args.chunk_count));
    }
    if args.tensor_count != 0 || args.tensor_first != 0 {
        parts.push(format!(
            "tensors={}..{}",
            args.tensor_first,
            u64::from(args.tensor_first) + u64::from(args.tensor_count)
        ));
    }
    parts.join(" ")
}

fn human_duration(ns: u64) -> String {
    let secs = ns as f64 / 1e9;
    if secs >= 120.0 {
        format!("{:.1} min", secs / 60.0)
    } else if secs >= 1.0 {
        format!("{secs:.2} s")
    } else {
        format!("{:.3} ms", ns as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use breadcrumb::format::Call;
    use reports::model::{Incident, RingExcerpt};

    const LABEL: &str = "selftest ioctl FS_IOC_SETFLAGS";

    fn dump_text(path: &std::path::Path) -> String {
        dump_output(&DumpArgs {
            path: path.to_path_buf(),
            format: Format::Text,
            last: None,
            all: false,
            strict: false,
            owner: None,
        })
        .unwrap()
    }

    fn in_flight_line(text: &str) -> String {
        let line = text
            .lines()
            .find(|l| l.contains(LABEL))
            .unwrap_or_else(|| panic!("{text}"));
        line.to_string()
    }

    /// An incident's ring copy shows the ages of the capture on every look (a live ring's grow), and the call
    /// has one name in `ring dump`, report.md and the verdict.
    #[test]
    fn a_copied_ring_shows_the_same_ages_on_two_looks_and_one_name() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join(reports::layout::RING_FILE);
        let writer = breadcrumb::Writer::create(&copy, 64).unwrap();
        let _in_flight = writer.enter(Call::Custom, &CallArgs::default(), LABEL);
        let snapshot = read_ring_from_file(
            &std::fs::File::open(&copy).unwrap(),
            &ReadOptions::default(),
        )
        .unwrap();
        let mut excerpt = RingExcerpt::from_snapshot(Some("/run/x/1-2.ring".into()), &snapshot, 32);
        excerpt.copy = Some(reports::layout::RING_FILE.to_string());
        let mut incident = Incident::new(4242);
        incident.ring = Some(excerpt.clone());
        std::fs::write(
            dir.path().join(reports::layout::INCIDENT_FILE),
            serde_json::to_vec(&incident).unwrap(),
        )
        .unwrap();

        let first = dump_text(&copy);
        std::thread::sleep(std::time::Duration::from_millis(30));
        let second = dump_text(&copy);
        assert_eq!(in_flight_line(&first), in_flight_line(&second));
        assert!(first.contains("ages at the capture's read"), "{first}");
        // And the age is the incident's own.
        let age = excerpt.in_flight[0].age_ns.expect("same boot: an age");
        assert!(
            in_flight_line(&first).contains(&format!("for {}", human_duration(age))),
            "{first}"
        );

        // One name: the label of a custom call, as report.md and the verdict write it; never `custom`.
        let name = reports::text::call_text("custom", &CallArgs::default(), LABEL);
        assert_eq!(name, format!("{LABEL}()"));
        assert!(
            in_flight_line(&first).contains(&format!(" {name} for ")),
            "{first}"
        );
        assert!(!first.contains("custom"), "{first}");
        let markdown = reports::render::markdown(&incident);
        assert!(
            markdown.contains(&format!(
                "IN FLIGHT tid {} {name} entered",
                excerpt.in_flight[0].tid
            )),
            "{markdown}"
        );

        // The same file outside its incident is a live ring: its age counts to now and grows.
        std::fs::remove_file(dir.path().join(reports::layout::INCIDENT_FILE)).unwrap();
        let live = dump_text(&copy);
        assert!(!live.contains("ages at the capture's read"), "{live}");
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_ne!(in_flight_line(&live), in_flight_line(&dump_text(&copy)));
    }
}
