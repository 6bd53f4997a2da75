"""ctypes bindings for the CUDA driver API (libcuda.so.1, the fake or the real one).

Constants, structs, entry-point signatures (``SIGS``), entry points looked up by dlsym (``fn``, ``call``)
or through ``cuGetProcAddress_v2`` (``proc``), and launch-argument packing. tests/support/fakecu.py
re-exports every public name here next to the ``Cuda`` convenience class; import from there.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from foundry.native._abi import CudaResult
from foundry.records import FuncAttr
from foundry.records.nodes import LaunchAttr

c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_size_t = ctypes.c_size_t
c_u64 = ctypes.c_uint64
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
POINTER = ctypes.POINTER

H = c_void_p  # any opaque handle (CUcontext, CUmodule, CUfunction, CUstream, CUgraph, ...)
DP = c_u64  # CUdeviceptr

CUDA_SUCCESS = CudaResult.SUCCESS
CU_LAUNCH_PARAM_END = 0
CU_LAUNCH_PARAM_BUFFER_POINTER = 1
CU_LAUNCH_PARAM_BUFFER_SIZE = 2
CU_LAUNCH_ATTRIBUTE_COOPERATIVE = LaunchAttr.COOPERATIVE
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = LaunchAttr.CLUSTER_DIMENSION
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
CU_LAUNCH_ATTRIBUTE_PRIORITY = LaunchAttr.PRIORITY
CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC = 1
CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC = 1
CU_GET_PROC_ADDRESS_DEFAULT = 0
CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1
CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2
CU_STREAM_CAPTURE_MODE_GLOBAL = 0
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
CU_STREAM_CAPTURE_MODE_RELAXED = 2
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = FuncAttr.MAX_DYNAMIC_SHARED_SIZE_BYTES

NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait_event",
              7: "event_record", 8: "ext_sem_signal", 9: "ext_sem_wait", 10: "mem_alloc", 11: "mem_free"}  # fmt: skip


# ---------------------------------------------------------------------------------------- structs
class CUlaunchAttributeValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("u32", c_uint * 16)]


class CUlaunchAttribute(ctypes.Structure):
    _fields_ = [("id", c_int), ("_pad", ctypes.c_char * 4), ("value", CUlaunchAttributeValue)]


class CUlaunchConfig(ctypes.Structure):
    _fields_ = [
        ("gridDimX", c_uint), ("gridDimY", c_uint), ("gridDimZ", c_uint),
        ("blockDimX", c_uint), ("blockDimY", c_uint), ("blockDimZ", c_uint),
        ("sharedMemBytes", c_uint), ("hStream", H), ("attrs", POINTER(CUlaunchAttribute)), ("numAttrs", c_uint),
    ]  # fmt: skip


class CUgraphEdgeData(ctypes.Structure):
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte), ("type", ctypes.c_ubyte),
                ("reserved", ctypes.c_ubyte * 5)]  # fmt: skip


class CUDA_KERNEL_NODE_PARAMS(ctypes.Structure):
    _fields_ = [
        ("func", H), ("gridDimX", c_uint), ("gridDimY", c_uint), ("gridDimZ", c_uint),
        ("blockDimX", c_uint), ("blockDimY", c_uint), ("blockDimZ", c_uint), ("sharedMemBytes", c_uint),
        ("kernelParams", POINTER(c_void_p)), ("extra", POINTER(c_void_p)), ("kern", H), ("ctx", H),
    ]  # fmt: skip


class CUDA_MEMSET_NODE_PARAMS(ctypes.Structure):
    _fields_ = [("dst", DP), ("pitch", c_size_t), ("value", c_uint), ("elementSize", c_uint),
                ("width", c_size_t), ("height", c_size_t)]  # fmt: skip


HOSTFN = ctypes.CFUNCTYPE(None, c_void_p)


class CUDA_HOST_NODE_PARAMS(ctypes.Structure):
    _fields_ = [("fn", HOSTFN), ("userData", c_void_p)]


class CUgraphExecUpdateResultInfo(ctypes.Structure):
    _fields_ = [("result", c_int), ("errorNode", H), ("errorFromNode", H)]


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", c_int), ("id", c_int)]


class CUmemAllocationProp(ctypes.Structure):
    _fields_ = [("type", c_int), ("requestedHandleTypes", c_int), ("location", CUmemLocation),
                ("win32HandleMetaData", c_void_p), ("allocFlags", ctypes.c_ubyte * 8)]  # fmt: skip


class CUmemAccessDesc(ctypes.Structure):
    _fields_ = [("location", CUmemLocation), ("flags", c_int)]


# ---------------------------------------------------------------------------------------- signatures
P = c_void_p
PH = POINTER(H)
SIGS: dict[str, list[Any]] = {
    "cuInit": [c_uint],
    "cuDriverGetVersion": [POINTER(c_int)],
    "cuDeviceGet": [POINTER(c_int), c_int],
    "cuDeviceGetCount": [POINTER(c_int)],
    "cuDeviceGetName": [c_char_p, c_int, c_int],
    "cuDeviceGetAttribute": [POINTER(c_int), c_int, c_int],
    "cuDeviceTotalMem_v2": [POINTER(c_size_t), c_int],
    "cuDevicePrimaryCtxRetain": [PH, c_int],
    "cuDevicePrimaryCtxRelease_v2": [c_int],
    "cuCtxSetCurrent": [H],
    "cuCtxGetCurrent": [PH],
    "cuCtxSynchronize": [],
    "cuGetErrorName": [c_int, POINTER(c_char_p)],
    "cuGetErrorString": [c_int, POINTER(c_char_p)],
    "cuGetProcAddress_v2": [c_char_p, POINTER(c_void_p), c_int, c_u64, POINTER(c_int)],
    "cuGetProcAddress": [c_char_p, POINTER(c_void_p), c_int, c_u64],
    "cuMemAlloc_v2": [POINTER(DP), c_size_t],
    "cuMemAlloc": [POINTER(ctypes.c_uint32), ctypes.c_uint32],
    "cuMemFree": [ctypes.c_uint32],
    "cuMemFree_v2": [DP],
    "cuMemAllocPitch_v2": [POINTER(DP), POINTER(c_size_t), c_size_t, c_size_t, c_uint],
    "cuMemGetAddressRange_v2": [POINTER(DP), POINTER(c_size_t), DP],
    "cuMemGetInfo_v2": [POINTER(c_size_t), POINTER(c_size_t)],
    "cuMemcpyHtoD_v2": [DP, P, c_size_t],
    "cuMemcpyDtoH_v2": [P, DP, c_size_t],
    "cuMemcpyDtoD_v2": [DP, DP, c_size_t],
    "cuMemcpyHtoDAsync_v2": [DP, P, c_size_t, H],
    "cuMemcpyDtoHAsync_v2": [P, DP, c_size_t, H],
    "cuMemcpyDtoDAsync_v2": [DP, DP, c_size_t, H],
    "cuMemsetD8_v2": [DP, ctypes.c_ubyte, c_size_t],
    "cuMemsetD32_v2": [DP, c_uint, c_size_t],
    "cuMemsetD8Async": [DP, ctypes.c_ubyte, c_size_t, H],
    "cuMemsetD32Async": [DP, c_uint, c_size_t, H],
    "cuMemAllocAsync": [POINTER(DP), c_size_t, H],
    "cuMemFreeAsync": [DP, H],
    "cuMemGetAllocationGranularity": [POINTER(c_size_t), POINTER(CUmemAllocationProp), c_int],
    "cuMemAddressReserve": [POINTER(DP), c_size_t, c_size_t, DP, ctypes.c_ulonglong],
    "cuMemAddressFree": [DP, c_size_t],
    "cuMemCreate": [POINTER(ctypes.c_ulonglong), c_size_t, POINTER(CUmemAllocationProp), ctypes.c_ulonglong],
    "cuMemRelease": [ctypes.c_ulonglong],
    "cuMemMap": [DP, c_size_t, c_size_t, ctypes.c_ulonglong, ctypes.c_ulonglong],
    "cuMemSetAccess": [DP, c_size_t, POINTER(CUmemAccessDesc), c_size_t],
    "cuMemUnmap": [DP, c_size_t],
    "cuModuleLoadData": [PH, P],
    "cuModuleLoadDataEx": [PH, P, c_uint, P, P],
    "cuModuleLoadFatBinary": [PH, P],
    "cuModuleLoad": [PH, c_char_p],
    "cuModuleUnload": [H],
    "cuModuleGetFunction": [PH, H, c_char_p],
    "cuModuleGetGlobal_v2": [POINTER(DP), POINTER(c_size_t), H, c_char_p],
    "cuLibraryGetGlobal": [POINTER(DP), POINTER(c_size_t), H, c_char_p],
    "cuModuleGetFunctionCount": [POINTER(c_uint), H],
    "cuModuleEnumerateFunctions": [PH, c_uint, H],
    "cuLibraryLoadData": [PH, P, P, P, c_uint, P, P, c_uint],
    "cuLibraryLoadFromFile": [PH, c_char_p, P, P, c_uint, P, P, c_uint],
    "cuLibraryUnload": [H],
    "cuLibraryGetKernel": [PH, H, c_char_p],
    "cuLibraryGetKernelCount": [POINTER(c_uint), H],
    "cuLibraryEnumerateKernels": [PH, c_uint, H],
    "cuLibraryGetModule": [PH, H],
    "cuKernelGetFunction": [PH, H],
    "cuKernelGetName": [POINTER(c_char_p), H],
    "cuKernelGetAttribute": [POINTER(c_int), c_int, H, c_int],
    "cuKernelSetAttribute": [c_int, c_int, H, c_int],
    "cuFuncGetName": [POINTER(c_char_p), H],
    "cuFuncGetModule": [PH, H],
    "cuFuncGetParamInfo": [H, c_size_t, POINTER(c_size_t), POINTER(c_size_t)],
    "cuFuncGetAttribute": [POINTER(c_int), c_int, H],
    "cuFuncSetAttribute": [H, c_int, c_int],
    "cuFuncIsLoaded": [POINTER(c_int), H],
    "cuFuncLoad": [H],
    "cuLaunchKernel": [H, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, H, P, P],
    "cuLaunchKernelEx": [POINTER(CUlaunchConfig), H, P, P],
    "cuLaunchCooperativeKernel": [H, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, H, P],
    "cuLaunchHostFunc": [H, HOSTFN, P],
    "cuStreamCreate": [PH, c_uint],
    "cuStreamDestroy_v2": [H],
    "cuStreamSynchronize": [H],
    "cuStreamQuery": [H],
    "cuStreamWaitEvent": [H, H, c_uint],
    "cuStreamIsCapturing": [H, POINTER(c_int)],
    "cuStreamBeginCapture_v2": [H, c_int],
    "cuStreamEndCapture": [H, PH],
    "cuStreamGetCaptureInfo_v3": [H, POINTER(c_int), POINTER(c_u64), PH, POINTER(P), POINTER(P), POINTER(c_size_t)],
    "cuThreadExchangeStreamCaptureMode": [POINTER(c_int)],
    "cuEventCreate": [PH, c_uint],
    "cuEventDestroy_v2": [H],
    "cuEventRecord": [H, H],
    "cuEventRecordWithFlags": [H, H, c_uint],
    "cuEventSynchronize": [H],
    "cuEventQuery": [H],
    "cuEventElapsedTime_v2": [POINTER(ctypes.c_float), H, H],
    "cuGraphCreate": [PH, c_uint],
    "cuGraphDestroy": [H],
    "cuGraphClone": [PH, H],
    "cuGraphGetNodes": [H, PH, POINTER(c_size_t)],
    "cuGraphGetRootNodes": [H, PH, POINTER(c_size_t)],
    "cuGraphGetEdges_v2": [H, PH, PH, POINTER(CUgraphEdgeData), POINTER(c_size_t)],
    "cuGraphGetEdges": [H, PH, PH, POINTER(c_size_t)],
    "cuGraphNodeGetType": [H, POINTER(c_int)],
    "cuGraphDestroyNode": [H],
    "cuGraphAddKernelNode_v2": [PH, H, PH, c_size_t, POINTER(CUDA_KERNEL_NODE_PARAMS)],
    "cuGraphKernelNodeGetParams_v2": [H, POINTER(CUDA_KERNEL_NODE_PARAMS)],
    "cuGraphKernelNodeSetParams_v2": [H, POINTER(CUDA_KERNEL_NODE_PARAMS)],
    "cuGraphKernelNodeGetAttribute": [H, c_int, POINTER(CUlaunchAttributeValue)],
    "cuGraphKernelNodeSetAttribute": [H, c_int, POINTER(CUlaunchAttributeValue)],
    "cuGraphAddDependencies_v2": [H, PH, PH, POINTER(CUgraphEdgeData), c_size_t],
    "cuGraphAddEmptyNode": [PH, H, PH, c_size_t],
    "cuGraphAddMemsetNode": [PH, H, PH, c_size_t, POINTER(CUDA_MEMSET_NODE_PARAMS), H],
    "cuGraphMemsetNodeGetParams": [H, POINTER(CUDA_MEMSET_NODE_PARAMS)],
    "cuGraphAddChildGraphNode": [PH, H, PH, c_size_t, H],
    "cuGraphChildGraphNodeGetGraph": [H, PH],
    "cuGraphAddEventRecordNode": [PH, H, PH, c_size_t, H],
    "cuGraphAddEventWaitNode": [PH, H, PH, c_size_t, H],
    "cuGraphEventRecordNodeGetEvent": [H, PH],
    "cuGraphAddHostNode": [PH, H, PH, c_size_t, POINTER(CUDA_HOST_NODE_PARAMS)],
    "cuGraphInstantiateWithFlags": [PH, H, ctypes.c_ulonglong],
    "cuGraphLaunch": [H, H],
    "cuGraphUpload": [H, H],
    "cuGraphExecDestroy": [H],
    "cuGraphExecKernelNodeSetParams_v2": [H, H, POINTER(CUDA_KERNEL_NODE_PARAMS)],
    "cuGraphExecUpdate_v2": [H, H, POINTER(CUgraphExecUpdateResultInfo)],
}

_SUFFIXES = ("", "_v2", "_v3", "_ptsz", "_ptds", "_v2_ptsz", "_v2_ptds", "_v3_ptsz")

_driver: ctypes.CDLL | None = None


def driver() -> ctypes.CDLL:
    """libcuda.so.1, loaded once (dlopen by soname: LD_LIBRARY_PATH decides which one)."""
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


def fn(name: str) -> Any:
    """The dlsym'd entry point ``name`` with its argument types set (int return = CUresult)."""
    f = getattr(driver(), name)
    if name in SIGS and f.argtypes is None:
        f.argtypes = SIGS[name]
        f.restype = c_int
    return f


