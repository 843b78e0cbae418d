#!/usr/bin/env bash
# One short device batch: the RM-lock runs (run3.sh) and the Python-frames GPU check (pyframes_run.sh).
# Usage: run4.sh BIN_DIR OUT_DIR   (BIN_DIR may hold a py-spy binary: it is put first on PATH)
set -u
BIN=$(cd "$1" && pwd); OUT=$2; HERE=$(cd "$(dirname "$0")" && pwd)
export PATH="$BIN:$PATH"
mkdir -p "$OUT"
timeout 150 bash "$HERE/pyframes_run.sh" "$BIN" "$OUT/py" > /dev/null 2>&1; echo "pyframes rc=$?"
timeout 200 bash "$HERE/run3.sh" "$BIN" "$OUT/g" > /dev/null 2>&1; echo "run3 rc=$?"
