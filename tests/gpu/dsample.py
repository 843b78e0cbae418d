#!/usr/bin/env python3
"""Sample every thread of PID every ~2 ms for SECONDS; record each D run (start, end, wchans, ioctl cmd, one
stack). Reads only /proc/<tid>/{stat,wchan,syscall,stack} (no mmap lock). Prints JSON: the 25 longest D runs.
Usage: dsample.py PID SECONDS OUT.json [all]   (all: also a histogram of every thread's state/wchan/syscall)"""
import json, os, sys, time

pid, seconds, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
def rd(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None
runs, cur, samples = [], {}, 0
hist_all = len(sys.argv) > 4 and sys.argv[4] == "all"
hist = {}
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        break
    now = time.monotonic()
    samples += 1
    seen = set()
    for tid in tids:
        stat = rd(f"/proc/{pid}/task/{tid}/stat")
        if not stat:
            continue
        state = stat[stat.rfind(")") + 2]
        if hist_all:
            w = rd(f"/proc/{pid}/task/{tid}/wchan") or "?"
            sc = (rd(f"/proc/{pid}/task/{tid}/syscall") or "?").split(" ")[0].strip()
            key = f"{tid} {state} {w} sys={sc}"
            hist[key] = hist.get(key, 0) + 1
        if state == "D":
            seen.add(tid)
            run = cur.get(tid)
            if run is None:
                run = cur[tid] = {"tid": int(tid), "comm": stat[stat.find("(") + 1:stat.rfind(")")],
                                  "start": now, "wchans": {}, "syscall": None, "stack": None}
            w = rd(f"/proc/{pid}/task/{tid}/wchan") or "?"
            run["wchans"][w] = run["wchans"].get(w, 0) + 1
            run["last"] = now
            if run["syscall"] is None:
                run["syscall"] = (rd(f"/proc/{pid}/task/{tid}/syscall") or "").strip()
            if run["stack"] is None and now - run["start"] > 0.05:
                run["stack"] = rd(f"/proc/{pid}/task/{tid}/stack")
    for tid in list(cur):
        if tid not in seen:
            run = cur.pop(tid)
            run["end"] = now
            runs.append(run)
    time.sleep(0.002)
for run in cur.values():
    run["end"] = time.monotonic(); run["still_in_d"] = True; runs.append(run)
for run in runs:
    run["seconds"] = round(run["end"] - run["start"], 4)
runs.sort(key=lambda r: -r["seconds"])
by_wchan = {}
for run in runs:
    top = max(run["wchans"], key=run["wchans"].get)
    agg = by_wchan.setdefault(top, {"runs": 0, "max_s": 0.0, "total_s": 0.0})
    agg["runs"] += 1; agg["total_s"] += run["seconds"]; agg["max_s"] = max(agg["max_s"], run["seconds"])
json.dump({"pid": pid, "samples": samples, "d_runs": len(runs), "by_wchan": by_wchan, "histogram": dict(sorted(hist.items(), key=lambda kv: -kv[1])[:60]), "longest": runs[:25]},
          open(out, "w"), indent=1)
print(f"dsample pid {pid}: {samples} samples, {len(runs)} D runs, longest "
      + ", ".join(f"{r['seconds']}s@{max(r['wchans'], key=r['wchans'].get)}" for r in runs[:6]))
