"""Fingerprints of each attention layer's inputs and output in an engine's processes (``foundry bench --engine
vllm ... --digests``): where two processes of the same model and flags first compute different bits.

Two vLLM processes of one Gemma2 shape, same flags, same memory profile and compile cache, can answer one bf16
step apart from the first generated token, each repeating itself bit for bit (docs/DESIGN.md, "What identical to
native is measured against"). The graphs and the compiled code hide the layers from Python; attention does not:
vLLM calls its backend's ``forward`` from Python for every layer of every eager or piecewise step. So the
fingerprints of the query, key, value and output there, layer by layer, say whether a difference starts before a
layer's attention (its query already differs: the compiled code between two attentions) or in it (same inputs,
another output: the attention kernel).

Loaded by this folder's ``sitecustomize`` in every Python process the engine starts, while
``FOUNDRY_BENCH_DIGESTS`` names a folder: an import hook wraps ``forward`` of the attention implementations in
``TARGETS`` when their module is first imported (nothing of the engine's is imported here). Once the benchmark
has written ``START_FILE`` into the folder (the engine serves), each call outside a graph capture appends one
JSON line to ``digests-<pid>.jsonl``: the layer's name, the number of tokens, and each
tensor's fingerprint (``fingerprint``). Costs a device synchronisation per layer: for finding a difference, never
for timing. A wrapper that fails stops recording and says so on stderr; the engine's call is never changed.

Between two attentions the compiled model runs Inductor's kernels and the matrix products it leaves to cuBLAS.
Inductor's generated code calls those through the attributes of one namespace (``extern_kernels.mm(a, b,
out=...)``), looked up at each call, so the same import hook wraps them there (``GEMMS``): each product outside a
graph is recorded as ``<last attention layer>/<op><i>``, its left input (``in``) and its output, the i-th product
since that layer's attention in the thread. A product whose input agrees and whose output does not is cuBLAS's
choice; one whose input already differs got it from a kernel of Inductor's, or from the product before."""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import IO, Any

__all__ = [
    "ENV",
    "GEMMS",
    "GEMM_MODULES",
    "MAX_LINES",
    "START_FILE",
    "TARGETS",
    "fingerprint",
    "start",
    "wrap",
    "wrap_products",
]

ENV = "FOUNDRY_BENCH_DIGESTS"  # the folder the fingerprints go to; unset: nothing recorded
# Written into that folder once the engine serves: only then are calls recorded. A fingerprint allocates device
# memory, and during start-up that would move what SAVE lays out and LOAD checks against it (the first capture's
# pool, the allocations of each phase); once the engine serves, SAVE's archive is written and LOAD's is in place.
START_FILE = "recording"
MAX_LINES = 400_000  # a process writes at most this many lines (bounded disk whatever the engine does)
# Module -> the attention implementations in it whose ``forward(layer, query, key, value, kv_cache, attn_metadata,
# output, ...)`` is wrapped (vLLM 0.26's backends that serve the dense and sliding-window models on NVIDIA GPUs).
TARGETS: dict[str, tuple[str, ...]] = {
    "vllm.v1.attention.backends.flash_attn": ("FlashAttentionImpl",),
    "vllm.v1.attention.backends.flashinfer": ("FlashInferImpl",),
    "vllm.v1.attention.backends.triton_attn": ("TritonAttentionImpl",),
}
# Inductor's modules that register the matrix products its compiled code calls by name (ExternKernelChoice sets
# ``torch._inductor.select_algorithm.extern_kernels.<name>``), and the names wrapped, with the position of the
# argument that is the activation (``addmm``'s first is the bias).
GEMM_MODULES = ("torch._inductor.kernel.mm", "torch._inductor.kernel.bmm")
GEMMS = {"mm": 0, "addmm": 1, "bmm": 0}
_MARK = "_foundry_digests"
_WEIGHT_MODULUS = 65521  # a prime: the weights of a weighted sum repeat only every this many elements


def fingerprint(tensor: Any) -> list[int] | None:
    """``[elements, sum, weighted sum]`` of a tensor's bits read as integers of its element's width (bf16 as int16),
    summed in int64 on its device: integer sums do not depend on their order, so equal bits give equal
    fingerprints in any process, and one changed element changes the sum. None for no tensor."""
    if tensor is None:
        return None
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    ints = flat.view(width).to(torch.int64)
    weights = torch.arange(ints.numel(), device=ints.device, dtype=torch.int64) % _WEIGHT_MODULUS + 1
    total, weighted = torch.stack([ints.sum(), (ints * weights).sum()]).tolist()
    return [int(ints.numel()), int(total), int(weighted)]


