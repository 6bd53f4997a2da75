"""One rank's process as the engines' custom all-reduce sees it (foundry.ranks' ``Driver``): device memory as a
sparse dict of 8-byte words, and the other processes' allocations it opened by IPC handle, each carved after the
last; and vLLM's C++ registration over such processes (``vllm_register``), which tests/cpu/test_custom_ar.py and
the fake engines' custom all-reduces (tests/support/fakevllm_allreduce.py, fakesglang_allreduce.py) run."""

from __future__ import annotations

from dataclasses import dataclass, field

from foundry.ranks.registrations import MAX_RANKS, slot_bytes

ALLOC = 0x20_0000  # each rank's graph inputs lie in allocations of this size


@dataclass
class PeerMemory:
    """One rank's process: device memory (a sparse dict of 8-byte words), its mappings of other processes'
    allocations, and its own allocations' base (the region's layout is the same on every rank)."""

    rank: int
    memory: dict[int, bytes] = field(default_factory=dict)
    maps: list[tuple[int, int]] = field(default_factory=list)
    next_map: int = 0x6000_4000_0000  # where the next opened allocation lands (a carve from the cursor)
    opens: list[bytes] = field(default_factory=list)
    opened: dict[bytes, int] = field(default_factory=dict)  # vLLM's C++ ipc_handles_: each handle opened once

    def read(self, address: int, n: int) -> bytes:
        return b"".join(self.memory.get(address + i, bytes(8)) for i in range(0, n, 8))

    def write(self, address: int, data: bytes) -> None:
        for i in range(0, len(data), 8):
            self.memory[address + i] = data[i : i + 8]

    def handle(self, address: int) -> tuple[bytes, int]:
        start = address - address % ALLOC
        return f"rank{self.rank}@{start:#x}".encode().ljust(64, b"\0"), address - start

    def open(self, handle: bytes) -> int:
        self.opens.append(handle)
        at = self.next_map
        self.maps.append((at, ALLOC))
        self.next_map += ALLOC
        return at

    def mappings(self) -> list[tuple[int, int]]:
        return list(self.maps)


def vllm_register(
    processes: list[PeerMemory], inputs: list[list[int]], first_slot: int, rank_data: int, width: int = MAX_RANKS
) -> None:
    """What vLLM's C++ ``register_graph_buffers`` leaves on every rank: the peers' allocations opened once each
    (its ipc_handles_ map), one RankData a captured all-reduce from ``first_slot`` of ``rank_data``. With ``width``
    the world size, SGLang's ``CustomAllReduceV2`` alike: one row of ``graph_params`` a captured all-reduce, the
    peers' base allocations mapped once each."""
    for me in processes:
        data = b""
        for i in range(len(inputs[me.rank])):
            pointers = []
            for peer in processes:
                if peer.rank == me.rank:
                    pointers.append(inputs[me.rank][i])
                    continue
                handle, offset = peer.handle(inputs[peer.rank][i])
                if handle not in me.opened:
                    me.opened[handle] = me.open(handle)
                pointers.append(me.opened[handle] + offset)
            data += slot_bytes(pointers, width)
        me.write(rank_data + first_slot * 8 * width, data)
