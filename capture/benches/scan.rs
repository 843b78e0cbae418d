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

/// The wall and CPU times of one row, one per round.
#[derive(Default)]
struct Series {
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
}

impl Series {
    /// Times one run of `f` into the series.
    fn time(&mut self, f: impl FnMut()) {
        let (w, c) = timed(f);
        self.wall.push(w);
        self.cpu.push(c);
    }

    /// Prints the row (medians) and returns its CPU µs per thread.
    fn row(self, label: &str, n: usize) -> f64 {
        let (w, c) = (median(self.wall), median(self.cpu));
        println!(
            "{label:<44} cpu {:>7.1} ms {:>6.2} µs/thread | wall {:>7.1} ms {:>6.2} µs/thread",
            c.as_secs_f64() * 1e3,
            per_thread_us(c, n),
            w.as_secs_f64() * 1e3,
            per_thread_us(w, n)
        );
        per_thread_us(c, n)
    }
}

/// Every row of the table, and what the scans skipped.
#[derive(Default)]
struct Rows {
    hot: Series,
    stat_every: Series,
    plain: Series,
    list: Series,
    one: Series,
    iterated: Series,
    iterator_alone: Series,
    per_thread_alone: Series,
    per_thread_stats: Series,
    skipped: usize,
    it_skipped: usize,
}

/// What the rounds measure: the scanners over this process's threads, and the other ways to read them.
struct Bench {
    root: ProcRoot,
    pid: i32,
    tids: Vec<i32>,
    scanner: Scanner,
    /// The scanner with the task iterator, and two more watches for the iterator read alone: the group
    /// walk (the scanner's, where the kernel loads it) and the per-thread program.
    iterated: Option<(
        Scanner,
        capture::task_iter::ProcessThreads,
        capture::task_iter::ProcessThreads,
    )>,
    records: Vec<u8>,
    /// The other per-thread candidate: taskstats by thread id, one netlink round trip per thread.
    per_thread_stats: Option<capture::taskstats::Taskstats>,
    /// One stat fd, for the floor.
    one: std::fs::File,
    buf: Vec<u8>,
    sink: u64,
}

fn main() {
    // `cargo test --benches` runs this binary with --bench absent: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let threads = env_usize("WEDGE_BENCH_THREADS", if quick { 200 } else { 10_000 });
    let rounds = env_usize("WEDGE_BENCH_ROUNDS", if quick { 3 } else { 15 });

    let (release, handles) = spawn_parked(threads);
    let mut bench = Bench::new(threads);
    let mut rows = Rows::default();
    for _ in 0..rounds {
        bench.round(&mut rows);
    }
    report(&bench, rows, threads, rounds);
    std::hint::black_box(bench.sink);

    release.wait();
    for h in handles {
        h.join().unwrap();
    }
}

/// `threads` threads parked on a barrier (state S), like the idle threads of a training process; waiting on
/// the barrier returned releases them.
fn spawn_parked(threads: usize) -> (Arc<Barrier>, Vec<std::thread::JoinHandle<()>>) {
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
    (release, handles)
}

impl Bench {
    fn new(threads: usize) -> Bench {
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
        // The busy-process shortcut, when this machine allows it (root, BTF, Linux >= 6.1).
        let task_iter = match capture::task_iter::TaskIter::load() {
            Ok(iter) => Some(iter),
            Err(err) => {
                println!("task iterator rows skipped: {err}");
                None
            }
        };
        let iterated = task_iter.as_ref().map(|iter| {
            let mut s = Scanner::new(&root, pid).expect("scanner");
            s.set_thread_iter(Some(iter.watch(pid).expect("watch")));
            s.scan().expect("first scan");
            (
                s,
                iter.watch(pid).expect("watch"),
                iter.watch_per_thread(pid).expect("watch"),
            )
        });
        let one = root
            .open_task_stat(pid, tids[tids.len() / 2])
            .expect("open");
        Bench {
            root,
            pid,
            tids,
            scanner,
            iterated,
            records: Vec::new(),
            per_thread_stats: capture::taskstats::Taskstats::open().ok(),
            one,
            buf: vec![0u8; 1024],
            sink: 0,
        }
    }

