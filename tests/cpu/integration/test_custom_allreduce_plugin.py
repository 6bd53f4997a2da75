"""The plugins' part of an engine's custom all-reduce (shared/allreduce.py, vllm/allreduce.py), against a model of
vLLM's ``CustomAllreduce`` whose C++ registration is tests/cpu/test_custom_ar.py's: SAVE records every registration
and keeps only the ones made while the saved graphs were captured (the V1 runner's memory profile registers
graphs it throws away, whose slots still count), the archive's document holds them, LOAD writes them again, and an
archive saved with the custom all-reduce on is refused where it is off, and the other way round."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from foundry.errors import PeerMemoryError
from foundry.integration.shared import allreduce
from foundry.integration.shared.errors import ArchiveMetadataError, ArchiveMismatchError
from foundry.ranks.registrations import SLOT_BYTES, PeerRegistration, rewrite_peer_registrations
from tests.cpu.test_custom_ar import RANK_DATA, Process
from tests.support.fakefoundry import BoundRegistrations
from tests.support.peermemory import vllm_register

MODULE = "fake_custom_all_reduce"


class FakeCustomAllreduce:
    """vLLM's Python shape: rank, world_size, rank_data, _ptr, group, disabled, register_graph_buffers (which
    registers the pending inputs of every rank, as the C++ does at the capture context's exit)."""

    def __init__(self, world: list[Process], pending: list[list[int]], rank: int = 0) -> None:
        self.rank, self.world_size, self.disabled, self._ptr, self.group = rank, len(world), False, 7, "gloo"
        self.rank_data = SimpleNamespace(data_ptr=lambda: RANK_DATA)
        self.world, self.pending, self.slot = world, pending, 1

    def register_graph_buffers(self) -> None:
        count = len(self.pending[self.rank])
        if count:
            vllm_register(self.world, self.pending, self.slot, RANK_DATA)
            self.slot += count
        self.pending = [[] for _ in self.world]


@pytest.fixture
def ops_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The kernel library's module, as vLLM's custom_all_reduce.py imports it: ``ops``."""
    module = ModuleType(MODULE)
    module.ops = SimpleNamespace(  # type: ignore[attr-defined]
        get_graph_buffer_ipc_meta=lambda ptr: ([], list(CURRENT[0].pending[CURRENT[0].rank]))
    )
    monkeypatch.setitem(sys.modules, MODULE, module)
    FakeCustomAllreduce.__module__ = MODULE
    return module


CURRENT: list[FakeCustomAllreduce] = []


def _ca(world: list[Process]) -> FakeCustomAllreduce:
    ca = FakeCustomAllreduce(world, [[] for _ in world])
    CURRENT[:] = [ca]
    return ca


class _Api:
    """The two calls of FoundryApi the custom all-reduce makes, over rank 0's model process."""

    def __init__(self, process: Process) -> None:
        self.process, self.declared = process, []

    def peer_registrations(self, rank: int, world: int, rank_data: int) -> Any:
        return BoundRegistrations(rank, world, rank_data, driver=self.process, remaps=self._declare)

    def _declare(self, address: int, size: int) -> None:
        self.declared.append((address, size))

    def rewrite_peer_registrations(
        self, registrations: Any, rank: int, world: int, rank_data: int, exchange: Any
    ) -> int:
        return rewrite_peer_registrations(registrations, rank, world, rank_data, exchange, self.process)


def test_save_keeps_the_captures_registrations_and_counts_the_profiles_slots(ops_module: ModuleType) -> None:
    world = [Process(0), Process(1)]
    ca = _ca(world)
    api = _Api(world[0])
    declared = api.declared
    rec = allreduce.record(ca, api)  # type: ignore[arg-type]
    # the memory profile's throwaway graphs: registered (slots 1-2), not kept
    ca.pending = [[0x6000_0100_0000, 0x6000_0100_4000]] * 2
    ca.register_graph_buffers()
    ca.register_graph_buffers()  # a context with no all-reduce captured: nothing registered, no slot taken
    rec.keeping = True
    ca.pending = [[0x6000_0900_0000, 0x6000_0900_0100, 0x6000_0900_0200]] * 2
    ca.register_graph_buffers()
    rec.keeping = False
    assert rec.kept == [PeerRegistration(3, (0x6000_0900_0000, 0x6000_0900_0100, 0x6000_0900_0200))]
    assert rec.records.next_slot == 6 and len(rec.records.done) == 2
    assert len(declared) == 2  # each peer allocation the registrations opened: the program's to map again
    assert allreduce.from_json(allreduce.to_json(rec.kept)) == tuple(rec.kept)