class _Recorder:
    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.lock = threading.Lock()
        self.file: IO[str] | None = None
        self.pid = -1
        self.lines = 0
        self.stopped = False
        self.started = False

    def active(self) -> bool:
        """Whether calls are recorded: once the start file is there (one look a call until then)."""
        if not self.started:
            self.started = os.path.exists(os.path.join(self.folder, START_FILE))
        return self.started and not self.stopped

    def write(self, entry: dict[str, Any]) -> None:
        with self.lock:
            if self.stopped or self.lines >= MAX_LINES:
                return
            if self.pid != os.getpid():  # a forked child records into its own file
                self.pid, self.lines = os.getpid(), 0
                os.makedirs(self.folder, exist_ok=True)
                self.file = open(os.path.join(self.folder, f"digests-{self.pid}.jsonl"), "a", buffering=1)  # noqa: SIM115
            assert self.file is not None
            self.file.write(json.dumps(entry, separators=(",", ":")) + "\n")
            self.lines += 1

    def stop(self, why: str) -> None:
        if not self.stopped:
            self.stopped = True
            print(f"foundry attention digests stopped: {why}", file=sys.stderr)


_RECORDER: _Recorder | None = None
_PLACE = threading.local()  # per thread: the last attention layer recorded, and the products since it


def _capturing() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def _record(layer: Any, metadata: Any, tensors: Sequence[Any]) -> None:
    recorder = _RECORDER
    if recorder is None or not recorder.active() or _capturing():
        return
    try:
        n = getattr(metadata, "num_actual_tokens", None)
        n = int(n) if n is not None else int(tensors[0].shape[0])
        q, k, v, out = (None if t is None else t[:n] for t in tensors)
        name = getattr(layer, "layer_name", None) or type(layer).__name__
        _PLACE.layer, _PLACE.products = str(name), 0
        entry = {"layer": str(name), "n": n, "q": fingerprint(q), "k": fingerprint(k), "v": fingerprint(v),
                 "out": fingerprint(out)}  # fmt: skip
        recorder.write(entry)
    except Exception as exc:
        recorder.stop(repr(exc))


def _record_product(op: str, activation: Any, out: Any) -> None:
    recorder = _RECORDER
    if recorder is None or not recorder.active() or _capturing():
        return
    try:
        i = getattr(_PLACE, "products", 0)
        _PLACE.products = i + 1
        layer = f"{getattr(_PLACE, 'layer', 'start')}/{op}{i}"
        rows = int(out.shape[-2]) if len(out.shape) >= 2 else int(out.shape[0])
        recorder.write({"layer": layer, "n": rows, "in": fingerprint(activation), "out": fingerprint(out)})
    except Exception as exc:
        recorder.stop(repr(exc))


def wrap_products(namespace: Any) -> list[str]:
    """Wraps the matrix products of ``GEMMS`` that ``namespace`` holds (Inductor's ``extern_kernels``) to record
    each call's input and output (once: a wrapped one is left as it is); the names it wrapped."""
    wrapped = []
    for op, position in GEMMS.items():
        original = getattr(namespace, op, None)
        if original is None or getattr(original, _MARK, False):
            continue

        def product(*args: Any, _original: Any = original, _op: str = op, _at: int = position, **kwargs: Any) -> Any:
            result = _original(*args, **kwargs)
            out = kwargs.get("out", result)
            if out is not None and len(args) > _at:
                _record_product(_op, args[_at], out)
            return result

        setattr(product, _MARK, True)
        product.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(namespace, op, product)
        wrapped.append(op)
    return wrapped


def wrap(cls: type) -> bool:
    """Wraps ``cls.forward`` to record each call's fingerprints (once: a wrapped class is left as it is); whether
    it wrapped."""
    original = cls.__dict__.get("forward")
    if original is None or getattr(original, _MARK, False):
        return False

    def forward(self: Any, layer: Any, query: Any, key: Any, value: Any, kv_cache: Any, attn_metadata: Any,
                output: Any, *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        result = original(self, layer, query, key, value, kv_cache, attn_metadata, output, *args, **kwargs)
        if attn_metadata is not None:  # None: vLLM's profile run, which computes nothing
            _record(layer, attn_metadata, (query, key, value, result if result is not None else output))
        return result

    setattr(forward, _MARK, True)
    forward.__wrapped__ = original  # type: ignore[attr-defined]
    cls.forward = forward  # type: ignore[attr-defined]
    return True


def _patch(module: ModuleType, names: tuple[str, ...]) -> None:
    for name in names:
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            wrap(cls)


def _sibling(name: str) -> str:
    # By name where this folder is on the path of the process (sitecustomize's case), else within its package.
    return f"{__package__}.{name}" if __package__ else name


def start(folder: str | None = None) -> bool:
    """Records into ``folder`` (default: ``$FOUNDRY_BENCH_DIGESTS``); False, doing nothing, where none is named."""
    global _RECORDER
    folder = folder or os.environ.get(ENV)
    if not folder or _RECORDER is not None:
        return False
    _RECORDER = _Recorder(folder)
    hooks = importlib.import_module(_sibling("foundry_site_hooks"))
    for name, names in TARGETS.items():
        hooks.after_import(name, lambda module, names=names: _patch(module, names))
    for name in GEMM_MODULES:
        hooks.after_import(name, lambda module: _wrap_inductor_products())
    return True


def _wrap_inductor_products() -> None:
    select = sys.modules.get("torch._inductor.select_algorithm")
    namespace = getattr(select, "extern_kernels", None)
    if namespace is not None:
        wrap_products(namespace)
