//! `cargo bench -p reports --bench store` — prints a Markdown table for BENCHMARKS.md.
//!
//! 1. `Store::create` (a new incident directory with its minimal incident.json, durable: temp → fsync → rename →
//!    fsync dir, directory renamed into place, root fsync-ed) against the unavoidable floor: one `write` + `fsync`
//!    of the same bytes to a fresh file in the same directory.
//! 2. `render::markdown` of a realistic incident and of a huge one (3,000 threads, 20,000 kernel log lines) against
//!    `serde_json::to_vec` of the same incident.
//!
//! `WEDGE_BENCH_DIR` picks the filesystem (default: the system temp dir); `WEDGE_BENCH_ROUNDS` the repetitions.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use capture::{StackFrame, ThreadSnapshot};
use reports::model::{Incident, KernelLogLine};
use reports::{Retention, Store};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn huge() -> Incident {
    let mut inc = common::incident();
    let threads = (0..3000).map(|i| ThreadSnapshot {
        tid: 10_000 + i,
        comm: format!("worker-{i}"),
        state: "D".into(),
        wchan: Some("os_acquire_mutex".into()),
        stack: (0..30)
            .map(|j| StackFrame {
                function: format!("kernel_function_{j}"),
                offset: 0x10,
                size: 0x100,
                module: Some("nvidia".into()),
            })
            .collect(),
        ..ThreadSnapshot::default()
    });
    inc.samples[1].snapshot.threads.extend(threads);
    for k in 0..20_000u64 {
        inc.kernel_log.push(KernelLogLine::new(
            Some(k),
            Some(4),
            Some(k),
            format!("NVRM: line {k}"),
        ));
    }
    inc
}

fn main() {
    let rounds: usize = std::env::var("WEDGE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let base = std::env::var_os("WEDGE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(&base).expect("temp dir");
    let store = Store::open(tmp.path().join("incidents"), Retention::UNLIMITED).expect("store");
    let mut minimal = common::incident();
    minimal.id.clear();
    minimal.ring = None;
    minimal.kernel_log.clear();
    minimal.samples.remove(0);
    let bytes = serde_json::to_vec_pretty(&minimal).unwrap();

    let (mut create, mut floor) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let t = Instant::now();
        let mut f = std::fs::File::create(tmp.path().join(format!("floor-{i}"))).unwrap();
        f.write_all(&bytes).unwrap();
        f.sync_all().unwrap();
        floor.push(t.elapsed());

        minimal.process.pid = 1000 + i as i32;
        let t = Instant::now();
        let handle = store.create(&minimal).unwrap();
        create.push(t.elapsed());
        drop(handle);
    }
    let (create, floor) = (median(create), median(floor));

    println!(
        "Filesystem of {}; {rounds} rounds, medians.\n",
        base.display()
    );
    println!("| operation | time | baseline | time | ratio |");
    println!("|---|---|---|---|---|");
    println!(
        "| `Store::create` (minimal incident.json, {} B, durable) | {} | write + fsync of the same bytes | {} | {:.1}× |",
        bytes.len(),
        ms(create),
        ms(floor),
        create.as_secs_f64() / floor.as_secs_f64()
    );

    for (name, inc) in [
        ("realistic incident", common::incident()),
        (
            "huge incident (3,000 D threads × 30 frames, 20,000 kmsg lines)",
            huge(),
        ),
    ] {
        let render_rounds = if name.starts_with("huge") {
            rounds.min(10)
        } else {
            rounds
        };
        let (mut render, mut json) = (Vec::new(), Vec::new());
        let mut out_len = 0;
        for _ in 0..render_rounds {
            let t = Instant::now();
            out_len = reports::render::markdown(&inc).chars().count();
            render.push(t.elapsed());
            let t = Instant::now();
            std::hint::black_box(serde_json::to_vec(&inc).unwrap());
            json.push(t.elapsed());
        }
        let (render, json) = (median(render), median(json));
        println!(
            "| `render::markdown`, {name} → {out_len} chars | {} | `serde_json::to_vec` of it | {} | {:.2}× |",
            ms(render),
            ms(json),
            render.as_secs_f64() / json.as_secs_f64()
        );
    }
}
