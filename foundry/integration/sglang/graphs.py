"""Where SGLang's CUDA-graph runners keep their graphs, and how loaded graphs take the captured ones' place.

Each runner (``runner/decode_cuda_graph_runner.py``, ``runner/prefill_cuda_graph_runner.py``) hands capture and
replay to a backend that keeps ``_graphs[ShapeKey]`` and ``_outputs[ShapeKey]``; ``replay`` runs
``_graphs[key]`` and returns ``_outputs[key]``, which the runner then slices.

- Decode, ``full`` backend (``FullCudaGraphBackend``): one graph per batch size (``capture_bs``); its output
  is a ``LogitsProcessorOutput`` whose tensors live in the graph pool and in the shared logits buffer.
- Prefill, ``breakable`` backend (``BreakableCudaGraphBackend``): one ``BreakableCUDAGraph`` per token count
  (``capture_num_tokens``), a list of segments with an eager step between two (breaks.py); its output is the
  transformer body's hidden states, copied by the last segment into one buffer all token counts share.

SAVE turns each into (key, graph, outputs) items for shared/steps.py: a decode graph keyed by runner and
batch size, its output as the tuple of the ``LogitsProcessorOutput``'s tensors (the field names in the key);
a prefill graph as one item per segment, keyed by runner, token count and segment index, whose outputs are the
tensors of the eager step after it (the last segment's: the graph's output). LOAD reverses it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from ..shared.errors import ArchiveMetadataError, ArchiveMismatchError, PatchTargetError, UnsupportedConfigError
from . import breaks
from .config import SGLANG

__all__ = [
    "BREAKABLE_MODULE",
    "FULL_MODULE",
    "Item",
    "decode_items",
    "file_name",
    "install_decode",
    "install_prefill",
    "prefill_items",
]

Key = dict[str, Any]
Item = tuple[Key, Any, Any]  # (key, graph, outputs)

FULL_MODULE = "sglang.srt.model_executor.runner_backend.full_cuda_graph_backend"
BREAKABLE_BACKEND_MODULE = "sglang.srt.model_executor.runner_backend.breakable_cuda_graph_backend"
BREAKABLE_MODULE = "sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph.breakable_cuda_graph"
SHAPE_KEY_MODULE = "sglang.srt.model_executor.runner.shape_key"
LOGITS_MODULE = "sglang.srt.layers.logits_processor"
LOGITS = "LogitsProcessorOutput"


def _backend(runner: Any, kind: str) -> Any:
    backend = getattr(runner, "backend", None)
    if type(backend).__name__ != kind or not hasattr(backend, "_graphs") or not hasattr(backend, "_outputs"):
        raise UnsupportedConfigError(
            f"SGLang's {type(runner).__name__} captured with {type(backend).__name__}; the Foundry adapter saves the "
            f"decode runner's full graphs and the prefill runner's breakable graphs ({kind} here, with _graphs and "
            f"_outputs as in SGLang {SGLANG.version}). Use those backends, or FOUNDRY_SGLANG_MODE=off."
        )
    return backend


def _foundry_graph(graph: Any, where: str) -> Any:
    if type(graph).__module__.split(".")[0] == "torch":
        raise PatchTargetError(
            f"{where} was captured with torch's CUDAGraph, not Foundry's: SGLang's capture is not where SGLang "
            f"{SGLANG.version} has it. {SGLANG.fallback()}"
        )
    return graph


def _shape(key: Any) -> Key:
    return {"size": int(key.size), "stream": key.stream_idx, "variant": key.variant_label}


def _shape_key(key: Key) -> Any:
    shape_key = sys.modules[SHAPE_KEY_MODULE].ShapeKey
    return shape_key(size=key["size"], stream_idx=key["stream"], variant_label=key["variant"])


def _tensors(outputs: Any) -> tuple[Any, ...]:
    if outputs is None:
        return ()
    return tuple(outputs) if isinstance(outputs, tuple | list) else (outputs,)


def file_name(index: int, key: Key) -> str:
    variant = f"_{key['variant']}" if key.get("variant") else ""
    if key["runner"] == "decode":
        return f"g{index:04d}_decode_bs{key['size']}{variant}.json"
    return f"g{index:04d}_prefill_t{key['size']}{variant}_s{key['segment']:03d}.json"


def _check_sizes(runner: str, have: Iterable[int], want: Iterable[int]) -> None:
    have, want = sorted(set(have)), sorted(set(want))
    if have != want:
        raise ArchiveMismatchError(
            f"this SGLang's {runner} runner captures {len(want)} sizes, the archive holds {runner} graphs for "
            f"{len(have)} (missing: {sorted(set(want) - set(have))[:4]}, extra: {sorted(set(have) - set(want))[:4]}): "
            "the CUDA-graph settings or the memory pool differ from SAVE's. Start with SAVE's settings, or run SAVE "
            "again."
        )


# ---------------------------------------------------------------------------------------------------- decode
def decode_items(runner: Any) -> list[Item]:
    backend = _backend(runner, "FullCudaGraphBackend")
    items = []
    for shape, graph in sorted(backend._graphs.items(), key=lambda kv: kv[0].size):
        where = f"the decode graph for batch size {shape.size}"
        output = backend._outputs[shape]
        if type(output).__name__ != LOGITS or not dataclasses.is_dataclass(output):
            raise UnsupportedConfigError(
                f"{where} returns a {type(output).__name__}, not a {LOGITS} (pipeline parallelism?): the Foundry "
                "adapter does not save it. Use one GPU, or FOUNDRY_SGLANG_MODE=off."
            )
        present = [(f.name, getattr(output, f.name)) for f in dataclasses.fields(output)]
        present = [(name, value) for name, value in present if value is not None]
        bad = [name for name, value in present if not hasattr(value, "data_ptr")]
        if bad:
            raise UnsupportedConfigError(
                f"{where} returns {LOGITS} fields {bad} that are not tensors; the Foundry adapter keeps only tensors. "
                "Report this with the SGLang settings, or use FOUNDRY_SGLANG_MODE=off."
            )
        key = {"runner": "decode", **_shape(shape), "fields": ",".join(name for name, _ in present)}
        items.append((key, _foundry_graph(graph, where), tuple(value for _, value in present)))
    _check_sizes("decode", [k["size"] for k, _, _ in items], runner.capture_bs)
    return items


def install_decode(runner: Any, loaded: Sequence[Item]) -> None:
    _check_sizes("decode", [k["size"] for k, _, _ in loaded], runner.capture_bs)
    backend = _backend(runner, "FullCudaGraphBackend")
    logits_type = getattr(sys.modules.get(LOGITS_MODULE), LOGITS, None)
    if logits_type is None:
        raise PatchTargetError(f"{LOGITS_MODULE}.{LOGITS} is missing. {SGLANG.fallback()}")
    for key, graph, outputs in loaded:
        names = [n for n in str(key["fields"]).split(",") if n]
        tensors = _tensors(outputs)
        if len(names) != len(tensors):
            raise ArchiveMetadataError(
                f"the decode graph for batch size {key['size']} names {len(names)} output fields for {len(tensors)} "
                "tensors: the archive is damaged. Run SAVE again."
            )
        shape = _shape_key(key)
        backend._graphs[shape] = graph
        backend._outputs[shape] = logits_type(**dict(zip(names, tensors, strict=True)))


# --------------------------------------------------------------------------------------------------- prefill
def prefill_items(runner: Any) -> tuple[list[Item], dict[int, dict[str, Any]]]:
    """The prefill graphs' segments as items, and the eager step after each segment but a graph's last, by the
    item's index in the list."""
    backend = _backend(runner, "BreakableCudaGraphBackend")
    if getattr(runner, "use_captured_attn_metadata", False):
        raise UnsupportedConfigError(
            "this attention backend keeps per-size attention metadata made at capture for SGLang's breakable prefill "
            f"graphs (use_captured_attn_metadata), which LOAD does not make; {breaks.PREFILL_OFF}"
        )
    items: list[Item] = []
    steps: dict[int, dict[str, Any]] = {}
    names: dict[int, str] = {}
    for shape, graph in sorted(backend._graphs.items(), key=lambda kv: kv[0].size):
        where = f"the prefill graph for {shape.size} tokens"
        if getattr(backend, "_capture_inputs", {}).get(shape) is not None or graph._deduped_cuda_graph is not None:
            raise UnsupportedConfigError(
                f"{where} keeps capture-time inputs or shares execs (SGLANG_ENABLE_CUDA_GRAPH_DEDUP), which the "
                f"Foundry adapter does not save; {breaks.PREFILL_OFF}"
            )
        segments, fns = list(graph._segments), list(graph._break_fns)
        if len(fns) != len(segments) - 1:
            raise PatchTargetError(
                f"{where} has {len(segments)} segments and {len(fns)} eager steps; SGLang {SGLANG.version} puts one "
                f"step between two segments. {SGLANG.fallback()}"
            )
        for i, segment in enumerate(segments):
            key = {"runner": "prefill", **_shape(shape), "segment": i, "segments": len(segments)}
            part = f"{where}, segment {i + 1} of {len(segments)}"
            if i < len(fns):
                doc, tensors = breaks.describe(fns[i], part, names)
                steps[len(items)] = doc
                outputs: Any = tensors or None
            else:
                outputs = backend._outputs[shape]
            items.append((key, _foundry_graph(segment, part), outputs))
    _check_sizes("prefill", [k["size"] for k, _, _ in items], runner.capture_num_tokens)
    return items, steps


