"""Saving a graph never runs it, nor slows it (run under `foundry run`): a graph that advances a counter and
one that draws random numbers are captured, replayed once, saved, and replayed again; then chains of small
kernels saved both ways SAVE can probe (launches dropped in the interposer, or work switched off with a
fresh exec after) are timed against an unsaved capture of the same chain. Prints one JSON line."""

import json
import sys
import tempfile
from pathlib import Path

import torch

import foundry
import foundry.capture.cudagraph as capture_module
from foundry.save import can_drop_launches

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


def chain() -> foundry.CUDAGraph:
    g = foundry.CUDAGraph()
    with foundry.graph(g):
        for _ in range(400):
            x.mul_(1.0)
    g.replay()
    return g


def median_us(graphs: dict[str, foundry.CUDAGraph], rounds: int = 40) -> dict[str, float]:
    """Interleaved, warm, CUDA events: the same clocks and memory for every graph."""
    times: dict[str, list[float]] = {k: [] for k in graphs}
    for _ in range(3):
        for g in graphs.values():
            g.replay()
    for _ in range(rounds):
        for k, g in graphs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times[k].append(a.elapsed_time(b) * 1000)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


chains = {"dropped": chain(), "switched": chain(), "control": chain()}
with tempfile.TemporaryDirectory() as tmp:
    chains["dropped"].save(Path(tmp) / "dropped.json", output_tensors=x, archive_dir=Path(tmp) / "archive")
    capture_module.can_drop_launches = lambda: False  # the other way: work switched off, then a fresh exec
    chains["switched"].save(Path(tmp) / "switched.json", output_tensors=x, archive_dir=Path(tmp) / "archive")
torch.cuda.synchronize()
speed = median_us(chains)
print(
    json.dumps(
        {
            "before": before,
            "after_save": after_save,
            "after_replay": counter.tolist(),
            "rng": [meta_bump.rng is not None, meta_noisy.rng is not None],
            "offset_restored": offset_after == offset,
            "dropout_zeros_fraction": zeros / x.numel(),
            "launches_dropped": can_drop_launches(),
            "chain_us": speed,
        }
    ),
    file=sys.stdout,
)
