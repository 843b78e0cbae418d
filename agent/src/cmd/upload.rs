//! `wedge-capture upload`: the instrumented chunked bulk uploader (uploader crate) on the
//! command line. By default it reproduces the wedged job's upload: 213,304 sample tensors of
//! shape [1,193] f32 plus 50 parameters of 256×1024 f32, chunked as ztensor does.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use breadcrumb::Writer;
use serde::Serialize;
use uploader::bench::{self, CompareReport, Measurement};
use uploader::cuda::CudaDriver;
use uploader::host::{HostConfig, HostDriver};
use uploader::outcome::{Progress, StrategyKind};
use uploader::pack::PackStore;
use uploader::pinned::{self, ArenaMemory, PinnedOptions, StagingMemory};
use uploader::plan::{plan, Plan, PlanOptions, Planned};
use uploader::strategy::{upload, ManagedOptions, Strategy};
use uploader::verify::{verify, VerifyReport};
use uploader::workload::{Workload, WorkloadSpec};
use uploader::{Driver, Traced};

use crate::cli::{self, OutputFormat};
use crate::exit::{ExitCode, Failure};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// The NVIDIA driver (libcuda), through cudarc's low-level calls.
    Cuda,
    /// Device memory simulated in host memory (no GPU needed; same driver-call sequence).
    Host,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyArg {
    /// ztensor's path: per chunk cuMemAlloc, pageable staging, synchronous cuMemcpyHtoD.
    Ztensor,
    /// cuMemAllocManaged per chunk, packed by the host, prefetched to the device.
    Managed,
    /// Pinned staging buffers packed by threads, overlapped with async copies on a stream.
    Pinned,
}

