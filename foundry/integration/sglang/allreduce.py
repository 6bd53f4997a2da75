"""SGLang's custom all-reduce at tensor parallel on CUDA (``CustomAllReduceV2``, its default there) under SAVE and
LOAD: where the plugin finds it, and the points of SGLang's start-up where shared/allreduce.py records and rewrites
its registrations.

SGLang builds it with the tensor-parallel group (``GroupCoordinator.ca_comm``) in ``init_torch_distributed``,
before the weights, in SAVE, native and LOAD alike: its workspaces (torch symmetric memory, the peers' mapped by
the rendezvous in the region as NCCL's are) and its device-side table ``graph_params`` lie where SAVE had them.
A captured all-reduce takes its input's copies on the other ranks from one row of ``graph_params`` (one pointer a
rank), which ``_register_graph_inputs`` fills at the exit of ``capture()``, from row ``_graph_counter`` on, with
the peers' inputs mapped into this process. SAVE wraps that method on the instance and reads every row back
(``foundry.PeerRegistrations`` with a row's width); LOAD, once every runner has its graphs and before the first
replay (the prefill warm-up's included), writes the rows again with the peers' inputs opened here and sets
``_graph_counter`` past them, as SGLang's capture left it.

Measured on two H200s (Qwen3-0.6B shape, ``launch_server --tp 2``; docs/DESIGN.md): SAVE and LOAD give
native's tokens and top-20 logprobs at batch 1, 8 and 64. SGLang's legacy ``CustomAllreduce``
(``SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2=0``, or where V2 cannot run) is refused by name."""

from __future__ import annotations

import sys
from typing import Any

from ..shared import allreduce
from ..shared.backend import FoundryApi
from ..shared.config import Mode
from ..shared.errors import UnsupportedConfigError
from . import session as sessions

__all__ = ["SWITCH", "attach", "find", "install", "record", "saved_field"]

SWITCH = "--disable-custom-all-reduce"


def find() -> Any:
    """The tensor-parallel group's custom all-reduce, or None (one GPU, switched off, or before SGLang's set-up).
    Only that group makes one (SGLang's other groups pass ``use_custom_allreduce=False``)."""
    parallel_state = sys.modules.get("sglang.srt.distributed.parallel_state")
    if parallel_state is None or not parallel_state.model_parallel_is_initialized():
        return None
    return getattr(parallel_state.get_tp_group(), "ca_comm", None)


def record(ca: Any, api: FoundryApi) -> allreduce.Recorder:
    """Wraps ``ca._register_graph_inputs`` (on the instance) so that each registration's rows are read back and
    recorded; returns the record. Refuses, by name, a custom all-reduce of another shape (the legacy one)."""
    table = getattr(ca, "graph_params", None)
    if table is None or not hasattr(ca, "_register_graph_inputs") or not hasattr(ca, "_graph_counter"):
        raise UnsupportedConfigError(
            f"tensor parallel with SGLang's {type(ca).__name__} (its legacy custom all-reduce: "
            "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2=0, or CustomAllReduceV2 could not run here), whose peer table "
            f"Foundry does not rebuild: start SGLang with {SWITCH}, or with its CustomAllReduceV2"
        )
    records = api.peer_registrations(int(ca.rank), int(ca.world_size), int(table.data_ptr()), int(table.shape[1]))
    records.next_slot = 0  # no row is taken at start-up: SGLang fills graph_params from row 0
    rec = allreduce.Recorder(records)
    original = ca._register_graph_inputs

    def register_graph_inputs() -> None:
        rec.register(original, len(ca._graph_inputs), first=int(ca._graph_counter))

    ca._register_graph_inputs = register_graph_inputs
    return rec


def attach(s: sessions.Session, ca: Any) -> None:
    """After SGLang's distributed set-up: SAVE starts recording; LOAD refuses an archive saved with the other
    setting, before the weights."""
    if s.config.mode is Mode.SAVE:
        s.state.allreduce = record(ca, s.api) if allreduce.active(ca) else None
    elif s.config.mode is Mode.LOAD:
        saved = s.require_saved().custom_all_reduce
        allreduce.check_same(saved, ca, SWITCH)
        allreduce.check_inputs(saved or (), s.config.region_base, s.config.region_size)


def saved_field(s: sessions.Session) -> Any:
    """SAVE: what the archive's engine document holds (None: no custom all-reduce ran)."""
    recorder = s.state.allreduce
    return None if recorder is None else tuple(recorder.kept)


def install(s: sessions.Session, ca: Any) -> int:
    """LOAD, every runner's graphs installed and none replayed yet: the saved rows written again; the rows
    written."""
    registrations = s.require_saved().custom_all_reduce
    if not registrations:
        return 0
    written = allreduce.rewrite(ca, registrations, s.api, table=ca.graph_params)
    ca._graph_counter = max(r.first_slot + len(r.inputs) for r in registrations)
    return written
