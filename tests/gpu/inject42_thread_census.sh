#!/usr/bin/env bash
# Issue 42, second batch: (1) every thread of uvmlock during the populate (SMI_ALL_THREADS: state, syscall with its
# arguments, stack) bare, with a CUPTI subscriber, after cuptiUnsubscribe + cuptiFinalize, and under --inject=cupti;
# (2) per-call overhead, interleaved repetitions: launches and idle-stream queries through the runtime and straight
# from the program, and the PyTorch loop; bare, --inject (LD_PRELOAD) and CUPTI. Usage as inject42_smi_and_overhead.sh.
set -u
BIN=$(cd "$1" && pwd); OUT=$2; HERE=$(cd "$(dirname "$0")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda-13.0}; export PATH=$CUDA/bin:$PATH
W=$(mktemp -d); D=$W/details2; mkdir -p "$OUT" "$D" "$W/ll"
exec > "$OUT/log2.txt" 2>&1
WC=$BIN/wedge-capture; LIB=$BIN/libwedge_inject.so
CUPTI=$(ls "$CUDA"/targets/*/lib/libcupti.so* 2>/dev/null | head -1)
res() { echo "$1" >> "$OUT/results2.jsonl"; echo "RESULT $1"; }
gcc -O1 -pthread -I"$CUDA/include" -o "$W/uvmlock" "$HERE/uvmlock.c" -L"$CUDA/lib64/stubs" -lcuda || exit 1
gcc -shared -fPIC -o "$W/noop.so" "$HERE/noop_inject.c" -ldl || exit 1
nvcc -O2 -o "$W/launchloop" "$HERE/launchloop.cu" -lcuda || exit 1
smi() { SMI_ALL_THREADS=1 timeout 150 python3 "$HERE/smi_during_uvm.py" "$1" "$D" -- "${@:2}" | while read -r l; do res "$l"; done; }
U="$W/uvmlock populate 48 4"
echo "== 1. threads during the populate"
smi census-bare $U
smi census-noop-none env CUDA_INJECTION64_PATH="$W/noop.so" NOOP_MODE=none NOOP_CUPTI="$CUPTI" $U
smi census-noop-unsub env CUDA_INJECTION64_PATH="$W/noop.so" NOOP_MODE=unsub NOOP_CUPTI="$CUPTI" $U
smi census-inject-driver "$WC" run --out "$W/inc" --ring-dir "$W/r1" --inject -- $U
tar -C "$W" -czf "$OUT/details2.tar.gz" details2
echo "== 2. overhead"
one() { # loop path cmd...
  local loop=$1 path=$2; shift 2
  case $path in
    bare) res "{\"loop\": \"$loop\", \"path\": \"bare\", $(timeout 60 "$@" | cut -c2-)" ;;
    driver) res "{\"loop\": \"$loop\", \"path\": \"driver\", $(LD_PRELOAD=$LIB WEDGE_CAPTURE_RING_DIR=$W/ll timeout 60 "$@" | cut -c2-)" ;;
    cupti) res "{\"loop\": \"$loop\", \"path\": \"cupti\", $(CUDA_INJECTION64_PATH=$LIB WEDGE_CAPTURE_CUPTI=$CUPTI WEDGE_CAPTURE_RING_DIR=$W/ll timeout 60 "$@" | cut -c2-)" ;;
  esac
}
for rep in 1 2 3 4 5 6 7; do
  for path in bare driver cupti; do
    one rt $path "$W/launchloop" rt 200000
    one drv $path "$W/launchloop" drv 200000
    one qrt $path "$W/launchloop" qrt 1000000
    one qdrv $path "$W/launchloop" qdrv 1000000
  done
done
for rep in 1 2 3 4 5; do
  for path in bare driver cupti; do one torch $path python3 "$HERE/torch_loop.py" 100000; done
done
echo "== done"
