#!/usr/bin/env bash
# Issue 36 on the GPU host, one batch: (1) `run --inject` on uvmlock's 48 GiB cuMemPrefetchAsync to the host
# (`migratemm`), whose main thread runs inside UVM_MIGRATE holding the mmap_lock while four threads wait in raw
# mmap: the incident must name the running holder and its breadcrumb (the wait graph). (`migrate`'s threads wait in
# cuMemAllocManaged on a lock inside libcuda, asleep in futex (S), not in D: no wedge for a D watcher.) (2), with
# RMLOCK=1, RM contention (rmlock: process A
# registers 16 GiB while B's 8 threads hammer RM calls) under `run --inject` at a low threshold: the RM-lock line
# names a holder or says why not. Usage:
#   waitgraph36_run.sh BIN_DIR OUT_DIR     (BIN_DIR: release wedge-capture and libwedge_inject.so)
# OUT_DIR gets log.txt, migrate.tar.gz and rm.tar.gz (every incident and ring of each part).
set -u
BIN=$(cd "$1" && pwd); OUT=$2; HERE=$(cd "$(dirname "$0")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda-13.0}; export PATH=$CUDA/bin:$PATH
W=$(mktemp -d); mkdir -p "$OUT"
exec > "$OUT/log.txt" 2>&1
WC=$BIN/wedge-capture
echo "== machine"; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; uname -r; nproc
gcc -O1 -pthread -I"$CUDA/include" -o "$W/uvmlock" "$HERE/uvmlock.c" -L"$CUDA/lib64/stubs" -lcuda || exit 1
gcc -O1 -pthread -I"$CUDA/include" -o "$W/rmlock" "$HERE/rmlock.c" -L"$CUDA/lib64/stubs" -lcuda || exit 1

echo "== 1. uvmlock migratemm 48 4 under run --inject"
timeout 120 "$WC" run --inject --threshold 2s --interval 250ms --samples 2 --out "$W/migrate" \
  --ring-dir "$W/migrate-rings" -- "$W/uvmlock" migratemm 48 4
echo "run exit $?"
for d in "$W"/migrate/*/; do [ -f "$d/incident.json" ] || continue
  python3 -c 'import json,sys; i=json.load(open(sys.argv[1])); print("VERDICT", i["verdict"]); g=i.get("wait_graph") or {}; print(json.dumps(g)[:3000])' "$d/incident.json"
  sed -n 1,80p "$d/report.md"
done

tar -C "$W" -czf "$OUT/migrate.tar.gz" migrate migrate-rings 2>/dev/null
[ "${RMLOCK:-0}" = 1 ] || { ls -la "$OUT"; exit 0; }

echo "== 2. rmlock: A registers 16 GiB while B hammers, run --inject --threshold 1s"
rm -f "$W/stop"
"$WC" run --inject --threshold 1s --interval 250ms --samples 2 --out "$W/rm" --ring-dir "$W/rm-rings" -- \
  "$W/rmlock" hammer 8 "$W/stop" 45 2> "$W/rm.B.log" & r=$!
sleep 4
timeout 60 "$W/rmlock" register 16 2> "$W/rm.A.log"
sleep 3; touch "$W/stop"; wait $r; echo "run exit $?"
grep -h "SLOW\|^A " "$W/rm.A.log" "$W/rm.B.log" | head -20
for d in "$W"/rm/*/; do [ -f "$d/incident.json" ] || continue
  python3 -c 'import json,sys; i=json.load(open(sys.argv[1])); print("VERDICT", i["verdict"]); print("RMLOCK", json.dumps([t.get("rm_lock") for t in i.get("wedged_threads",[])])[:2000])' "$d/incident.json"
  sed -n 1,60p "$d/report.md"
done
tar -C "$W" -czf "$OUT/rm.tar.gz" rm rm-rings 2>/dev/null
ls -la "$OUT"
