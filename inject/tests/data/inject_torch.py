"""A tiny, unmodified PyTorch program for checking the injection library on a GPU machine
(docs/inject.md, "GPU verification"): run it with CUDA_INJECTION64_PATH set, then read the ring.

Allocates a 64 MiB tensor, copies 4 MiB host->device and back, and runs a matrix product."""

import torch

device = torch.device("cuda")
big = torch.zeros(16 << 20, dtype=torch.float32, device=device)  # 64 MiB
host = torch.arange(1 << 20, dtype=torch.float32)  # 4 MiB
on_gpu = host.to(device)
a = torch.randn(1024, 1024, device=device)
product = a @ a
back = (on_gpu * 2).cpu()
torch.cuda.synchronize()
assert back[3].item() == 6.0
print(f"torch: ok ({torch.__version__}, {big.numel() * 4} + {host.numel() * 4} bytes, sum {product.sum().item():.1f})")
