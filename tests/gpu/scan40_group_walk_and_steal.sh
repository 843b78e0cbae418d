#!/usr/bin/env bash
# Issue 40 (BENCHMARKS.md "6. The group walk, on the H100 host"): the busy scan with the task iterator's group walk
# against an agent binary without it, the ring's directory, and the upload's packers under steal time.
# Usage: scan40_group_walk_and_steal.sh BIN_DIR OUT_DIR
#   BIN_DIR: release `wedge-capture` (the build to measure), `wedge-capture-before` (the build to compare with),
#   `scan-bench` (cargo bench -p capture --bench scan --no-run: target/release/deps/scan-<hash>) and `ring-bench`
#   (cargo bench -p breadcrumb --bench ring --no-run). Output is text on stdout (and OUT_DIR/log.txt).
set -u
BIN=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
steal() { awk '/^cpu /{print "steal_ticks=" $9, "total_ticks=" $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
nproc; grep -m1 "model name" /proc/cpuinfo; uname -r; lscpu | grep -i numa; ls /proc | grep -c '^[0-9]'; steal
echo "== scan bench, 1000 threads (hot): the group walk against the per-thread program, same process"
WEDGE_BENCH_THREADS=1000 WEDGE_BENCH_ROUNDS=15 "$BIN/scan-bench" --bench 2>&1 | grep -a "iterator\|baseline (open\|hot scan (S"
echo "== bench-agent 1k, before vs after, 3 processes"
for i in 1 2 3; do
  "$BIN/wedge-capture" internal bench-agent --threads 1000 --scans 30 \
    --agent-exe "$BIN/wedge-capture-before" --agent-exe "$BIN/wedge-capture" 2>&1 | grep -a "^| \(idle\|busy\)"
  steal
done
echo "== bench-agent 10k busy (above the walk's 2,046 threads: per thread, the spared re-listing only)"
"$BIN/wedge-capture" internal bench-agent --threads 10000 --shapes busy --scans 30 \
  --agent-exe "$BIN/wedge-capture-before" --agent-exe "$BIN/wedge-capture" 2>&1 | grep -a "^| busy"
echo "== ring: the ring's directory on the disk (/tmp) and on tmpfs (/dev/shm), alternated"
for d in /tmp /dev/shm /tmp /dev/shm; do
  echo "TMPDIR=$d"; TMPDIR=$d WEDGE_BENCH_ITERS=1000000 "$BIN/ring-bench" --bench 2>&1 | grep -a "^|\|goal\|excluding\|choice"
done
echo "== upload: spinning against parked packers, same process (2 processes), with the steal share"
for i in 1 2; do
  steal
  timeout 120 "$BIN/wedge-capture" upload --backend cuda --compare --repeat 21 --skip managed,pageable,ztensor \
    --sweep 8x4MiBx14:spin:bysize:overlap:fit,8x4MiBx14:park:bysize:overlap:fit,8x4MiBx8:park:bysize:overlap:fit \
    2>/dev/null | grep -a "ceiling)\|^pinned \|  8x4\|    pinned"
  steal
done
