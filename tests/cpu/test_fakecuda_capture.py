"""Tests of the fake CUDA driver itself (no Foundry): stream capture (eager vs replay, captured node
params, fork/join and capture errors), events and capture info."""

from __future__ import annotations

from pathlib import Path

from tests.support.fakecuda_helpers import (
    CAPTURE_INVALIDATED,
    CAPTURE_UNJOINED,
    CAPTURE_UNSUPPORTED,
    INVALID_HANDLE,
    run,
)

# A small "model step" used eagerly and under capture: memset, HtoD copy, kernels with kernelParams
# and with an extra buffer, DtoD copy, a host callback, philox reading seed/offset from memory.
STEP = """
n = 16
x, y, z, r = cu.malloc(4 * n), cu.malloc(4 * n), cu.malloc(4 * n), cu.malloc(4 * n)
seed, off = cu.malloc(8), cu.malloc(8)
host_in = (c_float * n)(*[float(i) for i in range(n)])
calls = []
def step(s):
    call("cuMemsetD32Async", y, 0x3F800000, n, s)                      # y = 1.0
    call("cuMemcpyHtoDAsync_v2", x, host_in, 4 * n, s)                 # x = 0..15
    cu.launch(F["fk_axpy_f32"], (1, 1, 1), (n, 1, 1), [(c_float, 3.0), ("ptr", x), ("ptr", y), (c_int, n)], stream=s)
    cu.launch(F["fk_add_f32"], (4, 1, 1), (4, 1, 1), [("ptr", x), ("ptr", y), ("ptr", z), (c_int, n)], stream=s,
              use_extra=True)
    call("cuMemcpyDtoDAsync_v2", x, z, 4 * n, s)
    cu.launch(F["fk_philox_f32"], (1, 1, 1), (n, 1, 1),
              [("ptr", seed), ("ptr", off), (c_uint, 5), ("ptr", r), (c_int, n)], stream=s)
    cu.launch_host(s, lambda: calls.append(1))
def state():
    return [cu.read_f32(p, n) for p in (x, y, z, r)]
def reset():
    for p in (x, y, z, r):
        call("cuMemsetD32_v2", p, 0, n)
"""


def test_capture_instantiate_launch_reproduces_eager(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        prefix=STEP,
        body="""
    s = cu.stream_create()
    cu.write_u64(seed, 7); cu.write_u64(off, 100)
    step(s)
    eager = state()
    reset()
    cu.begin_capture(s)
    capturing = cu.capture_status(s)
    step(s)
    mode = c_int(CU_STREAM_CAPTURE_MODE_RELAXED)
    call("cuThreadExchangeStreamCaptureMode", byref(mode))   # sync copies are legal in relaxed mode
    during = state()                 # nothing ran during capture
    call("cuThreadExchangeStreamCaptureMode", byref(mode))
    g = cu.end_capture(s)
    types = [cu.node_type(nd) for nd in cu.graph_nodes(g)]
    edges = len(cu.graph_edges(g))
    e = cu.instantiate(g)
    cu.graph_launch(e, s)
    replay = state()
    cu.write_u64(off, 200)           # RNG state is read from memory at run time
    cu.graph_launch(e, 0)
    replay2 = state()
    out(eager=eager, during=during, replay=replay, types=types, edges=edges, capturing=capturing,
        calls=len(calls), rng_changed=replay2[3] != replay[3],
        rng_ok=replay2[3] == [philox_ref(7, 205, i) for i in range(n)])
    """,
    )
    assert r["capturing"] == 1
    assert r["during"] == [[0.0] * 16] * 4
    assert r["replay"] == r["eager"]
    x, y, z, rr = r["eager"]
    assert y == [1.0 + 3.0 * i for i in range(16)] and x == z == [4.0 * i + 1.0 for i in range(16)]
    assert rr == [philox_ref_py(7, 105, i) for i in range(16)]
    assert r["types"] == ["memset", "memcpy", "kernel", "kernel", "memcpy", "kernel", "host"]
    assert r["edges"] == 6
    assert r["calls"] == 3 and r["rng_changed"] and r["rng_ok"]


def philox_ref_py(seed: int, offset: int, i: int) -> float:
    from tests.support.fakecu import philox_ref

    return philox_ref(seed, offset, i)


