"""A small PyTorch training loop for the GPU host checks (agent --gpu + SIGUSR1 next to a real job)."""
import sys, time
import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
end = time.monotonic() + seconds
steps = 0
while time.monotonic() < end:
    x = torch.randn(512, 4096, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    steps += 1
print(f"train.py: {steps} steps", file=sys.stderr)
