"""An eager, launch-bound decoder step (28 layers, ~800 kernels): prints, last, whether the interposer is mapped
into this process, a digest of the step's output and the median milliseconds of a step."""

import hashlib
import statistics
import time
from pathlib import Path

import torch

from foundry_bench import SHAPES, QwenDecoder

torch.cuda.init()
model = QwenDecoder(SHAPES["tiny"], seed=0)
ids = torch.randint(0, 1000, (8,), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
pos = torch.full((8,), 5, device="cuda")
with torch.no_grad():
    for _ in range(20):
        out = model(ids, pos)
    torch.cuda.synchronize()
    samples = []
    for _ in range(30):
        t0 = time.perf_counter()
        for _ in range(10):
            model(ids, pos)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / 10 * 1000)
hooked = "libfoundry" in Path("/proc/self/maps").read_text()
digest = hashlib.sha256(out.float().cpu().numpy().tobytes()).hexdigest()[:16]
print(int(hooked), digest, statistics.median(samples))
