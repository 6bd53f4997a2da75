"""Issue-2 probe under the interposer: a PyTorch workload with cuBLAS, cuDNN attention and a Triton
kernel, run eagerly (launches traced) and captured.

    python kernels_workload.py record OUT   allocation log, every launched/captured kernel resolved,
                                            the images they need written to OUT/images
    python kernels_workload.py reload OUT   in a fresh process: load those images, resolve every kernel
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import foundry
from foundry.kernels import registry
from foundry.load.build import load_images
from foundry.native import codec
from foundry.save.graph import _image_format
from foundry.storage import write_image


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def record(out: Path) -> None:
    torch.cuda.init()
    foundry.set_allocation_region(0x600000000000, "16GB")
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(512, 1024, device="cuda", generator=gen, dtype=torch.bfloat16)
    b = torch.randn(1024, 768, device="cuda", generator=gen, dtype=torch.bfloat16)
    q, k, v = (torch.randn(2, 8, 256, 64, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
    x = torch.randn(100_000, device="cuda", generator=gen)
    y = torch.randn(100_000, device="cuda", generator=gen)
    backend = "cudnn"

    def work() -> tuple[torch.Tensor, ...]:
        nonlocal backend
        c = a @ b
        try:
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
                att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        except RuntimeError:
            backend = "default"
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        z = torch.empty_like(x)
        _axpy[(triton.cdiv(x.numel(), 1024),)](x, y, z, x.numel(), 2.0, BLOCK=1024)
        return c.float().sum(), att.float().sum(), z.sum()

    with registry.launch_trace() as trace:
        work()
        work()
        torch.cuda.synchronize()
    g = foundry.CUDAGraph()
    with foundry.graph(g):
        work()
    _, graph_functions = codec.extract(g.raw_cuda_graph())

    t0 = time.perf_counter()
    kernels: dict[str, list[list[str]]] = {"traced": [], "graph": []}
    unresolved: list[str] = []
    needed: dict[int, str] = {}
    for kind, functions in (("traced", trace.functions), ("graph", graph_functions)):
        for f in functions:
            try:
                info = registry.describe_functions([f])[0]
                index, name = info.image, info.name
            except foundry.FoundryError as exc:
                unresolved.append(f"{kind}: {exc}")
                continue
            sha = registry.image_hash(index)
            needed[index] = sha
            kernels[kind].append([sha, name])
    resolve_s = time.perf_counter() - t0
    images = registry.recorded_images()
    for index in needed:
        write_image(out / "archive", registry.image_bytes(index), _image_format(images[index].format))
    report = {
        "events": [[int(e.kind), e.offset, e.size, e.span] for e in foundry.allocation_events()],
        "kernels": kernels,
        "unresolved": unresolved,
        "sdpa_backend": backend,
        "resolve_s": resolve_s,
        "registry": {
            "images": len(images),
            "by_kind_format": dict(Counter(f"{r.kind}/{r.format.name.lower()}" for r in images)),
            "owned_copies": sum(r.owned for r in images),
            "bytes": sum(r.size for r in images),
            "needed_images": len(needed),
            "needed_bytes": sum(images[i].size for i in needed),
        },
    }
    (out / "record.json").write_text(json.dumps(report))
    print(json.dumps({k: v for k, v in report.items() if k not in ("events", "kernels")}, indent=1))


def reload(out: Path) -> None:
    torch.cuda.init()
    torch.cuda.synchronize()
    report = json.loads((out / "record.json").read_text())
    wanted = {tuple(k) for kind in report["kernels"].values() for k in kind}
    t0 = time.perf_counter()
    load_images(out / "archive", sorted({sha for sha, _ in wanted}))
    failures = []
    for sha, name in sorted(wanted):
        try:
            assert registry.loaded_function(registry.KernelRef(sha, name))
        except Exception as exc:
            failures.append(f"{name}: {exc}")
    result = {"kernels": len(wanted), "failures": failures, "seconds": time.perf_counter() - t0}
    (out / "reload.json").write_text(json.dumps(result))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    {"record": record, "reload": reload}[sys.argv[1]](Path(sys.argv[2]))
