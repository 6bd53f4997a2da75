"""Median milliseconds of an eager, launch-bound decoder step (28 layers, ~800 kernels), printed last."""

import statistics
import time

import torch

from foundry_bench import SHAPES, QwenDecoder

torch.cuda.init()
model = QwenDecoder(SHAPES["tiny"], seed=0)
ids = torch.randint(0, 1000, (8,), device="cuda")
pos = torch.full((8,), 5, device="cuda")
with torch.no_grad():
    for _ in range(20):
        model(ids, pos)
    torch.cuda.synchronize()
    samples = []
    for _ in range(30):
        t0 = time.perf_counter()
        for _ in range(10):
            model(ids, pos)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / 10 * 1000)
print(statistics.median(samples))
