"""Saving a graph never runs it (run under `foundry run`): a graph that advances a counter and one that
draws random numbers are captured, replayed once, saved, and replayed again. Prints one JSON line."""

import json
import sys
import tempfile
from pathlib import Path

import torch

import foundry

torch.cuda.init()
foundry.set_allocation_region(0x600000000000, "1GB")
counter = torch.zeros(4, device="cuda")
x = torch.ones(1 << 16, device="cuda")
out = torch.empty_like(x)
torch.cuda.synchronize()

bump, noisy = foundry.CUDAGraph(), foundry.CUDAGraph()
with foundry.graph(bump):
    counter.add_(1.0)
with foundry.graph(noisy):
    out.copy_(torch.nn.functional.dropout(x, 0.5))
bump.replay()
torch.cuda.synchronize()
before = counter.tolist()
gen = torch.cuda.default_generators[torch.cuda.current_device()]
offset = gen.get_offset()
with tempfile.TemporaryDirectory() as tmp:
    # The counting graph is saved before it was ever replayed here too (noisy), and after (bump).
    meta_bump = bump.save(Path(tmp) / "bump.json", output_tensors=counter, archive_dir=Path(tmp) / "archive")
    meta_noisy = noisy.save(Path(tmp) / "noisy.json", output_tensors=out, archive_dir=Path(tmp) / "archive")
torch.cuda.synchronize()
after_save = counter.tolist()
offset_after = gen.get_offset()
bump.replay()
noisy.replay()
torch.cuda.synchronize()
zeros = int((out == 0).sum())
print(
    json.dumps(
        {
            "before": before,
            "after_save": after_save,
            "after_replay": counter.tolist(),
            "rng": [meta_bump.rng is not None, meta_noisy.rng is not None],
            "offset_restored": offset_after == offset,
            "dropout_zeros_fraction": zeros / x.numel(),
        }
    ),
    file=sys.stdout,
)
