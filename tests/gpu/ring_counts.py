#!/usr/bin/env python3
"""Counts the driver calls in breadcrumb rings (issue 42: the same program under --inject and --inject=cupti).

    ring_counts.py WEDGE_CAPTURE_BIN RING...   -> one JSON object: per ring, enter records by driver function
                                                  (the label's name for _ptsz/_v2/custom calls), exits, in flight
"""
import collections
import json
import subprocess
import sys

binary, rings = sys.argv[1], sys.argv[2:]
result = {}
for ring in rings:
    dump = json.loads(subprocess.run([binary, "ring", "dump", "--format", "json", "--all", ring],
                                     check=True, capture_output=True, text=True).stdout)
    counts = collections.Counter()
    exits = 0
    for record in dump["records"]:
        if record["kind"] == "enter":
            label = record.get("label") or ""
            first = label.split(" ")[0]
            counts[first if first.startswith("cu") else record["call"]] += 1
        else:
            exits += 1
    result[ring] = {
        "enters": sum(counts.values()),
        "exits": exits,
        "in_flight": len(dump["in_flight"]),
        "status": dump["header"].get("status"),
        "by_function": dict(sorted(counts.items())),
    }
print(json.dumps(result))
