//! Measurements for `upload --compare`: every strategy against the single-copy ceilings of the
//! same bytes (one pinned `cuMemcpyHtoDAsync`, one pageable `cuMemcpyHtoD`), and the cost of
//! breadcrumbs (ring on against ring off), all in one process.
//!
//! Each timed strategy run covers the whole upload (allocations, packing, copies, the final
//! synchronize) and excludes freeing. Ceilings time the copy alone, back to back, first. The
//! strategies then run in rounds (one run of each per round, the order rotating), after one
//! untimed warm-up round; the median of the rounds is reported.

use std::time::Instant;

use breadcrumb::Writer;
use serde::Serialize;

use crate::driver::{DevicePtr, Stream};
use crate::error::{Error, Result};
use crate::outcome::{DeviceMemory, PinnedStats, StrategyKind, Uploaded};
use crate::pack::PackStore;
use crate::pinned::{PinnedOptions, PinnedStager};
use crate::plan::Plan;
use crate::strategy::{upload, Strategy};
use crate::trace::{Site, Traced};
use crate::workload::TensorSource;

/// Median milliseconds of where a pinned upload's time went (see [`PinnedStats`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PinnedBreakdown {
    pub staging_ms: f64,
    pub arena_ms: f64,
    /// What the arenas were, e.g. "pool ×21" (`device` is `cuMemAlloc`).
    pub arenas: String,
    /// How staging was page-locked for the device, e.g. "read-only ×31" (`writable` where
    /// the option is off or the device cannot).
    pub staging_locks: String,
    pub pack_wait_ms: f64,
    pub first_slice_ms: f64,
    pub register_ms: f64,
    pub setup_ms: f64,
    pub submit_ms: f64,
    pub finish_ms: f64,
    pub copy_wait_ms: f64,
    pub unregister_ms: f64,
    pub teardown_ms: f64,
    /// Which store the runs packed with, e.g. "plain ×10, streaming ×1" (`Auto` decides per run).
    pub stores: String,
    /// `Auto`: median per-thread packing speed of the calibration pieces, MB/s (0 if none).
    pub calibration_plain_mbps: f64,
    pub calibration_streaming_mbps: f64,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