def test_captured_copy_and_kernel_node_params(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    s = cu.stream_create()
    o = cu.malloc(64)
    host = (c_float * 4)(1, 2, 3, 4)
    cu.begin_capture(s)
    call("cuMemcpyHtoDAsync_v2", o, host, 16, s)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, 9.0), (c_int, 4)], stream=s)
    cu.launch(F["fk_scale_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, 2.0), (c_int, 4)], stream=s,
              use_extra=True)
    g = cu.end_capture(s)
    cp, k1, k2 = cu.graph_nodes(g)
    class M3(ctypes.Structure):
        _fields_ = [("a", c_size_t * 4), ("srcMemoryType", c_int), ("_p", c_int), ("srcHost", c_void_p)]
    m = (ctypes.c_char * 400)()
    call_r = fn("cuGraphMemcpyNodeGetParams")
    call_r.argtypes = [c_void_p, c_void_p]
    call("cuGraphMemcpyNodeGetParams", cp, m)
    c3 = M3.from_buffer(m)
    p1 = cu.kernel_node_params(k1)
    p2 = cu.kernel_node_params(k2)
    args1 = [ctypes.cast(p1.kernelParams[0], ctypes.POINTER(c_uint64))[0] == o,
             ctypes.cast(p1.kernelParams[1], ctypes.POINTER(c_float))[0],
             ctypes.cast(p1.kernelParams[2], ctypes.POINTER(c_int))[0]]
    ex = [p2.extra[i] or 0 for i in range(5)]
    size = ctypes.cast(ex[3], ctypes.POINTER(c_size_t))[0]
    buf = ctypes.string_at(ex[1], size)
    out(src_type=c3.srcMemoryType, src_host=c3.srcHost == ctypes.addressof(host), args1=args1,
        k1=[p1.func == F["fk_fill_f32"], p1.kern is None, bool(p1.extra), p1.gridDimX, p1.blockDimX],
        k2=[bool(p2.kernelParams), ex[0], ex[2], ex[4], size,
            buf == pack_args([("ptr", o), (c_float, 2.0), (c_int, 4)])])
    """,
    )
    assert r["src_type"] == 1 and r["src_host"]  # CU_MEMORYTYPE_HOST
    assert r["args1"] == [True, 9.0, 4]
    assert r["k1"] == [True, True, False, 1, 4]
    assert r["k2"] == [False, 1, 2, 0, 16, True]


def test_fork_join_and_capture_errors(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    s1, s2 = cu.stream_create(), cu.stream_create()
    e1, e2 = cu.event_create(), cu.event_create()
    a = cu.malloc(64)
    def fill(s, v, off):
        cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", a + off), (c_float, v), (c_int, 4)], stream=s)
    cu.begin_capture(s1)
    fill(s1, 1.0, 0)
    cu.event_record(e1, s1)
    cu.stream_wait_event(s2, e1)                     # fork: s2 joins the capture
    joined = cu.capture_status(s2)
    fill(s2, 2.0, 16)
    fill(s1, 3.0, 32)
    cu.event_record(e2, s2)
    cu.stream_wait_event(s1, e2)                     # join back
    fill(s1, 4.0, 48)
    g = cu.end_capture(s1)
    after = cu.capture_status(s2)
    nodes = cu.graph_nodes(g)
    idx = {nd: i for i, nd in enumerate(nodes)}
    edges = sorted((idx[f], idx[t]) for f, t, _ in cu.graph_edges(g))
    e = cu.instantiate(g); cu.graph_launch(e, 0)
    vals = cu.read_f32(a, 16)
    # unjoined fork
    cu.begin_capture(s1)
    fill(s1, 1.0, 0); cu.event_record(e1, s1); cu.stream_wait_event(s2, e1); fill(s2, 2.0, 16)
    gg = c_void_p()
    unjoined = fn("cuStreamEndCapture")(s1, byref(gg))
    s2_after = cu.capture_status(s2)
    # synchronizing a capturing stream invalidates the capture
    cu.begin_capture(s1)
    fill(s1, 1.0, 0)
    sync = fn("cuStreamSynchronize")(s1)
    status = cu.capture_status(s1)
    more = cu.launch_raw(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", a), (c_float, 1.0), (c_int, 4)], stream=s1)
    end = fn("cuStreamEndCapture")(s1, byref(gg))
    # allocation while capturing (global mode) is prohibited and invalidates
    cu.begin_capture(s1)
    p = c_uint64()
    alloc = fn("cuMemAlloc_v2")(byref(p), 16)
    end2 = fn("cuStreamEndCapture")(s1, byref(gg))
    # relaxed mode allows it
    cu.begin_capture(s1, CU_STREAM_CAPTURE_MODE_RELAXED)
    alloc2 = fn("cuMemAlloc_v2")(byref(p), 16)
    g3 = cu.end_capture(s1)
    # legacy stream cannot capture; legacy-stream work during a blocking capture is implicit sync
    legacy = fn("cuStreamBeginCapture_v2")(None, 0)
    cu.begin_capture(s1)
    implicit = fn("cuMemsetD32Async")(a, 0, 4, None)
    end3 = fn("cuStreamEndCapture")(s1, byref(gg))
    out(joined=joined, after=after, edges=edges, vals=vals, unjoined=unjoined, null_graph=gg.value is None,
        s2_after=s2_after, sync=sync, status=status, more=more, end=end, alloc=alloc, end2=end2, alloc2=alloc2,
        legacy=legacy, implicit=implicit, end3=end3)
    """,
    )
    assert r["joined"] == 1 and r["after"] == 0
    # nodes: 0 fill s1, 1 fill s2, 2 fill s1, 3 join fill
    assert r["edges"] == [[0, 1], [0, 2], [1, 3], [2, 3]]
    assert r["vals"] == [1.0] * 4 + [2.0] * 4 + [3.0] * 4 + [4.0] * 4
    assert r["unjoined"] == CAPTURE_UNJOINED and r["null_graph"] and r["s2_after"] == 0
    assert r["sync"] == CAPTURE_UNSUPPORTED and r["status"] == 2
    assert r["more"] == CAPTURE_INVALIDATED and r["end"] == CAPTURE_INVALIDATED
    assert r["alloc"] == CAPTURE_UNSUPPORTED and r["end2"] == CAPTURE_INVALIDATED and r["alloc2"] == 0
    assert r["legacy"] == CAPTURE_UNSUPPORTED
    assert r["implicit"] == 906 and r["end3"] == CAPTURE_INVALIDATED


