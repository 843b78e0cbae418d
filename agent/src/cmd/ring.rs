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
only when the ring was written on this boot (same boot id).

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
    let snapshot = read.map_err(|message| {
        let shown = args.path.display().to_string();
        let message = if message.contains(&shown) {
            format!("cannot read ring: {message}")
        } else {
            format!("cannot read ring {shown}: {message}")
        };
        Failure::new(ExitCode::ERROR, message)
    })?;
    let count = if args.all {
        snapshot.records.len()
    } else {
        args.last.unwrap_or(DEFAULT_LAST)
    };
    let output = match args.format {
        Format::Json => render_json(&args.path, &snapshot, count)?,
        // Markdown is not among `formats` above: clap refuses it.
        Format::Text | Format::Markdown => render_text(&args.path, &snapshot, count),
    };
    print!("{output}");
    Ok(ExitCode::OK)
}

fn render_json(
    path: &std::path::Path,
    snapshot: &RingSnapshot,
    count: usize,
) -> anyhow::Result<String> {
    let value = serde_json::json!({
        "path": path,
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
                call.call,
                record_id(call.lane, call.seq),
                quoted_label(&call.label),
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
            record.call,
            quoted_label(&record.label),
            format_args(&record.args)
        ),
        RecordKind::Exit => format!(
            "  {:>10} {:>14}  tid {:<7} exit  {} -> {} (enter seq {})",
            record_id(record.lane, record.seq),
            when,
            record.tid,
            record.call,
            record.result.unwrap_or_default(),
            record
                .enter_seq
                .map(|s| record_id(record.enter_lane.unwrap_or(record.lane), s))
                .unwrap_or_else(|| "?".into())
        ),
    }
}

fn quoted_label(label: &str) -> String {
    if label.is_empty() {
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
