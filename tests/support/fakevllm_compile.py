"""The compiled side of the fake vLLM (tests/support/fakevllm.py): cudagraph modes, ``CUDAGraphWrapper`` with
``_all_instances``, and a model that vLLM's compile splits into pieces, with vLLM's names."""

from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar

from tests.support.faketensor import EngineDevice
from tests.support.fakevllm_cache import aot_forward


class CUDAGraphMode(enum.Enum):
    NONE = 0
    PIECEWISE = 1
    FULL = 2
    FULL_DECODE_ONLY = 3
    FULL_AND_PIECEWISE = 4


def graph_kinds(mode: CUDAGraphMode) -> tuple[bool, str | None]:
    """(FULL graphs for uniform decode batches, the mode of mixed batches' graphs) of a cudagraph mode."""
    return {
        CUDAGraphMode.NONE: (False, None),
        CUDAGraphMode.FULL_DECODE_ONLY: (True, None),
        CUDAGraphMode.FULL_AND_PIECEWISE: (True, "PIECEWISE"),
        CUDAGraphMode.PIECEWISE: (False, "PIECEWISE"),
        CUDAGraphMode.FULL: (False, "FULL"),
    }[mode]


def compilation(
    memory: EngineDevice, trace: Any, capturing: dict[str, bool], torch_v1: Any
) -> tuple[Any, ModuleType, Any]:
    """vLLM's ``BatchDescriptor``, its ``vllm.compilation.cuda_graph`` module (``CUDAGraphWrapper``: mode NONE,
    or another mode than its own, runs the runnable; its own mode captures, unless ``capturing["enabled"]`` is
    off, or replays) and the compiled model, which splits into pieces at its first forward, each piece in a
    PIECEWISE wrapper when the mode has piecewise graphs (middle pieces return two tensors, the last one).
    Each piece computes its outputs from the previous piece's first output (the model's inputs for the first)
    and the model's weight, so a graph's outputs follow what the program wrote into the inputs."""

    @dataclass(frozen=True)
    class BatchDescriptor:
        num_tokens: int
        num_reqs: int | None = None
        uniform: bool = False
        has_lora: bool = False
        num_active_loras: int = 0

    @dataclass
    class CUDAGraphEntry:
        batch_descriptor: Any
        cudagraph: Any = None
        output: Any = None

    cuda_graph = ModuleType("vllm.compilation.cuda_graph")
    cuda_graph.__dict__.update(torch=torch_v1, CUDAGraphEntry=CUDAGraphEntry)

    class CUDAGraphWrapper:
        """vLLM's wrapper: mode NONE or another mode than its own runs the runnable; its own mode captures
        (the first time for a descriptor, unless capturing was disabled) or replays."""

        _all_instances: ClassVar[weakref.WeakSet[Any]] = weakref.WeakSet()

        def __init__(self, runnable: Any = None, runtime_mode: CUDAGraphMode = CUDAGraphMode.FULL) -> None:
            self.runnable = runnable
            self.runtime_mode = runtime_mode
            self.concrete_cudagraph_entries: dict[Any, Any] = {}
            CUDAGraphWrapper._all_instances.add(self)

        def _run(self, desc: Any, mode: CUDAGraphMode) -> Any:
            return memory.allocate(desc.num_tokens * 2048) if self.runnable is None else self.runnable(desc, mode)

        def __call__(self, desc: Any, mode: CUDAGraphMode = CUDAGraphMode.FULL) -> Any:
            if mode != self.runtime_mode:
                return self._run(desc, mode)
            entry = self.concrete_cudagraph_entries.setdefault(desc, CUDAGraphEntry(desc))
            if entry.cudagraph is None:
                if not capturing["enabled"]:
                    raise RuntimeError("CUDA graph capturing detected at an inappropriate time")
                t = cuda_graph.torch
                graph = t.cuda.CUDAGraph()
                with t.cuda.graph(graph, pool=None, stream=None):
                    output = self._run(desc, mode)
                entry.cudagraph, entry.output = graph, output
                return output
            entry.cudagraph.replay()
            return entry.output

    cuda_graph.CUDAGraphWrapper = CUDAGraphWrapper  # type: ignore[attr-defined]

    class PiecewiseBackend:
        def __init__(self, index: int, count: int, model: Any) -> None:
            self.piecewise_compile_index = index
            self.total_piecewise_compiles = count
            self.vllm_backend = SimpleNamespace(prefix="backbone")
            self.model = model

        def __call__(self, desc: Any, mode: CUDAGraphMode) -> Any:
            n, source, weight = desc.num_tokens, self.model.hidden, self.model.weight
            if self.piecewise_compile_index == self.total_piecewise_compiles - 1:
                hidden = memory.allocate(n * 1024)  # hidden states
                memory.compute(hidden, source, weight)
                return hidden
            attention_input, residual = memory.allocate(n * 512), memory.allocate(n * 256)
            memory.compute(attention_input, source, weight)
            memory.compute(residual, attention_input, source)
            return attention_input, residual

    class CompiledModel:
        """The model under vLLM's compile: split into pieces at its first forward. It reads ``inputs`` (the
        runner's input ids) and one ``weight``."""

        def __init__(self, pieces: int, cg_mode: CUDAGraphMode, inputs: Any, weight: Any, aot: bool = False) -> None:
            self.aot = aot  # torch.compiled through vLLM's AOT cache (fakevllm_cache.py)
            self.count = pieces
            self.wrapped = graph_kinds(cg_mode)[1] == "PIECEWISE"  # vLLM wraps pieces only for piecewise graphs
            self.pieces: list[Any] | None = None
            self.inputs, self.weight = inputs, weight
            self.hidden = inputs  # what the next piece reads: the one before's first output

        def __call__(self, desc: Any, mode: CUDAGraphMode = CUDAGraphMode.NONE) -> Any:
            if self.pieces is None:
                trace("compile")
                if self.aot:
                    aot_forward(trace)
                backends = [PiecewiseBackend(i, self.count, self) for i in range(self.count)]
                self.pieces = (
                    [CUDAGraphWrapper(b, CUDAGraphMode.PIECEWISE) for b in backends] if self.wrapped else backends
                )
            out: Any = None
            self.hidden = self.inputs
            for piece in self.pieces:
                out = piece(desc, mode)  # attention runs eagerly between the pieces
                self.hidden = out[0] if isinstance(out, tuple) else out
            return out

    return BatchDescriptor, cuda_graph, CompiledModel