    /// One round of every row.
    fn round(&mut self, rows: &mut Rows) {
        let n = self.tids.len();
        let Bench {
            root,
            pid,
            tids,
            scanner,
            iterated,
            records,
            per_thread_stats,
            one,
            buf,
            sink,
        } = self;
        let pid = *pid;
        // Hot scan: pread every kept stat fd (+ the process stat; task dir re-listed only on change).
        rows.hot.time(|| {
            let s = scanner.scan().expect("scan");
            assert_eq!(s.threads, n);
            rows.skipped = s.unchanged;
            *sink += scanner.samples().map(|s| s.cpu_ticks).sum::<u64>();
        });

        // Same scanner with the schedstat shortcut off: pread of every kept stat fd.
        scanner.set_skip_unchanged_sleepers(false);
        rows.stat_every.time(|| {
            let s = scanner.scan().expect("scan");
            assert_eq!((s.threads, s.unchanged), (n, 0));
            *sink += scanner.samples().map(|s| s.cpu_ticks).sum::<u64>();
        });
        scanner.set_skip_unchanged_sleepers(true);

        // Baseline: open/read/close each stat file by path, parse the same fields.
        rows.plain.time(|| {
            for &tid in tids.iter() {
                let b = root
                    .read_task_file(pid, tid, TaskFile::Stat)
                    .expect("read stat");
                *sink += parse_lite(&b).expect("parse").cpu_ticks;
            }
        });

        // What a full task-dir re-listing would add (done only when num_threads changes).
        rows.list
            .time(|| *sink += root.tasks(pid).expect("tasks").len() as u64);

        // Floor: the same stat fd re-read n times (cache-hot kernel cost of one stat line).
        rows.one.time(|| {
            use std::os::unix::fs::FileExt;
            for _ in 0..n {
                let len = one.read_at(buf, 0).expect("pread");
                *sink += parse_lite(&buf[..len]).expect("parse").cpu_ticks;
            }
        });

        if let Some((it_scanner, threads, per_thread)) = iterated.as_mut() {
            // Scanner with the task iterator: one iterator read, stat only for threads that ran.
            rows.iterated.time(|| {
                let s = it_scanner.scan().expect("scan");
                assert_eq!(s.threads, n);
                rows.it_skipped = s.unswitched;
                *sink += it_scanner.samples().map(|s| s.cpu_ticks).sum::<u64>();
            });
            // The iterator read alone (and parsed): the scanner's, and the per-thread program's.
            rows.iterator_alone.time(|| {
                threads
                    .visit(records, |r| *sink += r.switches)
                    .expect("iterator read");
            });
            rows.per_thread_alone.time(|| {
                per_thread
                    .visit(records, |r| *sink += r.switches)
                    .expect("iterator read");
            });
        }
        if let Some(ts) = per_thread_stats.as_mut() {
            rows.per_thread_stats.time(|| {
                for &tid in tids.iter() {
                    if let Ok(counters) = ts.thread(tid) {
                        *sink += counters.nvcsw;
                    }
                }
            });
        }
    }
}

/// The table: one row per way of reading, medians of the rounds, and the ratios against the baseline.
fn report(bench: &Bench, rows: Rows, threads: usize, rounds: usize) {
    let n = bench.tids.len();
    let (skipped, it_skipped) = (rows.skipped, rows.it_skipped);
    println!("threads scanned: {n} (spawned {threads}), rounds: {rounds}, median per round");
    let hot_us = rows.hot.row("hot scan (Scanner default)", n);
    println!("  ({skipped} of {n} sleepers skipped stat: schedstat unchanged)");
    let so_us = rows
        .stat_every
        .row("hot scan, stat every thread (kept fds+pread)", n);
    let plain_us = rows.plain.row("baseline (open/read/close each stat)", n);
    if bench.iterated.is_some() {
        let it_us = rows.iterated.row("hot scan with the task iterator", n);
        println!(
            "  ({it_skipped} of {n} sleepers not read: asleep, not switched since the last scan)"
        );
        let walks = bench
            .iterated
            .as_ref()
            .is_some_and(|(_, threads, _)| threads.walks_group());
        rows.iterator_alone.row(
            if walks {
                "task iterator read alone: group walk"
            } else {
                "task iterator read alone: per thread (group too large to walk)"
            },
            n,
        );
        rows.per_thread_alone
            .row("task iterator read alone: per thread", n);
        println!(
            "ratio baseline/task-iterator scan (cpu): {:.2}x",
            plain_us / it_us
        );
    }
    if bench.per_thread_stats.is_some() {
        rows.per_thread_stats
            .row("taskstats per thread (1 round trip each)", n);
    }
    rows.list.row("task-dir re-listing (only on change)", n);
    rows.one.row("floor: one stat fd re-read n times", n);
    println!(
        "ratio baseline/hot (cpu): {:.2}x; baseline/stat-every-thread: {:.2}x; goal ≤ 6 µs/thread (cpu): {}",
        plain_us / hot_us,
        plain_us / so_us,
        if hot_us <= 6.0 { "met" } else { "NOT met" }
    );
}
