"""Module variables across SAVE and LOAD on the GPU, each mode in a process of its own (run under
`foundry run`, see tests/gpu/test_module_variables.py).

    python module_variables.py save DIR      cupy RawModule: write a __constant__ and a __device__ table
                                             from the host, capture a kernel reading them (on torch's
                                             stream), record the native outputs, save the archive
    python module_variables.py load DIR      fresh process: load_cuda_modules_and_libraries (which writes
                                             the variables the manifest lists), CUDAGraph.load, replay,
                                             compare bit for bit
    python module_variables.py loadbg DIR    the same through start_graph_builds alone (background LOAD:
                                             the loader thread loads the image and writes the variables)
    python module_variables.py refuse DIR    a __device__ pointer set from the host to another module
                                             variable's address: SAVE must refuse (ModuleAddressError)

Each mode prints one JSON line and writes it to DIR/<mode>.json (tests/gpu/cupy_processes.py).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import torch

import foundry
from foundry.errors import FoundryError
from tests.gpu.cupy_processes import compare_replays, launch, main, seeded

BASE = 0x600000000000
REGION = "4GB"
N = 4096
TABLE = 256

SOURCE = r"""
extern "C" {
__constant__ float ctab[256];
__device__ float dtab[256];
__device__ float target[4];
__device__ float *dptr;
__global__ void read_tables(const float *x, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * ctab[i % 256] + dtab[(i * 7) % 256];
}
__global__ void read_pointer(float *out) { out[threadIdx.x] = dptr[threadIdx.x]; }
}
"""


def _tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """The persistent tensors, made in the same order by every mode."""
    return torch.empty(N, device="cuda"), torch.empty(N, device="cuda")


def _tables() -> tuple[Any, Any]:
    import numpy as np

    i = np.arange(TABLE, dtype=np.float32)
    return (1.0 + 0.5 * np.sin(i)).astype(np.float32), (np.cos(3 * i) - 2.0).astype(np.float32)


def _module() -> Any:
    import cupy

    module = cupy.RawModule(code=SOURCE)
    return module, module.get_function("read_tables"), module.get_function("read_pointer")


def save(out: Path) -> dict[str, Any]:
    import cupy

    archive = out / "archive"
    x, y = _tensors()
    module, read_tables, _ = _module()
    ctab, dtab = _tables()
    module.get_global("ctab").copy_from_host(ctypes.c_void_p(ctab.ctypes.data), ctab.nbytes)  # cudaMemcpyToSymbol
    module.get_global("dtab").copy_from_host(ctypes.c_void_p(dtab.ctypes.data), dtab.nbytes)
    cx, cy = cupy.asarray(x), cupy.asarray(y)
    args = (cx, cy, cupy.int32(N))
    seeded(x, 0)
    launch(read_tables, N // 256, 256, args)  # warm-up
    torch.cuda.synchronize()
    g = foundry.CUDAGraph()
    with foundry.graph(g):
        launch(read_tables, N // 256, 256, args)
    expected, formula = [], []
    i = torch.arange(N)
    for seed in (0, 1):
        seeded(x, seed)
        g.replay()
        torch.cuda.synchronize()
        expected.append(y.cpu())
        # The kernel really reads the tables: its output is the formula on the host-written values.
        formula.append(x.cpu() * torch.from_numpy(ctab)[i % TABLE] + torch.from_numpy(dtab)[(i * 7) % TABLE])
    meta = g.save(archive / "tables.json", output_tensors=y, archive_dir=archive)
    foundry.save_graph_manifest(archive)
    torch.save({"expected": expected}, out / "tables.expected.pt")
    carried = sorted(v.name for ref in meta.images for v in ref.variables or ())
    return {
        "saved": True,
        "carried": carried,
        "formula": all(torch.allclose(e, f, rtol=1e-5, atol=1e-5) for e, f in zip(expected, formula, strict=True)),
    }


def load(out: Path) -> dict[str, Any]:
    archive = out / "archive"
    x, y = _tensors()
    expected = torch.load(out / "tables.expected.pt")["expected"]
    g, loaded_y = foundry.CUDAGraph.load(archive / "tables.json")
    same_output = loaded_y.data_ptr() == y.data_ptr()
    return {"loaded": True, "same_output": same_output, "identical": compare_replays(g, x, y, expected)}


def load_background(out: Path) -> dict[str, Any]:
    archive = out / "archive"
    x, y = _tensors()
    expected = torch.load(out / "tables.expected.pt")["expected"]
    pending = foundry.CUDAGraph.start_graph_builds([archive / "tables.json"], defer_dedicated=True)
    ((g, _),) = foundry.CUDAGraph.finish_graph_loads(pending)
    shared = compare_replays(g, x, y, expected)
    pending.build_dedicated()
    pending.wait_all()
    return {"loaded": True, "template": shared, "dedicated": compare_replays(g, x, y, expected)}


def refuse(out: Path) -> dict[str, Any]:
    import cupy
    import numpy as np

    archive = out / "refused"
    _, y = _tensors()
    module, _, read_pointer = _module()
    target = module.get_global("target")
    value = np.array([target.ptr], dtype=np.uint64)
    module.get_global("dptr").copy_from_host(ctypes.c_void_p(value.ctypes.data), 8)  # a module address, from the host
    cy = cupy.asarray(y)
    launch(read_pointer, 1, 4, (cy,))
    torch.cuda.synchronize()
    g = foundry.CUDAGraph()
    with foundry.graph(g):
        launch(read_pointer, 1, 4, (cy,))
    try:
        g.save(archive / "pointer.json", output_tensors=y, archive_dir=archive)
        result: dict[str, Any] = {"error": None}
    except FoundryError as exc:
        bases = [c.__name__ for c in type(exc).__mro__ if issubclass(c, FoundryError)]
        result = {"error": type(exc).__name__, "bases": bases, "message": str(exc),
                  "variable": getattr(exc, "variable", None), "offset": getattr(exc, "offset", None)}  # fmt: skip
    result["files"] = sorted(p.name for p in archive.glob("*.json")) if archive.exists() else []
    return result


if __name__ == "__main__":
    main({"save": save, "load": load, "loadbg": load_background, "refuse": refuse}, BASE, REGION, images_first={"load"})
