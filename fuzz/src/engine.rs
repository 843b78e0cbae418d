//! The fuzz loop: pick an input from the corpus, mutate it, run the target under `catch_unwind`, measure the
//! heap it took. Deterministic for a given seed and corpus: a run can be repeated exactly (the corpus includes
//! this machine's /proc files, so repeat a crash from the file it wrote, not from the seed alone).

use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::alloc;
use crate::targets::{Outcome, Target};

/// xorshift64*: tiny, fast, good enough to drive mutations; never zero.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so seeds 0, 1, 2 … start far apart (and the state is never 0).
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// Bytes that change how parsers split and decode: delimiters of /proc text, JSON, the ring's magic.
const INTERESTING_BYTES: &[u8] = b"\0\x01\x7f\x80\xff \t\n()[]{}:;,=\"'\\/-+0179xeE.@%";
const INTERESTING_U32: &[u32] = &[
    0,
    1,
    2,
    7,
    8,
    127,
    128,
    255,
    256,
    511,
    512,
    513,
    4095,
    4096,
    4097,
    0x7fff,
    0x8000,
    0xffff,
    0x10000,
    1 << 20,
    (1 << 20) + 1,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
];
const INTERESTING_U64: &[u64] = &[
    0,
    1,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 32,
    1 << 48,
    (1 << 48) - 1,
    i64::MAX as u64,
    1 << 63,
    u64::MAX - 1,
    u64::MAX,
];
const INTERESTING_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "-0",
    "1",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999",
    "1e308",
    "1e400",
    "-1e400",
    "0.0000001",
    "NaN",
    "0x",
    "0xffffffffffffffffff",
    "",
];

/// Mutate `input` in place: 1 to 16 stacked edits, biased to few. `focus`: a byte range most edits land in
/// (the ring header); `dict`: words of the input's language (JSON keys, /proc field names).
pub fn mutate(
    rng: &mut Rng,
    input: &mut Vec<u8>,
    other: &[u8],
    focus: Option<(usize, usize)>,
    dict: &[&[u8]],
    max_len: usize,
) {
    let edits = 1 << rng.below(5);
    for _ in 0..edits {
        edit_once(rng, input, other, focus, dict);
        if input.len() > max_len {
            input.truncate(max_len);
        }
    }
}

/// One edit of [`mutate`]'s fifteen kinds.
fn edit_once(
    rng: &mut Rng,
    input: &mut Vec<u8>,
    other: &[u8],
    focus: Option<(usize, usize)>,
    dict: &[&[u8]],
) {
    let pos = |rng: &mut Rng, len: usize| -> usize {
        match focus {
            Some((start, end)) if start < len && rng.below(4) != 0 => {
                start + rng.below(end.min(len) - start)
            }
            _ => rng.below(len + 1),
        }
    };
    match rng.below(15) {
        0 if !input.is_empty() => {
            let at = pos(rng, input.len() - 1);
            input[at] ^= 1 << rng.below(8);
        }
        1 if !input.is_empty() => {
            let at = pos(rng, input.len() - 1);
            input[at] = rng.next_u64() as u8;
        }
        2 if !input.is_empty() => {
            let at = pos(rng, input.len() - 1);
            input[at] = INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())];
        }
        3 => {
            let at = pos(rng, input.len());
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            input.splice(at..at, bytes);
        }
        4 if !input.is_empty() => {
            let at = pos(rng, input.len() - 1);
            let n = 1 + rng.below(16.min(input.len() - at));
            input.drain(at..at + n);
        }
        5 if !input.is_empty() => {
            // Duplicate a chunk elsewhere (repeated fields, lines, records).
            let from = rng.below(input.len());
            let n = 1 + rng.below((input.len() - from).min(256));
            let chunk = input[from..from + n].to_vec();
            let at = pos(rng, input.len());
            input.splice(at..at, chunk);
        }
        6 if input.len() >= 4 => {
            let at = pos(rng, input.len() - 4).min(input.len() - 4);
            let v = INTERESTING_U32[rng.below(INTERESTING_U32.len())];
            input[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        7 if input.len() >= 8 => {
            let at = pos(rng, input.len() - 8).min(input.len() - 8);
            let v = INTERESTING_U64[rng.below(INTERESTING_U64.len())];
            input[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        8 if !other.is_empty() => {
            // Splice a chunk of another corpus input in (overwrite or insert).
            let from = rng.below(other.len());
            let n = 1 + rng.below((other.len() - from).min(512));
            let at = pos(rng, input.len());
            if rng.chance(2) && at + n <= input.len() {
                input[at..at + n].copy_from_slice(&other[from..from + n]);
            } else {
                input.splice(at..at, other[from..from + n].iter().copied());
            }
        }
        9 if !input.is_empty() => {
            input.truncate(rng.below(input.len()));
        }
        10 => replace_number(rng, input),
        11 if !dict.is_empty() => {
            let word = dict[rng.below(dict.len())];
            let at = pos(rng, input.len());
            input.splice(at..at, word.iter().copied());
        }
        12 if !input.is_empty() => {
            // A long run: huge fields, deep nesting, many lines.
            let from = rng.below(input.len());
            let n = 1 + rng.below((input.len() - from).min(8));
            let scale = rng.below(12);
            let times = 1 + rng.below(1 << scale);
            let chunk = input[from..from + n].repeat(times);
            let at = pos(rng, input.len());
            input.splice(at..at, chunk);
        }
        13 if input.len() >= 2 => {
            let a = rng.below(input.len());
            let b = rng.below(input.len());
            input.swap(a, b);
        }
        _ => {
            let at = pos(rng, input.len());
            input.insert(at, INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())]);
        }
    }
}

