//! enter+exit cost of the breadcrumb ring against baselines measured in the same run.
//!
//! `cargo bench -p breadcrumb --bench ring` (env `WEDGE_BENCH_ITERS` = enter+exit pairs per
//! measurement, default 2,000,000). Each figure is the median of 5 measurements, in ns per
//! record (an enter and an exit are two records), measured as the writing threads' CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`: the bench machine is shared, wall time would count others' work),
//! for 1, 2 and 4 writer threads. Rings compared:
//! - the default (format v2): each thread its own lane, CPU-counter timestamps;
//! - v2 lanes with `clock_gettime(CLOCK_MONOTONIC)` timestamps (the counter's share);
//! - the version-1 record path: one shared lane (`fetch_add` claim + slot compare-and-swap) with
//!   `clock_gettime(CLOCK_MONOTONIC)` — what every record cost before v2.
//!
//! Baselines:
//! - mutex ring: the same 128-byte record written into a `Mutex`-protected in-memory ring (what a
//!   recorder that takes a lock per record, like PyTorch's Flight Recorder, pays at best);
//! - write(2): one `pwrite` of the 128-byte record per record to a file (the cost of any design
//!   that makes a system call per record);
//! - floors: the timestamp read alone (`rdtsc`/`CNTVCT_EL0`, `clock_gettime`).

use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Barrier, Mutex};

use breadcrumb::counter;
use breadcrumb::identity::{clock_ns, monotonic_ns, ProcessIdentity};
use breadcrumb::{Args, Call, RingClock, Writer, WriterOptions};

const RUNS: usize = 5;

