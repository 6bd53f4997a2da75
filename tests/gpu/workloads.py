"""GPU workloads for the round-trip tier: each builds its persistent state (weights, static inputs)
in a fixed order, exposes one or more graph bodies, and can reset its inputs for a given seed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from foundry_bench import SHAPES, QwenDecoder

__all__ = ["WORKLOADS", "Workload", "WorkloadState"]


def _randn(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).mul_(scale).to(dtype)


@dataclass
class WorkloadState:
    inputs: dict[str, torch.Tensor]
    graphs: dict[str, Callable[[], Any]]
    extra: dict[str, Any] = field(default_factory=dict)

    def reset(self, seed: int) -> None:
        """Writes fresh seeded values into every static input (in place: same addresses)."""
        gen = torch.Generator(device="cuda").manual_seed(1000 + seed)
        for name, t in self.inputs.items():
            if name.startswith("_zero_"):
                t.zero_()
            elif t.dtype in (torch.int64, torch.int32):
                hi = int(self.extra.get(f"{name}_high", 100))
                t.copy_(torch.randint(0, hi, t.shape, generator=gen, device="cuda", dtype=t.dtype))
            else:
                t.copy_(_randn(tuple(t.shape), t.dtype, gen))


@dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[], WorkloadState]


def _gemms(dtype: torch.dtype) -> Callable[[], WorkloadState]:
    # (m, k, n): decode-like, prefill-like, and a small-m/huge-k one that cuBLASLt serves with split-K
    shapes = [(1, 4096, 4096), (64, 1024, 3072), (512, 4096, 1024), (16, 16384, 128), (8, 8192, 64)]

    def build() -> WorkloadState:
        gen = torch.Generator(device="cuda").manual_seed(1)
        inputs = {}
        for i, (m, k, n) in enumerate(shapes):
            inputs[f"a{i}"] = _randn((m, k), dtype, gen)
            inputs[f"b{i}"] = _randn((k, n), dtype, gen, 0.05)
        return WorkloadState(inputs, {"": lambda: tuple(inputs[f"a{i}"] @ inputs[f"b{i}"] for i in range(len(shapes)))})

    return build


def _elementwise() -> WorkloadState:
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = _randn((64, 1000), torch.float32, gen)
    w = _randn((1000,), torch.float32, gen)
    staging = torch.empty_like(x)

    def body() -> tuple[torch.Tensor, ...]:
        staging.copy_(x)  # device-to-device copy node
        y = torch.sigmoid(staging * 2 + 1) * w
        z = torch.softmax(y, -1)
        ln = F.layer_norm(y, (1000,))
        acc = torch.zeros(64, device="cuda")  # memset node
        acc += y.sum(-1)
        return z, ln, acc, y.amax(-1), torch.cumsum(z, -1), (y > 0.5).sum(-1)

    return WorkloadState({"x": x, "w": w}, {"": body})


def _sdpa() -> WorkloadState:
    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (_randn((4, 16, 128, 64), torch.bfloat16, gen) for _ in range(3))
    kd = _randn((2, 8, 256, 128), torch.float16, gen)

    def body() -> tuple[torch.Tensor, ...]:
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        b = F.scaled_dot_product_attention(kd, kd, kd)
        return a, b

    return WorkloadState({"q": q, "k": k, "v": v, "kd": kd}, {"": body})


def _compiled() -> WorkloadState:
    gen = torch.Generator(device="cuda").manual_seed(4)
    x = _randn((256, 512), torch.float32, gen)
    w = _randn((512, 512), torch.float32, gen, 0.05)

    @torch.compile
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.gelu(x @ w)
        return F.layer_norm(h, (512,)) * 1.5 + h.sin(), h.sum(0)

    return WorkloadState({"x": x, "w": w}, {"": lambda: fn(x, w)})


def _dropout() -> WorkloadState:
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = _randn((128, 1024), torch.float32, gen)
    w = _randn((1024, 256), torch.float32, gen, 0.05)

    def body() -> tuple[torch.Tensor, torch.Tensor]:
        h = F.dropout(x, p=0.3, training=True) @ w
        return h, F.dropout(h, p=0.5, training=True) + torch.rand_like(h)

    return WorkloadState({"x": x, "w": w}, {"": body})


def _two_streams() -> WorkloadState:
    gen = torch.Generator(device="cuda").manual_seed(6)
    a = _randn((512, 512), torch.float16, gen)
    b = _randn((512, 512), torch.float16, gen)
    side = torch.cuda.Stream()

    def body() -> torch.Tensor:
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            left = (a @ b).relu()
        right = (b @ a).tanh()
        main.wait_stream(side)
        return left + right

    return WorkloadState({"a": a, "b": b}, {"": body})


def _decoder() -> WorkloadState:
    cfg = SHAPES["tiny"]
    model = QwenDecoder(cfg, seed=7)
    ids = torch.zeros(cfg.max_batch, dtype=torch.int64, device="cuda")
    pos = torch.zeros(cfg.max_batch, dtype=torch.int64, device="cuda")
    graphs = {f"bs{bs}": (lambda bs=bs: model(ids[:bs], pos[:bs])) for bs in (1, 8, 32)}
    state = WorkloadState({"ids": ids, "pos": pos, "_zero_k": model.k_cache, "_zero_v": model.v_cache}, graphs)
    state.extra.update(ids_high=cfg.vocab, pos_high=cfg.max_seq)
    state.extra["model"] = model
    return state


WORKLOADS: list[Workload] = [
    Workload("gemm_bf16", _gemms(torch.bfloat16)),
    Workload("gemm_fp16", _gemms(torch.float16)),
    Workload("elementwise", _elementwise),
    Workload("sdpa", _sdpa),
    Workload("compiled", _compiled),
    Workload("dropout", _dropout),
    Workload("two_streams", _two_streams),
    Workload("decoder", _decoder),
]
