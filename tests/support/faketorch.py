"""A stand-in ``torch`` over the fake driver, for CPU tests that run Foundry's torch-facing API for real
(``foundry.CUDAGraph``, ``foundry.graph``, ``restored_tensor``) and the engine plugins over it.

``install()`` puts it in ``sys.modules["torch"]``; call it in a process under the interposer (the ``app``
fixture) before anything imports torch. It has only what Foundry and its plugins ask of torch: devices,
streams, ``torch.cuda.CUDAGraph`` over stream capture, a memory snapshot, the default generator (which
never advances: no graph here draws random numbers), and ``FakeTensor`` (faketensor.py) as ``torch.Tensor``.
Known differences from torch: the current stream starts as a stream of its own rather than the legacy
default stream (captures that engines run inside their own stream context need none here), and memory
pools are names only (``DeviceMemory`` never frees, so no two tensors share memory).

``DeviceMemory`` is the fake engines' allocator and kernels on top of it: every allocation is a
``cuMemAlloc`` (the region's, once set), eager allocations are filled with a value derived from their
address (what SAVE and LOAD load as weights is then equal, as a model's weights are), and ``compute`` /
``copy`` launch the fake driver's kernels on the current stream, where a capture records them.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from types import ModuleType, SimpleNamespace
from typing import Any

from tests.fakecuda.images import make_cubin
from tests.support.fakecu import Cuda
from tests.support.fakecu_driver import H, c_int, c_void_p, call
from tests.support.faketensor import DTYPES, FakeDtype, FakeTensor

__all__ = ["DeviceMemory", "install"]

KERNELS = ("fk_add_f32", "fk_copy_bytes", "fk_fill_f32")
_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}  # CUstreamCaptureMode


class _Driver:
    """The process's device: the fake driver's primary context, made current on each thread that asks."""

    def __init__(self) -> None:
        self.cuda = Cuda()
        self.local = threading.local()
        self.default = self.cuda.stream_create()
        self.allocated: list[tuple[int, int]] = []

    def current(self) -> int:
        self.cuda.make_current()
        return int(getattr(self.local, "stream", self.default))


_DRIVER: _Driver | None = None


def _driver() -> _Driver:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = _Driver()
    return _DRIVER


class Stream:
    def __init__(self, device: int | None = None) -> None:
        self.cuda_stream = _driver().cuda.stream_create()


class _Current:
    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle


@contextmanager
def _stream(s: Stream | None) -> Iterator[None]:
    local = _driver().local
    before = getattr(local, "stream", None)
    if s is not None:
        local.stream = s.cuda_stream
    try:
        yield
    finally:
        if before is None:
            local.__dict__.pop("stream", None)
        else:
            local.stream = before


def _capturing(stream: int) -> bool:
    status = c_int()
    call("cuStreamIsCapturing", c_void_p(stream), ctypes.byref(status))
    return status.value != 0


class _Graph:
    """torch.cuda.graph as torch has it: synchronize, give the caching allocator's cache back (looked up at the
    call, as torch does, so that a program's patch of ``torch.cuda.empty_cache`` applies), enter the capture
    stream, then ``capture_begin(*pool, capture_error_mode=...)`` on the graph it is given; ``capture_end`` on
    leaving."""

    def __init__(
        self, cuda_graph: Any, pool: Any = None, stream: Stream | None = None, capture_error_mode: str = "global"
    ) -> None:
        self.cuda_graph, self.pool, self.mode = cuda_graph, () if pool is None else (pool,), capture_error_mode
        self.stream_ctx = _stream(stream)

    def __enter__(self) -> None:
        cuda = sys.modules["torch"].cuda
        cuda.synchronize()
        cuda.empty_cache()
        self.stream_ctx.__enter__()
        self.cuda_graph.capture_begin(*self.pool, capture_error_mode=self.mode)

    def __exit__(self, *exc: object) -> None:
        self.cuda_graph.capture_end()
        self.stream_ctx.__exit__(*exc)


class CUDAGraph:
    """torch.cuda.CUDAGraph over the driver: capture on the current stream, instantiate, launch."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._graph = 0
        self._exec = 0
        self._stream = 0
        self._pool: Any = None

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        self._stream = _driver().current()
        self._pool = pool if pool is not None else object()
        call("cuStreamBeginCapture_v2", c_void_p(self._stream), _MODES[capture_error_mode])

    def capture_end(self) -> None:
        graph = H()
        call("cuStreamEndCapture", c_void_p(self._stream), ctypes.byref(graph))
        self._graph = graph.value or 0

    def raw_cuda_graph(self) -> int:
        return self._graph

    def raw_cuda_graph_exec(self) -> int:
        if not self._exec:
            raise RuntimeError("this graph has no exec yet: replay() or instantiate() first")
        return self._exec

    def instantiate(self) -> None:
        if self._exec:
            call("cuGraphExecDestroy", c_void_p(self._exec))
        self._exec = _driver().cuda.instantiate(self._graph)

    def replay(self) -> None:
        if not self._exec:
            self.instantiate()
        call("cuGraphLaunch", c_void_p(self._exec), c_void_p(_driver().current()))

    def reset(self) -> None:
        if self._exec:
            call("cuGraphExecDestroy", c_void_p(self._exec))
        if self._graph:
            call("cuGraphDestroy", c_void_p(self._graph))
        self._graph = self._exec = 0

    def pool(self) -> Any:
        return self._pool


