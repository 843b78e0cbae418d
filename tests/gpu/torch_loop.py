"""Launch-heavy PyTorch loop (issue 42, BENCHMARKS.md): N in-place adds on a one-element CUDA tensor (one kernel
launch each, no synchronisation in between). Prints one JSON line: mean wall time per op."""
import json
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
x = torch.zeros(1, device="cuda")
for _ in range(2000):
    x.add_(1)
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(n):
    x.add_(1)
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
print(json.dumps({"n": n, "ns_per_op": elapsed / n * 1e9, "value": x.item()}))