def test_load_writes_the_kept_registrations_with_the_peers_inputs_opened_here(ops_module: ModuleType) -> None:
    world = [Process(r, next_map=0x6000_5000_0000 + r * 0x1000_0000) for r in range(2)]
    regs = [PeerRegistration(3, (0x6000_0900_0000, 0x6000_0900_0100))]
    ca = _ca(world)
    peer = world[1]

    def exchange(value: Any) -> list[Any]:  # rank 1 answers with the same inputs of its own
        return [value, [(peer.handle(a)[0].hex(), peer.handle(a)[1]) for a in regs[0].inputs]]

    assert allreduce.rewrite(ca, regs, _Api(world[0]), exchange) == 2  # type: ignore[arg-type]
    slots = world[0].read(RANK_DATA + 3 * SLOT_BYTES, 2 * SLOT_BYTES)
    words = [int.from_bytes(slots[i : i + 8], "little") for i in range(0, len(slots), 8)]
    assert words[0:2] == [0x6000_0900_0000, 0x6000_5000_0000] and words[8:10] == [0x6000_0900_0100, 0x6000_5000_0100]
    assert world[0].read(RANK_DATA + SLOT_BYTES, 2 * SLOT_BYTES) == bytes(2 * SLOT_BYTES)  # the profile's: untouched


def test_a_kernel_library_foundry_cannot_read_is_refused_naming_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    module = ModuleType(MODULE)
    monkeypatch.setitem(sys.modules, MODULE, module)
    FakeCustomAllreduce.__module__ = MODULE
    with pytest.raises(PeerMemoryError, match="--disable-custom-all-reduce"):
        allreduce.record(FakeCustomAllreduce([Process(0), Process(1)], [[], []]), _Api(Process(0)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("saved", "here", "said"),
    [((PeerRegistration(1, (1,)),), None, "on, and it is off here"), (None, "on", "off, and it is on here")],
)
def test_save_and_load_must_agree_on_the_custom_all_reduce(saved: Any, here: Any, said: str) -> None:
    ca = SimpleNamespace(disabled=False) if here else None
    with pytest.raises(ArchiveMismatchError, match=said + r".*--disable-custom-all-reduce"):
        allreduce.check_same(saved, ca, "--disable-custom-all-reduce")
    allreduce.check_same(saved, SimpleNamespace(disabled=False) if saved else None, "x")  # agreeing: accepted
    allreduce.check_same(None, SimpleNamespace(disabled=True), "x")  # made, then switched off by the engine: off


def test_a_malformed_entry_is_refused_by_name_and_an_absent_one_means_off() -> None:
    assert allreduce.from_json(None) is None
    assert allreduce.from_json({"registrations": []}) == ()
    with pytest.raises(ArchiveMetadataError, match="custom_all_reduce"):
        allreduce.from_json({"registrations": [{"first_slot": 1}]})


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ([{"first_slot": 0, "inputs": [4096]}], "slots 0 to 0"),  # register_buffer's slot
        ([{"first_slot": 2, "inputs": [4096, 8192]}, {"first_slot": 3, "inputs": [4096]}], "slots 3 to 3"),  # twice
        ([{"first_slot": allreduce.SLOTS - 1, "inputs": [4096, 8192]}], "inside the 131072 slots"),
        ([{"first_slot": 1, "inputs": [-5]}], "no address"),
        ([{"first_slot": 1, "inputs": []}], "registers no input"),
    ],
)
def test_registrations_that_vllm_could_not_have_written_are_refused_by_name(entry: Any, says: str) -> None:
    with pytest.raises(ArchiveMetadataError, match=says):
        allreduce.from_json({"registrations": entry})


def test_an_input_outside_the_region_is_refused_before_any_table_is_written() -> None:
    regs = (PeerRegistration(1, (0x6000_0000_1000,)), PeerRegistration(2, (0x5000_0000_0000,)))
    with pytest.raises(ArchiveMetadataError, match=r"1 inputs outside the region.*0x500000000000"):
        allreduce.check_inputs(regs, 0x6000_0000_0000, 1 << 40)
    allreduce.check_inputs(regs[:1], 0x6000_0000_0000, 1 << 40)