impl PinnedBreakdown {
    fn of(stats: &[PinnedStats]) -> Option<PinnedBreakdown> {
        if stats.is_empty() {
            return None;
        }
        let med = |f: fn(&PinnedStats) -> u64| {
            let mut v: Vec<f64> = stats.iter().map(|s| f(s) as f64).collect();
            median(&mut v)
        };
        let ms = |f: fn(&PinnedStats) -> u64| med(f) / 1e6;
        let count = |is: &dyn Fn(&PinnedStats) -> bool| stats.iter().filter(|s| is(s)).count();
        // The non-empty categories with their counts, e.g. "plain ×20, streaming ×11".
        let tally = |counts: &[(&str, usize)]| {
            counts
                .iter()
                .filter(|&&(_, n)| n > 0)
                .map(|(name, n)| format!("{name} ×{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let stores = tally(
            &[PackStore::Plain, PackStore::Streaming, PackStore::Auto]
                .map(|store| (store.name(), count(&|s| s.store == store))),
        );
        let arenas = tally(&[
            ("pool", count(&|s| s.arena_memory == DeviceMemory::Pool)),
            (
                "cuMemAlloc",
                count(&|s| s.arena_memory == DeviceMemory::Device),
            ),
        ]);
        let staging_locks = tally(&[
            ("read-only", count(&|s| s.staging_read_only)),
            ("writable", count(&|s| !s.staging_read_only)),
        ]);
        Some(PinnedBreakdown {
            staging_locks,
            staging_ms: ms(|s| s.staging_ns),
            arena_ms: ms(|s| s.arena_ns),
            arenas,
            pack_wait_ms: ms(|s| s.pack_wait_ns),
            first_slice_ms: ms(|s| s.first_slice_ns),
            register_ms: ms(|s| s.register_ns),
            setup_ms: ms(|s| s.setup_ns),
            submit_ms: ms(|s| s.submit_ns),
            finish_ms: ms(|s| s.finish_ns),
            copy_wait_ms: ms(|s| s.copy_wait_ns),
            unregister_ms: ms(|s| s.unregister_ns),
            teardown_ms: ms(|s| s.teardown_ns),
            stores,
            calibration_plain_mbps: med(|s| s.calibration_plain_mbps),
            calibration_streaming_mbps: med(|s| s.calibration_streaming_mbps),
        })
    }
}

/// Timings of one contender.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measurement {
    pub name: String,
    pub bytes: u64,
    pub seconds: Vec<f64>,
    pub median_seconds: f64,
    pub gbps: f64,
    /// Driver calls per run.
    pub driver_calls: u64,
    /// Pinned uploads: median time per phase.
    pub pinned: Option<PinnedBreakdown>,
}

impl Measurement {
    fn new(
        name: impl Into<String>,
        bytes: u64,
        seconds: Vec<f64>,
        driver_calls: u64,
    ) -> Measurement {
        let mut sorted = seconds.clone();
        let median = median(&mut sorted);
        Measurement {
            name: name.into(),
            bytes,
            seconds,
            median_seconds: median,
            gbps: bytes as f64 / median / 1e9,
            driver_calls,
            pinned: None,
        }
    }
}

/// One pinned host-to-device copy of `bytes`, set up once and repeatable: the hardware
/// ceiling for an upload of that many bytes.
pub struct CeilingCopy {
    stream: Stream,
    host: *mut u8,
    dev: DevicePtr,
    bytes: u64,
}

impl CeilingCopy {
    pub fn create(t: &Traced, bytes: u64) -> Result<CeilingCopy> {
        let site = Site::plain("ceiling pinned");
        let stream = t.stream_create(&site)?;
        let host = match t.host_alloc_pinned(&site, bytes.max(1)) {
            Ok(h) => h,
            Err(e) => {
                // SAFETY: our live stream, destroyed once.
                let _ = unsafe { t.stream_destroy(&site, stream) };
                return Err(e);
            }
        };
        // SAFETY: a live pinned buffer of `bytes` bytes, no copy in flight yet.
        unsafe { std::ptr::write_bytes(host, 0x5a, bytes as usize) };
        match t.mem_alloc(&site, bytes.max(1)) {
            Ok(dev) => Ok(CeilingCopy {
                stream,
                host,
                dev,
                bytes,
            }),
            Err(e) => {
                // SAFETY: our pinned buffer and stream, freed once, nothing in flight.
                let _ = unsafe { t.host_free_pinned(&site, host, bytes.max(1)) };
                // SAFETY: as above.
                let _ = unsafe { t.stream_destroy(&site, stream) };
                Err(e)
            }
        }
    }

    /// One timed copy (seconds), synchronized.
    pub fn once(&self, t: &Traced) -> Result<f64> {
        let site = Site::plain("ceiling pinned");
        let start = Instant::now();
        // SAFETY: `dev` holds `bytes` bytes; `host` is not touched until the stream sync.
        unsafe {
            t.memcpy_htod_async(&site, self.dev, self.host, self.bytes as usize, self.stream)
        }?;
        // SAFETY: our live stream.
        unsafe { t.stream_synchronize(&site, self.stream) }?;
        Ok(start.elapsed().as_secs_f64())
    }

