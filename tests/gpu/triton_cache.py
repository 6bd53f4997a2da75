"""One process of tests/gpu/test_triton_cache.py, with the real Triton under Foundry's cache manager
(foundry/integration/shared/tritoncache.py): JIT-compiles and runs a kernel, and prints as JSON what the
manager saw (entries opened, files written), the result, and where the kernel's files lie.

    python tests/gpu/triton_cache.py KERNEL OUT.json     (TRITON_CACHE_DIR, TRITON_CACHE_MANAGER and
                                                          FOUNDRY_TRITON_CACHE_COPY from the environment)
"""

from __future__ import annotations

import json
import sys

import torch
import triton
import triton.language as tl

from foundry.integration.shared import tritoncache


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


@triton.jit
def times_two(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def main() -> None:
    kernel = {"add_one": add_one, "times_two": times_two}[sys.argv[1]]
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    kernel[(4,)](x, 1000, BLOCK=256)
    torch.cuda.synchronize()
    entries, writes = tritoncache.activity()
    doc = {
        "entries": entries,
        "writes": writes,
        "used": [str(p) for p in tritoncache.used_dirs()],
        "first": [float(v) for v in x[:3].tolist()],
    }
    with open(sys.argv[2], "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
