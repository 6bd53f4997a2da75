"""The engines' custom all-reduce registrations (foundry/ranks/registrations.py), against a model of what
vLLM's C++ does with them: ``register_graph_buffers`` opens each peer's graph input allocation once
(by its IPC handle) and writes one RankData a captured all-reduce into ``rank_data`` after slot 0. SAVE reads the
slots back and keeps this rank's inputs and the first slot, declaring the mappings it opened the program's; LOAD
exchanges handles of its inputs with the other ranks and writes the slots with the peers' inputs as opened in its
own process."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from foundry.errors import PeerMemoryError
from foundry.ranks.registrations import (
    SLOT_BYTES,
    PeerRegistration,
    PeerRegistrations,
    rewrite_peer_registrations,
    slot_bytes,
)
from tests.support.peermemory import ALLOC, vllm_register
from tests.support.peermemory import PeerMemory as Process

RANK_DATA = 0x6000_0010_0000


def test_save_keeps_each_ranks_inputs_and_declares_only_the_mappings_the_registration_opened() -> None:
    world = [Process(0), Process(1)]
    world[0].maps.append((0x6000_3000_0000, 4096))  # a peer's signal buffer opened at start-up: a real peer
    inputs = [[0x6000_0100_0000, 0x6000_0100_4000], [0x6000_0100_0000, 0x6000_0100_4000]]
    records, declared = PeerRegistrations(0, 2, RANK_DATA), []

    reg = records.around(
        lambda: vllm_register(world, inputs, 1, RANK_DATA), 2, world[0], lambda a, n: declared.append((a, n))
    )
    assert reg == PeerRegistration(1, tuple(inputs[0]))
    assert declared == [(0x6000_4000_0000, ALLOC)]  # the peer's input allocation, opened once; not the start-up one
    # a second registration (another capture) follows in the slots and reuses the allocation opened before
    more = [[0x6000_0100_8000], [0x6000_0100_8000]]
    reg2 = records.around(
        lambda: vllm_register(world, more, 3, RANK_DATA), 1, world[0], lambda a, n: declared.append((a, n))
    )
    assert reg2 == PeerRegistration(3, (0x6000_0100_8000,)) and records.next_slot == 4
    assert len(declared) == 1 and PeerRegistration.from_json(reg2.to_json()) == reg2


def test_a_registration_that_does_not_read_as_vllms_is_refused_by_name() -> None:
    world = [Process(0), Process(1)]
    inputs = [[0x6000_0100_0000], [0x6000_0100_0000]]
    records = PeerRegistrations(0, 2, RANK_DATA, next_slot=2)  # Foundry expects another slot than vLLM wrote
    with pytest.raises(PeerMemoryError, match="--disable-custom-all-reduce"):
        records.around(lambda: vllm_register(world, inputs, 1, RANK_DATA), 1, world[0], lambda a, n: None)
    assert records.done == []


def test_load_writes_every_slot_again_with_the_peers_inputs_as_opened_here() -> None:
    inputs = [[0x6000_0100_0000, 0x6000_0100_4000, 0x6000_0180_0000] for _ in range(3)]
    regs = [PeerRegistration(1, tuple(inputs[0][:2])), PeerRegistration(3, (inputs[0][2],))]
    world = [Process(r, next_map=0x6000_5000_0000 + r * 0x1000_0000) for r in range(3)]
    calls: list[list[object]] = [[] for _ in world]

    # each rank's exchange answers with every rank's value of the same call, as the CPU group's broadcasts do
    def exchange_for(rank: int) -> Callable[[object], list[object]]:
        def exchange(value: object) -> list[object]:
            calls[rank].append(value)
            reg = regs[len(calls[rank]) - 1]
            everyone: list[object] = [[(p.handle(a)[0].hex(), p.handle(a)[1]) for a in reg.inputs] for p in world]
            assert value == everyone[rank]  # what this rank sent
            return everyone

        return exchange

    for p in world:
        assert rewrite_peer_registrations(regs, p.rank, 3, RANK_DATA, exchange_for(p.rank), p) == 3
    rank1 = world[1]
    slots = rank1.read(RANK_DATA + SLOT_BYTES, 3 * SLOT_BYTES)
    words = [int.from_bytes(slots[i : i + 8], "little") for i in range(0, len(slots), 8)]
    # slot 1: rank 0's input as opened on rank 1 (its first open), rank 1's own, rank 2's (its second open)
    assert words[0:3] == [0x6000_6000_0000, inputs[1][0], 0x6000_6000_0000 + ALLOC] and words[3:8] == [0] * 5
    # slot 2: the same allocations, 16 KiB on: no second open
    assert words[8:11] == [0x6000_6000_4000, inputs[1][1], 0x6000_6000_0000 + ALLOC + 0x4000]
    # slot 3, the second registration: another allocation of each peer, opened now
    assert words[16:19] == [0x6000_6000_0000 + 2 * ALLOC, inputs[1][2], 0x6000_6000_0000 + 3 * ALLOC]
    assert len(rank1.opens) == 4 and len(set(rank1.opens)) == 4  # each distinct allocation once
    assert [len(c) for c in calls] == [2, 2, 2]  # one exchange a registration, on every rank
    assert rank1.read(RANK_DATA, SLOT_BYTES) == bytes(SLOT_BYTES)  # slot 0, register_buffer's: untouched


def test_load_refuses_ranks_whose_registrations_differ() -> None:
    me = Process(0)
    regs = [PeerRegistration(1, (0x6000_0100_0000, 0x6000_0100_4000))]
    with pytest.raises(PeerMemoryError, match="registrations differ"):
        rewrite_peer_registrations(regs, 0, 2, RANK_DATA, lambda value: [value, value[:1]], me)
    with pytest.raises(ValueError, match="holds 8 at most"):
        slot_bytes(list(range(9)))


def test_a_table_of_rows_one_pointer_a_rank_the_engine_counting_its_rows_itself() -> None:
    """SGLang's CustomAllReduceV2: ``graph_params`` holds one row of world_size pointers a captured all-reduce,
    from row 0, and the engine keeps the next row itself (``_graph_counter``), which SAVE passes as ``first``."""
    world = [Process(0), Process(1), Process(2)]
    inputs = [[0x6000_0100_0000, 0x6000_0100_4000] for _ in range(3)]
    records = PeerRegistrations(1, 3, RANK_DATA, next_slot=0, width=3)
    reg = records.around(lambda: vllm_register(world, inputs, 0, RANK_DATA, 3), 2, world[1], lambda a, n: None, 0)
    assert reg == PeerRegistration(0, tuple(inputs[1])) and records.next_slot == 2
    assert world[1].read(RANK_DATA + 8, 8) == inputs[1][0].to_bytes(8, "little")  # row 0: its own, at its rank
    with pytest.raises(PeerMemoryError, match="over slots it had registered before"):
        records.around(lambda: None, 1, world[1], lambda a, n: None, 1)
    # LOAD: rows of three pointers written where SAVE's were, every peer opened here
    loaded = [Process(r, next_map=0x6000_5000_0000 + r * 0x1000_0000) for r in range(3)]
    handles = [[p.handle(a) for a in inputs[p.rank]] for p in loaded]

    def exchange(value: object) -> list[object]:
        return [[(h.hex(), off) for h, off in theirs] for theirs in handles]

    assert rewrite_peer_registrations([reg], 1, 3, RANK_DATA, exchange, loaded[1], width=3) == 2
    row = loaded[1].read(RANK_DATA + 8 * 3, 8 * 3)  # row 1
    pointers = [int.from_bytes(row[i : i + 8], "little") for i in range(0, 24, 8)]
    assert pointers[1] == inputs[1][1] and pointers[0] != inputs[0][1] and pointers[2] != inputs[2][1]
    assert loaded[1].read(RANK_DATA + 8 * 6, 8) == bytes(8)  # nothing past the rows SAVE registered
