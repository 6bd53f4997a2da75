"""Saves the small archive kept in tests/fixtures/gpu_archive (run on a GPU, under `foundry run`).

Two graphs of one small element-wise model at two batch sizes, so the archive holds a template and a
member delta; dropout makes them draw random numbers, and a weight vector the LOAD program does not
rebuild is kept as state memory. Two ATen ops and no cuBLAS, so that the archive stays a few MB. CPU tests read this
real archive.

    foundry run -- python scripts/make_fixture.py OUT_DIR
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import foundry

out = Path(sys.argv[1])
torch.manual_seed(0)
torch.cuda.init()
foundry.set_allocation_region(0x600000000000, "4GB")
gen = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(64, 1024, device="cuda", generator=gen)
scale = torch.randn(1024, device="cuda", generator=gen)


def body(bs: int) -> torch.Tensor:
    # Every distinct ATen op brings a whole kernel image (one per source file of libtorch_cuda, up to
    # 3 MB each): two ops keep the archive small.
    return F.dropout(x[:bs] * scale, p=0.1, training=True)


graphs = {}
for bs in (64, 32):  # capture everything first, then save, as an engine does
    body(bs)
    torch.cuda.synchronize()
    g = foundry.CUDAGraph()
    with foundry.graph(g):
        y = body(bs)
    g.replay()
    graphs[bs] = (g, y)
for bs, (g, y) in graphs.items():
    g.save(out / f"ew_bs{bs}.json", output_tensors=y, archive_dir=out)
foundry.save_graph_manifest(out)
print("fixture saved in", out)
