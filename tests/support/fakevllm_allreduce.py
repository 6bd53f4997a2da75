"""The fake vLLM's tensor-parallel group and custom all-reduce (tests/support/fakevllm.py builds them): vLLM 0.26's
``vllm.distributed.parallel_state`` with a TP group whose device communicator holds ``ca_comm``, and
``vllm.distributed.device_communicators.custom_all_reduce`` with ``CustomAllreduce`` and its kernel library
``ops``. A captured all-reduce remembers its input; at the exit of ``capture()`` ``register_graph_buffers`` writes
one slot of peer pointers a captured input into ``rank_data``, opening each peer allocation once, as vLLM's C++
does (the peers' inputs are taken to lie where this rank's do, as the ranks' layouts agree; the stand-in Foundry,
tests/support/fakefoundry.py, is the memory and the mappings)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any

from tests.support.peermemory import PeerMemory, vllm_register

MODULE = "vllm.distributed.device_communicators.custom_all_reduce"


class CustomAllreduce:
    def __init__(self, memory: Any, rank: int, world_size: int, trace: Callable[[str], None]) -> None:
        self.memory, self.rank, self.world_size, self._trace = memory, rank, world_size, trace
        self.disabled, self._ptr, self.group = False, 1, "gloo"
        self.rank_data = memory.allocate(8 << 20)
        self._IS_CAPTURING = False
        self.pending: list[int] = []
        self.next_slot = 1  # slot 0: register_buffer's, at start-up
        # this rank's memory the stand-in Foundry's; the others stand-ins whose inputs lie where this rank's do
        memory.peers.rank = rank
        self.world = [memory.peers if r == rank else PeerMemory(r) for r in range(world_size)]

    def all_reduce(self, inp: Any) -> None:
        """One all-reduce; inside a capture context its input is registered at the context's exit."""
        if self._IS_CAPTURING:
            self.pending.append(inp.data_ptr())

    @contextmanager
    def capture(self) -> Iterator[None]:
        try:
            self._IS_CAPTURING = True
            yield
        finally:
            self._IS_CAPTURING = False
            self.register_graph_buffers()

    def register_graph_buffers(self) -> None:
        self._trace(f"register_graph_buffers:{len(self.pending)}")
        vllm_register(self.world, [self.pending] * self.world_size, self.next_slot, self.rank_data.data_ptr())
        self.next_slot += len(self.pending)
        self.pending = []


def modules(memory: Any, trace: Callable[[str], None]) -> tuple[ModuleType, ModuleType, Callable[..., None]]:
    """The two modules, and ``init(rank, world_size)``, which vLLM's distributed set-up calls."""
    custom = ModuleType(MODULE)
    custom.CustomAllreduce = CustomAllreduce  # type: ignore[attr-defined]
    custom.ops = SimpleNamespace(  # type: ignore[attr-defined]
        get_graph_buffer_ipc_meta=lambda ptr: ([], list(groups[-1].device_communicator.ca_comm.pending))
    )
    groups: list[Any] = []
    state = ModuleType("vllm.distributed.parallel_state")
    state.model_parallel_is_initialized = lambda: bool(groups)  # type: ignore[attr-defined]
    state.get_tp_group = lambda: groups[-1]  # type: ignore[attr-defined]

    def init(rank: int, world_size: int) -> None:
        ca = CustomAllreduce(memory, rank, world_size, trace)
        groups.append(SimpleNamespace(device_communicator=SimpleNamespace(ca_comm=ca)))

    CustomAllreduce.__module__ = MODULE
    return custom, state, init


@contextmanager
def graph_capture(state: ModuleType) -> Iterator[Any]:
    """vLLM's ``graph_capture()``: the custom all-reduce's capture context around the captures, where one exists."""
    ca = state.get_tp_group().device_communicator.ca_comm if state.model_parallel_is_initialized() else None
    if ca is None:
        yield None
        return
    with ca.capture():
        yield ca


def all_reduce(ca: Any, inp: Any) -> None:
    """The model's all-reduce of ``inp``: the custom all-reduce's where one runs (NCCL's has nothing to register)."""
    if ca is not None:
        ca.all_reduce(inp)


def throwaway_capture(state: ModuleType, memory: Any) -> None:
    """The V1 runner's memory profile (``profile_cudagraph_memory``): graphs captured inside ``graph_capture()`` and
    thrown away, whose all-reduce inputs are registered all the same."""
    with graph_capture(state) as ca:
        all_reduce(ca, memory.allocate(4096))