    pub fn destroy(self, t: &Traced) -> Result<()> {
        let site = Site::plain("ceiling pinned");
        // SAFETY: our live stream.
        let synced = unsafe { t.stream_synchronize(&site, self.stream) };
        // SAFETY: our allocation, buffer and stream, each freed once, nothing in flight.
        let freed = unsafe { t.mem_free(&site, self.dev, self.bytes.max(1)) };
        // SAFETY: as above.
        let host = unsafe { t.host_free_pinned(&site, self.host, self.bytes.max(1)) };
        // SAFETY: as above.
        let stream = unsafe { t.stream_destroy(&site, self.stream) };
        synced.and(freed).and(host).and(stream)
    }
}

fn time_ceiling(t: &Traced, copy: &CeilingCopy, repeat: usize) -> Result<Measurement> {
    let mut seconds = Vec::with_capacity(repeat);
    let mut calls = 0;
    for i in 0..=repeat {
        let before = t.calls();
        let s = copy.once(t)?;
        if i > 0 {
            seconds.push(s);
            calls = t.calls() - before;
        }
    }
    Ok(Measurement::new(
        "pinned single copy (ceiling)",
        copy.bytes,
        seconds,
        calls,
    ))
}

/// One pageable synchronous host-to-device copy of `bytes` (the reference for pageable paths).
pub fn ceiling_pageable(t: &Traced, bytes: u64, repeat: usize) -> Result<Measurement> {
    let site = Site::plain("ceiling pageable");
    let host = vec![0x5au8; bytes as usize];
    let dev = t.mem_alloc(&site, bytes)?;
    let timed = (|| -> Result<Measurement> {
        let mut seconds = Vec::with_capacity(repeat);
        let mut calls = 0;
        for i in 0..=repeat {
            let before = t.calls();
            let start = Instant::now();
            // SAFETY: `dev` holds `bytes` bytes.
            unsafe { t.memcpy_htod(&site, dev, &host) }?;
            if i > 0 {
                seconds.push(start.elapsed().as_secs_f64());
                calls = t.calls() - before;
            }
        }
        Ok(Measurement::new(
            "pageable single copy",
            bytes,
            seconds,
            calls,
        ))
    })();
    // SAFETY: our allocation, synchronous copies only.
    let _ = unsafe { t.mem_free(&site, dev, bytes) };
    timed
}

/// One contender of a round-robin: how to run it once, and what it measured.
struct Entrant<'a> {
    name: String,
    /// One run; `None` for a bare copy that allocates nothing.
    run: Box<dyn FnMut() -> Result<Option<Uploaded>> + 'a>,
    seconds: Vec<f64>,
    stats: Vec<PinnedStats>,
    calls: u64,
    /// Why it cannot run here (set by the warm-up round).
    skipped: Option<String>,
}

impl<'a> Entrant<'a> {
    fn new(
        name: impl Into<String>,
        run: impl FnMut() -> Result<Option<Uploaded>> + 'a,
    ) -> Entrant<'a> {
        Entrant {
            name: name.into(),
            run: Box::new(run),
            seconds: Vec::new(),
            stats: Vec::new(),
            calls: 0,
            skipped: None,
        }
    }

    fn measurement(&self, bytes: u64) -> Measurement {
        let mut m = Measurement::new(self.name.clone(), bytes, self.seconds.clone(), self.calls);
        m.pinned = PinnedBreakdown::of(&self.stats);
        m
    }
}

/// Times every entrant `repeat` times in rounds — one run of each per round, the order rotating
/// from round to round — after one untimed warm-up round. A machine that drifts (a neighbour
/// starting, the page cache settling after the workload was generated) then affects every
/// entrant alike instead of whichever ran first. An entrant that is unsupported here
/// (`Unsupported`, `InsufficientMemory`) is skipped with its reason.
fn time_round_robin(
    t: &Traced,
    entrants: &mut [Entrant<'_>],
    repeat: usize,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    let n = entrants.len();
    for round in 0..=repeat {
        if round == 0 {
            log("warm-up round");
        } else if round == 1 || round % 5 == 0 || round == repeat {
            log(&format!("round {round}/{repeat}"));
        }
        for j in 0..n {
            let e = &mut entrants[(round + j) % n];
            if e.skipped.is_some() {
                continue;
            }
            let before = t.calls();
            let start = Instant::now();
            let uploaded = match (e.run)() {
                Ok(u) => u,
                Err(err @ (Error::Unsupported(_) | Error::InsufficientMemory { .. }))
                    if round == 0 =>
                {
                    e.skipped = Some(err.to_string());
                    continue;
                }
                Err(err) => return Err(err),
            };
            let elapsed = start.elapsed().as_secs_f64();
            if round > 0 {
                e.seconds.push(elapsed);
                e.calls = t.calls() - before;
                e.stats.extend(uploaded.as_ref().and_then(|u| u.pinned));
            }
            if let Some(uploaded) = uploaded {
                uploaded.free(t)?;
            }
        }
    }
    Ok(())
}

/// Contenders `--compare` can leave out (the pinned ceiling always runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    Pageable,
    Ztensor,
    Managed,
    Pinned,
    Reused,
    /// The ring on/off measurement of ztensor (or pinned).
    RingZtensor,
    RingPinned,
}

