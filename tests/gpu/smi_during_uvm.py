#!/usr/bin/env python3
"""How long another process's `nvidia-smi -q` takes while CMD runs a long UVM operation (issue 42).

    smi_during_uvm.py NAME OUTDIR -- CMD...      (CMD runs tests/gpu/uvmlock.c populate|migrate, maybe under
                                                  wedge-capture run or an injection library)

Starts CMD, waits for uvmlock's "ready" line, then runs `nvidia-smi -q` back to back until CMD exits, each timed on
CLOCK_MONOTONIC. Meanwhile every 0.3 s it samples the kernel state of every thread of the uvmlock and nvidia-smi
processes (stat state, wchan, syscall, stack: files that never take the target's mmap_lock) into NAME.stacks.txt.
Writes NAME.json and prints it: the populate window from uvmlock's log, every nvidia-smi run relative to it, and the
longest run that overlapped the window."""
import json
import os
import re
import subprocess
import sys
import threading
import time

name, out = sys.argv[1], sys.argv[2]
cmd = sys.argv[sys.argv.index("--") + 1:]
os.makedirs(out, exist_ok=True)
log_path = os.path.join(out, f"{name}.uvm.log")
log = open(log_path, "w")
proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
done = threading.Event()


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return f"<{e.strerror}>"


def sampler():
    with open(os.path.join(out, f"{name}.stacks.txt"), "w") as f:
        while not done.is_set():
            t = time.monotonic()
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or comm(pid) not in ("uvmlock", "nvidia-smi"):
                    continue
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    base = f"/proc/{pid}/task/{tid}"
                    stat = read(f"{base}/stat")
                    state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
                    census = os.environ.get("SMI_ALL_THREADS") == "1" and int(t * 10) % 10 < 3
                    if comm(pid) == "uvmlock" and state != "D" and not census:
                        continue
                    stack = " <- ".join(l.split("]", 1)[-1].strip().split("+")[0] for l in read(f"{base}/stack").splitlines()[:12])
                    f.write(f"{t:.3f} {comm(pid)} {pid}/{tid} {read(base + '/comm').strip()} {state} "
                            f"wchan={read(base + '/wchan').strip()} sys={' '.join(read(base + '/syscall').split()[:7])} {stack}\n")
            f.flush()
            time.sleep(0.3)


deadline = time.monotonic() + 90
while "ready" not in read(log_path) and proc.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
threading.Thread(target=sampler, daemon=True).start()
runs = []
while proc.poll() is None and time.monotonic() < deadline:
    t0 = time.monotonic()
    try:
        rc = subprocess.run(["nvidia-smi", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=60).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    runs.append((t0, time.monotonic() - t0, rc))
    time.sleep(0.25)
try:
    proc.wait(timeout=120)
except subprocess.TimeoutExpired:
    proc.kill()
done.set()
log.close()
text = read(log_path)
m = re.search(r"prefetch big->cpu \(populate\) -> (-?\d+) start ([\d.]+) end ([\d.]+)", text)
start, end = (float(m.group(2)), float(m.group(3))) if m else (None, None)
overlap = [d for t, d, _ in runs if start is not None and t < end and t + d > start]
result = {
    "name": name,
    "cmd": " ".join(cmd),
    "exit": proc.returncode,
    "populate_s": round(end - start, 2) if m else None,
    "smi_runs": len(runs),
    "smi_during_populate_s": [round(d, 2) for d in overlap],
    "smi_max_during_populate_s": round(max(overlap), 2) if overlap else None,
    "smi_outside_median_s": round(sorted(d for t, d, _ in runs)[len(runs) // 2], 2) if runs else None,
    "smi_runs_rel": [(round(t - start, 2) if start else round(t, 2), round(d, 2), rc) for t, d, rc in runs],
}
with open(os.path.join(out, f"{name}.json"), "w") as f:
    json.dump(result, f)
print(json.dumps({k: v for k, v in result.items() if k != "smi_runs_rel"}), flush=True)
