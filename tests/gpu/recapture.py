"""Captures into Foundry's shared pool after every graph that used it was reset or deleted (PyTorch
asserts on a pool whose use count fell to zero). Prints one JSON line of what each step gave."""

from __future__ import annotations

import gc
import json

import torch

import foundry


def capture(x: torch.Tensor) -> tuple[foundry.CUDAGraph, torch.Tensor]:
    y = x * 2  # warm-up outside the capture
    g = foundry.CUDAGraph()
    with foundry.graph(g):
        y = x * 2 + 1
    return g, y


def main() -> None:
    foundry.set_allocation_region(0x600000000000, "8GB")
    x = torch.arange(1024, device="cuda", dtype=torch.float32)
    results = {}
    g1, _ = capture(x)
    g1.reset()
    g2, y2 = capture(x)  # the pool g1 used has no user left
    g2.replay()
    torch.cuda.synchronize()
    results["after_reset"] = bool(torch.equal(y2, x * 2 + 1))
    del g2, y2
    gc.collect()
    g3, y3 = capture(x)  # the pool g2 used was released by deleting g2
    x.add_(1)
    g3.replay()
    torch.cuda.synchronize()
    results["after_delete"] = bool(torch.equal(y3, x * 2 + 1))
    g4, _ = capture(x)  # g3 is alive: g4 shares its pool
    results["shared_while_alive"] = g3.pool() == g4.pool()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
