"""What the GPU tier's cupy scripts share (module_variables.py, smem_limit.py): each mode of a script is a process
of its own run under `foundry run`, whose cupy kernels launch on torch's stream and read and write torch's tensors
(only torch allocates, so LOAD's allocations land where SAVE's did), replayed on seeded inputs and compared bit
for bit with the native replay's outputs; each mode prints one JSON line and writes it to DIR/<mode>.json."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import torch

import foundry

__all__ = ["compare_replays", "launch", "main", "seeded"]


def seeded(x: torch.Tensor, seed: int) -> None:
    """``x`` filled with the normal values of ``seed``, the same in every process."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x.copy_(torch.randn(x.numel(), device="cuda", generator=g).view_as(x))


def launch(kernel: Any, grid: int, block: int, args: tuple[Any, ...], shared_mem: int = 0) -> None:
    """A cupy kernel launched on torch's current stream (the capture stream inside foundry.graph)."""
    import cupy

    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        kernel((grid,), (block,), args, shared_mem=shared_mem)


def compare_replays(g: Any, x: torch.Tensor, out: torch.Tensor, expected: list[torch.Tensor]) -> list[bool]:
    """For each seed in turn, ``g`` replayed on ``seeded(x, seed)``: whether ``out`` equals ``expected[seed]``."""
    same = []
    for seed, want in enumerate(expected):
        seeded(x, seed)
        g.replay()
        torch.cuda.synchronize()
        same.append(torch.equal(out.cpu(), want))
    return same


def main(
    modes: dict[str, Callable[[Path], dict[str, Any]]], base: int, region: str, images_first: Collection[str]
) -> None:
    """``python SCRIPT MODE DIR``: the mode run in a process with Foundry's region at ``base``; the modes in
    ``images_first`` load the archive's kernel images before the region is set, as the seed README does. An
    exception is reported in the JSON line (its trace included), so that the test shows what went wrong."""
    mode, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    torch.cuda.init()
    if mode in images_first:
        foundry.load_cuda_modules_and_libraries(out / "archive")
    foundry.set_allocation_region(base, region)
    try:
        result = modes[mode](out)
    except Exception as exc:
        result = {"failed": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    (out / f"{mode}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
