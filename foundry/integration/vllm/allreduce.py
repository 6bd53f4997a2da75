"""vLLM's custom all-reduce (its default at tensor parallel on NVLink) under SAVE and LOAD: where the plugin finds
it, and the points of vLLM's start-up where shared/allreduce.py records and rewrites its registrations.

vLLM builds it in ``init_worker_distributed_environment`` (the tensor-parallel group's ``CudaCommunicator``,
``ca_comm``), before the weights, in SAVE, native and LOAD alike; its shared buffers are opened there too, so
they lie where SAVE had them. SAVE wraps its ``register_graph_buffers`` before the memory profile (the V1 runner
captures throwaway graphs there, inside the same ``graph_capture`` context, whose registrations take slots too)
and keeps what ``capture_model`` registers; LOAD writes that again after its graphs are installed."""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from typing import Any

from ..shared import allreduce
from ..shared.config import Mode
from ..shared.errors import UnsupportedConfigError
from . import session as sessions

__all__ = ["SWITCH", "attach", "capturing", "check_symmetric_memory", "communicator", "find", "install", "saved_field"]

SWITCH = "--disable-custom-all-reduce"  # vllm serve's flag (LLM(disable_custom_all_reduce=True))


def communicator() -> Any:
    """The tensor-parallel group's device communicator, or None (one GPU, or before vLLM's set-up)."""
    # Where vLLM made a communicator, it imported this module first: nothing to import here.
    parallel_state = sys.modules.get("vllm.distributed.parallel_state")
    if parallel_state is None or not parallel_state.model_parallel_is_initialized():
        return None
    return getattr(parallel_state.get_tp_group(), "device_communicator", None)


def find() -> Any:
    """The tensor-parallel group's custom all-reduce, or None (one GPU, or vLLM made none)."""
    return getattr(communicator(), "ca_comm", None)


def check_symmetric_memory(comm: Any) -> None:
    """Refuses vLLM's all-reduce over torch symmetric memory where vLLM made one it uses: its kernels read peer
    windows and multicast objects nothing restores. With ``VLLM_ALLREDUCE_USE_SYMM_MEM`` at its default vLLM
    makes the communicator (its buffer and the peers' mappings, made in SAVE, native and LOAD alike) and switches
    it off without multicast, which the NCCL settings turn off (shared/ranks.py): then nothing all-reduces there."""
    symm = getattr(comm, "symm_mem_comm", None)
    if symm is not None and not getattr(symm, "disabled", True):
        raise UnsupportedConfigError(
            "tensor parallel with vLLM's all-reduce over torch symmetric memory in use (VLLM_ALLREDUCE_USE_SYMM_MEM "
            "on, and multicast was available to it): its peer windows are not restored. Set "
            "VLLM_ALLREDUCE_USE_SYMM_MEM=0, or keep TORCH_SYMM_MEM_DISABLE_MULTICAST=1."
        )


def attach(s: sessions.Session, ca: Any) -> None:
    """After vLLM's distributed set-up: SAVE starts recording; LOAD refuses an archive saved with the other
    setting, before the weights."""
    check_symmetric_memory(communicator())
    if s.config.mode is Mode.SAVE:
        s.state.allreduce = allreduce.record(ca, s.api) if allreduce.active(ca) else None
    elif s.config.mode is Mode.LOAD:
        saved = s.require_saved().custom_all_reduce
        allreduce.check_same(saved, ca, SWITCH)
        allreduce.check_inputs(saved or (), s.config.region_base, s.config.region_size)


def capturing(s: sessions.Session) -> AbstractContextManager[None]:
    """SAVE: the registrations made inside are the saved graphs'."""
    return allreduce.keeping(s.state.allreduce)


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