impl std::str::FromStr for Contender {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "pageable" => Contender::Pageable,
            "ztensor" => Contender::Ztensor,
            "managed" => Contender::Managed,
            "pinned" => Contender::Pinned,
            "reused" => Contender::Reused,
            "ring-ztensor" => Contender::RingZtensor,
            "ring-pinned" => Contender::RingPinned,
            other => {
                return Err(Error::InvalidOptions(format!(
                    "unknown contender {other:?} (pageable, ztensor, managed, pinned, reused, ring-ztensor, ring-pinned)"
                )))
            }
        })
    }
}

/// A strategy that could not run (for example managed memory unsupported), with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub name: String,
    pub reason: String,
}

/// Ring on against ring off for one strategy, interleaved run by run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RingCost {
    pub strategy: String,
    pub off: Measurement,
    pub on: Measurement,
    /// on / off − 1 (medians); the goal is ≤ 0.02.
    pub overhead: f64,
    /// Median over the runs of on_i / off_i − 1 (each pair run back to back).
    pub paired_overhead: f64,
}

/// Everything `--compare` measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareReport {
    pub backend: String,
    pub tensors: usize,
    pub bytes: u64,
    pub chunks: usize,
    pub repeat: usize,
    /// The ceiling timed in a block of its own before the rounds; ratios are against it.
    pub ceiling_pinned: Measurement,
    /// The same copy timed once per round among the contenders (for drift: a host that got
    /// slower during the rounds shows here).
    pub ceiling_pinned_in_rounds: Measurement,
    pub ceiling_pageable: Option<Measurement>,
    pub strategies: Vec<Measurement>,
    pub skipped: Vec<Skipped>,
    /// Ratios: strategy median GB/s over the pinned ceiling's, and speedup over ztensor.
    pub ratios: Vec<Ratio>,
    pub ring: Vec<RingCost>,
    pub sweep: Vec<SweepRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ratio {
    pub name: String,
    pub of_pinned_ceiling: f64,
    pub speedup_over_ztensor: f64,
}

/// One pinned configuration of a sweep: cold (staging allocated per upload) and reused.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepRow {
    pub options: PinnedOptions,
    pub cold: Measurement,
    pub reused: Measurement,
}

/// What `--compare` runs.
#[derive(Debug, Clone, Default)]
pub struct CompareOptions<'a> {
    /// Timed runs per contender (after one warm-up); the median is reported.
    pub repeat: usize,
    /// With a ring: also measure ring on against ring off.
    pub ring: Option<&'a Writer>,
    pub skip: Vec<Contender>,
    /// Extra pinned configurations to time (cold and reused), same bytes, same process.
    pub sweep: Vec<PinnedOptions>,
}

/// Runs the ceilings, every strategy, and (with a ring) ring on against off.
pub fn compare(
    t: &Traced,
    strategy: &Strategy,
    src: &dyn TensorSource,
    plan: &Plan,
    options: &CompareOptions<'_>,
    log: &mut dyn FnMut(&str),
) -> Result<CompareReport> {
    log("ceiling: pinned single copy");
    let ceiling = CeilingCopy::create(t, plan.tensor_bytes)?;
    let result = compare_with(t, strategy, src, plan, options, log, &ceiling);
    let destroyed = ceiling.destroy(t);
    let report = result?;
    destroyed?;
    Ok(report)
}

/// What the round-robin measured.
struct Rounds {
    strategies: Vec<Measurement>,
    skipped: Vec<Skipped>,
    sweep: Vec<SweepRow>,
    ceiling_in_rounds: Measurement,
}

