"""One rank's process as the engines' custom all-reduce sees it (foundry.ranks' ``Driver``): device memory as a
sparse dict of 8-byte words, and the other processes' allocations it opened by IPC handle, each carved after the
last. tests/cpu/test_custom_ar.py models vLLM's C++ registration over it; the stand-in Foundry
(tests/support/fakefoundry.py) is the fake vLLM's memory through one."""

from __future__ import annotations

from dataclasses import dataclass, field

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
