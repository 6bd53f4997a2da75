"""vLLM's piecewise CUDA graphs: one graph per compiled piece of the model and per batch size.

With ``cudagraph_mode`` PIECEWISE or FULL_AND_PIECEWISE (vLLM's default), ``torch.compile`` splits the model
at its attention ops (``compilation/backends.py``) and wraps each piece between them in a
``CUDAGraphWrapper`` of runtime mode PIECEWISE (``compilation/cuda_graph.py``). When vLLM runs a batch in
PIECEWISE mode, each wrapper replays its graph for the batch's ``BatchDescriptor`` and returns the tensors
the piece wrote (at addresses in vLLM's graph pool); attention runs eagerly between the pieces, reading and
writing those same addresses. So a piece's graph and its output tensors, at SAVE's addresses, are all LOAD
must give each wrapper: the compiled code around them is vLLM's own, loaded from its compile cache.

A piece is named by its compiled module's tag (``VllmBackend.prefix``) and its index among that module's
pieces, which vLLM assigns in graph order both when it compiles and when it loads from its cache. Wrappers
are found through ``CUDAGraphWrapper._all_instances``; LOAD also fills a wrapper made after the graphs are
ready (vLLM compiles lazily, possibly only at the first request), through ``on_wrapper_created``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..shared.errors import ArchiveMismatchError, PatchTargetError, UnsupportedConfigError

__all__ = [
    "WRAPPER_MODULE",
    "PieceId",
    "captured_pieces",
    "descriptor_key",
    "install_pieces",
    "piece_of",
    "piece_wrappers",
]

WRAPPER_MODULE = "vllm.compilation.cuda_graph"
Key = dict[str, Any]


@dataclass(frozen=True, order=True)
class PieceId:
    """One compiled piece: the compiled module's tag, the piece's index and how many pieces it has."""

    model: str
    index: int
    count: int

    def key(self) -> Key:
        return {"model": self.model, "piece": self.index, "pieces": self.count}

    @classmethod
    def from_key(cls, key: Key) -> PieceId:
        return cls(str(key["model"]), int(key["piece"]), int(key["pieces"]))

    def __str__(self) -> str:
        return f"{self.model or 'model'} piece {self.index + 1}/{self.count}"


def _name(value: Any) -> Any:
    return getattr(value, "name", value)


def descriptor_key(desc: Any) -> Key:
    """vLLM's ``BatchDescriptor`` (a frozen dataclass of scalars) as a JSON-able dict."""
    return dataclasses.asdict(desc)


def piece_of(wrapper: Any) -> PieceId | None:
    """The piece a PIECEWISE wrapper runs, or None for a wrapper of another mode (V1's FULL wrapper)."""
    if _name(getattr(wrapper, "runtime_mode", None)) != "PIECEWISE":
        return None
    backend = getattr(wrapper, "runnable", None)
    index = getattr(backend, "piecewise_compile_index", None)
    count = getattr(backend, "total_piecewise_compiles", None)
    if index is None or count is None:
        raise PatchTargetError(
            f"a PIECEWISE CUDAGraphWrapper runs {type(backend).__name__}, not vLLM 0.26's PiecewiseBackend "
            "(piecewise_compile_index, total_piecewise_compiles): install vLLM 0.26.0, or run with "
            "FOUNDRY_VLLM_MODE=off"
        )
    prefix = getattr(getattr(backend, "vllm_backend", None), "prefix", "")
    return PieceId(str(prefix or ""), int(index), int(count))


def piece_wrappers() -> dict[PieceId, Any]:
    """Every live PIECEWISE wrapper by piece. Two wrappers of one piece (a recompiled model keeps its old
    pieces alive) are refused: which of them vLLM runs is not knowable here."""
    module = sys.modules.get(WRAPPER_MODULE)
    wrapper_type = getattr(module, "CUDAGraphWrapper", None)
    instances = getattr(wrapper_type, "_all_instances", None)
    if instances is None:
        raise PatchTargetError(
            f"{WRAPPER_MODULE}.CUDAGraphWrapper._all_instances is missing: this is not the vLLM the Foundry "
            "adapter was written for (0.26.0). Install vLLM 0.26.0, or run with FOUNDRY_VLLM_MODE=off."
        )
    found: dict[PieceId, Any] = {}
    for wrapper in list(instances):
        piece = piece_of(wrapper)
        if piece is None:
            continue
        if piece in found:
            raise UnsupportedConfigError(
                f"two compiled copies of {piece} are alive (torch.compile compiled the model twice, e.g. after a "
                "guard failure): Foundry cannot tell which one vLLM runs. Start vLLM with one compiled model "
                "(no dynamic-shape recompiles), or use FOUNDRY_VLLM_MODE=off."
            )
        found[piece] = wrapper
    return found


def captured_pieces(expected: Sequence[Key]) -> list[tuple[PieceId, Key, Any, Any]]:
    """(piece, batch key, graph, outputs) of every piecewise graph vLLM captured, in piece then batch order.
    Every piece must hold exactly the ``expected`` batch keys: those are the ones vLLM dispatches."""
    want = sorted(_text(k) for k in expected)
    out = []
    wrappers = piece_wrappers()
    if want and not wrappers:
        raise UnsupportedConfigError(
            "vLLM dispatches piecewise CUDA graphs, but no compiled piece holds any: the model was not compiled with "
            "vLLM's piecewise backend (compilation mode VLLM_COMPILE). Report this with the vLLM settings."
        )
    for piece, wrapper in sorted(wrappers.items()):
        entries = {_text(descriptor_key(d)): (d, e) for d, e in wrapper.concrete_cudagraph_entries.items()
                   if e.cudagraph is not None}  # fmt: skip
        if sorted(entries) != want:
            missing = sorted(set(want) - set(entries))[:2]
            extra = sorted(set(entries) - set(want))[:2]
            raise UnsupportedConfigError(
                f"{piece} holds graphs for {len(entries)} batch keys, vLLM dispatches {len(want)} (missing {missing}, "
                f"not dispatched {extra}): the adapter saves exactly the graphs vLLM replays. Report this with the "
                "vLLM settings."
            )
        for text in want:
            desc, entry = entries[text]
            out.append((piece, descriptor_key(desc), entry.cudagraph, entry.output))
    return out


def install_pieces(
    wrappers: dict[PieceId, Any], loaded: Iterable[tuple[PieceId, Key, Any, Any]], expected_pieces: Iterable[PieceId]
) -> None:
    """Gives each wrapper its loaded graphs, keyed by vLLM's own BatchDescriptor. A wrapper of a piece the
    archive does not hold, or of another piece count, is refused: its graphs would be another model's."""
    known = set(expected_pieces)
    stray = sorted(set(wrappers) - known)
    if stray:
        raise ArchiveMismatchError(
            f"this vLLM compiled {stray[0]}, which the archive has no graphs for (it holds "
            f"{len(known)} pieces): the model or its compilation (splitting ops, compile settings) differ from SAVE. "
            "Start with SAVE's settings, or run SAVE again."
        )
    descriptor_type = sys.modules["vllm.forward_context"].BatchDescriptor
    entry_type = sys.modules[WRAPPER_MODULE].CUDAGraphEntry
    for piece, key, graph, outputs in loaded:
        wrapper = wrappers.get(piece)
        if wrapper is None:
            continue
        desc = descriptor_type(**key)
        wrapper.concrete_cudagraph_entries[desc] = entry_type(batch_descriptor=desc, cudagraph=graph, output=outputs)


def _text(key: Key) -> str:
    return repr(sorted(key.items()))