fn compare_with(
    t: &Traced,
    strategy: &Strategy,
    src: &dyn TensorSource,
    plan: &Plan,
    options: &CompareOptions<'_>,
    log: &mut dyn FnMut(&str),
    ceiling: &CeilingCopy,
) -> Result<CompareReport> {
    let repeat = options.repeat.max(1);
    let bytes = plan.tensor_bytes;
    let ceiling_pinned = time_ceiling(t, ceiling, repeat)?;
    let ceiling_pageable = if options.skip.contains(&Contender::Pageable) {
        None
    } else {
        log("ceiling: pageable single copy");
        Some(ceiling_pageable(t, bytes, repeat)?)
    };
    let comparison = Comparison {
        t,
        strategy,
        src,
        plan,
        options,
        repeat,
    };
    // Reused stagers live across the rounds; made first, destroyed after (also on error).
    let mut stagers: Vec<PinnedStager> = Vec::new();
    let timed = comparison.time_rounds(&mut stagers, ceiling, log);
    let mut destroyed = Ok(());
    for stager in stagers {
        if let Err(e) = stager.destroy(t) {
            destroyed = destroyed.and(Err(e));
        }
    }
    let Rounds {
        strategies,
        skipped,
        sweep,
        ceiling_in_rounds: ceiling_pinned_in_rounds,
    } = timed?;
    destroyed?;

    let ratios = ratios_of(&strategies, &ceiling_pinned);
    let mut ring_costs = Vec::new();
    if let Some(ring) = options.ring {
        ring_costs = comparison.ring_costs(ring, log)?;
    }
    Ok(CompareReport {
        backend: t.backend().into(),
        tensors: plan.placements.len(),
        bytes,
        chunks: plan.chunks.len(),
        repeat,
        ceiling_pinned,
        ceiling_pinned_in_rounds,
        ceiling_pageable,
        strategies,
        skipped,
        ratios,
        ring: ring_costs,
        sweep,
    })
}

/// Each strategy's median GB/s over the pinned ceiling's, and its speedup over ztensor.
fn ratios_of(strategies: &[Measurement], ceiling_pinned: &Measurement) -> Vec<Ratio> {
    let ztensor = strategies
        .iter()
        .find(|m| m.name == "ztensor")
        .map(|m| m.median_seconds);
    strategies
        .iter()
        .map(|m| Ratio {
            name: m.name.clone(),
            of_pinned_ceiling: m.gbps / ceiling_pinned.gbps,
            speedup_over_ztensor: ztensor.map_or(f64::NAN, |z| z / m.median_seconds),
        })
        .collect()
}

/// One `--compare` run: what every contender uploads, and how often.
struct Comparison<'a> {
    t: &'a Traced<'a>,
    strategy: &'a Strategy,
    src: &'a dyn TensorSource,
    plan: &'a Plan,
    options: &'a CompareOptions<'a>,
    /// Timed rounds (at least one).
    repeat: usize,
}

/// The round-robin's entrants: the strategies first, then a cold and a reused entrant per
/// sweep configuration, then the ceiling.
struct Entrants<'e> {
    all: Vec<Entrant<'e>>,
    /// `all[..sweep_start]` are the strategies (and the reused stager).
    sweep_start: usize,
    /// `all[sweep_end]` is the ceiling.
    sweep_end: usize,
}

