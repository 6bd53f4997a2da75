"""The fake SGLang's tensor-parallel group and custom all-reduce (tests/support/fakesglang.py builds them): SGLang
0.5.17's ``sglang.srt.distributed.parallel_state`` with a TP group holding ``ca_comm``, a ``CustomAllReduceV2``
(its CUDA default). An all-reduce inside ``capture()`` takes the next row of ``graph_params`` (one pointer a rank)
for its input; at the context's exit ``_register_graph_inputs`` writes those rows from ``_graph_counter`` on with
the peers' inputs mapped here, each peer allocation once, as SGLang's VMM path does (the peers' inputs lie where
this rank's do, as the ranks' layouts agree; the stand-in Foundry, tests/support/fakefoundry.py, is the memory and
the mappings). ``legacy=True`` makes SGLang's other one, which has no such table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any

from tests.support.peermemory import PeerMemory, vllm_register

ROWS = 131072


class CustomAllReduceV2:
    def __init__(self, memory: Any, rank: int, world_size: int, trace: Callable[[str], None]) -> None:
        self.memory, self.rank, self.world_size, self._trace = memory, rank, world_size, trace
        self.disabled, self.group = False, "gloo"
        table = memory.allocate(ROWS * world_size * 8)
        self.graph_params = SimpleNamespace(data_ptr=table.data_ptr, shape=(ROWS, world_size))
        self._graph_inputs: list[tuple[int, int]] = []
        self._graph_counter = 0
        self._graph_mode_allowed = False
        memory.peers.rank = rank  # this rank's memory the stand-in Foundry's; the others stand-ins
        self.world = [memory.peers if r == rank else PeerMemory(r) for r in range(world_size)]

    def custom_all_reduce(self, inp: Any) -> None:
        if self._graph_mode_allowed:
            self._graph_inputs.append((inp.data_ptr(), 4096))

    @contextmanager
    def capture(self) -> Iterator[None]:
        try:
            self._graph_mode_allowed = True
            yield
        finally:
            self._graph_mode_allowed = False
        self._register_graph_inputs()

    def _register_graph_inputs(self) -> None:
        if not self._graph_inputs:
            return
        self._trace(f"register_graph_inputs:{len(self._graph_inputs)}")
        ptrs = [p for p, _ in self._graph_inputs]
        table = self.graph_params.data_ptr()
        vllm_register(self.world, [ptrs] * self.world_size, self._graph_counter, table, self.world_size)
        self._graph_counter += len(ptrs)
        self._graph_inputs.clear()


class CustomAllreduce:
    """SGLang's legacy one (``SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2=0``): a ``rank_data`` slot table, no rows."""

    def __init__(self, memory: Any, rank: int, world_size: int, trace: Callable[[str], None]) -> None:
        self.rank, self.world_size, self.disabled = rank, world_size, False

    def custom_all_reduce(self, inp: Any) -> None: ...

    @contextmanager
    def capture(self) -> Iterator[None]:
        yield


def modules(memory: Any, trace: Callable[[str], None]) -> tuple[ModuleType, Callable[..., None]]:
    """``parallel_state``, and ``init(rank, world_size, legacy)``, which SGLang's distributed set-up calls."""
    groups: list[Any] = []
    state = ModuleType("sglang.srt.distributed.parallel_state")
    state.model_parallel_is_initialized = lambda: bool(groups)  # type: ignore[attr-defined]
    state.get_tp_group = lambda: groups[-1]  # type: ignore[attr-defined]

    def init(rank: int, world_size: int, legacy: bool = False) -> None:
        ca = (CustomAllreduce if legacy else CustomAllReduceV2)(memory, rank, world_size, trace)
        groups.append(SimpleNamespace(ca_comm=ca))

    return state, init


@contextmanager
def graph_capture(state: ModuleType) -> Iterator[Any]:
    """SGLang's ``graph_capture()``: the custom all-reduce's capture context around a runner's captures."""
    ca = state.get_tp_group().ca_comm if state.model_parallel_is_initialized() else None
    if ca is None:
        yield None
        return
    with ca.capture():
        yield ca


def all_reduce(ca: Any, inp: Any) -> None:
    """The model's all-reduce of ``inp``: the custom all-reduce's where one runs (NCCL's registers nothing)."""
    if ca is not None:
        ca.custom_all_reduce(inp)
