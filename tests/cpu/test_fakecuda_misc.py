"""Tests of the fake CUDA driver itself (no Foundry): managed/host memory, cooperative launch, pools,
callbacks, capture dependency updates, instantiate with params, JIT-option module loads."""

from __future__ import annotations

from pathlib import Path

from tests.support.fakecuda_helpers import INVALID_VALUE, run


def test_misc_driver_apis(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    res = {}
    o = cu.malloc(64)
    # managed / pinned host memory are usable by kernels
    m, h = c_uint64(), c_void_p()
    fn("cuMemAllocManaged").argtypes = [ctypes.POINTER(c_uint64), c_size_t, c_uint]
    call("cuMemAllocManaged", byref(m), 64, 1)
    fn("cuMemAllocHost_v2").argtypes = [ctypes.POINTER(c_void_p), c_size_t]
    call("cuMemAllocHost_v2", byref(h), 64)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", m.value), (c_float, 1.5), (c_int, 4)])
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", h.value), (c_float, 2.5), (c_int, 4)])
    res["managed"] = cu.read_f32(m.value, 4)
    res["host"] = list((c_float * 4).from_address(h.value))
    fn("cuMemFreeHost").argtypes = [c_void_p]
    res["free_host_wrong"] = fn("cuMemFreeHost")(m.value)
    call("cuMemFreeHost", h)
    # cooperative launch
    fn("cuLaunchCooperativeKernel").argtypes = SIGS["cuLaunchCooperativeKernel"]
    objs = [c_uint64(o), c_float(3.0), c_int(4)]
    arr = (c_void_p * 3)(*[ctypes.cast(ctypes.pointer(x), c_void_p) for x in objs])
    res["coop"] = fn("cuLaunchCooperativeKernel")(F["fk_fill_f32"], 1, 1, 1, 4, 1, 1, 0, None, arr)
    res["coop_too_big"] = fn("cuLaunchCooperativeKernel")(F["fk_fill_f32"], 100000, 1, 1, 4, 1, 1, 0, None, arr)
    # pools and stream-ordered allocation
    pool = c_void_p()
    fn("cuDeviceGetDefaultMemPool").argtypes = [ctypes.POINTER(c_void_p), c_int]
    call("cuDeviceGetDefaultMemPool", byref(pool), 0)
    fn("cuMemAllocFromPoolAsync").argtypes = [ctypes.POINTER(c_uint64), c_size_t, c_void_p, c_void_p]
    pa = c_uint64()
    call("cuMemAllocFromPoolAsync", byref(pa), 32, pool, None)
    s = cu.stream_create()
    fn("cuMemcpyAsync").argtypes = [c_uint64, c_uint64, c_size_t, c_void_p]
    call("cuMemcpyAsync", pa.value, o, 16, s)
    res["pool_copy"] = cu.read_f32(pa.value, 4)
    call("cuMemFreeAsync", pa.value, s)
    # callbacks
    hits = []
    CB = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p)
    cb = CB(lambda st, status, u: hits.append(status))
    fn("cuStreamAddCallback").argtypes = [c_void_p, CB, c_void_p, c_uint]
    call("cuStreamAddCallback", s, cb, None, 0)
    res["callback"] = hits
    # capture with explicit dependency updates and graph-structure queries
    cu.begin_capture(s)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, 1.0), (c_int, 4)], stream=s)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o + 16), (c_float, 2.0), (c_int, 4)], stream=s)
    st, g, deps, nd = c_int(), c_void_p(), c_void_p(), c_size_t()
    call("cuStreamGetCaptureInfo_v3", s, byref(st), None, byref(g), byref(deps), None, byref(nd))
    first = cu.graph_nodes(g.value)[0]
    PV = ctypes.POINTER(c_void_p)
    fn("cuStreamUpdateCaptureDependencies_v2").argtypes = [c_void_p, PV, c_void_p, c_size_t, c_uint]
    call("cuStreamUpdateCaptureDependencies_v2", s, (c_void_p * 1)(first), None, 1, 0)   # ADD
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o + 32), (c_float, 3.0), (c_int, 4)], stream=s)
    g = cu.end_capture(s)
    n0, n1, n2 = cu.graph_nodes(g)
    fn("cuGraphNodeGetDependencies_v2").argtypes = [c_void_p, PV, c_void_p, ctypes.POINTER(c_size_t)]
    k = c_size_t(); call("cuGraphNodeGetDependencies_v2", n2, None, None, byref(k))
    res["deps_of_last"] = k.value
    cl = c_void_p(); call("cuGraphClone", byref(cl), g)
    fc = c_void_p()
    fn("cuGraphNodeFindInClone").argtypes = [ctypes.POINTER(c_void_p), c_void_p, c_void_p]
    call("cuGraphNodeFindInClone", byref(fc), n1, cl)
    res["found_in_clone"] = cu.graph_nodes(cl.value).index(fc.value)
    call("cuGraphDestroyNode", n1)
    res["after_destroy"] = [len(cu.graph_nodes(g)), len(cu.graph_edges(g))]
    class IP(ctypes.Structure):
        _fields_ = [("flags", c_uint64), ("hUploadStream", c_void_p), ("hErrNode_out", c_void_p),
                    ("result_out", c_int)]
    ip = IP()
    e = c_void_p()
    fn("cuGraphInstantiateWithParams").argtypes = [ctypes.POINTER(c_void_p), c_void_p, ctypes.POINTER(IP)]
    call("cuGraphInstantiateWithParams", byref(e), g, byref(ip))
    call("cuGraphUpload", e, s)
    cu.memset_d32(o, 0, 16)
    cu.graph_launch(e.value, s)
    res["ran"] = cu.read_f32(o, 12)
    res["result_out"] = ip.result_out
    # load with JIT options (ignored)
    mod = c_void_p()
    img = make_ptx(["fk_fill_f32"])
    call("cuModuleLoadDataEx", byref(mod), img, 0, None, None)
    res["ex"] = cu.func_name(cu.module_function(mod.value, "fk_fill_f32"))
    out(**res)
    """,
    )
    assert r["managed"] == [1.5] * 4 and r["host"] == [2.5] * 4 and r["free_host_wrong"] == INVALID_VALUE
    assert r["coop"] == 0 and r["coop_too_big"] == 720  # CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
    assert r["pool_copy"] == [3.0] * 4 and r["callback"] == [0]
    assert r["deps_of_last"] == 2 and r["found_in_clone"] == 1
    assert r["after_destroy"] == [2, 1]
    assert r["ran"] == [1.0] * 4 + [0.0] * 4 + [3.0] * 4 and r["result_out"] == 0
    assert r["ex"] == "fk_fill_f32"
