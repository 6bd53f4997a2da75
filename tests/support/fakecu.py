"""A small ctypes harness that plays "the application / CUDA runtime" on top of libcuda.so.1.

The driver is loaded with ``ctypes.CDLL("libcuda.so.1")`` (found through LD_LIBRARY_PATH), so every
entry point is looked up with dlsym, which Foundry's interposer overrides when it is preloaded.
``proc()`` resolves entry points through ``cuGetProcAddress_v2`` instead, the path the real CUDA
runtime takes.

Example::

    from tests.support.fakecu import Cuda
    from tests.fakecuda.images import make_cubin

    cu = Cuda()                                   # cuInit + primary context, current
    mod = cu.load_module(make_cubin(["fk_fill_f32"]))
    fill = cu.module_function(mod, "fk_fill_f32")
    out = cu.malloc(4 * 8)
    cu.launch(fill, (1, 1, 1), (8, 1, 1), [("ptr", out), (ctypes.c_float, 2.5), (ctypes.c_int, 8)])
    assert cu.read_f32(out, 8) == [2.5] * 8

Works with the real driver as well (it only uses documented driver API calls).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import Any

# Every public name of the bindings is re-exported: ``from tests.support.fakecu import X`` keeps working.
from tests.support.fakecu_driver import *  # noqa: F403
from tests.support.fakecu_driver import (
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
    CU_LAUNCH_PARAM_BUFFER_POINTER,
    CU_LAUNCH_PARAM_BUFFER_SIZE,
    CU_LAUNCH_PARAM_END,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    CU_MEM_ALLOC_GRANULARITY_MINIMUM,
    CU_MEM_ALLOCATION_TYPE_PINNED,
    CU_MEM_LOCATION_TYPE_DEVICE,
    CU_STREAM_CAPTURE_MODE_GLOBAL,
    CUDA_KERNEL_NODE_PARAMS,
    DP,
    HOSTFN,
    NODE_TYPES,
    ArgSpec,
    CUgraphEdgeData,
    CUlaunchAttribute,
    CUlaunchConfig,
    CUmemAccessDesc,
    CUmemAllocationProp,
    H,
    _arg_object,
    c_char_p,
    c_int,
    c_size_t,
    c_void_p,
    call,
    check,
    driver,
    fn,
    pack_args,
)


class Cuda:
    """The application's view: one device, its primary context current on the creating thread."""

    def __init__(self, device: int = 0) -> None:
        self.lib = driver()
        call("cuInit", 0)
        d = c_int()
        call("cuDeviceGet", ctypes.byref(d), device)
        self.device = d.value
        ctx = H()
        call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self.device)
        self.ctx = ctx.value
        self.make_current()
        self._keep: list[Any] = []  # ctypes objects that must outlive asynchronous use

    # ------------------------------------------------------------------ basics
    @staticmethod
    def check(result: int, what: str) -> None:
        check(result, what)

    @staticmethod
    def call(name: str, *args: Any) -> None:
        call(name, *args)

    @staticmethod
    def raw(name: str, *args: Any) -> int:
        """Call an entry point and return the CUresult without raising."""
        return int(fn(name)(*args))

    def make_current(self) -> None:
        call("cuCtxSetCurrent", self.ctx)

    def sync(self) -> None:
        call("cuCtxSynchronize")

    # ------------------------------------------------------------------ memory
    def malloc(self, n: int) -> int:
        p = DP()
        call("cuMemAlloc_v2", ctypes.byref(p), n)
        return p.value

    def free(self, p: int) -> None:
        call("cuMemFree_v2", p)

    def memcpy_htod(self, dst: int, data: bytes) -> None:
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        call("cuMemcpyHtoD_v2", dst, buf, len(data))

    def memcpy_dtoh(self, src: int, n: int) -> bytes:
        buf = ctypes.create_string_buffer(n)
        call("cuMemcpyDtoH_v2", buf, src, n)
        return buf.raw

    def memset_d32(self, dst: int, value: int, n: int) -> None:
        call("cuMemsetD32_v2", dst, value, n)

    def write_f32(self, ptr: int, values: Sequence[float]) -> None:
        self.memcpy_htod(ptr, struct.pack(f"<{len(values)}f", *values))

    def read_f32(self, ptr: int, n: int) -> list[float]:
        return list(struct.unpack(f"<{n}f", self.memcpy_dtoh(ptr, 4 * n)))

    def write_u64(self, ptr: int, value: int) -> None:
        self.memcpy_htod(ptr, struct.pack("<Q", value))

    # ------------------------------------------------------------------ VMM
    @staticmethod
    def _prop(device: int = 0) -> CUmemAllocationProp:
        prop = CUmemAllocationProp()
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        prop.requestedHandleTypes = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: exportable, as NCCL asks
        return prop

    def granularity(self) -> int:
        g = c_size_t()
        prop = self._prop(self.device)
        call("cuMemGetAllocationGranularity", ctypes.byref(g), ctypes.byref(prop), CU_MEM_ALLOC_GRANULARITY_MINIMUM)
        return g.value

    def reserve(self, size: int, addr: int = 0, align: int = 0) -> int:
        p = DP()
        call("cuMemAddressReserve", ctypes.byref(p), size, align, addr, 0)
        return p.value

    def address_free(self, ptr: int, size: int) -> None:
        call("cuMemAddressFree", ptr, size)

    def mem_create(self, size: int) -> int:
        h = ctypes.c_ulonglong()
        prop = self._prop(self.device)
        call("cuMemCreate", ctypes.byref(h), size, ctypes.byref(prop), 0)
        return h.value

    def mem_release(self, handle: int) -> None:
        call("cuMemRelease", handle)

    def mem_map(self, ptr: int, size: int, handle: int, offset: int = 0) -> None:
        call("cuMemMap", ptr, size, offset, handle, 0)

    def set_access(self, ptr: int, size: int, flags: int = CU_MEM_ACCESS_FLAGS_PROT_READWRITE) -> None:
        desc = CUmemAccessDesc()
        desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = self.device
        desc.flags = flags
        call("cuMemSetAccess", ptr, size, ctypes.byref(desc), 1)

    def unmap(self, ptr: int, size: int) -> None:
        call("cuMemUnmap", ptr, size)

    # ------------------------------------------------------------------ images, modules, libraries
    def load_module(self, image: bytes) -> int:
        buf = ctypes.create_string_buffer(bytes(image), len(image))
        m = H()
        call("cuModuleLoadData", ctypes.byref(m), buf)
        return m.value or 0

    def load_library(self, image: bytes) -> int:
        buf = ctypes.create_string_buffer(bytes(image), len(image))
        lib = H()
        call("cuLibraryLoadData", ctypes.byref(lib), buf, None, None, 0, None, None, 0)
        return lib.value or 0

    def global_address(self, handle: int, name: str, library: bool = False) -> tuple[int, int]:
        """(address, size) of module variable ``name`` of a CUmodule (a CUlibrary with ``library``)."""
        addr, size = DP(), c_size_t()
        call("cuLibraryGetGlobal" if library else "cuModuleGetGlobal_v2", ctypes.byref(addr), ctypes.byref(size),
             handle, name.encode())  # fmt: skip
        return addr.value, size.value

    def module_function(self, mod: int, name: str) -> int:
        f = H()
        call("cuModuleGetFunction", ctypes.byref(f), mod, name.encode())
        return f.value or 0

    def library_kernel(self, lib: int, name: str) -> int:
        k = H()
        call("cuLibraryGetKernel", ctypes.byref(k), lib, name.encode())
        return k.value or 0

    def kernel_function(self, kernel: int) -> int:
        f = H()
        call("cuKernelGetFunction", ctypes.byref(f), kernel)
        return f.value or 0

    def func_name(self, func: int) -> str:
        s = c_char_p()
        call("cuFuncGetName", ctypes.byref(s), func)
        return (s.value or b"").decode()

    def param_info(self, func: int) -> list[tuple[int, int]]:
        """[(offset, size)] of every parameter, via cuFuncGetParamInfo until INVALID_VALUE."""
        out: list[tuple[int, int]] = []
        off, size = c_size_t(), c_size_t()
        while True:
            r = fn("cuFuncGetParamInfo")(func, len(out), ctypes.byref(off), ctypes.byref(size))
            if r == 1:  # CUDA_ERROR_INVALID_VALUE: past the last parameter
                return out
            check(r, "cuFuncGetParamInfo")
            out.append((off.value, size.value))

    def func_attr(self, func: int, attr: int) -> int:
        v = c_int()
        call("cuFuncGetAttribute", ctypes.byref(v), attr, func)
        return v.value

    def set_func_attr(self, func: int, attr: int, value: int) -> None:
        call("cuFuncSetAttribute", func, attr, value)

    # ------------------------------------------------------------------ launches
    def _params(self, args: Sequence[ArgSpec], use_extra: bool) -> tuple[Any, Any]:
        if use_extra:
            packed = pack_args(args)
            buf = ctypes.create_string_buffer(packed, max(len(packed), 1))
            size = c_size_t(len(packed))
            extra = (c_void_p * 5)(CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.cast(buf, c_void_p),
                                   CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.cast(ctypes.pointer(size), c_void_p),
                                   CU_LAUNCH_PARAM_END)  # fmt: skip
            self._keep_tmp: tuple[Any, ...] = (buf, size, extra)
            return None, extra
        objs = [_arg_object(a) for a in args]
        arr = (c_void_p * max(len(objs), 1))(*[ctypes.cast(ctypes.pointer(o), c_void_p) for o in objs])
        self._keep_tmp = (objs, arr)
        return arr, None

    def launch(self, func: int, grid: Sequence[int], block: Sequence[int], args: Sequence[ArgSpec],
               shared: int = 0, stream: int = 0, use_extra: bool = False) -> None:  # fmt: skip
        self.check(self.launch_raw(func, grid, block, args, shared, stream, use_extra), "cuLaunchKernel")

    def launch_raw(self, func: int, grid: Sequence[int], block: Sequence[int], args: Sequence[ArgSpec],
                   shared: int = 0, stream: int = 0, use_extra: bool = False) -> int:  # fmt: skip
        params, extra = self._params(args, use_extra)
        return int(fn("cuLaunchKernel")(func, *grid, *block, shared, stream, params, extra))

    @staticmethod
    def attrs(cluster: Sequence[int] | None = None, programmatic: bool = False,
              extra: Sequence[tuple[int, Sequence[int]]] = ()) -> list[tuple[int, Sequence[int]]]:  # fmt: skip
        """Launch attributes as (id, u32 words of the value)."""
        out: list[tuple[int, Sequence[int]]] = []
        if cluster is not None:
            out.append((CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, list(cluster)))
        if programmatic:
            out.append((CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, [1]))
        out.extend(extra)
        return out

    def launch_ex_raw(self, func: int, grid: Sequence[int], block: Sequence[int], args: Sequence[ArgSpec],
                      shared: int = 0, stream: int = 0, cluster: Sequence[int] | None = None,
                      programmatic: bool = False, attrs: Sequence[tuple[int, Sequence[int]]] = (),
                      use_extra: bool = False) -> int:  # fmt: skip
        lst = self.attrs(cluster, programmatic, attrs)
        arr = (CUlaunchAttribute * max(len(lst), 1))()
        for i, (aid, words) in enumerate(lst):
            arr[i].id = aid
            for j, w in enumerate(words):
                arr[i].value.u32[j] = w
        cfg = CUlaunchConfig(*grid, *block, shared, stream, arr, len(lst))
        params, extra = self._params(args, use_extra)
        return int(fn("cuLaunchKernelEx")(ctypes.byref(cfg), func, params, extra))

    def launch_ex(self, func: int, grid: Sequence[int], block: Sequence[int], args: Sequence[ArgSpec],
                  shared: int = 0, stream: int = 0, cluster: Sequence[int] | None = None,
                  programmatic: bool = False, attrs: Sequence[tuple[int, Sequence[int]]] = (),
                  use_extra: bool = False) -> None:  # fmt: skip
        r = self.launch_ex_raw(func, grid, block, args, shared, stream, cluster, programmatic, attrs, use_extra)
        self.check(r, "cuLaunchKernelEx")

    def launch_host(self, stream: int, callback: Any) -> None:
        """cuLaunchHostFunc with a Python callable taking no arguments (kept alive by this object)."""
        cb = HOSTFN(lambda _user: callback())
        self._keep.append(cb)
        call("cuLaunchHostFunc", stream, cb, None)

    # ------------------------------------------------------------------ streams, events, capture
    def stream_create(self, flags: int = 0) -> int:
        s = H()
        call("cuStreamCreate", ctypes.byref(s), flags)
        return s.value or 0

    def stream_destroy(self, s: int) -> None:
        call("cuStreamDestroy_v2", s)

    def stream_sync(self, s: int) -> None:
        call("cuStreamSynchronize", s)

    def event_create(self, flags: int = 0) -> int:
        e = H()
        call("cuEventCreate", ctypes.byref(e), flags)
        return e.value or 0

    def event_record(self, ev: int, stream: int = 0) -> None:
        call("cuEventRecord", ev, stream)

    def stream_wait_event(self, stream: int, ev: int) -> None:
        call("cuStreamWaitEvent", stream, ev, 0)

    def begin_capture(self, stream: int, mode: int = CU_STREAM_CAPTURE_MODE_GLOBAL) -> None:
        call("cuStreamBeginCapture_v2", stream, mode)

    def end_capture(self, stream: int) -> int:
        g = H()
        call("cuStreamEndCapture", stream, ctypes.byref(g))
        return g.value or 0

    def capture_status(self, stream: int) -> int:
        st = c_int()
        call("cuStreamIsCapturing", stream, ctypes.byref(st))
        return st.value

    # ------------------------------------------------------------------ graphs
    def instantiate(self, graph: int, flags: int = 0) -> int:
        e = H()
        call("cuGraphInstantiateWithFlags", ctypes.byref(e), graph, flags)
        return e.value or 0

    def graph_launch(self, exec_: int, stream: int = 0) -> None:
        call("cuGraphLaunch", exec_, stream)

    def graph_nodes(self, graph: int) -> list[int]:
        n = c_size_t()
        call("cuGraphGetNodes", graph, None, ctypes.byref(n))
        arr = (H * max(n.value, 1))()
        call("cuGraphGetNodes", graph, arr, ctypes.byref(n))
        return [arr[i] or 0 for i in range(n.value)]

    def node_type(self, node: int) -> str:
        t = c_int()
        call("cuGraphNodeGetType", node, ctypes.byref(t))
        return NODE_TYPES.get(t.value, str(t.value))

    def graph_edges(self, graph: int) -> list[tuple[int, int, tuple[int, int, int]]]:
        """[(from, to, (from_port, to_port, type))] via cuGraphGetEdges_v2 with edge data."""
        n = c_size_t()
        call("cuGraphGetEdges_v2", graph, None, None, None, ctypes.byref(n))
        k = max(n.value, 1)
        fr, to, data = (H * k)(), (H * k)(), (CUgraphEdgeData * k)()
        call("cuGraphGetEdges_v2", graph, fr, to, data, ctypes.byref(n))
        return [(fr[i] or 0, to[i] or 0, (data[i].from_port, data[i].to_port, data[i].type)) for i in range(n.value)]

    def kernel_node_params(self, node: int) -> CUDA_KERNEL_NODE_PARAMS:
        p = CUDA_KERNEL_NODE_PARAMS()
        call("cuGraphKernelNodeGetParams_v2", node, ctypes.byref(p))
        return p


# ---------------------------------------------------------------------------------------- references
_M64 = (1 << 64) - 1


def _mix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def philox_ref(seed: int, offset: int, i: int) -> float:
    """What fk_philox_f32 writes at index i for (seed, offset + offset_intragraph)."""
    return (_mix64((seed ^ _mix64((offset & _M64) ^ _mix64(i))) & _M64) >> 40) / 16777216.0