def install_prefill(runner: Any, loaded: Sequence[Item], steps: dict[str, Any], files: Sequence[str]) -> None:
    """Gives the prefill runner's backend one BreakableCUDAGraph per token count: its loaded segments, and
    between two the eager step SAVE described (``steps`` by graph file; ``files`` names each loaded item)."""
    _check_sizes("prefill", [k["size"] for k, _, _ in loaded], runner.capture_num_tokens)
    backend = _backend(runner, "BreakableCudaGraphBackend")
    graph_type = getattr(sys.modules.get(BREAKABLE_BACKEND_MODULE), "BreakableCUDAGraph", None)
    if graph_type is None:
        raise PatchTargetError(f"{BREAKABLE_BACKEND_MODULE}.BreakableCUDAGraph is missing. {SGLANG.fallback()}")
    shapes: dict[tuple[int, Any], list[tuple[Key, Any, Any, str]]] = {}
    for (key, graph, outputs), name in zip(loaded, files, strict=True):
        shapes.setdefault((key["size"], key["variant"]), []).append((key, graph, outputs, name))
    for parts in shapes.values():
        parts.sort(key=lambda p: p[0]["segment"])
        count = parts[0][0]["segments"]
        if [p[0]["segment"] for p in parts] != list(range(count)):
            raise ArchiveMismatchError(
                f"the archive holds segments {[p[0]['segment'] for p in parts]} of the {count}-segment prefill graph "
                f"for {parts[0][0]['size']} tokens: it is damaged. Run SAVE again."
            )
        bcg = graph_type(None)
        if not hasattr(bcg, "_segments") or not hasattr(bcg, "_break_fns"):
            raise PatchTargetError(f"BreakableCUDAGraph has no _segments and _break_fns. {SGLANG.fallback()}")
        bcg._segments = [graph for _, graph, _, _ in parts]
        bcg._break_fns = [breaks.rebuild(steps.get(f), _tensors(outputs), f) for _, _, outputs, f in parts[:-1]]
        shape = _shape_key(parts[0][0])
        backend._graphs[shape] = bcg
        backend._outputs[shape] = parts[-1][2]
