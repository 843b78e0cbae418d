#!/usr/bin/env bash
# Issue 31, second round: the next most likely long RM operations (a large device allocation with zeroing,
# parallel multi-GiB pins, a context-creation storm) while B hammers, then `run --inject` over a tree holding
# both A and B with a sub-second threshold. Usage: rmlock_long_operations.sh BIN_DIR OUT_DIR
set -u
BIN=$(cd "$1" && pwd); OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda-13.0}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
gcc -O1 -pthread -I"$CUDA/include" -o /tmp/rmlock "$HERE/rmlock.c" -L"$CUDA/lib64/stubs" -lcuda || exit 1
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
DEVGIB=$(( total_mib * 3 / 4 / 1024 ))
echo "device memory ${total_mib} MiB: devalloc ${DEVGIB} GiB"
phase() {
  local name=$1; shift
  rm -f /tmp/stop
  /tmp/rmlock hammer 8 /tmp/stop 90 2> "$OUT/$name.B.log" & local b=$!
  sleep 3
  python3 "$HERE/dsample.py" $b 100 "$OUT/$name.B.dsample.json" > "$OUT/$name.B.dsample.txt" & local s=$!
  sleep 1
  timeout 120 /tmp/rmlock "$@" 2> "$OUT/$name.A.log" & local a=$!
  sleep 0.3
  python3 "$HERE/dsample.py" $a 100 "$OUT/$name.A.dsample.json" all > "$OUT/$name.A.dsample.txt" &
  wait $a
  sleep 1; touch /tmp/stop; wait $b; wait $s
  echo "== $name: $*"; cat "$OUT/$name.B.dsample.txt" "$OUT/$name.A.dsample.txt" 2>/dev/null
  grep -h "^A " "$OUT/$name.A.log"; grep -h SLOW "$OUT/$name.B.log" | sort -k6 -n -r | head -4
}
phase devalloc devalloc "$DEVGIB"
phase multireg multireg 20 3
phase ctxstorm ctxstorm 16 10

echo "== run --inject, one process: 8 hammer threads + one thread pinning 32 GiB, threshold 0.4 s"
rm -f /tmp/stop
"$BIN/wedge-capture" run --inject --threshold 0.4s --interval 0.1 --samples 2 --out "$OUT/incidents1" -- \
  /tmp/rmlock both 32 8 /tmp/stop 2> "$OUT/run1.log"
echo "run exit $?"
for d in "$OUT"/incidents1/*/; do [ -f "$d/report.md" ] && { echo "== $d"; head -30 "$d/report.md"; }; done | head -120

echo "== run --inject over a tree with A (register 32 GiB) and B (hammer 8), threshold 0.4 s"
rm -f /tmp/stop
"$BIN/wedge-capture" run --inject --threshold 0.4s --interval 0.1 --samples 2 --out "$OUT/incidents" -- \
  sh -c '/tmp/rmlock hammer 8 /tmp/stop 90 2> '"$OUT"'/run.B.log & sleep 4; /tmp/rmlock register 32 2> '"$OUT"'/run.A.log; sleep 2; touch /tmp/stop; wait'
echo "run exit $?"
ls "$OUT/incidents"
for d in "$OUT"/incidents/*/; do [ -f "$d/report.md" ] && { echo "== $d"; head -40 "$d/report.md"; }; done
