"""A kernel's dynamic shared-memory limit lowered after a capture, on the GPU, SAVE and LOAD each in a process of
its own (run under `foundry run`, see tests/gpu/test_smem_limit.py). FlashInfer sets a kernel's limit to each
launch's exact size; this does the same with one cupy kernel launched twice in one capture, first with 64 KiB
(above the 48 KiB default, so the limit is raised first) and then with 1 KiB (the limit lowered to that), so
that the limit SAVE reads after the capture is below what the graph's first node needs.

    python smem_limit.py save DIR      capture, record the native outputs, save the archive and the limit SAVE saw
    python smem_limit.py load DIR      fresh process: CUDAGraph.load, replay, compare bit for bit
    python smem_limit.py loadbg DIR    the same through start_graph_builds (the loader thread builds the graph)

Each mode prints one JSON line and writes it to DIR/<mode>.json (tests/gpu/cupy_processes.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

import foundry
from tests.gpu.cupy_processes import compare_replays, launch, main, seeded

BASE = 0x610000000000
REGION = "4GB"
N = 4096
BLOCK = 256
BIG = 64 * 1024  # above the 48 KiB every kernel may use without raising its limit
SMALL = 1024

SOURCE = r"""
extern "C" __global__ void reverse_in_shared(const float *x, float *out, float scale) {
  extern __shared__ float buf[];
  int i = threadIdx.x, base = blockIdx.x * blockDim.x;
  buf[i] = x[base + i] * scale;
  __syncthreads();
  out[base + i] = buf[blockDim.x - 1 - i] + 1.0f;
}
"""


def _tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The persistent tensors, made in the same order by every mode."""
    return tuple(torch.empty(N, device="cuda") for _ in range(3))  # type: ignore[return-value]


def _launch(kernel: Any, shared: int, args: tuple[Any, ...]) -> None:
    """As FlashInfer does: the kernel's limit set to this launch's size, then the launch."""
    kernel.max_dynamic_shared_size_bytes = shared
    launch(kernel, N // BLOCK, BLOCK, args, shared_mem=shared)


def save(out: Path) -> dict[str, Any]:
    import cupy

    archive = out / "archive"
    x, y, z = _tensors()
    kernel = cupy.RawModule(code=SOURCE).get_function("reverse_in_shared")
    cx, cy, cz = cupy.asarray(x), cupy.asarray(y), cupy.asarray(z)
    first, second = (cx, cy, cupy.float32(2.0)), (cy, cz, cupy.float32(0.5))
    seeded(x, 0)
    _launch(kernel, BIG, first)  # warm-up
    _launch(kernel, SMALL, second)
    torch.cuda.synchronize()
    g = foundry.CUDAGraph()
    with foundry.graph(g):
        _launch(kernel, BIG, first)
        _launch(kernel, SMALL, second)
    expected = []
    for seed in (0, 1):
        seeded(x, seed)
        g.replay()
        torch.cuda.synchronize()
        expected.append(z.cpu())
    meta = g.save(archive / "shared.json", output_tensors=z, archive_dir=archive)
    foundry.save_graph_manifest(archive)
    torch.save({"expected": expected}, out / "shared.expected.pt")
    limits = sorted({f.attrs.max_dynamic_shared_size_bytes for f in meta.functions})
    return {"saved": True, "limit_after_capture": kernel.max_dynamic_shared_size_bytes, "recorded": limits}


def load(out: Path) -> dict[str, Any]:
    x, _, z = _tensors()
    expected = torch.load(out / "shared.expected.pt")["expected"]
    g, _ = foundry.CUDAGraph.load(out / "archive" / "shared.json")
    return {"loaded": True, "identical": compare_replays(g, x, z, expected)}


def load_background(out: Path) -> dict[str, Any]:
    x, _, z = _tensors()
    expected = torch.load(out / "shared.expected.pt")["expected"]
    pending = foundry.CUDAGraph.start_graph_builds([out / "archive" / "shared.json"])
    ((g, _),) = foundry.CUDAGraph.finish_graph_loads(pending)
    pending.wait_all()
    return {"loaded": True, "identical": compare_replays(g, x, z, expected)}


if __name__ == "__main__":
    main({"save": save, "load": load, "loadbg": load_background}, BASE, REGION, images_first={"load", "loadbg"})