def error_name(code: int) -> str:
    s = c_char_p()
    if fn("cuGetErrorName")(code, ctypes.byref(s)) != 0 or not s.value:
        return f"CUresult({code})"
    return s.value.decode()


class CudaError(RuntimeError):
    def __init__(self, code: int, what: str) -> None:
        self.code = code
        self.name = error_name(code)
        super().__init__(f"{what} failed: {self.name} ({code})")


def check(result: int, what: str) -> None:
    """Raise CudaError (a RuntimeError) naming the call and cuGetErrorName(result) unless success."""
    if result != CUDA_SUCCESS:
        raise CudaError(result, what)


def call(name: str, *args: Any) -> None:
    check(fn(name)(*args), name)


def proc_address(name: str, version: int = 13000, flags: int = 0) -> tuple[int, int, int]:
    """Raw cuGetProcAddress_v2: (CUresult, address or 0, symbolStatus)."""
    p = c_void_p()
    st = c_int(-1)
    r = fn("cuGetProcAddress_v2")(name.encode(), ctypes.byref(p), version, flags, ctypes.byref(st))
    return r, p.value or 0, st.value


def symbol_address(name: str) -> int:
    """Address dlsym gives for ``name`` (0 if absent)."""
    try:
        return ctypes.cast(getattr(driver(), name), c_void_p).value or 0
    except AttributeError:
        return 0


