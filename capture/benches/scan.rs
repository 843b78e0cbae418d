//! Hot-scan benchmark: the per-thread cost of `Scanner::scan` (kept-open fds re-read with pread; stat
//! skipped for sleepers whose schedstat shows they have not run), of the same scanner reading stat for
//! every thread, of the scanner with the BPF task iterator (busy-process shortcut; root), and of a plain
//! open/read/close of the same stat files, side by side in one run over the same threads. Times are the bench thread's CPU time (and wall time), median of the rounds.
//!
//!   cargo bench -p capture --bench scan
//!   WEDGE_BENCH_THREADS=10000 WEDGE_BENCH_ROUNDS=15 cargo bench -p capture --bench scan
//!
//! The threads are spawned by the bench and parked on a barrier (state S), like the idle threads of a
//! training process. Goal (issue 2): ≤ 6 µs per thread for the hot scan.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use capture::parse::stat::parse_lite;
use capture::proc_root::TaskFile;
use capture::scan::Scanner;
use capture::ProcRoot;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU time of the calling thread: the cost we pay, unaffected by other processes competing for the
/// CPU (wall time on a shared 2-core machine mostly measures the neighbours).
fn thread_cpu() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("CLOCK_THREAD_CPUTIME_ID");
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

/// Wall and CPU time of one run of `f`.
fn timed(mut f: impl FnMut()) -> (Duration, Duration) {
    let (w, c) = (Instant::now(), thread_cpu());
    f();
    (w.elapsed(), thread_cpu() - c)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn per_thread_us(d: Duration, threads: usize) -> f64 {
    d.as_secs_f64() * 1e6 / threads as f64
}

fn main() {
    // `cargo test --benches` runs this binary with --bench absent: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let threads = env_usize("WEDGE_BENCH_THREADS", if quick { 200 } else { 10_000 });
    let rounds = env_usize("WEDGE_BENCH_ROUNDS", if quick { 3 } else { 15 });

    let release = Arc::new(Barrier::new(threads + 1));
    let started = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (release, started) = (release.clone(), started.clone());
            std::thread::Builder::new()
                .name(format!("parked-{i}"))
                .stack_size(64 * 1024)
                .spawn(move || {
                    started.wait();
                    release.wait();
                })
                .expect("spawn parked thread (raise ulimit -u / threads-max?)")
        })
        .collect();
    started.wait();

    let root = ProcRoot::default();
    let pid = std::process::id() as i32;
    let mut scanner = Scanner::new(&root, pid).expect("scanner");
    let first = scanner.scan().expect("first scan");
    assert!(first.threads > threads, "{first:?}");
    assert_eq!(
        first.unkept, 0,
        "RLIMIT_NOFILE too low to keep every stat fd: {first:?}"
    );
    let tids: Vec<i32> = scanner.samples().map(|s| s.tid).collect();
    let n = tids.len();
    // The busy-process shortcut, when this machine allows it (root, BTF, Linux >= 6.1).
    let task_iter = match capture::task_iter::TaskIter::load() {
        Ok(iter) => Some(iter),
        Err(err) => {
            println!("task iterator rows skipped: {err}");
            None
        }
    };
    let mut iterated = task_iter.as_ref().map(|iter| {
        let mut s = Scanner::new(&root, pid).expect("scanner");
        s.set_thread_iter(Some(iter.watch(pid).expect("watch")));
        s.scan().expect("first scan");
        (s, iter.watch(pid).expect("watch"))
    });
    let (mut it_w, mut it_c, mut raw_w, mut raw_c) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut it_skipped = 0;
    let mut records = Vec::new();
    // The other per-thread candidate: taskstats by thread id, one netlink round trip per thread.
    let mut per_thread_stats = capture::taskstats::Taskstats::open().ok();
    let (mut ts_w, mut ts_c) = (Vec::new(), Vec::new());

    let (mut hot_w, mut hot_c) = (Vec::new(), Vec::new());
    let (mut so_w, mut so_c) = (Vec::new(), Vec::new());
    let mut skipped = 0;
    let (mut plain_w, mut plain_c) = (Vec::new(), Vec::new());
    let (mut list_w, mut list_c) = (Vec::new(), Vec::new());
    let (mut one_w, mut one_c) = (Vec::new(), Vec::new());
    let one = root.open_task_stat(pid, tids[n / 2]).expect("open");
    let mut buf = vec![0u8; 1024];
    let mut sink = 0u64;
    for _ in 0..rounds {
        // Hot scan: pread every kept stat fd (+ the process stat; task dir re-listed only on change).
        let (w, c) = timed(|| {
            let s = scanner.scan().expect("scan");
            assert_eq!(s.threads, n);
            skipped = s.unchanged;
            sink += scanner.samples().map(|s| s.cpu_ticks).sum::<u64>();
        });
        hot_w.push(w);
        hot_c.push(c);

        // Same scanner with the schedstat shortcut off: pread of every kept stat fd.
        scanner.set_skip_unchanged_sleepers(false);
        let (w, c) = timed(|| {
            let s = scanner.scan().expect("scan");
            assert_eq!((s.threads, s.unchanged), (n, 0));
            sink += scanner.samples().map(|s| s.cpu_ticks).sum::<u64>();
        });
        scanner.set_skip_unchanged_sleepers(true);
        so_w.push(w);
        so_c.push(c);

        // Baseline: open/read/close each stat file by path, parse the same fields.
        let (w, c) = timed(|| {
            for &tid in &tids {
                let b = root
                    .read_task_file(pid, tid, TaskFile::Stat)
                    .expect("read stat");
                sink += parse_lite(&b).expect("parse").cpu_ticks;
            }
        });
        plain_w.push(w);
        plain_c.push(c);

        // What a full task-dir re-listing would add (done only when num_threads changes).
        let (w, c) = timed(|| sink += root.tasks(pid).expect("tasks").len() as u64);
        list_w.push(w);
        list_c.push(c);

        // Floor: the same stat fd re-read n times (cache-hot kernel cost of one stat line).
        let (w, c) = timed(|| {
            use std::os::unix::fs::FileExt;
            for _ in 0..n {
                let len = one.read_at(&mut buf, 0).expect("pread");
                sink += parse_lite(&buf[..len]).expect("parse").cpu_ticks;
            }
        });
        one_w.push(w);
        one_c.push(c);

        if let Some((it_scanner, threads)) = iterated.as_mut() {
            // Scanner with the task iterator: one iterator read, stat only for threads that ran.
            let (w, c) = timed(|| {
                let s = it_scanner.scan().expect("scan");
                assert_eq!(s.threads, n);
                it_skipped = s.unswitched;
                sink += it_scanner.samples().map(|s| s.cpu_ticks).sum::<u64>();
            });
            it_w.push(w);
            it_c.push(c);
            // The iterator read alone.
            let (w, c) = timed(|| {
                threads.read(&mut records).expect("iterator read");
                sink += records.len() as u64;
            });
            raw_w.push(w);
            raw_c.push(c);
        }
        if let Some(ts) = per_thread_stats.as_mut() {
            let (w, c) = timed(|| {
                for &tid in &tids {
                    if let Ok(counters) = ts.thread(tid) {
                        sink += counters.nvcsw;
                    }
                }
            });
            ts_w.push(w);
            ts_c.push(c);
        }
    }

    let row = |label: &str, w: Vec<Duration>, c: Vec<Duration>| {
        let (w, c) = (median(w), median(c));
        println!(
            "{label:<44} cpu {:>7.1} ms {:>6.2} µs/thread | wall {:>7.1} ms {:>6.2} µs/thread",
            c.as_secs_f64() * 1e3,
            per_thread_us(c, n),
            w.as_secs_f64() * 1e3,
            per_thread_us(w, n)
        );
        per_thread_us(c, n)
    };
    println!("threads scanned: {n} (spawned {threads}), rounds: {rounds}, median per round");
    let hot_us = row("hot scan (Scanner default)", hot_w, hot_c);
    println!("  ({skipped} of {n} sleepers skipped stat: schedstat unchanged)");
    let so_us = row("hot scan, stat every thread (kept fds+pread)", so_w, so_c);
    let plain_us = row("baseline (open/read/close each stat)", plain_w, plain_c);
    if iterated.is_some() {
        let it_us = row("hot scan with the task iterator", it_w, it_c);
        println!(
            "  ({it_skipped} of {n} sleepers not read: asleep, not switched since the last scan)"
        );
        row("task iterator read alone", raw_w, raw_c);
        println!(
            "ratio baseline/task-iterator scan (cpu): {:.2}x",
            plain_us / it_us
        );
    }
    if per_thread_stats.is_some() {
        row("taskstats per thread (1 round trip each)", ts_w, ts_c);
    }
    row("task-dir re-listing (only on change)", list_w, list_c);
    row("floor: one stat fd re-read n times", one_w, one_c);
    println!(
        "ratio baseline/hot (cpu): {:.2}x; baseline/stat-every-thread: {:.2}x; goal ≤ 6 µs/thread (cpu): {}",
        plain_us / hot_us,
        plain_us / so_us,
        if hot_us <= 6.0 { "met" } else { "NOT met" }
    );
    std::hint::black_box(sink);

    release.wait();
    for h in handles {
        h.join().unwrap();
    }
}