fn iters() -> u64 {
    std::env::var("WEDGE_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000)
}

fn args(i: u64) -> Args {
    Args {
        bytes: 4 << 20,
        ptr: 0x7f00_0000_0000 + i,
        ptr2: 0x5500_0000,
        stream: 7,
        chunk: i as u32,
        chunk_count: 53,
        ..Args::default()
    }
}

/// Median CPU ns per record of `run(threads, pairs)`, which returns CPU ns per thread for
/// `pairs * 2` records per thread.
fn measure(threads: usize, pairs: u64, run: &dyn Fn(usize, u64) -> u64) -> f64 {
    let mut samples: Vec<f64> = (0..RUNS)
        .map(|_| run(threads, pairs) as f64 / (pairs * 2) as f64)
        .collect();
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[RUNS / 2]
}

/// This thread's CPU time in ns (the machine is shared: wall time would count other work).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `body(thread, pairs)` on `threads` threads started together; returns the CPU ns the
/// threads spent, averaged per thread (each thread writes `pairs * 2` records).
fn on_threads(threads: usize, pairs: u64, body: Arc<dyn Fn(usize, u64) + Send + Sync>) -> u64 {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let barrier = Arc::clone(&barrier);
            let body = Arc::clone(&body);
            std::thread::spawn(move || {
                barrier.wait();
                let start = thread_cpu_ns();
                body(t, pairs);
                thread_cpu_ns() - start
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    total / threads as u64
}

/// The baseline: a ring of 128-byte records behind one mutex.
struct MutexRing {
    inner: Mutex<(u64, Vec<[u64; 16]>)>,
}

impl MutexRing {
    fn record(&self, kind: u64, call: u16, args: &Args, label: &str, result: i64) {
        let now = monotonic_ns();
        let mut label_words = [0u64; 5];
        for (i, b) in label.as_bytes().iter().take(40).enumerate() {
            label_words[i / 8] |= u64::from(*b) << ((i % 8) * 8);
        }
        let mut guard = self.inner.lock().unwrap();
        let (head, slots) = &mut *guard;
        let len = slots.len() as u64;
        let slot = &mut slots[(*head % len) as usize];
        *head += 1;
        *slot = [
            *head,
            now,
            kind | (u64::from(call) << 48),
            args.bytes,
            args.ptr,
            args.ptr2,
            args.stream,
            u64::from(args.chunk),
            u64::from(args.tensor_first),
            *head,
            result as u64,
            label_words[0],
            label_words[1],
            label_words[2],
            label_words[3],
            label_words[4],
        ];
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing special: keep it short then.
    // An explicit WEDGE_BENCH_ITERS wins either way: the GPU-host script ran the binary without
    // --bench, so its figures were 10,000-pair runs (issue 40; ~2 ns a record more here).
    let quick = !std::env::args().any(|a| a == "--bench")
        && std::env::var_os("WEDGE_BENCH_ITERS").is_none();
    let pairs = if quick { 10_000 } else { iters() };
    let dir = std::env::temp_dir().join(format!("wedge-breadcrumb-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ring_with = |name: &str, clock: RingClock, lane_count: u32| {
        let options = WriterOptions {
            slot_count: 4096,
            clock,
            lane_count,
        };
        Arc::new(
            Writer::create_with(&dir.join(name), &options, &ProcessIdentity::current()).unwrap(),
        )
    };
    let default_writer = Arc::new(Writer::create(dir.join("default.ring"), 4096).unwrap());
    let lanes_clock_writer = ring_with("lanes-clock.ring", RingClock::Monotonic, 0);
    let v1_path_writer = ring_with("v1-path.ring", RingClock::Monotonic, 1);
    let coarse_writer = ring_with("coarse.ring", RingClock::MonotonicCoarse, 0);
    let mutex_ring = Arc::new(MutexRing {
        inner: Mutex::new((0, vec![[0u64; 16]; 4096])),
    });
    let file = Arc::new(std::fs::File::create(dir.join("write.bin")).unwrap());

    let ring_of = |writer: &Arc<Writer>, threads: usize, pairs: u64| {
        let writer = Arc::clone(writer);
        on_threads(
            threads,
            pairs,
            Arc::new(move |_, pairs| {
                for i in 0..pairs {
                    let token = writer.enter(
                        Call::CuMemcpyHtoDAsync_v2,
                        &args(i),
                        "bulkUpload chunk 12/53",
                    );
                    writer.exit(black_box(token), 0);
                }
            }),
        )
    };
    let default = |threads: usize, pairs: u64| ring_of(&default_writer, threads, pairs);
    let lanes_clock = |threads: usize, pairs: u64| ring_of(&lanes_clock_writer, threads, pairs);
    let v1_path = |threads: usize, pairs: u64| ring_of(&v1_path_writer, threads, pairs);
    let coarse = |threads: usize, pairs: u64| ring_of(&coarse_writer, threads, pairs);
    let mutex = |threads: usize, pairs: u64| mutex_run(&mutex_ring, threads, pairs);
    let syscall = |threads: usize, pairs: u64| pwrite_run(&file, threads, pairs);
    let clock = |threads: usize, pairs: u64| clock_of(libc::CLOCK_MONOTONIC, threads, pairs);
    let clock_coarse =
        |threads: usize, pairs: u64| clock_of(libc::CLOCK_MONOTONIC_COARSE, threads, pairs);
    const THREADS: [usize; 3] = [1, 2, 4];
    let row = |run: &dyn Fn(usize, u64) -> u64, pairs: u64| -> Vec<f64> {
        THREADS.iter().map(|&t| measure(t, pairs, run)).collect()
    };
    let syscall_pairs = (pairs / 10).max(1);
    let figures = Figures {
        default_ns: row(&default, pairs),
        lanes_clock_ns: row(&lanes_clock, pairs),
        v1_ns: row(&v1_path, pairs),
        coarse_ns: row(&coarse, pairs),
        mutex_ns: row(&mutex, pairs),
        write1: measure(1, syscall_pairs, &syscall),
        counter1: measure(1, pairs, &counter_run),
        clock1: measure(1, pairs, &clock),
        coarse_clock1: measure(1, pairs, &clock_coarse),
    };
    let _ = std::fs::remove_dir_all(&dir);
    report(pairs, &figures, &default_writer);
}

/// Every figure of one run, ns per record (rows: 1, 2 and 4 threads).
struct Figures {
    default_ns: Vec<f64>,
    lanes_clock_ns: Vec<f64>,
    v1_ns: Vec<f64>,
    coarse_ns: Vec<f64>,
    mutex_ns: Vec<f64>,
    write1: f64,
    counter1: f64,
    clock1: f64,
    coarse_clock1: f64,
}

/// Prints the table (each ratio against the default ring of the same run) and the goals.
fn report(pairs: u64, f: &Figures, default_writer: &Writer) {
    let counter_name = if default_writer.uses_counter() {
        if cfg!(target_arch = "aarch64") {
            "CNTVCT_EL0"
        } else {
            "rdtsc"
        }
    } else {
        "none: the default fell back to clock_gettime"
    };
    println!("breadcrumb ring bench: {pairs} enter+exit pairs per thread per run, median of {RUNS} runs, ns per record (CPU time of each writing thread)");
    println!("| what | 1 thread | 2 threads | 4 threads |");
    println!("|---|---|---|---|");
    let cells = |ns: &[f64], base: &[f64]| -> String {
        ns.iter()
            .zip(base)
            .map(|(n, b)| format!("{n:.1} ns ({:.2}x)", n / b))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    println!(
        "| **default (v2): own lane, counter timestamps ({counter_name})** | {} |",
        f.default_ns
            .iter()
            .map(|n| format!("**{n:.1} ns**"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!(
        "| v2 own lane, clock_gettime(CLOCK_MONOTONIC) | {} |",
        cells(&f.lanes_clock_ns, &f.default_ns)
    );
    println!(
        "| v2 own lane, CLOCK_MONOTONIC_COARSE | {} |",
        cells(&f.coarse_ns, &f.default_ns)
    );
    println!(
        "| baseline: v1 record path (shared claim fetch_add + slot CAS, clock_gettime) | {} |",
        cells(&f.v1_ns, &f.default_ns)
    );
    println!(
        "| baseline: mutex-protected ring | {} |",
        cells(&f.mutex_ns, &f.default_ns)
    );
    println!(
        "| baseline: one pwrite(2) per record | {:.1} ns ({:.1}x) | - | - |",
        f.write1,
        f.write1 / f.default_ns[0]
    );
    println!(
        "| floor: counter read alone ({counter_name}) | {:.1} ns | - | - |",
        f.counter1
    );
    println!(
        "| floor: clock_gettime(CLOCK_MONOTONIC) alone | {:.1} ns | - | - |",
        f.clock1
    );
    println!(
        "| floor: clock_gettime(CLOCK_MONOTONIC_COARSE) alone | {:.1} ns | - | - |",
        f.coarse_clock1
    );
    report_goal(default_writer, f.default_ns[0], f.counter1, f.clock1);
}

/// The writer's clock choice and the issue 40 goals against the cheapest usable clock read.
fn report_goal(default_writer: &Writer, default1: f64, counter1: f64, clock1: f64) {
    match default_writer.read_costs() {
        Some(costs) => println!(
            "default writer's clock choice at creation: {} (measured per read: counter {:.1} ns, clock_gettime(CLOCK_MONOTONIC) {:.1} ns)",
            if default_writer.uses_counter() { "counter" } else { "CLOCK_MONOTONIC" },
            costs.counter_ns,
            costs.monotonic_ns
        ),
        None => println!("default writer's clock: CLOCK_MONOTONIC (no usable counter)"),
    }
    // The cheapest clock that keeps the ring's resolution promise (docs/breadcrumb-ring.md: the
    // coarse clock does not; it is listed above for reference only).
    let cheapest = if default_writer.read_costs().is_some() {
        counter1.min(clock1)
    } else {
        clock1
    };
    let over = default1 - cheapest;
    println!(
        "goal (issue 40): default record within 5 ns of the cheapest usable clock read ({cheapest:.1} ns): {} ({:.1} ns, {over:+.1} ns); <= 25 ns: {}",
        if over <= 5.0 { "met" } else { "NOT met" },
        default1,
        if default1 <= 25.0 { "met" } else { "NOT met" }
    );
    println!(
        "default ring cost excluding the counter read: {:.1} ns per record",
        default1 - counter1
    );
}

/// The mutex-ring baseline: an enter-like and an exit-like record per pair.
fn mutex_run(ring: &Arc<MutexRing>, threads: usize, pairs: u64) -> u64 {
    let ring = Arc::clone(ring);
    on_threads(
        threads,
        pairs,
        Arc::new(move |_, pairs| {
            for i in 0..pairs {
                ring.record(1, 20, &args(i), "bulkUpload chunk 12/53", 0);
                ring.record(2, 20, &Args::default(), "", 0);
            }
        }),
    )
}

/// The system-call baseline: one `pwrite` of a 128-byte record per record.
fn pwrite_run(file: &Arc<std::fs::File>, threads: usize, pairs: u64) -> u64 {
    let file = Arc::clone(file);
    on_threads(
        threads,
        pairs,
        Arc::new(move |t, pairs| {
            let record = [0x5au8; 128];
            for i in 0..pairs {
                let at = ((t as u64 * 4096 + i) % 8192) * 128;
                file.write_at(black_box(&record), at).unwrap();
                file.write_at(black_box(&record), at + 128).unwrap();
            }
        }),
    )
}

/// The floor: clock `id` read alone, once per record.
fn clock_of(id: libc::clockid_t, threads: usize, pairs: u64) -> u64 {
    on_threads(
        threads,
        pairs,
        Arc::new(move |_, pairs| {
            for _ in 0..pairs {
                black_box(clock_ns(black_box(id)));
                black_box(clock_ns(black_box(id)));
            }
        }),
    )
}

/// The floor: the CPU counter read alone, once per record.
fn counter_run(threads: usize, pairs: u64) -> u64 {
    on_threads(
        threads,
        pairs,
        Arc::new(move |_, pairs| {
            for _ in 0..pairs {
                black_box(counter::read());
                black_box(counter::read());
            }
        }),
    )
}
