"""GPU host check for issue 29: a PyTorch thread held in a real CUDA copy (device → host) into a MAP_SHARED
mapping of a file the caller freezes: the copy's write fault sleeps in the filesystem's freeze (a reversible D
state; the GPU itself is never wedged). The incident should show this file's line, the breadcrumb and the libcuda
symbol together. Usage: pyframes_dtoh.py FILE READY_MARKER (the caller syncs and freezes FILE's filesystem once
READY_MARKER exists, then thaws it)."""
import mmap, os, sys, threading, time
import numpy as np
import torch

path, ready = sys.argv[1], sys.argv[2]
size = 4 << 20
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, size)
shared = mmap.mmap(fd, size, mmap.MAP_SHARED)
host = torch.from_numpy(np.frombuffer(shared, dtype=np.uint8))
host.fill_(1)
shared.flush()  # clean pages: the next write to each faults into the filesystem
device = torch.full((size,), 7, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
open(ready, "w").close()
time.sleep(2)  # the caller freezes the filesystem now


def copy_back():
    host.copy_(device)  # the wedged call: cuMemcpyDtoH into the frozen mapping
    torch.cuda.synchronize()


def step():
    copy_back()


worker = threading.Thread(target=step, name="copy-worker")
worker.start()
worker.join()
print("pyframes_dtoh.py: released", file=sys.stderr)
