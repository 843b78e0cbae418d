#!/usr/bin/env bash
# Issue 40 (BENCHMARKS.md "7. One helper for every binary, the quiet process's net by the walk"): the ring bench,
# `internal bench-agent` with up to three agent binaries measured against one helper per shape and size (the
# baseline measured before the first and after each: B A B A B), and the uploads, each process with the
# hypervisor's steal share. The session's runs were this script's parts as three device calls.
# Usage: scan40_quiet_walk_net.sh BIN_DIR OUT_DIR
#   BIN_DIR: release `wedge-capture` (the build to measure, which also runs the harness), optional
#   `wedge-capture-before` and `wedge-capture-walk` (builds to compare with, each measured in every process,
#   in a different order per process), and `ring-bench` (cargo bench -p breadcrumb --bench ring --no-run).
#   PARTS="ring agent upload" (default all). Output is text on stdout (and OUT_DIR/log.txt).
set -u
BIN=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PARTS=${PARTS:-ring agent upload}
part() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
prev=""
steal() { now=$(awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat); [ -n "$prev" ] && echo "$prev $now" | awk '{printf "steal %.1f %%\n", 100*($3-$1)/($4-$2)}'; prev=$now; }
nproc; grep -m1 "model name" /proc/cpuinfo; uname -r; ls /proc | grep -c '^[0-9]'; uptime; steal
if part ring; then
  for i in 1 2 3; do
    echo "== ring bench, process $i"
    WEDGE_BENCH_ITERS=2000000 "$BIN/ring-bench" --bench 2>&1 | grep -a "^| \*\*default\|floor\|goal\|excluding\|choice"
    steal
  done
fi
if part agent; then
  EXES=()
  for x in wedge-capture-before wedge-capture-walk wedge-capture; do [ -x "$BIN/$x" ] && EXES+=("$x"); done
  for i in 1 2 3; do
    echo "== bench-agent 1k, process $i"
    A=()
    # A different order in each process (rotated), so no binary always runs first or last.
    for k in "${!EXES[@]}"; do A+=(--agent-exe "$BIN/${EXES[$(( (k + i - 1) % ${#EXES[@]} ))]}"); done
    "$BIN/wedge-capture" internal bench-agent --threads 1000 --scans 30 "${A[@]}" 2>&1 \
      | grep -a "^| \(idle\|busy\)" | cut -d'|' -f2,6-9 | sed "s#$BIN/##"
    steal
  done
  echo "== bench-agent 10k"
  A=(); for x in "${EXES[@]}"; do A+=(--agent-exe "$BIN/$x"); done
  "$BIN/wedge-capture" internal bench-agent --threads 10000 --scans 30 "${A[@]}" 2>&1 \
    | grep -a "^| \(idle\|busy\)" | cut -d'|' -f2,6-9 | sed "s#$BIN/##"
  steal
fi
if part upload; then
  nvidia-smi -L
  for i in 1 2 3; do
    echo "== real workload, process $i"
    timeout 80 "$BIN/wedge-capture" upload --backend cuda --compare --repeat 31 --skip managed,pageable 2>/dev/null \
      | grep -a "ceiling)\|^pinned\|^ztensor\|waiting for packers" | head -10
    steal
  done
  echo "== 4 GiB"
  timeout 100 "$BIN/wedge-capture" upload --backend cuda --compare --repeat 11 --tensors 16384 --floats 65536 \
    --params 0 --skip managed,pageable,ztensor 2>/dev/null | grep -a "ceiling)\|^pinned"
  steal
  echo "== packers: 14 (default), 16, 12, 16x2MiB, parked (2 processes)"
  for i in 1 2; do
    timeout 120 "$BIN/wedge-capture" upload --backend cuda --compare --repeat 21 --skip managed,pageable,ztensor \
      --sweep 8x4MiBx14:spin:bysize:overlap:fit,8x4MiBx16:spin:bysize:overlap:fit,16x2MiBx16:spin:bysize:overlap:fit,8x4MiBx12:spin:bysize:overlap:fit,8x4MiBx16:park:bysize:overlap:fit \
      2>&1 | grep -av "^ *staging" | tail -16
    steal
  done
fi