/// Replace one run of ASCII digits with a boundary number (overflow, sign, exponent, empty).
fn replace_number(rng: &mut Rng, input: &mut Vec<u8>) {
    let start = rng.below(input.len() + 1);
    let Some(first) = input[start..]
        .iter()
        .position(u8::is_ascii_digit)
        .map(|p| p + start)
    else {
        return;
    };
    let end = input[first..]
        .iter()
        .position(|c| !c.is_ascii_digit())
        .map_or(input.len(), |p| p + first);
    let number = INTERESTING_NUMBERS[rng.below(INTERESTING_NUMBERS.len())];
    input.splice(first..end, number.bytes());
}

/// How a run went.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub target: &'static str,
    pub executions: u64,
    /// Inputs the target accepted (parsed), the rest it rejected with an error.
    pub accepted: u64,
    pub panics: u64,
    /// Files holding the inputs that panicked or exceeded the memory budget.
    pub saved: Vec<PathBuf>,
    pub wall: Duration,
    /// Largest heap growth of one execution, and the budget it had.
    pub max_exec_heap: usize,
    pub over_budget: u64,
    /// `ru_maxrss` before and after the run.
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub corpus: usize,
    pub largest_input: usize,
}

impl Report {
    pub fn clean(&self) -> bool {
        self.panics == 0 && self.over_budget == 0
    }

    pub fn line(&self) -> String {
        let secs = self.wall.as_secs_f64();
        format!(
            "{:<12} execs {:>11}  accepted {:>10}  wall {:>8.2}s  {:>9.0}/s  peak RSS {:>7} KiB (start {} KiB)  \
             max heap/exec {:>9} B  largest input {:>7} B  corpus {:>4}  panics {}  over budget {}",
            self.target,
            self.executions,
            self.accepted,
            secs,
            self.executions as f64 / secs.max(1e-9),
            self.rss_after_kib,
            self.rss_before_kib,
            self.max_exec_heap,
            self.largest_input,
            self.corpus,
            self.panics,
            self.over_budget,
        )
    }
}

/// Peak resident set of this process, KiB.
pub fn max_rss_kib() -> u64 {
    // SAFETY: an all-zero rusage is a valid value; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to a rusage we own.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    usage.ru_maxrss.max(0) as u64
}

/// The message of the last panic, captured by the hook instead of printed (a fuzz run makes thousands).
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

fn install_quiet_hook() {
    panic::set_hook(Box::new(|info| {
        let msg = format!("{info}");
        if let Ok(mut last) = LAST_PANIC.lock() {
            *last = Some(msg);
        }
    }));
}

