//! Every default of the watch loop, the capture path and the agent, as a named constant here and
//! nowhere else. A leaf: it imports nothing of this crate, so the watch loop, the settings layer and the
//! daemon all reach down to it (the watch loop builds its types from the settings layer's, never the reverse).

use std::time::Duration;

/// How often every watched thread is sampled.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How long a thread must sit in D without progress to count as wedged.
pub const THRESHOLD: Duration = Duration::from_secs(30);
/// K: unchanged samples needed on top of the threshold (the no-progress proof).
pub const SAMPLES: u32 = 3;
/// Deadline of the risky reads done in sacrificial children.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Probe children still stuck (unkillable) before further probes are skipped.
pub const MAX_STUCK_PROBES: usize = 4;
/// While an episode is open, a new thread snapshot is added this often.
pub const RESAMPLE_EVERY: Duration = Duration::from_secs(30);
/// `run` re-samples every threshold, but not more often than this (a short test threshold must not
/// fill the incident with samples).
pub const MIN_RUN_RESAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Kernel log kept from this long before the wedge began.
pub const KMSG_BEFORE: Duration = Duration::from_secs(600);
/// Samples kept per incident (the first and the latest ones).
pub const MAX_SAMPLES: usize = 8;
/// Pre-wedge history: each watched process's cheap samples cover the threshold plus this much.
pub const HISTORY_BEYOND_THRESHOLD: Duration = Duration::from_secs(30);
/// Pre-wedge history bounds: samples per process, threads per sample (5 bytes each: ≤ 1.2 MiB per 1,000
/// threads), and threads written into an incident.
pub const HISTORY_MAX_SAMPLES: usize = 240;
pub const HISTORY_MAX_THREADS: usize = 4096;
pub const HISTORY_THREADS_WRITTEN: usize = 64;
/// An incident's thread snapshots (issue 35): besides the threads judged wedged, at most this many threads in D
/// are listed and read in full (a process can put any number of threads in D on purpose)...
pub const SNAPSHOT_MAX_IN_D: usize = 256;
/// ...and at most this many others (running first, then lowest tid); a very wide process's other threads are
/// counted by state and wchan, their stacks, syscalls and fds never read. capture's `SnapshotOptions::default()`
/// holds the same bounds (a test checks), so every snapshot the agent takes is bounded alike.
pub const SNAPSHOT_MAX_OTHERS: usize = 256;
/// ...and only while the listed threads' estimated bytes stay within this (a stack holds up to 64 frames): with
/// [`MAX_SAMPLES`] samples, at most 4 MiB of an incident.json is threads, within its 8 MB bound.
pub const SNAPSHOT_MAX_BYTES: usize = 512 << 10;
/// Most D-state tasks listed in the host census.
pub const MAX_CENSUS: usize = 256;
/// Agent: at most one new incident per process in this window.
pub const RATE_LIMIT: Duration = Duration::from_secs(600);
/// Agent: at most one on-demand (SIGUSR1) incident per process in this window.
pub const ON_DEMAND_RATE_LIMIT: Duration = Duration::from_secs(60);
/// Agent: shortest time between two reads of one process's fd links for `--gpu`.
pub const GPU_RESCAN: Duration = Duration::from_secs(5);
/// Agent: most processes watched at once.
pub const MAX_TARGETS: usize = 4096;
/// Agent metrics endpoint: most connections served at once; more are closed at once (a flood of
/// clients costs a socket each, never a thread each).
pub const METRICS_MAX_CONNECTIONS: usize = 64;
/// Agent metrics endpoint: the whole request head must arrive within this (a slow client is dropped).
pub const METRICS_REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// Agent metrics endpoint: the largest request head read (a scrape's is a few hundred bytes).
pub const METRICS_MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Agent metrics endpoint: `/healthz` fails once the loop has not published for this long (or 10
/// intervals, if longer): a watch loop stuck that long gets its pod restarted.
pub const METRICS_STALE_AFTER: Duration = Duration::from_secs(60);
/// Agent `--textfile-dir`: the file node_exporter's textfile collector reads.
pub const TEXTFILE_NAME: &str = "wedge_capture.prom";
/// Agent `--textfile-dir`: rewritten at most this often unless a gauge an alert reads changed.
pub const TEXTFILE_EVERY: Duration = Duration::from_secs(10);
/// Where the kubelet keeps one directory per pod, `<namespace>_<name>_<uid>` (pod names of incidents).
pub const PODS_LOG_DIR: &str = "/var/log/pods";
/// The node's root as the agent sees it: the kubelet's (`var/lib/kubelet/pods`) and the container runtime's state
/// (`run/containerd/…`, `run/containers/storage/…`) under it confirm a target's pod (`capture::pod`).
pub const NODE_ROOT: &str = "/";
/// `npd-check`: an open episode whose incident was last written longer ago than this is stale (its
/// agent died; an open episode is rewritten every `resample_every`), so the node is not marked for it.
pub const NPD_MAX_AGE: Duration = Duration::from_secs(3600);
/// `selftest`: sampling interval of its (deliberately fast) watch.
pub const SELFTEST_INTERVAL: Duration = Duration::from_millis(250);
/// `selftest`: wedge threshold of its watch.
pub const SELFTEST_THRESHOLD: Duration = Duration::from_secs(2);
/// Where incidents go unless `--out` (or the config's `out`) says otherwise.
pub const INCIDENT_DIR: &str = reports::layout::DEFAULT_DIR;
/// Directory inside `--out` where `run` and `selftest` put their per-run ring directories. A dot name:
/// the incident store skips it (not an incident, never bundled, never removed by retention).
pub const RINGS_SUBDIR: &str = ".rings";
/// `--py-spy`: the program that reads a CPython target's Python stacks; a bare name is looked up on PATH.
pub const PY_SPY: &str = "py-spy";
/// py-spy children of one target still stuck in the kernel after SIGKILL (its `process_vm_readv` sleeps
/// unkillably behind a wedged mmap-lock writer) before py-spy is no longer started for that target: each stuck
/// child holds a pid and a little memory until the wedge clears, and a second one would tell nothing new.
pub const MAX_STUCK_PY_SPY_PER_TARGET: usize = 1;
/// Bytes of a blocked thread's stack read at sp for the candidate return-address scan (64 words).
pub const STACK_SCAN_BYTES: usize = 512;
/// Candidate frames kept from that scan per thread.
pub const MAX_STACK_CANDIDATES: usize = 12;
/// A tenant's stuck probe children (all its processes together) before its probes are skipped: this many
/// times the per-process bound ([`MAX_STUCK_PROBES`]).
pub const STUCK_PROBES_TENANT_FACTOR: usize = 4;
/// Capture workers: captures running at once (each runs its stages one after another; at most one per
/// tenant at a time, see `watch::queue`).
pub const CAPTURE_WORKERS: usize = 2;
/// A capture's total deadline: a stage that would start later is recorded as not run. Every stage has its
/// own deadline too (at most a few seconds each).
pub const CAPTURE_DEADLINE: Duration = Duration::from_secs(30);
/// A capture still not back this long after its total deadline is given up by the watch loop: the incident
/// is finished without it, saying so, and another worker takes its place.
pub const CAPTURE_GIVE_UP_AFTER: Duration = Duration::from_secs(15);
/// Captures waiting per tenant; more are not run (their minimal incidents are durable, and say why).
pub const MAX_QUEUED_CAPTURES_PER_TENANT: usize = 32;
/// The symbolizer helper (`internal resolve-symbols`, run with the target's credentials): the largest ELF file
/// it accepts. It maps the file whole (address space; only the headers and symbol tables are read), so a
/// `libtorch_cuda.so`-sized library (~1 GiB) passes and a bigger one is refused with its size.
pub const SYMBOLIZER_MAX_ELF_FILE_BYTES: u64 = 2 << 30;
/// The symbolizer's per-file cost cap: most bytes of symbol tables (`.symtab` + `.dynsym`, read from the
/// section headers before anything else) in one ELF file: 64 MiB is ~2.8 M symbols (libc has ~3,000,
/// librustc_driver ~186,000), whose index takes ~22 MiB of heap. A bigger file is refused, naming its size.
pub const SYMBOLIZER_MAX_SYMBOL_TABLE_BYTES: u64 = 64 << 20;
/// The symbolizer's budget of symbol-table bytes for all the files of one capture (the pcs' files first,
/// then the candidates'): files past it are refused, so the run's cost stays bounded whatever the count.
pub const SYMBOLIZER_SYMBOL_TABLE_BUDGET: u64 = 128 << 20;
/// The symbolizer's `RLIMIT_DATA` (heap and private writable mappings): measured needs are 4 MiB for libc
/// or libLLVM (111 MiB), 32 MiB for a generated 4 M-symbol file (above the per-file cap).
pub const SYMBOLIZER_DATA_LIMIT: u64 = 256 << 20;
/// The symbolizer's `RLIMIT_AS`: one mapped file at the size cap plus 512 MiB for the program, its heap
/// (bounded by [`SYMBOLIZER_DATA_LIMIT`]) and stacks. Measured: 28 MiB for libc, 140 MiB for libLLVM-15.
pub const SYMBOLIZER_ADDRESS_SPACE_LIMIT: u64 = SYMBOLIZER_MAX_ELF_FILE_BYTES + (512 << 20);
/// py-spy's `RLIMIT_AS` (it stays root: reading another process's memory needs ptrace rights): measured
/// needs 16 MiB (Debian's python3.11) to 32 MiB (a pyenv build with a 23 MiB libpython); a target mapping a
/// huge fake `libpython*.so` makes py-spy fail at the limit instead of growing.
pub const PY_SPY_ADDRESS_SPACE_LIMIT: u64 = 512 << 20;
/// Bytes the copies of one incident's breadcrumb rings may take together (ring.bin, ring-2.bin …): shared
/// among the rings read (each gets what is left divided by the rings still to read); a ring over its share is
/// copied as a valid smaller ring of its newest records (`rings::copy`). The incident's evidence is the calls in
/// flight and the last records (in incident.json), not 4 × 128 MiB of a tenant's rings.
pub const RING_COPY_BUDGET: u64 = 16 << 20;
