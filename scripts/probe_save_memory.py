"""Where does a SAVE process use more device memory than a native one? vLLM saw, for the same flags, 0.23 GiB of
"non-torch" memory in its profile under SAVE against 0.22 natively (a KV cache smaller by about one 2 MiB
granule) and 0.63 GiB of capture memory against 0.46. Two suspects, each measured as the drop in
cudaMemGetInfo's free memory, in a process of its own per variant (run them in one call to compare):

  small     32 raw cudaMalloc calls of each of several sizes below a granule (not through PyTorch's allocator, as
            libraries make them): natively the driver packs them into shared pages; Foundry's region packs them
            into shared granules (csrc/region.c), and this says whether it packs as tightly
  graphs    300 graphs of 20 small kernels captured into one shared pool with torch.cuda.CUDAGraph(keep_graph=...)
            and replayed once, or with foundry.graph (variant foundry): Foundry captures with keep_graph=True, so
            the captured graph lives beside its exec; vLLM's capture under SAVE took 0.17-0.31 GiB more than
            native's in every row at 48cf88b, and this says whether Foundry's capture alone does. Variant
            reinstantiate: keep_graph=True and each graph instantiated a second time after its replay (SAVE
            replaces the exec it probed, so each graph's exec is made twice: does the driver give the first one's
            memory back?); variant saved: foundry.graph and every graph saved as SAVE does (its whole path)

    python3 scripts/probe_save_memory.py small plain OUT.json
    python3 -m foundry.cli run -- python3 scripts/probe_save_memory.py small region OUT.json
    python3 scripts/probe_save_memory.py graphs keep OUT.json
    python3 scripts/probe_save_memory.py graphs nokeep OUT.json
    python3 -m foundry.cli run -- python3 scripts/probe_save_memory.py graphs foundry OUT.json   (foundry.graph)
    python3 scripts/probe_save_memory.py graphs reinstantiate OUT.json
    python3 -m foundry.cli run -- python3 scripts/probe_save_memory.py graphs saved OUT.json     (and saved)

Each appends {"probe", "variant", "bytes"} to OUT.json (a JSON list).
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

BASE = 0x600000000000


def _free() -> int:
    torch.cuda.synchronize()
    return int(torch.cuda.mem_get_info()[0])


SMALL_SIZES = (512, 4096, 100_000, 1 << 20, 3 << 19)  # bytes; the last two: half a granule and three quarters


def small(variant: str) -> dict[str, Any]:
    """For each size, 32 bare cudaMallocs: the drop in free memory, and the distinct gaps between consecutive
    addresses (how the driver, or the region, packs them)."""
    import cupy  # its runtime.malloc is a bare cudaMalloc (cupy's memory pool is not involved)

    torch.cuda.init()
    if variant == "region":
        import foundry

        foundry.set_allocation_region(BASE, "64GB")
    torch.zeros(1, device="cuda")  # the context, and PyTorch's first segment, before measuring
    out: dict[str, Any] = {}
    for size in SMALL_SIZES:
        before = _free()
        ptrs = [cupy.cuda.runtime.malloc(size) for _ in range(32)]
        used = before - _free()
        gaps = sorted({b - a for a, b in itertools.pairwise(ptrs)})
        for p in ptrs:
            cupy.cuda.runtime.free(p)
        out[str(size)] = {"bytes": used, "gaps": gaps[:8], "aligned_512": all(p % 512 == 0 for p in ptrs)}
    return out


def graphs(variant: str) -> int:
    torch.cuda.init()
    archive = Path(tempfile.mkdtemp(prefix="probe-save-memory-"))
    if variant in ("foundry", "saved"):
        import foundry

        foundry.set_allocation_region(BASE, "64GB")
    x = torch.randn(256, 256, device="cuda")
    for _ in range(3):
        x = torch.tanh(x * 1.0001)  # the kernels loaded before measuring
    before = _free()
    kept: list[Any] = []
    pool = torch.cuda.graph_pool_handle()  # one pool for every graph, as vLLM and Foundry's graph() share one
    for i in range(300):
        if variant in ("foundry", "saved"):
            import foundry

            g: Any = foundry.CUDAGraph()
            ctx: Any = foundry.graph(g)
        else:
            g = torch.cuda.CUDAGraph(keep_graph=variant in ("keep", "reinstantiate"))
            ctx = torch.cuda.graph(g, pool=pool)
        with ctx:
            y = x
            for _ in range(20):
                y = torch.tanh(y * 1.0001)
        g.replay()
        if variant == "reinstantiate":
            g.instantiate()  # the first exec destroyed, a second made: what SAVE's probe does to each graph
            g.replay()
        if variant == "saved":
            g.save(archive / f"g{i}.json", output_tensors=y, archive_dir=archive)
        kept.append((g, y))
    return before - _free()


def main(probe: str, variant: str, out: Path) -> None:
    doc = json.loads(out.read_text()) if out.is_file() else []
    if probe == "small":
        sizes = small(variant)
        doc.append({"probe": probe, "variant": variant, "sizes": sizes})
        for size, m in sizes.items():
            print(f"{probe} {variant} 32 x {size} B: {m['bytes'] / 2**20:.2f} MiB, gaps {m['gaps']}", flush=True)
    else:
        measured = graphs(variant)
        doc.append({"probe": probe, "variant": variant, "bytes": measured})
        print(f"{probe} {variant}: {measured / 2**20:.2f} MiB", flush=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
