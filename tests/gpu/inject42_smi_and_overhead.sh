#!/usr/bin/env bash
# Issue 42 on the GPU host, one batch: (1) nvidia-smi -q from another process while uvmlock populates 48 GiB of
# managed memory on the host, under each breadcrumb path and each step of using CUPTI; (2) a PyTorch job's driver
# calls under --inject and --inject=cupti; (3) per-launch overhead (CUDA C runtime and driver loops, PyTorch);
# (4) cudarc (wedge-capture upload) under --inject; (5) what cuGetProcAddress returns. Usage:
#   inject42_smi_and_overhead.sh BIN_DIR OUT_DIR     (BIN_DIR: release wedge-capture and libwedge_inject.so)
# OUT_DIR gets results.jsonl (one line per measurement), log.txt, details.tar.gz and recordings.tar.gz.
set -u
BIN=$(cd "$1" && pwd); OUT=$2; HERE=$(cd "$(dirname "$0")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda-13.0}; export PATH=$CUDA/bin:$PATH
W=$(mktemp -d); D=$W/details; R=$W/recordings; mkdir -p "$OUT" "$D" "$R"
exec > "$OUT/log.txt" 2>&1
WC=$BIN/wedge-capture; LIB=$BIN/libwedge_inject.so
CUPTI=$(ls "$CUDA"/targets/*/lib/libcupti.so* 2>/dev/null | head -1)
res() { echo "$1" >> "$OUT/results.jsonl"; echo "RESULT $1"; }
echo "== machine"; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; uname -r
python3 -c 'import torch; print("torch", torch.__version__)'; echo "cupti $CUPTI"; nproc; free -g | head -2
echo "== build"
gcc -O1 -pthread -I"$CUDA/include" -o "$W/uvmlock" "$HERE/uvmlock.c" -L"$CUDA/lib64/stubs" -lcuda || exit 1
gcc -shared -fPIC -o "$W/noop.so" "$HERE/noop_inject.c" -ldl || exit 1
gcc -O1 -o "$W/gpa_check" "$HERE/gpa_check.c" -ldl || exit 1
nvcc -O2 -o "$W/launchloop" "$HERE/launchloop.cu" -lcuda || exit 1
run_wc() { "$WC" run --out "$W/inc" --ring-dir "$1" "${@:2}"; }
smi() { timeout 150 python3 "$HERE/smi_during_uvm.py" "$1" "$D" -- "${@:2}" | while read -r l; do res "$l"; done; }

mkdir -p "$W/ll"
echo "== 1. nvidia-smi -q during a 48 GiB populate"
U="$W/uvmlock populate 48 4"
smi bare $U
smi run-no-inject "$WC" run --out "$W/inc" --ring-dir "$W/r0" -- $U
smi inject-driver "$WC" run --out "$W/inc" --ring-dir "$W/r1" --inject -- $U
smi inject-cupti "$WC" run --out "$W/inc" --ring-dir "$W/r2" --inject=cupti -- $U
for m in empty load version none unsub domain; do
  smi "noop-$m" env CUDA_INJECTION64_PATH="$W/noop.so" NOOP_MODE=$m NOOP_CUPTI="$CUPTI" $U
done
smi bare-2 $U
smi inject-driver-2 "$WC" run --out "$W/inc" --ring-dir "$W/r3" --inject -- $U
for r in r1 r3; do ls "$W/$r"; done
"$WC" ring dump --last 30 "$W"/r1/*.driver.ring | head -40
cp "$W"/r1/*.driver.ring "$R/uvmlock-populate.driver.ring" 2>/dev/null

echo "== 2. PyTorch job: driver calls under each path (every call: INJECT_ALL, 262144 slots)"
for p in driver cupti; do
  WEDGE_CAPTURE_RING_SLOTS=262144 WEDGE_CAPTURE_INJECT_ALL=1 WEDGE_CAPTURE_INJECT_STATS=1 timeout 120 \
    "$WC" run --out "$W/inc" --ring-dir "$W/t-$p" --inject=$p -- python3 "$HERE/../../inject/tests/data/inject_torch.py"
  res "$(python3 "$HERE/ring_counts.py" "$WC" "$W"/t-$p/*.$p.ring | sed "s|$W/t-$p/|torch-all-$p:|")"
  timeout 120 "$WC" run --out "$W/inc" --ring-dir "$W/d-$p" --inject=$p -- python3 "$HERE/../../inject/tests/data/inject_torch.py"
  cp "$W"/d-$p/*.$p.ring "$R/pytorch.$p.ring"
  res "$(python3 "$HERE/ring_counts.py" "$WC" "$R/pytorch.$p.ring" | sed "s|$R/||")"
done

echo "== 3. per-launch overhead"
for rep in 1 2 3; do
  for mode in rt drv; do
    res "{\"loop\": \"$mode\", \"path\": \"bare\", $(timeout 60 "$W/launchloop" $mode 200000 | cut -c2-)"
    res "{\"loop\": \"$mode\", \"path\": \"driver\", $(LD_PRELOAD=$LIB WEDGE_CAPTURE_RING_DIR=$W/ll timeout 60 "$W/launchloop" $mode 200000 | cut -c2-)"
    res "{\"loop\": \"$mode\", \"path\": \"cupti\", $(CUDA_INJECTION64_PATH=$LIB WEDGE_CAPTURE_CUPTI=$CUPTI WEDGE_CAPTURE_RING_DIR=$W/ll timeout 60 "$W/launchloop" $mode 200000 | cut -c2-)"
  done
done
for rep in 1 2; do
  res "{\"loop\": \"torch\", \"path\": \"bare\", $(timeout 90 python3 "$HERE/torch_loop.py" 100000 | cut -c2-)"
  res "{\"loop\": \"torch\", \"path\": \"driver\", $(LD_PRELOAD=$LIB WEDGE_CAPTURE_RING_DIR=$W/ll timeout 90 python3 "$HERE/torch_loop.py" 100000 | cut -c2-)"
  res "{\"loop\": \"torch\", \"path\": \"cupti\", $(CUDA_INJECTION64_PATH=$LIB WEDGE_CAPTURE_CUPTI=$CUPTI WEDGE_CAPTURE_RING_DIR=$W/ll timeout 90 python3 "$HERE/torch_loop.py" 100000 | cut -c2-)"
done

echo "== 4. cudarc: wedge-capture upload under --inject"
WEDGE_CAPTURE_INJECT_STATS=1 timeout 120 "$WC" run --out "$W/inc" --ring-dir "$W/up" --inject -- "$WC" upload --tensors 4000 --params 4 --format json
ls -la "$W/up"; cp "$W"/up/*.driver.ring "$R/upload-cudarc.driver.ring"
res "$(python3 "$HERE/ring_counts.py" "$WC" "$R/upload-cudarc.driver.ring" | sed "s|$R/||")"

echo "== 5. cuGetProcAddress results, bare and preloaded"
"$W/gpa_check" > "$D/gpa-bare.txt"; LD_PRELOAD=$LIB WEDGE_CAPTURE_RING_DIR=$W/ll "$W/gpa_check" > "$D/gpa-preload.txt"
grep -c "not an exported" "$D/gpa-bare.txt"; head -12 "$D/gpa-bare.txt"; head -12 "$D/gpa-preload.txt"
"$WC" doctor --format json > "$R/doctor.json"; LD_PRELOAD=$LIB "$WC" doctor > "$D/doctor-preloaded.txt" 2>&1
grep breadcrumbs "$D/doctor-preloaded.txt"
tar -C "$W" -czf "$OUT/details.tar.gz" details; tar -C "$W" -czf "$OUT/recordings.tar.gz" recordings
echo "== done"
