#!/usr/bin/env bash
# Issues 31 (part 4) and 40: the numbers on merged main, on the GPU host. Usage: numbers_run.sh BIN_DIR OUT_DIR
#   BIN_DIR: release wedge-capture and ring-bench (cargo bench -p breadcrumb --bench ring --no-run: the printed
#   target/release/deps/ring-<hash>, copied as ring-bench); optional wedge-capture-before (see bench-agent below)
#   and pack-bench (cargo bench -p uploader --bench pack --no-run: target/release/deps/pack-<hash>)
# Every ratio comes with its baseline from the same process; the upload and bench-agent rows run in three
# processes because their spread across processes is wide.
# PARTS (default: all of "ring agent fixed upload"): the parts to run, so a device call's time limit can take
# them in two calls, e.g. PARTS="ring agent" then PARTS="fixed upload".
set -u
PARTS=" ${PARTS:-ring agent fixed upload} "
part() { case "$PARTS" in *" $1 "*) return 0;; *) return 1;; esac; }
BIN=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
exec > >(tee "$OUT/numbers-log.txt") 2>&1
nproc; nvidia-smi -L; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; grep -m1 "model name" /proc/cpuinfo
# The share of CPU time the hypervisor took since the previous call (/proc/stat's steal column): on a KVM host
# with 16-20 % stolen, spinning packers collapse (issue 40, BENCHMARKS.md section 6), so every process says it.
STEAL_PREV=""
steal() {
  local now; now=$(awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
  if [ -n "$STEAL_PREV" ]; then
    echo "$STEAL_PREV $now" | awk '{d=$4-$2; if (d > 0) printf "steal since the previous step: %.1f %%\n", 100*($3-$1)/d}'
  fi
  STEAL_PREV=$now
}
steal
# Fastest first, so a run cut short by the device time keeps the most rows.
if part ring; then
echo "== breadcrumb ring bench"
# --bench: without it (and before issue 40, whatever WEDGE_BENCH_ITERS said) the bench ran 10,000 pairs only.
WEDGE_BENCH_ITERS=2000000 "$BIN/ring-bench" --bench > "$OUT/ring-bench.txt" 2>&1; echo "rc=$?"; tail -18 "$OUT/ring-bench.txt"
fi
if part upload && [ -x "$BIN/pack-bench" ]; then
  # Issue 40: the real workload's packing alone (no GPU), per tensor against gathered streaming, same process.
  echo "== pack bench: real workload, 1 and 14 packers"
  WEDGE_BENCH_PACK_MIB=0 WEDGE_BENCH_PACK_THREADS=1,14 WEDGE_BENCH_PACK_ROUNDS=7 "$BIN/pack-bench" --bench \
    > "$OUT/pack-bench.txt" 2>&1; echo "rc=$?"; tail -7 "$OUT/pack-bench.txt"
fi
# With BIN_DIR/wedge-capture-before (e.g. main before the merge), every bench-agent row is measured for both agent
# binaries in the same process (same helper threads, same baseline code).
AGENTS=()
if [ -x "$BIN/wedge-capture-before" ]; then AGENTS=(--agent-exe "$BIN/wedge-capture-before" --agent-exe "$BIN/wedge-capture"); fi
if part agent; then
echo "== bench-agent (16 cores, 3 processes)"
for i in 1 2 3; do
  "$BIN/wedge-capture" internal bench-agent --threads 1000,10000 --scans 30 ${AGENTS[@]+"${AGENTS[@]}"} > "$OUT/bench-agent-$i.txt" 2>&1
  echo "rc=$?"; tail -10 "$OUT/bench-agent-$i.txt"; steal
done
fi
if part fixed; then
echo "== bench-agent: the fixed per-scan cost (a 1-thread target; 2 processes)"
for i in 1 2; do
  "$BIN/wedge-capture" internal bench-agent --threads 1 --shapes idle --scans 30 ${AGENTS[@]+"${AGENTS[@]}"} > "$OUT/bench-agent-fixed-$i.txt" 2>&1
  echo "rc=$?"; tail -3 "$OUT/bench-agent-fixed-$i.txt"
done
fi
if part upload; then
# Issue 40: the default packs the real workload's small tensors with streaming stores (`bysize`); the
# sweep rows are the previous default (plain), explicit streaming, and streaming gathered through an L1
# bounce buffer (`:gather`, every staging line written whole; against the `streaming` row of the same
# process), same ring fit.
echo "== upload: real workload (3 processes)"
for i in 1 2 3; do
  "$BIN/wedge-capture" upload --backend cuda --compare --repeat 31 --skip managed,pageable --ring /tmp/r.ring --format json \
    --sweep 8x4MiBx14:overlap:plain:fit,8x4MiBx14:overlap:streaming:fit,8x4MiBx14:overlap:bysize:fit,8x4MiBx14:overlap:streaming:fit:gather \
    > "$OUT/upload-real-$i.json" 2> "$OUT/upload-real-$i.err"; echo "rc=$?"; tail -3 "$OUT/upload-real-$i.err"; steal
done
echo "== upload: 4 GiB (2 processes)"
for i in 1 2; do
  "$BIN/wedge-capture" upload --backend cuda --compare --repeat 11 --tensors 16384 --floats 65536 --params 0 \
    --skip managed,pageable,ztensor --sweep 8x4MiBx14:overlap:plain:fit --format json \
    > "$OUT/upload-4g-$i.json" 2> "$OUT/upload-4g-$i.err"; echo "rc=$?"; tail -3 "$OUT/upload-4g-$i.err"; steal
done
fi
