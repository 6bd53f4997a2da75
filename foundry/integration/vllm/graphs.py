"""Where each vLLM model runner keeps its decode graphs, and how a loaded graph takes a captured one's place.

A runner's table maps a batch key (a plain dict, the JSON form of vLLM's descriptor) to a graph and its
output tensor. SAVE reads the table after vLLM captured; LOAD fills it with Foundry's loaded graphs, keyed
by vLLM's own descriptor objects, so that vLLM's dispatch picks them exactly as it would have picked its own.

V2 (``vllm/v1/worker/gpu/cudagraph_utils.py``, ``ModelCudaGraphManager``): ``graphs[BatchExecutionDescriptor]``
holds FULL graphs; every FULL graph writes the model's output into the one persistent ``hidden_states``
buffer, and replay returns ``hidden_states[:num_tokens]``. Inputs are the runner's persistent buffers
(``InputBuffers``, block tables, attention metadata builders' buffers, the KV cache).

V1 (``vllm/compilation/cuda_graph.py``, ``CUDAGraphWrapper`` around the model): one entry per
``BatchDescriptor``, each with its own output tensor in the graph pool; replay returns it.

Both runners keep their piecewise graphs (PIECEWISE and FULL_AND_PIECEWISE modes) in the compiled model's
piece wrappers (pieces.py); ``piece_keys`` is the batch keys each piece is captured for.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any, Protocol

from ..shared.errors import PatchTargetError, UnsupportedConfigError
from .pieces import WRAPPER_MODULE, descriptor_key

__all__ = ["BREAKABLE", "RunnerGraphs", "V1Graphs", "V2Graphs", "graphs_for", "key_text"]

BREAKABLE = (
    "VLLM_USE_BREAKABLE_CUDAGRAPH: breakable CUDA graphs are captured around eager breaks that the Foundry adapter "
    "does not save; unset it (vLLM's compiled piecewise graphs are saved), or use FOUNDRY_VLLM_MODE=off"
)

Key = dict[str, Any]
Captured = tuple[Key, Any, Any]  # (batch key, graph, output tensor)


def key_text(key: Key) -> str:
    return json.dumps(key, sort_keys=True)


class RunnerGraphs(Protocol):
    name: str
    capture_modules: tuple[str, ...]  # the modules whose torch.cuda.graph vLLM captures with

    def expected_keys(self, runner: Any) -> list[Key]:
        """The keys of the FULL graphs vLLM dispatches."""
        ...

    def piece_keys(self, runner: Any) -> list[Key]:
        """The BatchDescriptor keys each compiled piece is captured for (none without piecewise graphs)."""
        ...

    def captured(self, runner: Any) -> list[Captured]: ...
    def install(self, runner: Any, loaded: Sequence[Captured]) -> None: ...


def _enum_name(value: Any) -> Any:
    return getattr(value, "name", value)


class V2Graphs:
    name = "v2"
    capture_modules: tuple[str, ...] = ("vllm.v1.worker.gpu.cudagraph_utils", WRAPPER_MODULE)

    @staticmethod
    def key(desc: Any) -> Key:
        return {
            "cg_mode": _enum_name(desc.cg_mode),
            "num_tokens": desc.num_tokens,
            "num_reqs": desc.num_reqs,
            "uniform_token_count": desc.uniform_token_count,
            "num_active_loras": desc.num_active_loras,
        }

    @staticmethod
    def _manager(runner: Any) -> Any:
        manager = getattr(runner, "cudagraph_manager", None)
        if manager is None or not hasattr(manager, "graphs") or not hasattr(manager, "_capture_descs"):
            raise PatchTargetError(
                "the V2 model runner has no cudagraph_manager with graphs and _capture_descs at capture time (vLLM "
                "0.26.0 creates it in initialize_kv_cache). Install vLLM 0.26.0, or run with FOUNDRY_VLLM_MODE=off."
            )
        if getattr(manager, "use_aux_hidden_state_outputs", False) or not getattr(manager, "is_last_pp_rank", True):
            raise UnsupportedConfigError(
                "this V2 runner's graphs have auxiliary or intermediate outputs (speculative decoding or pipeline "
                "parallelism), which the Foundry adapter does not save; turn those off or use FOUNDRY_VLLM_MODE=off"
            )
        if getattr(manager, "use_breakable_cg", False):
            raise UnsupportedConfigError(BREAKABLE)
        return manager

    def _descs(self, runner: Any, mode: str = "FULL") -> list[Any]:
        manager = self._manager(runner)
        return [d for m, descs in manager._capture_descs.items() if _enum_name(m) == mode for d in descs]

    def expected_keys(self, runner: Any) -> list[Key]:
        return [self.key(d) for d in self._descs(runner)]

    def piece_keys(self, runner: Any) -> list[Key]:
        # The descriptor V2's capture and execute_model put in the forward context for a PIECEWISE batch.
        descriptor = sys.modules["vllm.forward_context"].BatchDescriptor
        has_lora = getattr(runner, "lora_config", None) is not None
        return [
            descriptor_key(descriptor(num_tokens=d.num_tokens, has_lora=has_lora, num_active_loras=d.num_active_loras))
            for d in self._descs(runner, "PIECEWISE")
        ]

    def captured(self, runner: Any) -> list[Captured]:
        manager = self._manager(runner)
        return [(self.key(desc), graph, manager.hidden_states) for desc, graph in manager.graphs.items()]

    def install(self, runner: Any, loaded: Sequence[Captured]) -> None:
        manager = self._manager(runner)
        by_key = {key_text(self.key(d)): d for d in self._descs(runner)}
        for key, graph, outputs in loaded:
            manager.graphs[by_key[key_text(key)]] = graph
            manager.hidden_states = outputs
        manager._graphs_captured = True


class V1Graphs:
    name = "v1"
    capture_modules: tuple[str, ...] = (WRAPPER_MODULE,)

    @staticmethod
    def key(desc: Any) -> Key:
        return dataclasses.asdict(desc)

    @staticmethod
    def _wrapper(runner: Any) -> Any:
        wrapper = getattr(runner, "model", None)
        if type(wrapper).__name__ == "BreakableCUDAGraphWrapper":
            raise UnsupportedConfigError(BREAKABLE)
        if not hasattr(wrapper, "concrete_cudagraph_entries"):
            raise UnsupportedConfigError(
                "the V1 model runner dispatches FULL graphs but its model is not wrapped in CUDAGraphWrapper "
                "(micro-batching wraps it in UBatchWrapper), which the Foundry adapter does not save: turn "
                "micro-batching off, or use FOUNDRY_VLLM_MODE=off."
            )
        return wrapper

    @staticmethod
    def _descs(runner: Any, mode: str = "FULL") -> list[Any]:
        return [d for m, descs in runner.cudagraph_dispatcher.get_capture_descs() if _enum_name(m) == mode
                for d in descs]  # fmt: skip

    def expected_keys(self, runner: Any) -> list[Key]:
        return [self.key(d) for d in self._descs(runner)]

    def piece_keys(self, runner: Any) -> list[Key]:
        return [descriptor_key(d) for d in self._descs(runner, "PIECEWISE")]

    def captured(self, runner: Any) -> list[Captured]:
        if not self._descs(runner):
            return []
        entries = self._wrapper(runner).concrete_cudagraph_entries
        return [(self.key(bd), e.cudagraph, e.output) for bd, e in entries.items() if e.cudagraph is not None]

    def install(self, runner: Any, loaded: Sequence[Captured]) -> None:
        if loaded:
            wrapper = self._wrapper(runner)
            entry_type = sys.modules[WRAPPER_MODULE].CUDAGraphEntry
            by_key = {key_text(self.key(d)): d for d in self._descs(runner)}
            for key, graph, outputs in loaded:
                desc = by_key[key_text(key)]
                wrapper.concrete_cudagraph_entries[desc] = entry_type(
                    batch_descriptor=desc, cudagraph=graph, output=outputs
                )
        # What V1's capture_model does after capturing: make any capture from now on an error (a batch without a
        # loaded graph must not be captured behind Foundry's back). Its other step, locking the workspace, is
        # workspace.lock's: locking it here, before SAVE's buffers were back, left MoE models' first eager forward
        # an empty, locked workspace.
        sys.modules[type(runner).__module__].set_cudagraph_capturing_enabled(False)


def graphs_for(runner_name: str) -> RunnerGraphs:
    return V2Graphs() if runner_name == "v2" else V1Graphs()
