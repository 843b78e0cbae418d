//! enter+exit cost of the breadcrumb ring against baselines measured in the same run.
//!
//! `cargo bench -p breadcrumb --bench ring` (env `WEDGE_BENCH_ITERS` = enter+exit pairs per
//! measurement, default 2,000,000). Each figure is the median of 5 measurements, in ns per
//! record (an enter and an exit are two records), measured as the writing threads' CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`: the bench machine is shared, wall time would count others' work).
//! Baselines:
//! - mutex ring: the same 128-byte record written into a `Mutex`-protected in-memory ring (what a
//!   recorder that takes a lock per record, like PyTorch's Flight Recorder, pays at best);
//! - write(2): one `pwrite` of the 128-byte record per record to a file (the cost of any design
//!   that makes a system call per record).

use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Barrier, Mutex};

use wedge_breadcrumb::identity::{clock_ns, monotonic_ns, ProcessIdentity};
use wedge_breadcrumb::{Args, Call, RingClock, Writer, WriterOptions};

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
    let quick = !std::env::args().any(|a| a == "--bench");
    let pairs = if quick { 10_000 } else { iters() };
    let dir = std::env::temp_dir().join(format!("wedge-breadcrumb-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let writer = Arc::new(Writer::create(dir.join("bench.ring"), 4096).unwrap());
    let coarse_options = WriterOptions {
        slot_count: 4096,
        clock: RingClock::MonotonicCoarse,
    };
    let coarse_writer = Arc::new(
        Writer::create_with(
            &dir.join("coarse.ring"),
            &coarse_options,
            &ProcessIdentity::current(),
        )
        .unwrap(),
    );
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
    let ring = |threads: usize, pairs: u64| ring_of(&writer, threads, pairs);
    let coarse = |threads: usize, pairs: u64| ring_of(&coarse_writer, threads, pairs);
    let mutex = |threads: usize, pairs: u64| {
        let ring = Arc::clone(&mutex_ring);
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
    };
    let syscall = |threads: usize, pairs: u64| {
        let file = Arc::clone(&file);
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
    };
    let clock_of = |id: libc::clockid_t, threads: usize, pairs: u64| {
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
    };
    let clock = |threads: usize, pairs: u64| clock_of(libc::CLOCK_MONOTONIC, threads, pairs);
    let clock_coarse =
        |threads: usize, pairs: u64| clock_of(libc::CLOCK_MONOTONIC_COARSE, threads, pairs);

    let syscall_pairs = (pairs / 10).max(1);
    let ring1 = measure(1, pairs, &ring);
    let ring2 = measure(2, pairs, &ring);
    let coarse1 = measure(1, pairs, &coarse);
    let coarse2 = measure(2, pairs, &coarse);
    let mutex1 = measure(1, pairs, &mutex);
    let mutex2 = measure(2, pairs, &mutex);
    let write1 = measure(1, syscall_pairs, &syscall);
    let clock1 = measure(1, pairs, &clock);
    let coarse_clock1 = measure(1, pairs, &clock_coarse);
    let _ = std::fs::remove_dir_all(&dir);

    println!("breadcrumb ring bench: {pairs} enter+exit pairs per thread per run, median of {RUNS} runs, ns per record");
    println!("| what | 1 thread | 2 threads (CPU per record, each thread) |");
    println!("|---|---|---|");
    println!("| breadcrumb ring `enter`+`exit` | {ring1:.1} ns | {ring2:.1} ns |");
    println!("| breadcrumb ring, `CLOCK_MONOTONIC_COARSE` timestamps | {coarse1:.1} ns | {coarse2:.1} ns |");
    println!("| baseline: mutex-protected ring | {mutex1:.1} ns ({:.1}x ring) | {mutex2:.1} ns ({:.1}x ring) |", mutex1 / ring1, mutex2 / ring2);
    println!(
        "| baseline: one pwrite(2) per record | {write1:.1} ns ({:.1}x ring) | - |",
        write1 / ring1
    );
    println!("| floor: clock_gettime(CLOCK_MONOTONIC) alone | {clock1:.1} ns | - |");
    println!("| floor: clock_gettime(CLOCK_MONOTONIC_COARSE) alone | {coarse_clock1:.1} ns | - |");
    let verdict = |ns: f64| if ns <= 20.0 { "met" } else { "NOT met" };
    println!(
        "goal <= 20 ns per record single-threaded: {} with CLOCK_MONOTONIC, {} with CLOCK_MONOTONIC_COARSE",
        verdict(ring1),
        verdict(coarse1)
    );
    println!(
        "ring cost excluding the clock read: {:.1} ns per record",
        ring1 - clock1
    );
}
