#!/usr/bin/env bash
# GPU verification of the injection library (docs/inject.md, "GPU verification").
# Usage: gpu_check.sh BIN_DIR OUT_DIR
#   BIN_DIR holds a release wedge-capture and libwedge_inject.so; OUT_DIR receives the ring dumps
#   (JSON), the benchmark figures and a log. Needs nvcc, a GPU, libcupti and python3 with torch.
set -u
BIN=$(cd "$1" && pwd)
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda-13.0}
export PATH=$CUDA/bin:$PATH
WORK=$(mktemp -d)
exec > >(tee "$OUT/log.txt") 2>&1

CUPTI=$(ls "$CUDA"/targets/*/lib/libcupti.so* "$CUDA"/extras/CUPTI/lib64/libcupti.so* 2>/dev/null | head -1)
echo "== machine"; nvidia-smi -L; nvcc --version | tail -2; echo "libcupti: $CUPTI"
ls -d "$CUDA"/extras/CUPTI/lib64 "$CUDA"/targets/*/lib/libcupti* 2>&1 | head
python3 -c 'import nvidia, os; print("python nvidia dir:", list(nvidia.__path__))' 2>&1
ls "$(python3 -c 'import nvidia,sys; print(list(nvidia.__path__)[0])' 2>/dev/null)" 2>&1 | tr '\n' ' '; echo

nvcc -O2 -o "$WORK/probe" "$HERE/inject_probe.cu" -lcuda || exit 1
inject() { env CUDA_INJECTION64_PATH="$BIN/libwedge_inject.so" WEDGE_CAPTURE_CUPTI="$CUPTI" "$@"; }
dump() { "$BIN/wedge-capture" ring dump --format json --all "$1" > "$OUT/$2.json"; echo "dump $2: rc=$?"; }
summary() { "$BIN/wedge-capture" ring dump --last "${2:-40}" "$1"; }

echo "== basic (CUDA C, runtime API)"
inject WEDGE_CAPTURE_RING="$WORK/basic.ring" "$WORK/probe" basic; echo "rc=$?"
dump "$WORK/basic.ring" basic; summary "$WORK/basic.ring" 60

echo "== torch (unmodified PyTorch)"
inject WEDGE_CAPTURE_RING="$WORK/torch.ring" python3 "$HERE/inject_torch.py"; echo "rc=$?"
dump "$WORK/torch.ring" torch; summary "$WORK/torch.ring" 40

echo "== SIGKILL inside a long synchronize"
# Started directly (env execs the probe), so $! is the CUDA program itself: a shell function in the
# background would be a bash subshell, and SIGKILL would hit that subshell, not the program.
env CUDA_INJECTION64_PATH="$BIN/libwedge_inject.so" WEDGE_CAPTURE_CUPTI="$CUPTI" \
  WEDGE_CAPTURE_RING="$WORK/kill.ring" "$WORK/probe" spin 4 & victim=$!
sleep 1.5; echo "victim $victim: $(ps -o comm=,stat= -p $victim)"
[ "$(ps -o comm= -p $victim)" = probe ] || { echo "victim is not the probe: not killing"; exit 1; }
kill -9 $victim; wait $victim; echo "killed rc=$?"
if kill -0 $victim 2>/dev/null; then echo "victim still alive"; else echo "victim $victim is gone"; fi
dump "$WORK/kill.ring" kill; summary "$WORK/kill.ring" 12

echo "== fail soft: CUPTI path that does not exist"
env CUDA_INJECTION64_PATH="$BIN/libwedge_inject.so" WEDGE_CAPTURE_CUPTI=/nonexistent/libcupti.so \
  WEDGE_CAPTURE_RING="$WORK/soft.ring" "$WORK/probe" basic; echo "rc=$?"
summary "$WORK/soft.ring" 5

echo "== through wedge-capture run (ring dir)"
inject "$BIN/wedge-capture" run --out "$WORK/incidents" --ring-dir "$WORK/rings" -- "$WORK/probe" basic
echo "rc=$?"; ls -la "$WORK/rings"

echo "== overhead: N driver calls, no injection / CUPTI only / CUPTI + ring (5 rounds)"
N=${N:-200000}
for round in 1 2 3 4 5; do
  echo "-- round $round: none";  "$WORK/probe" bench $N
  echo "-- round $round: cupti"; inject WEDGE_CAPTURE_INJECT_RECORD=0 WEDGE_CAPTURE_RING="$WORK/b0.ring" "$WORK/probe" bench $N
  echo "-- round $round: ring";  inject WEDGE_CAPTURE_RING="$WORK/b1.ring" "$WORK/probe" bench $N
done | tee "$OUT/bench.txt"
summary "$WORK/b1.ring" 6
echo "== done"