def test_events_streams_and_capture_info(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    import time
    s = cu.stream_create()
    e1, e2, nt = cu.event_create(), cu.event_create(), cu.event_create(2)   # 2 = DISABLE_TIMING
    ms = ctypes.c_float()
    never = fn("cuEventElapsedTime_v2")(byref(ms), e1, e2)
    cu.event_record(e1, s); time.sleep(0.02); cu.event_record(e2, s)
    call("cuEventElapsedTime_v2", byref(ms), e1, e2)
    no_timing = fn("cuEventElapsedTime_v2")(byref(ms), e1, nt)
    buf = cu.malloc(4)
    cu.begin_capture(s)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (1, 1, 1), [("ptr", buf), (c_float, 1.0), (c_int, 1)], stream=s)
    st, cid, gr, deps, edata, nd = c_int(), c_uint64(), c_void_p(), c_void_p(), c_void_p(), c_size_t()
    call("cuStreamGetCaptureInfo_v3", s, byref(st), byref(cid), byref(gr), byref(deps), byref(edata), byref(nd))
    cu.event_record(e1, s)
    captured_query = fn("cuEventQuery")(e1)
    g = cu.end_capture(s)
    first = ctypes.cast(deps, ctypes.POINTER(c_void_p))[0]
    out(never=never, elapsed=ms.value, no_timing=no_timing, info=[st.value, cid.value > 0, gr.value == g, nd.value,
        first == cu.graph_nodes(g)[0]], captured_query=captured_query, query=fn("cuStreamQuery")(s))
    """,
    )
    assert r["never"] == INVALID_HANDLE and r["no_timing"] == INVALID_HANDLE and r["elapsed"] >= 15.0
    assert r["info"] == [1, True, True, 1, True]
    assert r["captured_query"] == 907 and r["query"] == 0
