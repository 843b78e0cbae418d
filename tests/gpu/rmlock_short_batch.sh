#!/usr/bin/env bash
# The short GPU-host batch (issue 31) for a tight device budget: one process with 8 RM-heavy threads and one
# thread pinning 32 GiB under `run --inject` (sub-second threshold: the RM-lock waits measured so far last
# < 1 s), the next likely long RM operations (a device allocation of 3/4 of the memory, 3 parallel 16 GiB
# pins) sampled, and `agent --gpu` + SIGUSR1 next to a PyTorch job. Usage: rmlock_short_batch.sh BIN_DIR OUT_DIR
set -u
BIN=$(cd "$1" && pwd); OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda-13.0}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
gcc -O1 -pthread -I"$CUDA/include" -o /tmp/rmlock "$HERE/rmlock.c" -L"$CUDA/lib64/stubs" -lcuda || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== run --inject: hammer 8 + pin 32 GiB in one process, threshold 0.4 s"
rm -f /tmp/stop
"$BIN/wedge-capture" run --inject --threshold 0.4s --interval 0.1 --samples 2 --out "$OUT/incidents" -- \
  /tmp/rmlock both 32 8 /tmp/stop 2> "$OUT/run.log" &
r=$!
sleep 2
p=$(pgrep -n -f "rmlock both" || true)
[ -n "$p" ] && python3 "$HERE/dsample.py" "$p" 60 "$OUT/both.dsample.json" all > "$OUT/both.dsample.txt" &
wait $r; echo "run exit $?"; wait
cat "$OUT/both.dsample.txt"; grep "^A " "$OUT/run.log"
for d in "$OUT"/incidents/*/; do [ -f "$d/report.md" ] && { echo "== $d"; head -12 "$d/report.md"; }; done
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
for mode in "devalloc $(( total_mib * 3 / 4 / 1024 ))" "multireg 16 3"; do
  rm -f /tmp/stop
  /tmp/rmlock hammer 8 /tmp/stop 60 2> "$OUT/B.log" & b=$!
  sleep 2.5
  python3 "$HERE/dsample.py" $b 60 "$OUT/${mode%% *}.B.dsample.json" > "$OUT/${mode%% *}.B.dsample.txt" & s=$!
  timeout 60 /tmp/rmlock $mode 2> "$OUT/${mode%% *}.A.log"
  touch /tmp/stop; wait $b; wait $s
  echo "== $mode"; cat "$OUT/${mode%% *}.B.dsample.txt"; grep "^A " "$OUT/${mode%% *}.A.log"
done
echo "== agent --gpu + SIGUSR1 next to PyTorch under run --inject"
"$BIN/wedge-capture" run --inject --out "$OUT/run-incidents" --ring-dir "$OUT/rings" -- python3 "$HERE/train.py" 25 2> "$OUT/train.log" & t=$!
sleep 9
"$BIN/wedge-capture" agent --gpu --out "$OUT/agent-incidents" --ring-dir "$OUT/rings" 2> "$OUT/agent.stderr" & a=$!
sleep 3; kill -USR1 $a; sleep 5; kill -TERM $a; wait $a; echo "agent exit $?"; wait $t
