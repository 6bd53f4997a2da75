"""SGLang's part of the plugin's metadata file, ``sglang_plugin.json`` (shared/metadata.py holds the rest):
the KV-cache budget SGLang measured at SAVE and the pool it made of it, so that LOAD skips the measurement
and checks it gets the same pool; the answer SGLang's prefill-graph memory gate gave; the custom all-reduce's
registrations (allreduce.py); and, for every breakable-graph segment that an eager step follows, that step
(breaks.py). Each step is checked against the functions the plugin calls (allowed.py) when the metadata is
read, at the start of LOAD, before the GPU is touched: a step naming anything else, or passing arguments its
function does not take, is refused there."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import foundry

from ..shared import allreduce as shared_allreduce
from ..shared.errors import ArchiveMetadataError
from ..shared.metadata import ArchiveMetadata, Fingerprint, GraphEntry, MetadataFile, PhaseMark
from ..shared.outputs import tensor_count
from .allowed import step_problem
from .config import SGLANG

__all__ = [
    "FILE", "GRAPH_PARAMS_ROWS", "Fingerprint", "GraphEntry", "PhaseMark", "SglangMetadata",
    "custom_all_reduce_from_json", "read_metadata",
]  # fmt: skip

GRAPH_PARAMS_ROWS = 131072  # SGLang 0.5.17's _MAX_GRAPH_INPUTS: the rows of CustomAllReduceV2's graph_params


def custom_all_reduce_from_json(doc: Any) -> tuple[foundry.PeerRegistration, ...] | None:
    """The ``custom_all_reduce`` entry (allreduce.py), checked against ``graph_params``' rows, from row 0."""
    return shared_allreduce.from_json(doc, slots=GRAPH_PARAMS_ROWS, first_free=0)


@dataclass(frozen=True)
class SglangMetadata(ArchiveMetadata):
    available_bytes: int = field(kw_only=True)  # KVCacheConfigurator._profile_available_bytes at SAVE
    max_total_num_tokens: int = field(kw_only=True)  # the KV pool SGLang made of it
    max_running_requests: int = field(kw_only=True)
    prefill_gate_skip: bool | None = field(default=None, kw_only=True)  # None: SGLang did not ask
    # graph file -> the eager step that follows that segment of a breakable graph (breaks.py)
    breaks: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    # the custom all-reduce's rows of graph_params SAVE's graphs read (allreduce.py); None: none ran
    custom_all_reduce: tuple[foundry.PeerRegistration, ...] | None = field(default=None, kw_only=True)

    def engine_json(self) -> dict[str, Any]:
        return {
            "memory_pool": {
                "available_bytes": self.available_bytes,
                "max_total_num_tokens": self.max_total_num_tokens,
                "max_running_requests": self.max_running_requests,
            },
            "prefill_gate": None if self.prefill_gate_skip is None else {"skip": self.prefill_gate_skip},
            "breaks": dict(self.breaks),
            "custom_all_reduce": shared_allreduce.to_json(self.custom_all_reduce),
        }

    def check(self, source: str) -> None:
        """Every eager step follows a graph the metadata lists, and is one SAVE writes (allowed.py) over the
        tensors that graph outputs: checked before anything is imported or called."""
        super().check(source)
        outputs = {g.json: g.outputs for g in self.graphs}
        for name, step in self.breaks.items():
            problem: str | None
            if name not in outputs:
                problem = "follows a graph the metadata does not list"
            else:
                problem = step_problem(step, tensor_count(outputs[name]))
            if problem:
                raise ArchiveMetadataError(
                    f"{source}: the eager step after {name!r:.120} {problem}: the metadata was edited or damaged, "
                    "and LOAD calls nothing else. Run SAVE again."
                )

    @classmethod
    def engine_fields(cls, doc: Mapping[str, Any]) -> dict[str, Any]:
        pool = doc["memory_pool"]
        gate = doc["prefill_gate"]
        breaks = doc["breaks"]
        if not isinstance(breaks, dict):
            raise ValueError("breaks is not a JSON object")
        return {
            "available_bytes": int(pool["available_bytes"]),
            "max_total_num_tokens": int(pool["max_total_num_tokens"]),
            "max_running_requests": int(pool["max_running_requests"]),
            "prefill_gate_skip": None if gate is None else bool(gate["skip"]),
            "breaks": breaks,
            # absent from archives saved before SGLang's custom all-reduce was taken: none ran there
            "custom_all_reduce": custom_all_reduce_from_json(doc.get("custom_all_reduce")),
        }


FILE = MetadataFile(SGLANG, SglangMetadata)
read_metadata = FILE.read