def proc_symbol(name: str, version: int = 13000, flags: int = 0) -> str | None:
    """Which exported symbol cuGetProcAddress_v2(name, version, flags) returned, if identifiable."""
    r, addr, _ = proc_address(name, version, flags)
    check(r, f"cuGetProcAddress_v2({name!r}, {version}, {flags})")
    cands = [name + s for s in _SUFFIXES] + ["cuGraphInstantiateWithFlags"]
    for cand in cands:
        if symbol_address(cand) == addr:
            return cand
    return None


def proc(name: str, version: int = 13000, flags: int = 0, argtypes: Sequence[Any] | None = None) -> Any:
    """The entry point ``name`` (a base name such as "cuMemAlloc") as ``cuGetProcAddress_v2`` resolves
    it for ``version``/``flags``; a ctypes function returning the CUresult. Argument types come from
    ``argtypes`` or, when the resolved implementation is a known symbol, from its signature."""
    r, addr, _ = proc_address(name, version, flags)
    check(r, f"cuGetProcAddress_v2({name!r}, {version}, {flags})")
    if argtypes is None:
        sym = proc_symbol(name, version, flags)
        base_sym = sym.replace("_ptsz", "").replace("_ptds", "") if sym else None
        argtypes = SIGS.get(sym or "") or SIGS.get(base_sym or "")
    if argtypes is not None:
        return ctypes.CFUNCTYPE(c_int, *argtypes)(addr)
    f: Any = ctypes.CFUNCTYPE(c_int)(addr)
    f.argtypes = None  # unknown signature: any arguments, converted by ctypes' defaults
    return f


ArgSpec = tuple[Any, Any]  # (ctypes type or "ptr", value)


def _arg_object(spec: ArgSpec) -> Any:
    t, v = spec
    if t == "ptr":
        t = c_u64
    if isinstance(v, t):
        return v
    if isinstance(v, tuple):
        return t(*v)
    return t(v)


def pack_args(args: Sequence[ArgSpec]) -> bytes:
    """Arguments laid out with natural C alignment, as a CU_LAUNCH_PARAM_BUFFER_POINTER buffer."""
    buf = bytearray()
    for spec in args:
        obj = _arg_object(spec)
        al = ctypes.alignment(type(obj))
        buf += bytes(-len(buf) % al)
        buf += bytes(obj)
    return bytes(buf)