impl Comparison<'_> {
    fn skips(&self, contender: Contender) -> bool {
        self.options.skip.contains(&contender)
    }

    /// Makes the reused stagers (into `stagers`, for the caller to destroy, also on error) and
    /// times every strategy, the sweep and the ceiling in rounds.
    fn time_rounds(
        &self,
        stagers: &mut Vec<PinnedStager>,
        ceiling: &CeilingCopy,
        log: &mut dyn FnMut(&str),
    ) -> Result<Rounds> {
        let (t, strategy, repeat) = (self.t, self.strategy, self.repeat);
        let pinned_strategy = Strategy {
            kind: StrategyKind::Pinned,
            ..*strategy
        };
        if !self.skips(Contender::Reused) {
            stagers.push(PinnedStager::create(t, &pinned_strategy.pinned)?);
        }
        for config in &self.options.sweep {
            stagers.push(PinnedStager::create(t, config)?);
        }
        let sweep_strategies: Vec<Strategy> = self
            .options
            .sweep
            .iter()
            .map(|config| Strategy {
                kind: StrategyKind::Pinned,
                pinned: *config,
                ..*strategy
            })
            .collect();
        let kinds: Vec<(StrategyKind, Strategy)> = StrategyKind::ALL
            .into_iter()
            .filter(|kind| {
                !self.skips(match kind {
                    StrategyKind::Ztensor => Contender::Ztensor,
                    StrategyKind::Managed => Contender::Managed,
                    StrategyKind::Pinned => Contender::Pinned,
                })
            })
            .map(|kind| (kind, Strategy { kind, ..*strategy }))
            .collect();
        let mut entrants = self.entrants(&kinds, &sweep_strategies, stagers, ceiling);
        log(&format!(
            "{} contenders, {repeat} rounds after a warm-up round",
            entrants.all.len()
        ));
        time_round_robin(t, &mut entrants.all, repeat, log)?;
        Ok(self.tally(&entrants))
    }

    /// The entrants of the round-robin; `stagers` are the reused stagers, in the order
    /// `time_rounds` made them.
    fn entrants<'e>(
        &'e self,
        kinds: &'e [(StrategyKind, Strategy)],
        sweep_strategies: &'e [Strategy],
        stagers: &'e [PinnedStager],
        ceiling: &'e CeilingCopy,
    ) -> Entrants<'e> {
        let (t, src, plan) = (self.t, self.src, self.plan);
        let mut entrants = Vec::new();
        for (kind, s) in kinds {
            entrants.push(Entrant::new(kind.name(), move || {
                upload(t, s, src, plan, &mut |_| {}).map(Some)
            }));
        }
        let mut next_stager = stagers.iter();
        if !self.skips(Contender::Reused) {
            let stager = next_stager.next().expect("made above");
            entrants.push(Entrant::new("pinned, staging reused", move || {
                stager.upload(t, src, plan, &mut |_| {}).map(Some)
            }));
        }
        let sweep_start = entrants.len();
        for s in sweep_strategies {
            let label = s.pinned.describe();
            entrants.push(Entrant::new(format!("pinned {label}"), move || {
                upload(t, s, src, plan, &mut |_| {}).map(Some)
            }));
            let stager = next_stager.next().expect("made above");
            entrants.push(Entrant::new(
                format!("pinned, staging reused {label}"),
                move || stager.upload(t, src, plan, &mut |_| {}).map(Some),
            ));
        }
        let sweep_end = entrants.len();
        // The ceiling once more, as one of the rounds: the same machine drift as the uploads.
        entrants.push(Entrant::new(
            "pinned single copy, in the rounds",
            move || ceiling.once(t).map(|_| None),
        ));
        Entrants {
            all: entrants,
            sweep_start,
            sweep_end,
        }
    }

    /// What the timed entrants measured, by kind.
    fn tally(&self, entrants: &Entrants<'_>) -> Rounds {
        let bytes = self.plan.tensor_bytes;
        let (main, sweep_end) = (entrants.sweep_start, entrants.sweep_end);
        let ceiling_in_rounds = entrants.all[sweep_end].measurement(bytes);
        let mut strategies = Vec::new();
        let mut skipped = Vec::new();
        for e in &entrants.all[..main] {
            match &e.skipped {
                Some(reason) => skipped.push(Skipped {
                    name: e.name.clone(),
                    reason: reason.clone(),
                }),
                None => strategies.push(e.measurement(bytes)),
            }
        }
        let sweep = self
            .options
            .sweep
            .iter()
            .zip(entrants.all[main..sweep_end].chunks(2))
            .map(|(config, pair)| {
                let mut cold = pair[0].measurement(bytes);
                let mut reused = pair[1].measurement(bytes);
                cold.name = "pinned".into();
                reused.name = "pinned, staging reused".into();
                SweepRow {
                    options: *config,
                    cold,
                    reused,
                }
            })
            .collect();
        Rounds {
            strategies,
            skipped,
            sweep,
            ceiling_in_rounds,
        }
    }

    /// Ring on against ring off, for each strategy not skipped.
    fn ring_costs(&self, ring: &Writer, log: &mut dyn FnMut(&str)) -> Result<Vec<RingCost>> {
        let (t, strategy) = (self.t, self.strategy);
        let on_t = t.with_ring(Some(ring));
        let pinned = Strategy {
            kind: StrategyKind::Pinned,
            ..*strategy
        };
        let variants: [(&str, Contender, Contender); 3] = [
            ("ztensor", Contender::Ztensor, Contender::RingZtensor),
            ("pinned", Contender::Pinned, Contender::RingPinned),
            (
                "pinned, staging reused",
                Contender::Reused,
                Contender::RingPinned,
            ),
        ];
        let mut ring_costs = Vec::new();
        for (name, plain, ring_only) in variants {
            if self.skips(plain) || self.skips(ring_only) {
                continue;
            }
            log(&format!("ring on/off: {name}"));
            let reuse = name.ends_with("reused");
            // One stager for both sides: the same pinned buffers, so placement of the staging
            // memory cannot masquerade as the cost of the ring.
            let stager = if reuse {
                Some(PinnedStager::create(t, &pinned.pinned)?)
            } else {
                None
            };
            let s = Strategy {
                kind: if name == "ztensor" {
                    StrategyKind::Ztensor
                } else {
                    StrategyKind::Pinned
                },
                ..*strategy
            };
            let measured = self.ring_cost(name, &on_t, &s, stager.as_ref());
            if let Some(st) = stager {
                st.destroy(t)?;
            }
            ring_costs.push(measured?);
        }
        Ok(ring_costs)
    }

    /// Ring on (`on_t`) against off for one strategy `s` (through `stager` if given), run by
    /// run.
    fn ring_cost(
        &self,
        name: &str,
        on_t: &Traced<'_>,
        s: &Strategy,
        stager: Option<&PinnedStager>,
    ) -> Result<RingCost> {
        let (t, src, plan, repeat) = (self.t, self.src, self.plan, self.repeat);
        let bytes = plan.tensor_bytes;
        // One upload, timed, then freed; returns (seconds, driver calls of the upload).
        let once = |tr: &Traced, stager: Option<&PinnedStager>| -> Result<(f64, u64)> {
            let before = tr.calls();
            let start = Instant::now();
            let up = match stager {
                Some(st) => st.upload(tr, src, plan, &mut |_| {})?,
                None => upload(tr, s, src, plan, &mut |_| {})?,
            };
            let elapsed = start.elapsed().as_secs_f64();
            let calls = tr.calls() - before;
            up.free(tr)?;
            Ok((elapsed, calls))
        };
        let (mut off, mut on) = (Vec::new(), Vec::new());
        let (mut off_calls, mut on_calls) = (0, 0);
        // Interleave so drift affects both sides alike, alternating which side goes first; the
        // first pair warms up.
        for i in 0..=repeat {
            let (a, b) = if i % 2 == 0 {
                let a = once(t, stager)?;
                (a, once(on_t, stager)?)
            } else {
                let b = once(on_t, stager)?;
                (once(t, stager)?, b)
            };
            if i > 0 {
                off.push(a.0);
                on.push(b.0);
                (off_calls, on_calls) = (a.1, b.1);
            }
        }
        let mut ratios: Vec<f64> = on.iter().zip(&off).map(|(a, b)| a / b).collect();
        ratios.sort_by(f64::total_cmp);
        let paired_overhead = ratios.get(ratios.len() / 2).map_or(f64::NAN, |r| r - 1.0);
        let off = Measurement::new(format!("{name} ring off"), bytes, off, off_calls);
        let on = Measurement::new(format!("{name} ring on"), bytes, on, on_calls);
        let overhead = on.median_seconds / off.median_seconds - 1.0;
        Ok(RingCost {
            strategy: name.into(),
            off,
            on,
            overhead,
            paired_overhead,
        })
    }
}
