"""vLLM's custom all-reduce (its default at tensor parallel on NVLink) under SAVE and LOAD: where the plugin finds
it, and the points of vLLM's start-up where shared/allreduce.py records and rewrites its registrations.

vLLM builds it in ``init_worker_distributed_environment`` (the tensor-parallel group's ``CudaCommunicator``,
``ca_comm``), before the weights, in SAVE, native and LOAD alike; its shared buffers are opened there too, so
they lie where SAVE had them. SAVE wraps its ``register_graph_buffers`` before the memory profile (the V1 runner
captures throwaway graphs there, inside the same ``graph_capture`` context, whose registrations take slots too)
and keeps what ``capture_model`` registers; LOAD writes that again after its graphs are installed."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..shared import allreduce
from ..shared.config import Mode
from . import session as sessions

__all__ = ["SWITCH", "attach", "capturing", "find", "install", "saved_field"]

SWITCH = "--disable-custom-all-reduce"  # vllm serve's flag (LLM(disable_custom_all_reduce=True))


def find() -> Any:
    """The tensor-parallel group's custom all-reduce, or None (one GPU, or vLLM made none)."""
    # Where vLLM made a communicator, it imported this module first: nothing to import here.
    parallel_state = sys.modules.get("vllm.distributed.parallel_state")
    if parallel_state is None or not parallel_state.model_parallel_is_initialized():
        return None
    communicator = getattr(parallel_state.get_tp_group(), "device_communicator", None)
    return getattr(communicator, "ca_comm", None)


def attach(s: sessions.Session, ca: Any) -> None:
    """After vLLM's distributed set-up: SAVE starts recording; LOAD refuses an archive saved with the other
    setting, before the weights."""
    if s.config.mode is Mode.SAVE:
        s.state.allreduce = allreduce.record(ca, s.api) if allreduce.active(ca) else None
    elif s.config.mode is Mode.LOAD:
        saved = s.require_saved().custom_all_reduce
        allreduce.check_same(saved, ca, SWITCH)
        allreduce.check_inputs(saved or (), s.config.region_base, s.config.region_size)


@contextmanager
def capturing(s: sessions.Session) -> Iterator[None]:
    """SAVE: the registrations made inside are the saved graphs'."""
    recorder = s.state.allreduce
    if recorder is not None:
        recorder.keeping = True
    try:
        yield
    finally:
        if recorder is not None:
            recorder.keeping = False


def saved_field(s: sessions.Session) -> Any:
    """SAVE: what the archive's engine document holds (None: no custom all-reduce ran)."""
    recorder = s.state.allreduce
    return None if recorder is None else tuple(recorder.kept)


def install(s: sessions.Session, ca: Any) -> int:
    """LOAD, the graphs installed and none replayed yet: the saved registrations written again; the slots written."""
    registrations = s.require_saved().custom_all_reduce
    if not registrations:
        return 0
    return allreduce.rewrite(ca, registrations, s.api)