# ---------------------------------------------------------------- the vLLM plugin over the fake vLLM's start-up
TP_READY = {"VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}


def _start(engines: Any, mode: str, runner: str, custom: bool = True, **memory: Any) -> Any:
    """Both ranks' start-ups in turn (vLLM starts one worker process per rank); rank 0's fake engine."""
    from tests.support.fakefoundry import FakeFoundry
    from tests.support.fakevllm_config import make_config

    fakes = []
    for rank in range(2):
        fake = engines.prepare(mode, FakeFoundry(**memory) if memory else None)
        config = make_config(runner=runner, tp=2, disable_custom_all_reduce=not custom, custom_all_reduce=custom)
        fake.start_engine(config, rank=rank)
        fakes.append(fake)
    return fakes[0]


@pytest.mark.parametrize("runner", ["v2", "v1"])
def test_vllm_saves_the_captures_registrations_and_load_writes_them_before_any_graph_replays(
    engines: Any, monkeypatch: pytest.MonkeyPatch, runner: str
) -> None:
    from foundry.integration.vllm import read_metadata

    for k, v in TP_READY.items():
        monkeypatch.setenv(k, v)
    saved = _start(engines, "save", runner)
    meta = read_metadata(engines.archive / "rank_0")
    registered = [e for e in saved.trace.events if e.startswith("register_graph_buffers:")]
    (kept,) = meta.custom_all_reduce or ()
    if runner == "v1":  # the memory profile's throwaway graph took slot 1: the capture's follow it
        assert registered[0] == "register_graph_buffers:1" and kept.first_slot == 2
    else:
        assert kept.first_slot == 1
    assert registered[-1] == f"register_graph_buffers:{len(kept.inputs)}" and len(kept.inputs) == 4  # 4 sizes
    # every peer mapping the registrations opened is declared the program's to map again
    assert saved.memory.remapped == saved.memory.peers.maps and saved.memory.remapped
    loaded = _start(engines, "load", runner, high_water_saved=int(meta.high_water))
    calls = loaded.memory.calls
    assert f"rewrite_peer_registrations:{len(kept.inputs)}" in calls
    started = next(i for i, c in enumerate(calls) if c.startswith("start_builds"))
    assert started < calls.index(f"rewrite_peer_registrations:{len(kept.inputs)}")  # SAVE's memory mapped first
    assert loaded.memory.rewritten == [kept]
    assert not [e for e in loaded.trace.events if e.startswith("register_graph_buffers")]  # nothing captured


def test_vllm_load_refuses_an_archive_saved_with_the_other_all_reduce_before_the_weights(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foundry.integration.vllm import read_metadata

    for k, v in TP_READY.items():
        monkeypatch.setenv(k, v)
    _start(engines, "save", "v2")
    high_water = int(read_metadata(engines.archive / "rank_0").high_water)
    from tests.support.fakefoundry import FakeFoundry
    from tests.support.fakevllm_config import make_config

    fake = engines.prepare("load", FakeFoundry(high_water_saved=high_water))
    with pytest.raises(ArchiveMismatchError, match=r"custom all-reduce on, and it is off here.*--disable-custom"):
        fake.start_engine(make_config(tp=2, disable_custom_all_reduce=True), rank=0)
    assert "load_model" not in fake.trace.events and "start_builds" not in fake.memory.calls


def test_vllms_symmetric_memory_all_reduce_is_refused_only_where_vllm_uses_it() -> None:
    from foundry.integration.shared.errors import UnsupportedConfigError
    from foundry.integration.vllm.allreduce import check_symmetric_memory

    # VLLM_ALLREDUCE_USE_SYMM_MEM at its default: vLLM makes the communicator and, without multicast, turns it off
    check_symmetric_memory(SimpleNamespace(symm_mem_comm=SimpleNamespace(disabled=True)))
    check_symmetric_memory(SimpleNamespace(symm_mem_comm=None))
    check_symmetric_memory(None)  # one GPU: no communicator
    with pytest.raises(UnsupportedConfigError, match="VLLM_ALLREDUCE_USE_SYMM_MEM=0"):
        check_symmetric_memory(SimpleNamespace(symm_mem_comm=SimpleNamespace(disabled=False)))
