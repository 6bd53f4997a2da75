"""The rank this process is in a multi-process job, as the program declares it (``foundry.set_rank``).

Foundry does not ask torch.distributed or NCCL: the program knows its rank and world size before it
creates a communicator, and LOAD must refuse a wrong archive before any collective, so the program
says it. The device is read from the driver at SAVE and LOAD: its name and PCI bus id are compared
(which GPU of the machine the rank ran on: its NVLink and PCIe neighbours follow from it); its UUID is
recorded for the reader but not compared, so that an archive copied to an identical machine loads.

``FOUNDRY_RANK_GPUS=alike`` compares the GPU model only, for a data-parallel replica of a tensor-parallel
group started on other GPUs of the same kind (GPUs 2 and 3 from the archive GPUs 0 and 1 saved). NCCL picks
its channels, and so its peer buffers, from the topology; where the other GPUs give it another choice, the
checks after this one refuse it (another count or size of peer mappings: ``PeerMappingError``; another
layout: ``LayoutMismatchError``). Where they give the same choice, the replica is what native gives on those
GPUs only if NCCL's reduction order is the same too, which those checks do not see: the benchmark's replica run
compares it bit for bit (identical at TP=2 on 4x H200, docs/RESULTS.md), and the setting stays the user's choice.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from foundry._state import ProcessState
from foundry.errors import RankMismatchError
from foundry.native.machine import current_device_place
from foundry.schema import RankSpec

__all__ = ["check_rank", "current_rank", "rank_here", "set_rank"]


@dataclass
class _Rank:
    lock: threading.Lock = field(default_factory=threading.Lock)
    rank: tuple[int, int] | None = None


_STATE = ProcessState("ranks.rank", _Rank)

GPUS_ENV = "FOUNDRY_RANK_GPUS"  # "same" (the default): the GPU model and PCI bus id; "alike": the model only
GPUS_CHOICES = ("same", "alike")


def set_rank(rank: int, world_size: int) -> None:
    """Declares this process rank ``rank`` of ``world_size`` (call it before saving or loading graphs, with the
    numbers torch.distributed uses). Every graph saved afterwards records it with the device, and LOAD
    refuses such a graph in a process that declared another rank or world size, or none, or runs on
    another device. SAVE refuses a graph that may read a peer's memory until the rank is declared."""
    if isinstance(rank, bool) or isinstance(world_size, bool) or not isinstance(rank, int):
        raise TypeError(f"set_rank: rank must be an int, not {type(rank).__name__}")
    if not isinstance(world_size, int) or not 0 <= rank < world_size < 2**32:
        raise ValueError(f"set_rank({rank!r}, {world_size!r}): need 0 <= rank < world_size")
    state = _STATE.get()
    with state.lock:
        state.rank = (rank, world_size)


def current_rank() -> tuple[int, int] | None:
    """(rank, world size) as ``set_rank`` declared them, or None."""
    state = _STATE.get()
    with state.lock:
        return state.rank


def rank_here() -> RankSpec | None:
    """What SAVE records: the declared rank with the current device, or None when none was declared."""
    declared = current_rank()
    if declared is None:
        return None
    name, bus, uuid = current_device_place()
    return RankSpec(declared[0], declared[1], name, bus, uuid)


def check_rank(saved: RankSpec | None, source: str) -> None:
    """Refuses a graph saved by another rank, world size or device; each rank checks its own archive, before
    any collective runs. A graph saved with no rank declared holds no peer memory (SAVE refuses peer memory
    without a rank), so it loads in any process: a data-parallel replica's, or one rank's own single-GPU graph."""
    if saved is None:
        return
    here = current_rank()
    if here is None:
        raise RankMismatchError(
            f"{source} was saved by rank {saved.rank} of {saved.world_size}; this process declared no rank. Call "
            f"foundry.set_rank({saved.rank}, {saved.world_size}) on that rank before loading (and load each rank's "
            "own archive folder)."
        )
    if (saved.rank, saved.world_size) != here:
        raise RankMismatchError(
            f"{source} was saved by rank {saved.rank} of {saved.world_size}; this process is rank {here[0]} of "
            f"{here[1]}. Load each rank's own archive folder (rank_{here[0]}) with the world size it was saved "
            "with."
        )
    choice = os.environ.get(GPUS_ENV, "same")
    if choice not in GPUS_CHOICES:
        raise RankMismatchError(
            f"{GPUS_ENV}={choice!r} is not one of {', '.join(GPUS_CHOICES)}: 'same' asks each rank for the GPU it "
            "saved on, 'alike' for a GPU of the same model (a replica of the group on other GPUs)."
        )
    name, bus, _ = current_device_place()
    if saved.device_name != name:
        raise RankMismatchError(
            f"{source} was saved by rank {saved.rank} on {saved.device_name}; this rank runs on {name}. An archive "
            "loads on the GPU model it was saved on: SAVE again on this one."
        )
    if choice == "same" and saved.pci_bus_id != bus:
        raise RankMismatchError(
            f"{source} was saved by rank {saved.rank} on {saved.device_name} at PCI bus {saved.pci_bus_id}; this "
            f"rank runs on {name} at PCI bus {bus}. Give each rank the GPU it saved on (the same "
            f"CUDA_VISIBLE_DEVICES and torch.cuda.set_device), or, for a replica of the group on other GPUs of "
            f"this model, set {GPUS_ENV}=alike (NCCL's choices are then checked through the peer mappings and the "
            "layout), or SAVE again."
        )
