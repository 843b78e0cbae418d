#!/usr/bin/env python3
"""Reads the aarch64 VM's console (tests/aarch64/init.sh's `@@wedge` markers and libtest's lines) and reports
like `cargo test`: every group's result, the failures by name, one summary line; writes the files the VM
recorded under WORK/recorded/. Exit status 0 when every test passed and the VM finished, else 1.

usage: report.py CONSOLE_LOG WORK_DIR QEMU_RC VM_SECONDS TOTAL_SECONDS
"""

import base64
import os
import re
import shutil
import sys

TEST_LINE = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)")
KMSG_LINE = re.compile(r"^\[ *\d+\.\d+\] ")
RESULT_LINE = re.compile(r"^test result: \S+\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; (\d+) filtered out")


def main() -> int:
    console, work, qemu_rc, vm_seconds, total_seconds = sys.argv[1:6]
    lines = open(console, encoding="utf-8", errors="replace").read().splitlines()
    kernel = "unknown (the VM printed no @@wedge kernel line)"
    groups = []  # (name, passed, failed, ignored, filtered, rc, seconds)
    failures = []
    current = None
    counts = None
    recording = None
    recorded_dir = os.path.join(work, "recorded")
    shutil.rmtree(recorded_dir, ignore_errors=True)
    links = []
    done = False
    for line in lines:
        if recording is not None:
            if line == "@@wedge endfile":
                path, body = recording
                target = os.path.join(recorded_dir, path)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(base64.b64decode("".join(body)))
                recording = None
            elif not KMSG_LINE.match(line):  # a kernel message printed to the console meanwhile
                recording[1].append(line)
            continue
        if line.startswith("@@wedge kernel "):
            kernel = line[len("@@wedge kernel "):].split(" Linux version")[0]
        elif line.startswith("@@wedge file "):
            recording = (line[len("@@wedge file "):].strip(), [])
        elif line.startswith("@@wedge link "):
            links.append(line[len("@@wedge link "):])
        elif line.startswith("@@wedge begin "):
            current = line.split()[2]
            counts = {"ok": 0, "FAILED": 0, "ignored": 0, "filtered": 0, "results": 0}
        elif line.startswith("@@wedge end ") and current:
            fields = dict(f.split("=", 1) for f in line.split()[3:] if "=" in f)
            rc = int(fields.get("rc", "1"))
            seconds = fields.get("seconds", "")
            if "-" in seconds:
                a, b = seconds.split("-")
                seconds = f"{float(b) - float(a):.0f}"
            if rc != 0 and counts["FAILED"] == 0:
                failures.append(f"{current}: exited {rc} with no failed test named (crash or timeout?)")
                counts["FAILED"] += 1
            groups.append((current, counts, rc, seconds))
            current = None
        elif line == "@@wedge done":
            done = True
        elif current:
            m = TEST_LINE.match(line)
            if m:
                counts[m.group(2)] += 1
                if m.group(2) == "FAILED":
                    failures.append(f"{current}: {m.group(1)}")
            m = RESULT_LINE.match(line)
            if m:
                counts["filtered"] += int(m.group(4))
                counts["results"] += 1
    if current:
        failures.append(f"{current}: did not finish (the VM stopped or timed out inside it)")
        groups.append((current, counts, None, "?"))
    if links:
        os.makedirs(recorded_dir, exist_ok=True)
        with open(os.path.join(recorded_dir, "links.txt"), "w", encoding="utf-8") as f:
            f.write("".join(l + "\n" for l in links))

    print()
    print(f"aarch64: kernel {kernel}")
    passed = failed = ignored = 0
    for name, c, rc, seconds in groups:
        passed += c["ok"]
        failed += c["FAILED"]
        ignored += c["ignored"]
        status = "ok" if c["FAILED"] == 0 and rc == 0 else "FAILED"
        print(f"aarch64: group {name}: {status}. {c['ok']} passed; {c['FAILED']} failed; {c['ignored']} ignored; "
              f"{c['filtered']} filtered out; {seconds} s")
    if failures:
        print("aarch64: failures:")
        for f in failures:
            print(f"    {f}")
    if not done:
        why = "timed out" if qemu_rc in ("124", "137") else f"qemu exited {qemu_rc}"
        print(f"aarch64: the VM did not finish its run ({why})")
    ok = done and not failures and passed > 0
    print(f"aarch64: test result: {'ok' if ok else 'FAILED'}. {passed} passed; {failed} failed; {ignored} ignored; "
          f"VM {vm_seconds} s, wall {total_seconds} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
