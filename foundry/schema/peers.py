"""What a graph saved by one rank of a multi-process job records of its place in the job: the peers'
memory mapped into its region, and the rank it was (docs/FORMAT.md, "peers" and "rank").

Both are data LOAD compares with the process it runs in; neither selects code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .jsonfields import I32, U32, U64, At, field_int, field_str, get_list, get_obj

__all__ = ["PeerMapping", "RankSpec", "peers_from_json"]


@dataclass(frozen=True, slots=True)
class PeerMapping:
    """Memory of another process (imported from a shareable handle) mapped at SAVE inside a reservation
    carved from the region: ``offset`` from the region base, ``size`` bytes. ``handle_type`` is the
    ``CUmemAllocationHandleType`` it was imported with (1: a POSIX file descriptor, NCCL's default; 8:
    a fabric handle) and ``device`` the device holding it as the driver reported (-1: not reported).
    The driver does not name the exporting process; these are what it does tell."""

    offset: int
    size: int
    handle_type: int
    device: int

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "size": self.size, "handle_type": self.handle_type, "device": self.device}

    @classmethod
    def from_json(cls, value: Any, at: At) -> PeerMapping:
        obj = get_obj(value, at)
        mapping = cls(
            offset=field_int(obj, "offset", at),
            size=field_int(obj, "size", at),
            handle_type=field_int(obj, "handle_type", at, U32),
            device=field_int(obj, "device", at, (-1, I32[1])),
        )
        if mapping.size == 0 or mapping.offset + mapping.size > U64[1]:
            at.key("size").fail(f"{mapping.size} at offset {mapping.offset} is empty or runs past 2**64")
        return mapping


def peers_from_json(value: Any, at: At, region_size: int) -> tuple[PeerMapping, ...]:
    """The ``peers`` list: sorted by offset, not overlapping, inside the region of ``region_size`` bytes."""
    peers = tuple(PeerMapping.from_json(v, at.index(i)) for i, v in enumerate(get_list(value, at)))
    end = 0
    for i, peer in enumerate(peers):
        if peer.offset < end:
            at.index(i).fail("peer mappings must be sorted by offset and must not overlap")
        end = peer.offset + peer.size
        if end > region_size:
            at.index(i).fail(f"ends at offset {end:#x}, past the region's {region_size} bytes")
    return peers


@dataclass(frozen=True, slots=True)
class RankSpec:
    """The rank that saved a graph (``foundry.set_rank``): its number, the job's world size, and the
    device it ran on (name, PCI bus id, UUID). LOAD compares all but the UUID (see docs/DESIGN.md,
    "Many GPUs: peer memory")."""

    rank: int
    world_size: int
    device_name: str
    pci_bus_id: str
    uuid: str

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "device_name": self.device_name,
            "pci_bus_id": self.pci_bus_id,
            "uuid": self.uuid,
        }

    @classmethod
    def from_json(cls, value: Any, at: At) -> RankSpec:
        obj = get_obj(value, at)
        spec = cls(
            rank=field_int(obj, "rank", at, U32),
            world_size=field_int(obj, "world_size", at, U32),
            device_name=field_str(obj, "device_name", at),
            pci_bus_id=field_str(obj, "pci_bus_id", at),
            uuid=field_str(obj, "uuid", at),
        )
        if spec.rank >= spec.world_size:
            at.key("rank").fail(f"{spec.rank} is not below the world size {spec.world_size}")
        return spec