class _Generator:
    def get_offset(self) -> int:
        return 0

    def set_offset(self, offset: int) -> None:
        pass

    def initial_seed(self) -> int:
        return 0


def _memory_snapshot() -> list[dict[str, Any]]:
    """torch.cuda.memory_snapshot's shape: every DeviceMemory allocation, in use."""
    return [
        {"device": 0, "address": a, "blocks": [{"state": "active_allocated", "size": n}]}
        for a, n in _driver().allocated
    ]


class _Device:
    def __init__(self, kind: str, index: int | None = None) -> None:
        self.type, self.index = kind, index


def _as_tensor(obj: Any, device: Any = None) -> FakeTensor:
    interface = obj.__cuda_array_interface__
    return FakeTensor(interface["data"][0], interface["shape"][0])


def _device_name(device: int | None = None) -> str:
    name = ctypes.create_string_buffer(256)
    call("cuDeviceGetName", name, 256, 0)
    return name.value.decode()


def _module() -> ModuleType:
    torch = ModuleType("torch")
    cuda = ModuleType("torch.cuda")
    cuda.__dict__.update(
        is_available=lambda: True,
        init=lambda: _driver().current(),  # the primary context, current on this thread
        device_count=lambda: 1,
        current_device=lambda: 0,
        set_device=lambda device: None,
        get_device_name=_device_name,
        synchronize=lambda device=None: _driver().cuda.sync(),
        empty_cache=lambda: None,
        Stream=Stream,
        current_stream=lambda device=None: _Current(_driver().current()),
        stream=_stream,
        CUDAGraph=CUDAGraph,
        graph=_Graph,
        graph_pool_handle=object,
        memory_snapshot=_memory_snapshot,
        default_generators=[_Generator()],
        MemPool=object,
        use_mem_pool=lambda pool: nullcontext(),
    )
    torch.__dict__.update(
        __version__="0.0+fakecuda",
        version=SimpleNamespace(cuda="13.0"),
        cuda=cuda,
        Tensor=FakeTensor,
        dtype=FakeDtype,
        device=_Device,
        _C=SimpleNamespace(),  # neither raw-stream nor storage accessor: Foundry takes its public fallbacks
        empty=lambda shape, dtype, device=None: FakeTensor(0, 0, dtype, tuple(shape)),
        as_tensor=_as_tensor,
        is_tensor=lambda x: isinstance(x, FakeTensor),
        **{d.name: d for d in DTYPES},
    )
    return torch


def install() -> None:
    """Makes the stand-in this process's ``torch``."""
    assert "torch" not in sys.modules or getattr(sys.modules["torch"], "__version__", "") == "0.0+fakecuda"
    sys.modules["torch"] = _module()
    sys.modules["torch.cuda"] = sys.modules["torch"].cuda


class DeviceMemory:
    """The fake engines' device: allocations and the few kernels their models run (see the module's doc)."""

    def __init__(self) -> None:
        self._driver = _driver()
        self._kernels: dict[str, int] = {}

    def _kernel(self, name: str) -> int:
        if not self._kernels:
            module = self._driver.cuda.load_module(make_cubin(list(KERNELS)))
            self._kernels = {k: self._driver.cuda.module_function(module, k) for k in KERNELS}
        return self._kernels[name]

    def _launch(self, name: str, n: int, args: list[Any]) -> None:
        """``name`` over ``n`` elements (the fake's element-wise kernels cover grid x block of them)."""
        grid = (max(1, -(-n // 1024)), 1, 1)
        self._driver.cuda.launch(self._kernel(name), grid, (1024, 1, 1), args, stream=self._driver.current())

    def allocate(self, nbytes: int) -> FakeTensor:
        address = self._driver.cuda.malloc(nbytes)
        self._driver.allocated.append((address, nbytes))
        tensor = FakeTensor(address, nbytes)
        if not _capturing(self._driver.current()):
            value = float(address >> 12 & 0xFFF)
            self._launch("fk_fill_f32", nbytes // 4, [("ptr", address), (ctypes.c_float, value), (c_int, nbytes // 4)])
        return tensor

    def compute(self, out: FakeTensor, a: FakeTensor, b: FakeTensor) -> None:
        """out = a + b over the float32 elements all three hold (the model's layers)."""
        n = min(out.nbytes, a.nbytes, b.nbytes) // 4
        self._launch("fk_add_f32", n, [("ptr", a.address), ("ptr", b.address), ("ptr", out.address), (c_int, n)])

    def copy(self, dst: FakeTensor, src: FakeTensor) -> None:
        n = min(dst.nbytes, src.nbytes)
        self._launch("fk_copy_bytes", n, [("ptr", dst.address), ("ptr", src.address), (ctypes.c_ulonglong, n)])

    # the tests' side: what the program writes into its inputs and reads from its outputs
    def write(self, tensor: FakeTensor, values: list[float]) -> None:
        self._driver.cuda.write_f32(tensor.address, values[: tensor.nbytes // 4])

    def clear(self, tensor: FakeTensor) -> None:
        self._driver.cuda.memset_d32(tensor.address, 0, tensor.nbytes // 4)

    def read(self, tensor: FakeTensor) -> list[float]:
        return self._driver.cuda.read_f32(tensor.address, tensor.nbytes // 4)
