"""An engine's custom all-reduce (vLLM's ``CustomAllreduce``, SGLang's ``CustomAllReduceV2``: sglang/allreduce.py)
across SAVE and LOAD.

Its captured kernels take the peers' copies of their input from a slot of ``rank_data``, device memory that
``register_graph_buffers`` fills at the exit of ``CustomAllreduce.capture()`` with pointers opened from the peers'
IPC handles (docs/DESIGN.md, "Many GPUs: tensor parallel in the plugins"). LOAD captures nothing, so nothing fills
those slots: SAVE records every registration the engine makes (``foundry.PeerRegistrations``), keeps the ones made
while the saved graphs were captured (the V1 runner's memory profile registers graphs it throws away, whose slots
no saved graph reads), and LOAD writes the kept ones again once its graphs are installed and before their first
replay (``foundry.rewrite_peer_registrations``), exchanging handles over the all-reduce's own CPU group, every rank
in the same order.

What the archive holds (the engine document's ``custom_all_reduce``): ``null`` where SAVE ran without a custom
all-reduce, else ``{"registrations": [{"first_slot", "inputs"}, ...]}``. SAVE and LOAD must agree on whether one
runs: its graphs differ from NCCL's, and the eager all-reduces between them too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import foundry

from .backend import FoundryApi
from .errors import ArchiveMetadataError, ArchiveMismatchError

__all__ = [
    "SLOTS", "Recorder", "active", "check_inputs", "check_same", "from_json", "keeping", "record", "rewrite", "to_json",
]  # fmt: skip

SLOTS = (8 << 20) // 64  # vLLM's rank_data: 8 MiB of RankData slots, 8 pointers each


def active(ca: Any) -> bool:
    """Whether ``ca`` is a custom all-reduce the engine uses (built, and not switched off by the engine itself:
    one rank, an unsupported world size or no peer access)."""
    return ca is not None and not getattr(ca, "disabled", True)


@dataclass
class Recorder:
    """SAVE's record of one process's custom all-reduce: every registration, and the ones the saved graphs use."""

    records: Any  # foundry.PeerRegistrations, or a test's stand-in
    keeping: bool = False  # set while the graphs SAVE writes are captured
    kept: list[foundry.PeerRegistration] = field(default_factory=list)

    def register(self, original: Callable[[], None], count: int, first: int | None = None) -> None:
        """Runs the engine's registration of ``count`` captured inputs (``original``), read back and recorded
        (``first``: the slot it writes first, where the engine counts its slots itself); with none captured the
        engine registers nothing and takes no slot."""
        if not count:
            original()
            return
        registration = self.records.around(original, count, first=first)
        if self.keeping:
            self.kept.append(registration)


def record(ca: Any, api: FoundryApi) -> Recorder:
    """Wraps ``ca.register_graph_buffers`` (on the instance) so that each registration is read back and recorded
    (``api.peer_registrations``); returns the record. The number of inputs comes from the kernel library's
    ``get_graph_buffer_ipc_meta``, the ``ops`` of the module that defines ``ca``'s class."""
    ops = getattr(sys.modules[type(ca).__module__], "ops", None)
    if ops is None or not hasattr(ops, "get_graph_buffer_ipc_meta"):
        raise foundry.PeerMemoryError(
            f"{type(ca).__module__}.{type(ca).__name__}: its kernel library has no get_graph_buffer_ipc_meta, so "
            "Foundry cannot read what it registers. Start the engine with --disable-custom-all-reduce."
        )
    rec = Recorder(api.peer_registrations(int(ca.rank), int(ca.world_size), int(ca.rank_data.data_ptr())))
    original: Callable[[], None] = ca.register_graph_buffers

    def register_graph_buffers() -> None:
        _, offsets = ops.get_graph_buffer_ipc_meta(ca._ptr)
        rec.register(original, len(offsets))

    ca.register_graph_buffers = register_graph_buffers
    return rec


@contextmanager
def keeping(recorder: Recorder | None) -> Iterator[None]:
    """SAVE: the registrations made inside are the saved graphs' (``recorder``: None where none runs)."""
    if recorder is not None:
        recorder.keeping = True
    try:
        yield
    finally:
        if recorder is not None:
            recorder.keeping = False


