#!/usr/bin/env bash
# Issue 31 part 4: the numbers on merged main, on the GPU host. Usage: numbers_run.sh BIN_DIR OUT_DIR
#   BIN_DIR: release wedge-capture, libwedge_inject.so and ring-bench (cargo bench -p breadcrumb --bench ring --no-run)
set -u
BIN=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
exec > >(tee "$OUT/numbers-log.txt") 2>&1
nproc; nvidia-smi -L
echo "== upload: real workload (3 processes)"
for i in 1 2 3; do
  "$BIN/wedge-capture" upload --backend cuda --compare --repeat 31 --skip managed,pageable --ring /tmp/r.ring --format json \
    > "$OUT/upload-real-$i.json" 2> "$OUT/upload-real-$i.err"; echo "rc=$?"; tail -3 "$OUT/upload-real-$i.err"
done
echo "== upload: 4 GiB"
"$BIN/wedge-capture" upload --backend cuda --compare --repeat 11 --tensors 16384 --floats 65536 --params 0 \
  --skip managed,pageable,ztensor --format json > "$OUT/upload-4g.json" 2> "$OUT/upload-4g.err"; echo "rc=$?"; tail -3 "$OUT/upload-4g.err"
echo "== bench-agent (16 cores)"
"$BIN/wedge-capture" internal bench-agent --threads 1000,10000 --scans 30 > "$OUT/bench-agent.txt" 2>&1; echo "rc=$?"; tail -12 "$OUT/bench-agent.txt"
echo "== breadcrumb ring bench"
WEDGE_BENCH_ITERS=2000000 "$BIN/ring-bench" > "$OUT/ring-bench.txt" 2>&1; echo "rc=$?"; tail -15 "$OUT/ring-bench.txt"
