#!/usr/bin/env bash
# GPU host check for issue 31 (docs/capture.md "RM lock waits"): does a long pin/alloc in process A leave
# process B's threads in D inside NVIDIA ioctls, for how long, and does `run --inject` capture it?
# Usage: rmlock_contention.sh BIN_DIR OUT_DIR [GIB]   BIN_DIR: release wedge-capture + libwedge_inject.so
set -u
BIN=$(cd "$1" && pwd); OUT=$2; GIB=${3:-32}
HERE=$(cd "$(dirname "$0")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda-13.0}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
gcc -O1 -pthread -I"$CUDA/include" -o /tmp/rmlock "$HERE/rmlock.c" -L"$CUDA/lib64/stubs" -lcuda || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader; free -g | head -2
uname -r; cat /proc/driver/nvidia/version 2>/dev/null | head -1

# phase NAME AMODE: B hammers with 8 threads, sampled every ~2 ms; A (if any) pins/allocates GIB GiB.
phase() {
  local name=$1 mode=$2
  rm -f /tmp/stop
  /tmp/rmlock hammer 8 /tmp/stop 90 2> "$OUT/$name.B.log" & local b=$!
  sleep 3
  python3 "$HERE/dsample.py" $b 100 "$OUT/$name.B.dsample.json" > "$OUT/$name.B.dsample.txt" & local s=$!
  sleep 1
  if [ "$mode" = none ]; then sleep 12; else
    timeout 150 /tmp/rmlock "$mode" "$GIB" 2> "$OUT/$name.A.log" & local a=$!
    sleep 0.3
    python3 "$HERE/dsample.py" $a 100 "$OUT/$name.A.dsample.json" all > "$OUT/$name.A.dsample.txt" &
    wait $a
  fi
  sleep 1; touch /tmp/stop; wait $b; wait $s
  echo "== $name"; cat "$OUT/$name.B.dsample.txt" "$OUT/$name.A.dsample.txt" 2>/dev/null
  grep -h "^A \|SLOW" "$OUT/$name.A.log" "$OUT/$name.B.log" 2>/dev/null | sort -k6 -n -r | head -12
}
phase baseline none
phase register register
phase hostalloc hostalloc

echo "== run --inject --threshold 2s around the register phase"
rm -f /tmp/stop
"$BIN/wedge-capture" run --inject --threshold 2s --interval 0.25 --out "$OUT/incidents" -- \
  /tmp/rmlock hammer 8 /tmp/stop 90 2> "$OUT/run.B.log" & r=$!
sleep 4
timeout 150 /tmp/rmlock register "$GIB" 2> "$OUT/run.A.log"
sleep 3; touch /tmp/stop; wait $r; echo "run exit $?"
ls -R "$OUT/incidents" | head -30
for d in "$OUT"/incidents/*/; do [ -f "$d/report.md" ] && head -60 "$d/report.md"; done
