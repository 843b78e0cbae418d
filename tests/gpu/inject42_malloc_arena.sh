#!/usr/bin/env bash
# Issue 42, third batch: does MALLOC_ARENA_MAX=1 (CUPTI's threads allocate from the main arena instead of mapping
# a new 64 MiB arena) keep nvidia-smi fast under a CUPTI subscriber? Usage as inject42_smi_and_overhead.sh.
set -u
BIN=$(cd "$1" && pwd); OUT=$2; HERE=$(cd "$(dirname "$0")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda-13.0}; export PATH=$CUDA/bin:$PATH
W=$(mktemp -d); D=$W/details3; mkdir -p "$OUT" "$D"
exec > "$OUT/log3.txt" 2>&1
WC=$BIN/wedge-capture
gcc -O1 -pthread -I"$CUDA/include" -o "$W/uvmlock" "$HERE/uvmlock.c" -L"$CUDA/lib64/stubs" -lcuda || exit 1
smi() { SMI_ALL_THREADS=1 timeout 150 python3 "$HERE/smi_during_uvm.py" "$1" "$D" -- "${@:2}" >> "$OUT/results3.jsonl"; }
U="$W/uvmlock populate 48 4"
smi arena1-inject-cupti env MALLOC_ARENA_MAX=1 "$WC" run --out "$W/inc" --ring-dir "$W/r1" --inject=cupti -- $U
smi inject-cupti-3 "$WC" run --out "$W/inc" --ring-dir "$W/r2" --inject=cupti -- $U
smi inject-driver-3 "$WC" run --out "$W/inc" --ring-dir "$W/r3" --inject -- $U
tar -C "$W" -czf "$OUT/details3.tar.gz" details3