impl From<StrategyArg> for StrategyKind {
    fn from(s: StrategyArg) -> StrategyKind {
        match s {
            StrategyArg::Ztensor => StrategyKind::Ztensor,
            StrategyArg::Managed => StrategyKind::Managed,
            StrategyArg::Pinned => StrategyKind::Pinned,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PackWait {
    /// Spin (with a yield now and then): no wake-up latency, burns the packing threads' CPUs.
    Spin,
    /// Sleep; the publisher wakes each thread per slice.
    Park,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StagingArg {
    /// cuMemHostAlloc.
    Hostalloc,
    /// An anonymous mapping advised for huge pages, page-locked with cuMemHostRegister.
    Register,
    /// The same mapping, faulted in by the packers and registered in doubling groups of
    /// buffers while packing goes on (the default).
    Overlap,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArenaArg {
    /// A stream-ordered pool kept for the process: later uploads reuse memory the GPU has
    /// already written (fresh memory fills slower).
    Pool,
    /// A fresh cuMemAlloc per upload.
    Alloc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreArg {
    /// Time both on the first pieces of each upload, then use the faster.
    Auto,
    /// memcpy.
    Plain,
    /// Non-temporal stores (x86_64; plain elsewhere): no read-for-ownership of staging lines.
    Streaming,
    /// Streaming when the upload's mean tensor is under 64 KiB, else plain (the default).
    Bysize,
}

fn parse_pinned(s: &str) -> Result<PinnedOptions, String> {
    pinned::parse_pinned_config(s).map_err(|e| e.to_string())
}

fn parse_contender(s: &str) -> Result<bench::Contender, String> {
    s.parse().map_err(|e: uploader::Error| e.to_string())
}

/// Parses a byte count: `67108864`, `64MiB`, `64M`, `4GiB`, `512KiB` (binary units).
fn parse_bytes(s: &str) -> Result<u64, String> {
    pinned::parse_bytes(s)
}

/// Upload f32 tensors to a GPU in chunks, with a breadcrumb around every driver call.
///
/// The defaults reproduce the wedged job's upload (ztensor bulkUploadF32): 213,304 tensors of
/// [1,193] f32 then 50 parameters of 256×1024 f32, chunks of at most 64 MiB and 4096 tensors.
/// With --ring (or WEDGE_CAPTURE_RING set) every driver call writes an enter record before and
/// an exit record after it, so `wedge-capture` names the exact call and chunk of a wedge.
///
/// A flag that the chosen mode would not use is refused (exit 2), never ignored: the pinned flags need
/// --strategy pinned (or --compare), --no-prefetch --strategy managed (or --compare), --host-memory
/// --backend host, --ring-slots --ring, --skip/--sweep/--repeat --compare; --compare runs every strategy
/// and verifies none, so it takes no --strategy or --verify.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  wedge-capture upload --backend host --verify
  wedge-capture upload --strategy pinned --verify --ring /tmp/upload.ring
  wedge-capture upload --compare --ring /tmp/cmp.ring --format json")]
pub struct Args {
    /// Driver backend.
    #[arg(long, value_enum, default_value_t = Backend::Cuda)]
    pub backend: Backend,
    /// Upload strategy (--compare runs them all) [default: ztensor].
    #[arg(long, value_enum, conflicts_with = "compare")]
    pub strategy: Option<StrategyArg>,
    /// Sample tensors.
    #[arg(long, default_value_t = 213_304, value_name = "N")]
    pub tensors: usize,
    /// f32 elements per sample tensor ([1,193] → 193, 772 bytes).
    #[arg(long, default_value_t = 193, value_name = "F")]
    pub floats: usize,
    /// Parameter tensors, uploaded after the samples.
    #[arg(long, default_value_t = 50, value_name = "P")]
    pub params: usize,
    /// f32 elements per parameter tensor (256×1024).
    #[arg(long, default_value_t = 256 * 1024, value_name = "F")]
    pub param_floats: usize,
    /// Byte cap per chunk (e.g. 64MiB).
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes, value_name = "B")]
    pub chunk_bytes: u64,
    /// Tensor cap per chunk.
    #[arg(long, default_value_t = 4096, value_name = "T")]
    pub chunk_tensors: u32,
    /// Align each tensor's offset in its chunk to this many bytes (default: no padding, as ztensor).
    #[arg(long, value_parser = parse_bytes, value_name = "A")]
    pub align: Option<u64>,
    /// Breadcrumb ring file to create (default: $WEDGE_CAPTURE_RING / $WEDGE_CAPTURE_RING_DIR, else none).
    #[arg(long, value_name = "PATH")]
    pub ring: Option<PathBuf>,
    /// Slots in a ring created by --ring (a power of two).
    #[arg(long, default_value_t = 1 << 16, value_name = "N", requires = "ring")]
    pub ring_slots: u32,
    /// Read every tensor back from the device and compare.
    #[arg(long, conflicts_with = "compare")]
    pub verify: bool,
    /// Output format: text, or json (one object).
    #[arg(long, value_name = "FORMAT", default_value = "text",
          value_parser = cli::formats(&[OutputFormat::Text, OutputFormat::Json]))]
    pub format: OutputFormat,
    /// Old spelling of `--format json`.
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
    /// Run every strategy and the single-copy ceilings (pinned, pageable) on the same bytes and
    /// print GB/s and ratios; with --ring, also breadcrumb cost (ring on against off).
    #[arg(long)]
    pub compare: bool,
    /// --compare: leave these contenders out (comma list of pageable, ztensor, managed, pinned, reused, ring-ztensor, ring-pinned).
    #[arg(long, value_delimiter = ',', value_parser = parse_contender, value_name = "LIST", requires = "compare")]
    pub skip: Vec<bench::Contender>,
    /// Timed runs per contender in --compare (median reported, after one warm-up).
    #[arg(long, default_value_t = 5, value_name = "R", requires = "compare")]
    pub repeat: usize,
    /// pinned: staging buffers, a ring the packers fill while earlier ones are copied (default 8).
    #[arg(long, value_name = "N")]
    pub staging_buffers: Option<usize>,
    /// pinned: bytes per staging buffer, one async copy each (default 4MiB).
    #[arg(long, value_parser = parse_bytes, value_name = "B")]
    pub staging_bytes: Option<u64>,
    /// pinned: how staging memory is page-locked (default overlap).
    #[arg(long, value_enum, value_name = "HOW")]
    pub staging_memory: Option<StagingArg>,
    /// pinned: where the device arena comes from (default pool).
    #[arg(long, value_enum, value_name = "HOW")]
    pub arena: Option<ArenaArg>,
    /// pinned: the submitting thread packs pieces while it waits for packers (true) or spins
    /// (false) (default false).
    #[arg(long, value_name = "BOOL")]
    pub submitter_packs: Option<bool>,
    /// pinned: page-lock register/overlap staging read-only for the device
    /// (CU_MEMHOSTREGISTER_READ_ONLY) where the device supports it: unlocking then takes half
    /// as long (default true).
    #[arg(long, value_name = "BOOL")]
    pub staging_read_only: Option<bool>,
    /// pinned: packing threads; the submitting thread does not pack (default: all CPUs but
    /// two, at least three quarters of them, at most 14).
    #[arg(long, value_name = "N")]
    pub pack_threads: Option<usize>,
    /// pinned: bytes a packing thread claims at a time (default 256KiB).
    #[arg(long, value_parser = parse_bytes, value_name = "B")]
    pub pack_piece: Option<u64>,
    /// pinned: plain or non-temporal (streaming) stores into staging memory, auto: time both on
    /// the first pieces of each upload and keep the faster, or bysize (the default): streaming
    /// when the upload's mean tensor is under 64 KiB, else plain.
    #[arg(long, value_enum, value_name = "HOW")]
    pub pack_store: Option<StoreArg>,
    /// pinned: idle packing threads spin (fast hand-off) or sleep [default: spin].
    #[arg(long, value_enum)]
    pub pack_wait: Option<PackWait>,
    /// --compare: also time these pinned configurations, cold and with staging reused (comma list of
    /// BUFFERSxBYTESxTHREADS[:spin|:park][:auto|:plain|:streaming][:hostalloc|:register|:overlap][:pool|:alloc]
    /// [:piece=BYTES][:help][:fit], e.g. 8x2MiBx8,4x4MiBx8:plain:register).
    #[arg(long, value_delimiter = ',', value_parser = parse_pinned, value_name = "LIST", requires = "compare")]
    pub sweep: Vec<PinnedOptions>,
    /// managed: skip the prefetch to the device (data then migrates on first GPU touch).
    #[arg(long)]
    pub no_prefetch: bool,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub device: i32,
    /// host backend: simulated device memory [default: 16GiB].
    #[arg(long, value_parser = parse_bytes, value_name = "B")]
    pub host_memory: Option<u64>,
}

#[derive(Debug, Serialize)]
struct UploadSummary {
    backend: &'static str,
    strategy: &'static str,
    tensors: usize,
    skipped: usize,
    bytes: u64,
    chunks: usize,
    driver_calls: u64,
    seconds: f64,
    gbps: f64,
    ring: Option<PathBuf>,
    verify: Option<VerifyReport>,
}

/// A `\r` progress line on stderr, at most every 100 ms, only on a terminal.
struct ProgressLine {
    enabled: bool,
    last: Option<Instant>,
}

impl ProgressLine {
    fn new(enabled: bool) -> ProgressLine {
        ProgressLine {
            enabled: enabled && std::io::stderr().is_terminal(),
            last: None,
        }
    }

    fn update(&mut self, p: &Progress) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        let finished = p.done == p.count;
        if !finished
            && self
                .last
                .is_some_and(|t| now - t < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(now);
        let pct = if p.bytes_total == 0 {
            100.0
        } else {
            p.bytes_done as f64 * 100.0 / p.bytes_total as f64
        };
        let width = 30;
        let filled = ((pct / 100.0) * width as f64) as usize;
        eprint!(
            "\r[{}{}] {:5.1}%  {} {}/{}  {:.1}/{:.1} MB",
            "#".repeat(filled.min(width)),
            " ".repeat(width - filled.min(width)),
            pct,
            p.unit,
            p.done,
            p.count,
            p.bytes_done as f64 / 1e6,
            p.bytes_total as f64 / 1e6
        );
        if finished {
            eprintln!();
        }
    }

    fn note(&self, what: &str) {
        if self.enabled {
            eprintln!("{what}");
        }
    }
}

fn map_err(e: uploader::Error) -> anyhow::Error {
    if e.is_no_driver() {
        Failure::new(ExitCode::NO_DRIVER, e.to_string()).into()
    } else {
        anyhow::Error::new(e)
    }
}

/// The pinned settings: each flag given, the library default otherwise.
fn pinned_options(args: &Args) -> PinnedOptions {
    let d = PinnedOptions::default();
    PinnedOptions {
        buffers: args.staging_buffers.unwrap_or(d.buffers),
        buffer_bytes: args.staging_bytes.unwrap_or(d.buffer_bytes),
        threads: args.pack_threads.unwrap_or(d.threads),
        spin: args.pack_wait.unwrap_or(PackWait::Spin) == PackWait::Spin,
        piece_bytes: args.pack_piece.unwrap_or(d.piece_bytes),
        store: match args.pack_store {
            None => d.store,
            Some(StoreArg::Auto) => PackStore::Auto,
            Some(StoreArg::Plain) => PackStore::Plain,
            Some(StoreArg::Streaming) => PackStore::Streaming,
            Some(StoreArg::Bysize) => PackStore::BySize,
        },
        staging: match args.staging_memory {
            None => d.staging,
            Some(StagingArg::Hostalloc) => StagingMemory::HostAlloc,
            Some(StagingArg::Register) => StagingMemory::Register,
            Some(StagingArg::Overlap) => StagingMemory::Overlap,
        },
        arena: match args.arena {
            None => d.arena,
            Some(ArenaArg::Pool) => ArenaMemory::Pool,
            Some(ArenaArg::Alloc) => ArenaMemory::Alloc,
        },
        submitter_packs: args.submitter_packs.unwrap_or(d.submitter_packs),
        // An explicit ring is used as given.
        fit_ring: d.fit_ring && args.staging_buffers.is_none(),
        read_only_staging: args.staging_read_only.unwrap_or(d.read_only_staging),
        // Set with a pinned config (`:gather`), as the sweep does.
        gather: d.gather,
    }
}

impl Args {
    fn json_output(&self) -> bool {
        cli::chosen(self.format, self.json) == OutputFormat::Json
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (options, strategy) = settings(&args)?;

    // The driver first: a machine without one fails fast, before generating data.
    let cuda;
    let host;
    let driver: &dyn Driver = match args.backend {
        Backend::Cuda => {
            cuda = CudaDriver::load().map_err(map_err)?;
            &cuda
        }
        Backend::Host => {
            host = HostDriver::new(HostConfig {
                memory_bytes: args.host_memory.unwrap_or(DEFAULT_HOST_MEMORY),
                ..HostConfig::default()
            });
            &host
        }
    };
    let ring = open_ring(&args)?;
    let ring_path = ring.as_ref().map(|r| r.path().to_path_buf());
    let t = Traced::open(
        driver,
        if args.compare { None } else { ring.as_ref() },
        args.device,
    )
    .map_err(map_err)?;

    let mut progress = ProgressLine::new(!args.json_output());
    let workload = generate_workload(&args, &mut progress);
    let plan = match plan(workload.infos(), &options).map_err(map_err)? {
        Planned::Bulk(p) => p,
        Planned::TooFew {
            eligible,
            min_eligible,
        } => {
            print_too_few(&args, eligible, min_eligible);
            t.close().map_err(map_err)?;
            return Ok(ExitCode::OK);
        }
    };

    if args.compare {
        let report = compare(
            &args,
            &t,
            &strategy,
            &workload,
            &plan,
            ring.as_ref(),
            &mut progress,
        )?;
        if args.json_output() {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print_compare(&report, &args);
        }
        return Ok(ExitCode::OK);
    }
    let summary = upload_once(
        &args,
        &t,
        &strategy,
        &workload,
        &plan,
        ring_path,
        &mut progress,
    )?;
    print_summary(&summary, args.json_output())?;
    Ok(ExitCode::OK)
}

/// The plan options and the strategy the flags ask for; a usage error if they make no sense.
fn settings(args: &Args) -> anyhow::Result<(PlanOptions, Strategy)> {
    if args.tensors + args.params == 0 {
        return Err(Failure::new(
            ExitCode::USAGE,
            "nothing to upload: --tensors and --params are both 0",
        )
        .into());
    }
    let options = PlanOptions {
        chunk_bytes: args.chunk_bytes,
        chunk_tensors: args.chunk_tensors,
        alignment: args.align,
        ..PlanOptions::default()
    };
    options
        .validate()
        .map_err(|e| Failure::new(ExitCode::USAGE, e.to_string()))?;
    refuse_unused_flags(args)?;
    let mut strategy = Strategy::new(args.strategy.unwrap_or(StrategyArg::Ztensor).into());
    strategy.pinned = pinned_options(args);
    strategy.managed = ManagedOptions {
        prefetch: !args.no_prefetch,
        ..ManagedOptions::default()
    };
    if strategy.pinned.validate().is_err() {
        return Err(Failure::new(
            ExitCode::USAGE,
            "--staging-buffers (≤ 4096), --staging-bytes, --pack-threads and --pack-piece must be > 0",
        )
        .into());
    }
    Ok((options, strategy))
}

/// The host backend's simulated device memory without --host-memory.
const DEFAULT_HOST_MEMORY: u64 = 16 << 30;

/// A usage error naming the flags given that the chosen strategy and backend would not use (clap's
/// `requires`/`conflicts_with` cover the flags whose use does not depend on a value).
fn refuse_unused_flags(args: &Args) -> Result<(), Failure> {
    let strategy = args.strategy.unwrap_or(StrategyArg::Ztensor);
    let mut unused = Vec::new();
    if !args.compare && strategy != StrategyArg::Pinned {
        let pinned = [
            ("--staging-buffers", args.staging_buffers.is_some()),
            ("--staging-bytes", args.staging_bytes.is_some()),
            ("--staging-memory", args.staging_memory.is_some()),
            ("--arena", args.arena.is_some()),
            ("--submitter-packs", args.submitter_packs.is_some()),
            ("--staging-read-only", args.staging_read_only.is_some()),
            ("--pack-threads", args.pack_threads.is_some()),
            ("--pack-piece", args.pack_piece.is_some()),
            ("--pack-store", args.pack_store.is_some()),
            ("--pack-wait", args.pack_wait.is_some()),
        ];
        let given: Vec<&str> = pinned.iter().filter(|(_, g)| *g).map(|(f, _)| *f).collect();
        if !given.is_empty() {
            unused.push(format!(
                "{} (pinned only: add --strategy pinned)",
                given.join(", ")
            ));
        }
    }
    if !args.compare && strategy != StrategyArg::Managed && args.no_prefetch {
        unused.push("--no-prefetch (managed only: add --strategy managed)".to_string());
    }
    if args.backend != Backend::Host && args.host_memory.is_some() {
        unused.push("--host-memory (host backend only: add --backend host)".to_string());
    }
    if unused.is_empty() {
        return Ok(());
    }
    Err(Failure::new(
        ExitCode::USAGE,
        format!("flags this upload would not use: {}", unused.join("; ")),
    ))
}

/// The breadcrumb ring: `--ring`, else the one the environment names, else none.
fn open_ring(args: &Args) -> anyhow::Result<Option<Writer>> {
    Ok(match &args.ring {
        Some(path) => Some(
            Writer::create(path, args.ring_slots)
                .with_context(|| format!("cannot create ring {}", path.display()))?,
        ),
        None => Writer::from_env()
            .context("cannot create the ring named by WEDGE_CAPTURE_RING(_DIR)")?,
    })
}

/// The synthetic workload the flags describe.
fn generate_workload(args: &Args, progress: &mut ProgressLine) -> Workload {
    let spec = WorkloadSpec {
        samples: args.tensors,
        sample_floats: args.floats,
        params: args.params,
        param_floats: args.param_floats,
        ..WorkloadSpec::default()
    };
    progress.note(&format!(
        "generating {} tensors ({:.1} MB) …",
        spec.tensors(),
        spec.bytes() as f64 / 1e6
    ));
    Workload::synthetic(&spec)
}

/// Says that the workload has too few eligible tensors for a bulk upload (not an error:
/// ztensor would not bulk-upload it either).
fn print_too_few(args: &Args, eligible: usize, min_eligible: usize) {
    let msg = format!(
        "{eligible} eligible tensors, fewer than {min_eligible}: ztensor does no bulk upload"
    );
    if args.json_output() {
        println!(
            "{}",
            serde_json::json!({ "bulk": false, "eligible": eligible, "min_eligible": min_eligible })
        );
    } else {
        println!("{msg}");
    }
}

/// `--compare`: every strategy against the ceilings; closes `t`.
fn compare(
    args: &Args,
    t: &Traced,
    strategy: &Strategy,
    workload: &Workload,
    plan: &Plan,
    ring: Option<&Writer>,
    progress: &mut ProgressLine,
) -> anyhow::Result<CompareReport> {
    let options = bench::CompareOptions {
        repeat: args.repeat,
        ring,
        skip: args.skip.clone(),
        sweep: args.sweep.clone(),
    };
    let report = bench::compare(t, strategy, workload, plan, &options, &mut |what| {
        progress.note(&format!("measuring {what} …"))
    })
    .map_err(map_err)?;
    t.close().map_err(map_err)?;
    Ok(report)
}

/// One timed upload (verified with `--verify`), freed; closes `t`.
fn upload_once(
    args: &Args,
    t: &Traced,
    strategy: &Strategy,
    workload: &Workload,
    plan: &Plan,
    ring: Option<PathBuf>,
    progress: &mut ProgressLine,
) -> anyhow::Result<UploadSummary> {
    let calls_before = t.calls();
    let start = Instant::now();
    let uploaded =
        upload(t, strategy, workload, plan, &mut |p| progress.update(p)).map_err(map_err)?;
    let seconds = start.elapsed().as_secs_f64();
    let driver_calls = t.calls() - calls_before;
    let verified = if args.verify {
        match verify(t, &uploaded, workload) {
            Ok(r) => Some(r),
            Err(e) => {
                let _ = uploaded.free(t);
                return Err(map_err(e));
            }
        }
    } else {
        None
    };
    uploaded.free(t).map_err(map_err)?;
    t.close().map_err(map_err)?;
    Ok(UploadSummary {
        backend: t.backend(),
        strategy: strategy.kind.name(),
        tensors: plan.placements.len(),
        skipped: plan.skipped,
        bytes: plan.tensor_bytes,
        chunks: plan.chunks.len(),
        driver_calls,
        seconds,
        gbps: plan.tensor_bytes as f64 / seconds / 1e9,
        ring,
        verify: verified,
    })
}

fn print_summary(summary: &UploadSummary, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(summary)?);
    } else {
        println!(
            "uploaded {} tensors ({:.1} MB) in {} chunks with {} on {}: {:.4} s, {:.2} GB/s, {} driver calls",
            summary.tensors,
            summary.bytes as f64 / 1e6,
            summary.chunks,
            summary.strategy,
            summary.backend,
            summary.seconds,
            summary.gbps,
            summary.driver_calls
        );
        if let Some(v) = &summary.verify {
            println!(
                "verified: {} tensors, {:.1} MB read back in {} copies, all equal",
                v.tensors,
                v.bytes as f64 / 1e6,
                v.reads
            );
        }
        if let Some(p) = &summary.ring {
            println!("breadcrumbs: {}", p.display());
        }
    }
    Ok(())
}

fn print_compare(r: &CompareReport, args: &Args) {
    println!(
        "workload: {} tensors, {:.1} MB, {} chunks; backend {}; median of {} runs after a warm-up",
        r.tensors,
        r.bytes as f64 / 1e6,
        r.chunks,
        r.backend,
        r.repeat
    );
    println!("pinned: {}", pinned_options(args).describe());
    println!(
        "{:<32} {:>10} {:>8} {:>11} {:>11} {:>7}",
        "contender", "median s", "GB/s", "of ceiling", "vs ztensor", "calls"
    );
    let ceiling = r.ceiling_pinned.gbps;
    let ztensor = r
        .strategies
        .iter()
        .find(|m| m.name == "ztensor")
        .map(|m| m.median_seconds);
    let row = |m: &Measurement| {
        println!(
            "{:<32} {:>10.4} {:>8.2} {:>10.1}% {:>10.2}x {:>7}",
            m.name,
            m.median_seconds,
            m.gbps,
            m.gbps / ceiling * 100.0,
            ztensor.map_or(f64::NAN, |z| z / m.median_seconds),
            m.driver_calls
        );
        if let Some(b) = &m.pinned {
            println!("{:<32} {}", "", breakdown_line(b));
        }
    };
    row(&r.ceiling_pinned);
    row(&r.ceiling_pinned_in_rounds);
    if let Some(m) = &r.ceiling_pageable {
        row(m);
    }
    for m in &r.strategies {
        row(m);
    }
    for s in &r.skipped {
        println!("{:<32} skipped: {}", s.name, s.reason);
    }
    for c in &r.ring {
        println!(
            "breadcrumbs, {}: ring off {:.4} s, on {:.4} s, overhead {:+.2}% (paired {:+.2}%, {} calls per run)",
            c.strategy,
            c.off.median_seconds,
            c.on.median_seconds,
            c.overhead * 100.0,
            c.paired_overhead * 100.0,
            c.on.driver_calls
        );
    }
    if !r.sweep.is_empty() {
        println!("pinned sweep: cold = staging allocated per upload");
        for row in &r.sweep {
            println!("  {}", row.options.describe());
            for m in [&row.cold, &row.reused] {
                println!(
                    "    {:<24} {:.4} s {:6.2} GB/s {:5.1}% of ceiling",
                    m.name,
                    m.median_seconds,
                    m.gbps,
                    m.gbps / ceiling * 100.0
                );
                if let Some(b) = &m.pinned {
                    println!("      {}", breakdown_line(b));
                }
            }
        }
    }
}

/// Where a pinned upload's time went, one line (medians).
fn breakdown_line(b: &uploader::bench::PinnedBreakdown) -> String {
    format!(
        "staging {:.2} ms, arena {:.2} ms ({}), waiting for packers {:.2} ms (first slice {:.2}), \
         registering {:.2} ms ({}), for copies {:.2} ms, unregistering early {:.2} ms, teardown \
         {:.2} ms; stores {}",
        b.staging_ms,
        b.arena_ms,
        b.arenas,
        b.pack_wait_ms,
        b.first_slice_ms,
        b.register_ms,
        b.staging_locks,
        b.copy_wait_ms,
        b.unregister_ms,
        b.teardown_ms,
        b.stores
    )
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("67108864"), Ok(64 << 20));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("4G"), Ok(4 << 30));
        assert_eq!(parse_bytes("512 KiB"), Ok(512 << 10));
        assert!(parse_bytes("12XB").is_err());
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("99999999999999GiB").is_err());
    }
}
