#!/usr/bin/env bash
# GPU host check for issue 31 part 3: `agent --gpu` next to a PyTorch job under `run --inject`, an on-demand
# incident (SIGUSR1), /metrics, and `doctor`. Usage: agent_run.sh BIN_DIR OUT_DIR
set -u
BIN=$(cd "$1" && pwd); OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
exec > >(tee "$OUT/agent-log.txt") 2>&1
"$BIN/wedge-capture" doctor --format json > "$OUT/doctor.json"; echo "doctor exit $?"
"$BIN/wedge-capture" doctor > "$OUT/doctor.txt" 2>&1; cat "$OUT/doctor.txt"
"$BIN/wedge-capture" run --inject --out "$OUT/run-incidents" --ring-dir "$OUT/rings" -- python3 "$HERE/train.py" 40 2> "$OUT/train.log" & r=$!
sleep 12
"$BIN/wedge-capture" agent --gpu --out "$OUT/agent-incidents" --metrics-listen 127.0.0.1:9464 \
  --ring-dir "$OUT/rings" 2> "$OUT/agent.stderr" & a=$!
sleep 4
kill -USR1 $a; sleep 8
curl -s 127.0.0.1:9464/metrics > "$OUT/metrics.txt" || python3 -c 'import urllib.request;print(urllib.request.urlopen("http://127.0.0.1:9464/metrics").read().decode())' > "$OUT/metrics.txt"
kill -TERM $a; wait $a; echo "agent exit $?"
wait $r; echo "run exit $?"
cat "$OUT/agent.stderr" | tail -20
for d in "$OUT"/agent-incidents/*/; do [ -f "$d/report.md" ] && { echo "== $d"; cat "$d/report.md"; }; done | head -250