/// Heap one execution may take: generous for the input's size, far below what an unbounded length field does.
pub fn heap_budget(input_len: usize) -> usize {
    (16 << 20) + 64 * input_len
}

/// Options of one run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub iterations: u64,
    pub seed: u64,
    /// Where panicking or over-budget inputs are written.
    pub crash_dir: PathBuf,
    /// Most crash files written per run.
    pub max_saved: usize,
}

/// Run `target` for `options.iterations` executions.
pub fn run(target: &Target, options: &RunOptions) -> Report {
    install_quiet_hook();
    let mut rng = Rng::new(options.seed ^ fnv(target.name.as_bytes()));
    let mut corpus = (target.seeds)();
    corpus.extend(
        crate::targets::regressions(target.name)
            .into_iter()
            .map(|(_, bytes)| bytes),
    );
    assert!(!corpus.is_empty(), "target {} has no seeds", target.name);
    let seeds = corpus.len();
    let mut report = Report {
        target: target.name,
        rss_before_kib: max_rss_kib(),
        ..Report::default()
    };
    let started = Instant::now();
    let mut input = Vec::new();
    for iteration in 0..options.iterations {
        let base = rng.below(corpus.len());
        input.clear();
        input.extend_from_slice(&corpus[base]);
        // One in 64 runs a seed as it is: the real inputs must keep passing.
        if !rng.chance(64) {
            let other = &corpus[rng.below(corpus.len())];
            mutate(
                &mut rng,
                &mut input,
                other,
                target.focus,
                target.dict,
                target.max_len,
            );
        }
        report.largest_input = report.largest_input.max(input.len());
        let heap_before = alloc::reset_peak();
        let result = panic::catch_unwind(AssertUnwindSafe(|| (target.run)(&input)));
        let heap = alloc::peak().saturating_sub(heap_before);
        report.max_exec_heap = report.max_exec_heap.max(heap);
        report.executions += 1;
        let over = heap > heap_budget(input.len());
        match result {
            Ok(Outcome::Accepted) => {
                report.accepted += 1;
                // Accepted inputs grow the corpus (bounded), so mutations reach deeper than one edit from a seed.
                if corpus.len() < seeds + 512 {
                    if rng.chance(8) {
                        corpus.push(input.clone());
                    }
                } else if rng.chance(64) {
                    let slot = seeds + rng.below(corpus.len() - seeds);
                    corpus[slot] = input.clone();
                }
            }
            Ok(Outcome::Rejected) => {}
            Err(_) => {
                report.panics += 1;
                let why = LAST_PANIC
                    .lock()
                    .ok()
                    .and_then(|mut m| m.take())
                    .unwrap_or_default();
                save(&mut report, options, "panic", iteration, &input, &why);
            }
        }
        if over {
            report.over_budget += 1;
            let why = format!(
                "one execution took {heap} bytes of heap (budget {})",
                heap_budget(input.len())
            );
            save(&mut report, options, "memory", iteration, &input, &why);
        }
    }
    report.wall = started.elapsed();
    report.rss_after_kib = max_rss_kib();
    report.corpus = corpus.len();
    report
}

fn save(
    report: &mut Report,
    options: &RunOptions,
    kind: &str,
    iteration: u64,
    input: &[u8],
    why: &str,
) {
    if report.saved.len() >= options.max_saved {
        return;
    }
    let stem = format!(
        "{}-{kind}-seed{}-iter{iteration}",
        report.target, options.seed
    );
    let path = options.crash_dir.join(format!("{stem}.bin"));
    let written = std::fs::create_dir_all(&options.crash_dir)
        .and_then(|()| std::fs::write(&path, input))
        .and_then(|()| std::fs::write(options.crash_dir.join(format!("{stem}.txt")), why));
    match written {
        Ok(()) => report.saved.push(path),
        Err(e) => eprintln!("wedge-fuzz: cannot save {}: {e}", path.display()),
    }
}

/// Run one saved input (a crash file) once, with the panic shown: for reproducing and for regression tests.
pub fn replay(target: &Target, path: &Path) -> std::io::Result<Outcome> {
    let input = std::fs::read(path)?;
    Ok((target.run)(&input))
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}