def rewrite(
    ca: Any,
    registrations: Sequence[foundry.PeerRegistration],
    api: FoundryApi,
    exchange: Callable[[Any], list[Any]] | None = None,
    table: Any = None,
) -> int:
    """LOAD: writes SAVE's registrations into the engine's table (``ca.rank_data`` unless ``table``, a tensor of
    one row of pointers a slot) again, the peers' inputs opened here; returns the slots written. Every rank of
    ``ca``'s group calls it at the same point (``exchange``: over ``ca.group`` unless given)."""
    exchange = exchange or _exchange(ca.group)
    rank, world = int(ca.rank), int(ca.world_size)
    if table is None:  # vLLM's RankData slots, the library's default width
        return api.rewrite_peer_registrations(registrations, rank, world, int(ca.rank_data.data_ptr()), exchange)
    return api.rewrite_peer_registrations(
        registrations, rank, world, int(table.data_ptr()), exchange, width=int(table.shape[1])
    )


def _exchange(group: Any) -> Callable[[Any], list[Any]]:
    """Every rank's value, by rank, over the all-reduce's CPU (gloo) group: one broadcast from each rank in turn,
    as vLLM's ``register_graph_buffers`` exchanges its handles (``all_gather_object`` fails on gloo in inference
    mode). torch is imported at the first exchange."""

    def exchange(value: Any) -> list[Any]:
        import torch.distributed as dist

        ranks = sorted(dist.get_process_group_ranks(group))
        data: list[list[Any]] = [[None] for _ in ranks]
        data[ranks.index(dist.get_rank())] = [value]
        for i, source in enumerate(ranks):
            dist.broadcast_object_list(data[i], src=source, group=group, device="cpu")
        return [d[0] for d in data]

    return exchange


def to_json(registrations: Sequence[foundry.PeerRegistration] | None) -> dict[str, Any] | None:
    return None if registrations is None else {"registrations": [r.to_json() for r in registrations]}


def from_json(doc: Any, slots: int = SLOTS, first_free: int = 1) -> tuple[foundry.PeerRegistration, ...] | None:
    """The document's registrations; None where SAVE ran without a custom all-reduce (or before it was saved).
    Each must be a first slot from ``first_free`` on (vLLM's slot 0 is ``register_buffer``'s) and inputs that are
    addresses, the slots of all of them inside the engine's table of ``slots`` and none written twice."""
    if doc is None:
        return None
    try:
        regs = tuple(foundry.PeerRegistration.from_json(r) for r in doc["registrations"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ArchiveMetadataError(
            f"the archive's custom_all_reduce entry is malformed ({type(exc).__name__}: {exc}): save again"
        ) from exc
    taken = first_free
    for reg in regs:
        if not reg.inputs:
            raise ArchiveMetadataError(
                "the archive's custom_all_reduce entry holds a registration that registers no input: save again"
            )
        if reg.first_slot < taken or reg.first_slot + len(reg.inputs) > slots:
            raise ArchiveMetadataError(
                f"the archive's custom_all_reduce entry writes slots {reg.first_slot} to "
                f"{reg.first_slot + len(reg.inputs) - 1}, which are not after the ones before it inside the "
                f"{slots} slots of the engine's table: save again"
            )
        if any(not 0 < a < 1 << 64 for a in reg.inputs):
            raise ArchiveMetadataError("the archive's custom_all_reduce entry holds an input that is no address")
        taken = reg.first_slot + len(reg.inputs)
    return regs


def check_inputs(registrations: Sequence[foundry.PeerRegistration], base: int, size: int) -> None:
    """LOAD: every registered input lies in the region (SAVE's graphs' memory, which LOAD restores there)."""
    outside = [a for reg in registrations for a in reg.inputs if not base <= a < base + size]
    if outside:
        raise ArchiveMetadataError(
            f"the archive's custom_all_reduce entry names {len(outside)} inputs outside the region "
            f"[{base:#x}, {base + size:#x}) (the first {outside[0]:#x}): save again"
        )


def check_same(saved: Sequence[foundry.PeerRegistration] | None, ca: Any, switch: str) -> None:
    """LOAD, before the GPU holds anything of the archive: refuses an archive saved with the custom all-reduce on
    where it is off here, or the other way round, naming ``switch`` (the engine's flag that turns it off)."""
    here = active(ca)
    if (saved is not None) == here:
        return
    said = "on" if saved is not None else "off"
    raise ArchiveMismatchError(
        f"SAVE ran with the engine's custom all-reduce {said}, and it is {'on' if here else 'off'} here: the saved "
        f"graphs all-reduce otherwise. Start with SAVE's setting ({switch} {'absent' if said == 'on' else 'given'}), "
        "or run SAVE again."
    )
