#!/usr/bin/env bash
# GPU host check for issue 29: `run --inject` watching a PyTorch thread held in a real CUDA copy into a frozen
# file mapping (pyframes_dtoh.py); prints the verdict and the wedged-thread table (Python frames, breadcrumb and
# the libcuda/libc symbol together). Needs root, py-spy (pip install py-spy), torch, numpy, mkfs.ext4, fsfreeze.
# Usage: pyframes_run.sh BIN_DIR OUT_DIR
set -u
BIN=$(cd "$1" && pwd); OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
exec > >(tee "$OUT/pyframes-log.txt") 2>&1
"$BIN/wedge-capture" doctor | grep -E "py-spy|nvidia|libcuda|libcupti"
IMG="$OUT/frozen.img"; MNT="$OUT/mnt"; mkdir -p "$MNT"
truncate -s 64M "$IMG" && mkfs.ext4 -q -F "$IMG" && mount -o loop "$IMG" "$MNT" || { echo "cannot mount $IMG"; exit 2; }
thaw() { fsfreeze -u "$MNT" 2>/dev/null; }
trap 'thaw; umount "$MNT" 2>/dev/null' EXIT
rm -f "$OUT/ready"
"$BIN/wedge-capture" run --inject --threshold 2 --exit-after 5 --out "$OUT/incidents" \
  -- python3 "$HERE/pyframes_dtoh.py" "$MNT/shared.bin" "$OUT/ready" 2> "$OUT/run.stderr" & r=$!
for _ in $(seq 1 600); do [ -f "$OUT/ready" ] && break; sleep 0.1; done
[ -f "$OUT/ready" ] || { echo "the worker never got ready"; cat "$OUT/run.stderr"; kill $r; exit 2; }
sync; fsfreeze -f "$MNT"; echo "frozen $MNT"
wait $r; echo "run exit $? (3: a wedge was captured and the process was still wedged)"
thaw; echo "thawed"
sleep 2
tail -5 "$OUT/run.stderr"
for d in "$OUT"/incidents/*/; do
  [ -f "$d/report.md" ] || continue
  echo "== $d"
  python3 - "$d/incident.json" <<'PY'
import json, sys
i = json.load(open(sys.argv[1]))
print("verdict:", i["verdict"])
for w in i["wedged_threads"]:
    print("tid", w["tid"], "python:", [f'{f["file"].rsplit("/", 1)[-1]}:{f.get("line")} {f["function"]}' for f in w.get("python_stack") or []][:4])
    uf = w.get("user_frame") or {}
    print("  user frame:", uf.get("path"), uf.get("symbol"), "build id", uf.get("build_id"), uf.get("symbol_not_captured") or w.get("user_frame_not_captured"))
    for c in uf.get("candidates", [])[:8]:
        print("  candidate:", c.get("path", "").rsplit("/", 1)[-1], c.get("symbol"))
for n in i["not_captured"]:
    print("not captured:", n["what"], "—", n["why"])
PY
  sed -n '1,/^<details>/p' "$d/report.md" | head -80
done
