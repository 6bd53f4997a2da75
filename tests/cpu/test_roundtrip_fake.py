"""SAVE -> LOAD round trips on the fake CUDA driver, each half in its own process.

Every test captures graphs natively in a SAVE process, runs them on two sets of input values, and
saves them; a fresh LOAD process makes the same persistent allocations, rebuilds the graphs from the
archive and runs them on the same input sets. The loaded graph's outputs must equal the native
graph's exactly, for both input sets (the second one written into the static inputs after LOAD), and
the rebuilt graph must have the same nodes, parameters and edges as the captured one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.fakecuda.images import make_cubin
from tests.support.fakecu import philox_ref
from tests.support.graphs import (
    BASE,
    JsonRunner,
    RoundTrip,
    Scenario,
    f32,
    load_prefix,
    prelude,
    roundtrip,
    run_load,
    run_save,
)

N = 320  # elements per buffer; grids below cover fewer, so a lost grid/block shows in the output


def check_roundtrip(rt: RoundTrip, graph: str) -> None:
    """Loaded outputs == native outputs on every input set; rebuilt graph == captured graph."""
    native = rt.native(graph)
    assert rt.loaded(graph) == native
    assert len(native) >= 2 and native[0] != native[1], "the input sets must change the outputs"
    assert rt.load["structure"][graph] == rt.save["structure"][graph]
    assert rt.load["buffers"] == rt.save["buffers"]


def kernel_nodes(structure: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in structure["nodes"] if n["type"] == "kernel"]


# ------------------------------------------------------------------------------------------ kernels
ELEMENTWISE = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("t", 4 * n); buf("out", 4 * n); buf("st", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [0.5 * i + 100.0 * k for i in range(n)])
        cu.write_f32(B["y"], [2.0 + k] * n)
    READS["elementwise"] = [("t", n), ("out", n), ("st", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32", "fk_struct_arg")
    class Arg(ctypes.Structure):
        _fields_ = [("out", c_uint64), ("scale", c_float), ("n", c_int), ("bias", c_double)]
    assert ctypes.sizeof(Arg) == 24
    s = cu.stream_create()
    cu.begin_capture(s)
    call("cuMemsetD32Async", B["t"], f32_bits(-1.0), n, s)                              # memset node
    cu.launch(K["fk_add_f32"], (2, 1, 1), (128, 1, 1),                                  # 256 of 320
              [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["t"]), (c_int, n)], stream=s)
    cu.launch(K["fk_scale_f32"], (1, 1, 1), (64, 1, 1),                                 # 64 of 320
              [("ptr", B["t"]), (c_float, 3.0), (c_int, n)], stream=s, use_extra=True)
    call("cuMemcpyDtoDAsync_v2", B["out"], B["t"], 4 * n, s)                            # memcpy node
    call("cuMemsetD32Async", B["st"], f32_bits(-2.0), n, s)
    cu.launch(K["fk_struct_arg"], (1, 1, 1), (200, 1, 1), [(Arg, (B["st"], 0.5, n, 0.25))], stream=s)
    add_graph("elementwise", cu.end_capture(s))
    """,
)


def test_kernel_params_extra_struct_grid_memset_memcpy_roundtrip(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, ELEMENTWISE, tmp_path / "arch")
    check_roundtrip(rt, "elementwise")
    for k, run in enumerate(rt.loaded("elementwise")):
        s = [f32(0.5 * i + 100.0 * k) + (2.0 + k) for i in range(N)]
        want = [f32(v * 3.0) if i < 64 else v if i < 256 else -1.0 for i, v in enumerate(s)]
        assert run["t"] == want and run["out"] == want
        assert run["st"] == [f32(f32(0.5 * i) + 0.25) if i < 200 else -2.0 for i in range(N)]
    nodes = rt.load["structure"]["elementwise"]["nodes"]
    assert [n["type"] for n in nodes] == ["memset", "kernel", "kernel", "memcpy", "memset", "kernel"]
    add, scale, struct_ = kernel_nodes(rt.load["structure"]["elementwise"])
    assert (add["name"], add["grid"], add["block"], add["mode"]) == ("fk_add_f32", [2, 1, 1], [128, 1, 1], "params")
    assert (scale["name"], scale["grid"], scale["block"]) == ("fk_scale_f32", [1, 1, 1], [64, 1, 1])
    assert scale["mode"] == "extra"
    assert struct_["mode"] == "params" and len(bytes.fromhex(struct_["args"])) == 24
    memcpy = nodes[3]
    buffers = rt.load["buffers"]
    assert (memcpy["src"], memcpy["dst"], memcpy["width"]) == (buffers["t"], buffers["out"], 4 * N)
    assert rt.meta("elementwise")["stats"]["kernel"] == 3


CLUSTER_SMEM = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("out", 4 * n); buf("big", 4 * n); buf("out2", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i % 7) + k for i in range(n)])
        cu.write_f32(B["y"], [0.25 * i - 3.0 * k for i in range(n)])
    READS["cluster"] = [("out", n), ("big", n), ("out2", n)]
    """,
    capture="""
    K = module("fk_cluster_add_f32", "fk_bigsmem_f32")
    cu.set_func_attr(K["fk_bigsmem_f32"], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 * 1024)
    # Another image: its cluster kernel gets its cluster shape from function attributes (required
    # cluster width/height/depth, 11-13) instead of a launch attribute.
    K2 = module("fk_cluster_add_f32", "fk_scale_f32")
    for attr, value in ((11, 2), (12, 1), (13, 1)):
        cu.set_func_attr(K2["fk_cluster_add_f32"], attr, value)
    s = cu.stream_create()
    cu.begin_capture(s)
    cu.launch_ex(K["fk_cluster_add_f32"], (4, 1, 1), (64, 1, 1),
                 [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["out"]), (c_int, n)], stream=s, cluster=(2, 1, 1))
    cu.launch(K["fk_bigsmem_f32"], (1, 1, 1), (300, 1, 1), [("ptr", B["big"]), (c_int, n)], shared=64 * 1024,
              stream=s)
    cu.launch(K2["fk_cluster_add_f32"], (2, 1, 1), (100, 1, 1),
              [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["out2"]), (c_int, n)], stream=s)
    cu.launch_ex(K2["fk_scale_f32"], (1, 1, 1), (n, 1, 1), [("ptr", B["out2"]), (c_float, -1.0), (c_int, n)],
                 stream=s, attrs=[(CU_LAUNCH_ATTRIBUTE_PRIORITY, [3]), (10, [1])])   # priority, mem sync domain
    params, _ = cu._params([("ptr", B["big"]), (c_float, 2.0), (c_int, n)], False)
    call("cuLaunchCooperativeKernel", K2["fk_scale_f32"], 1, 1, 1, n, 1, 1, 0, s, params)
    add_graph("cluster", cu.end_capture(s))
    """,
)


def test_cluster_cooperative_priority_and_big_shared_memory_restored(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, CLUSTER_SMEM, tmp_path / "arch")
    check_roundtrip(rt, "cluster")
    cluster, big, by_function, scale, cooperative = kernel_nodes(rt.load["structure"]["cluster"])
    assert cluster["cluster"] == [2, 1, 1]
    assert big["shared"] == 64 * 1024
    # The LOAD process never called cuFuncSetAttribute itself: LOAD restored the saved attributes
    # (without them the fake refuses to instantiate a >48 KiB launch or an unclustered cluster kernel).
    assert big["max_dynamic_shared"] == 64 * 1024
    assert by_function["cluster"] == [0, 0, 0]
    functions = rt.meta("cluster")["functions"]
    assert [f[2][0] for f in functions] == [0, 64 * 1024, 0, 0]
    assert [f[2][2:5] for f in functions] == [[0, 0, 0], [0, 0, 0], [2, 1, 1], [0, 0, 0]]
    assert scale["attrs"]["8"][0] == 3 and scale["attrs"]["10"][0] == 1  # priority, mem sync domain
    assert cooperative["attrs"]["2"][0] == 1  # cuLaunchCooperativeKernel
    for k, run in enumerate(rt.loaded("cluster")):
        s = [f32(float(i % 7) + k) + f32(0.25 * i - 3.0 * k) for i in range(N)]
        assert run["out"] == [v if i < 256 else 0.0 for i, v in enumerate(s)]
        assert run["big"] == [2.0 * i if i < 300 else 0.0 for i in range(N)]
        assert run["out2"] == [-v if i < 200 else -0.0 for i, v in enumerate(s)]


COPIES = Scenario(
    alloc=f"""
    n = {N}
    buf("src", 4 * n); buf("d8", 4 * n); buf("d16", 4 * n); buf("m2", 4 * n); buf("m3", 4 * n); buf("ms2", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["src"], [float(i) + 1000.0 * k for i in range(n)])
    READS["copies"] = [("d8", n), ("d16", n), ("m2", n), ("m3", n)]
    READS["memset2d"] = [("ms2", n)]
    """,
    capture="""
    class MEMCPY2D(ctypes.Structure):
        _fields_ = [
            ("srcXInBytes", c_size_t), ("srcY", c_size_t), ("srcMemoryType", c_int), ("srcHost", c_void_p),
            ("srcDevice", c_uint64), ("srcArray", c_void_p), ("srcPitch", c_size_t),
            ("dstXInBytes", c_size_t), ("dstY", c_size_t), ("dstMemoryType", c_int), ("dstHost", c_void_p),
            ("dstDevice", c_uint64), ("dstArray", c_void_p), ("dstPitch", c_size_t),
            ("WidthInBytes", c_size_t), ("Height", c_size_t),
        ]
    DEVICE = 2  # CU_MEMORYTYPE_DEVICE
    s = cu.stream_create()
    cu.begin_capture(s)
    call("cuMemsetD8Async", B["d8"], 0x41, 4 * n - 12, s)
    fn("cuMemsetD16Async").argtypes = [c_uint64, ctypes.c_ushort, c_size_t, c_void_p]
    check(fn("cuMemsetD16Async")(B["d16"], 0x4040, 2 * n - 2, s), "cuMemsetD16Async")
    p2 = MEMCPY2D(srcXInBytes=16, srcY=2, srcMemoryType=DEVICE, srcDevice=B["src"], srcPitch=64,
                  dstXInBytes=8, dstY=1, dstMemoryType=DEVICE, dstDevice=B["m2"], dstPitch=48,
                  WidthInBytes=32, Height=5)
    fn("cuMemcpy2DAsync_v2").argtypes = [c_void_p, c_void_p]
    check(fn("cuMemcpy2DAsync_v2")(byref(p2), s), "cuMemcpy2DAsync_v2")
    p3 = MEMCPY3D(srcXInBytes=4, srcY=1, srcZ=1, srcMemoryType=DEVICE, srcDevice=B["src"], srcPitch=64,
                  srcHeight=4, dstXInBytes=0, dstY=2, dstZ=1, dstMemoryType=DEVICE, dstDevice=B["m3"],
                  dstPitch=32, dstHeight=4, WidthInBytes=16, Height=3, Depth=2)
    fn("cuMemcpy3DAsync_v2").argtypes = [c_void_p, c_void_p]
    check(fn("cuMemcpy3DAsync_v2")(byref(p3), s), "cuMemcpy3DAsync_v2")
    add_graph("copies", cu.end_capture(s))
    # A pitched 2D memset node (built by hand), then a copy node that depends on it.
    g = c_void_p(); call("cuGraphCreate", byref(g), 0)
    mp = CUDA_MEMSET_NODE_PARAMS(B["ms2"] + 4, 64, f32_bits(9.5), 4, 8, 5)
    ms = c_void_p(); call("cuGraphAddMemsetNode", byref(ms), g, None, 0, byref(mp), cu.ctx)
    cp = MEMCPY3D(srcMemoryType=DEVICE, srcDevice=B["src"] + 40, dstMemoryType=DEVICE, dstDevice=B["ms2"] + 8,
                  WidthInBytes=12, Height=1, Depth=1)
    add_memcpy = fn("cuGraphAddMemcpyNode")
    add_memcpy.argtypes = [c_void_p, c_void_p, c_void_p, c_size_t, c_void_p, c_void_p]
    nd = c_void_p()
    check(add_memcpy(byref(nd), g, (c_void_p * 1)(ms.value), 1, byref(cp), cu.ctx), "cuGraphAddMemcpyNode")
    add_graph("memset2d", g.value)
    """,
)


def _copy3d(src: bytes, dst: bytearray, s: tuple[int, ...], d: tuple[int, ...], extent: tuple[int, int, int]) -> None:
    """A strided copy: s/d = (x bytes, y, z, pitch, height); extent = (width bytes, height, depth)."""
    width, height, depth = extent
    for z in range(depth):
        for y in range(height):
            a = s[0] + (s[2] + z) * s[3] * s[4] + (s[1] + y) * s[3]
            b = d[0] + (d[2] + z) * d[3] * d[4] + (d[1] + y) * d[3]
            dst[b : b + width] = src[a : a + width]


def _floats(data: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def test_memset_and_memcpy_nodes_keep_element_size_pitch_offsets_and_extent(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    rt = roundtrip(app_json, COPIES, tmp_path / "arch")
    check_roundtrip(rt, "copies")
    check_roundtrip(rt, "memset2d")
    copies = rt.load["structure"]["copies"]["nodes"]
    assert [(n["type"], n.get("element_size")) for n in copies] == [
        ("memset", 1), ("memset", 2), ("memcpy", None), ("memcpy", None)
    ]  # fmt: skip
    assert (copies[3]["width"], copies[3]["height"], copies[3]["depth"]) == (16, 3, 2)
    for k, run in enumerate(rt.loaded("copies")):
        src = struct.pack(f"<{N}f", *[float(i) + 1000.0 * k for i in range(N)])
        assert run["d8"] == _floats(b"\x41" * (4 * N - 12) + bytes(12))
        assert run["d16"] == _floats(b"\x40" * (4 * N - 4) + bytes(4))
        m2, m3 = bytearray(4 * N), bytearray(4 * N)
        _copy3d(src, m2, (16, 2, 0, 64, 0), (8, 1, 0, 48, 0), (32, 5, 1))
        _copy3d(src, m3, (4, 1, 1, 64, 4), (0, 2, 1, 32, 4), (16, 3, 2))
        assert run["m2"] == _floats(bytes(m2)) and run["m3"] == _floats(bytes(m3))
        ms2 = [0.0] * N
        for row in range(5):
            ms2[1 + 16 * row : 9 + 16 * row] = [9.5] * 8
        ms2[2:5] = [10.0 + 1000.0 * k, 11.0 + 1000.0 * k, 12.0 + 1000.0 * k]
        assert rt.loaded("memset2d")[k]["ms2"] == ms2


# ------------------------------------------------------------------------------------ graph shapes
FORK_JOIN = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("t", 4 * n); buf("sum", 4); buf("o2", 4 * n); buf("o3", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i) for i in range(n)])
        cu.write_f32(B["y"], [1.5 * k - 0.5] * n)
    READS["fork_join"] = [("sum", 1), ("o2", n), ("o3", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32", "fk_sum_f32", "fk_copy_bytes")
    s1, s2 = cu.stream_create(), cu.stream_create()
    e1, e2 = cu.event_create(), cu.event_create()
    full = ((2, 1, 1), (160, 1, 1))
    cu.begin_capture(s1)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["t"]), (c_int, n)], stream=s1)
    cu.event_record(e1, s1)
    cu.stream_wait_event(s2, e1)                                                        # fork
    cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B["o2"]), ("ptr", B["t"]), (c_uint64, 4 * n)],
              stream=s2)
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["o2"]), (c_float, 2.0), (c_int, n)], stream=s2)
    cu.launch(K["fk_sum_f32"], (1, 1, 1), (1, 1, 1), [("ptr", B["t"]), ("ptr", B["sum"]), (c_int, n)], stream=s1)
    cu.event_record(e2, s2)
    cu.stream_wait_event(s1, e2)                                                        # join
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["o2"]), ("ptr", B["t"]), ("ptr", B["o3"]), (c_int, n)], stream=s1)
    add_graph("fork_join", cu.end_capture(s1))
    """,
)


def test_two_stream_fork_join_roundtrip(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, FORK_JOIN, tmp_path / "arch")
    check_roundtrip(rt, "fork_join")
    structure = rt.load["structure"]["fork_join"]
    names = [n["name"] for n in structure["nodes"]]
    assert names == ["fk_add_f32", "fk_copy_bytes", "fk_scale_f32", "fk_sum_f32", "fk_add_f32"]
    assert [e[:2] for e in structure["edges"]] == [[0, 1], [0, 3], [1, 2], [2, 4], [3, 4]]
    for k, run in enumerate(rt.loaded("fork_join")):
        t = [float(i) + (1.5 * k - 0.5) for i in range(N)]
        assert run["sum"] == [f32(sum(t))]
        assert run["o2"] == [2.0 * v for v in t] and run["o3"] == [3.0 * v for v in t]


PDL = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("t", 4 * n); buf("out", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i) * (k + 1) for i in range(n)])
        cu.write_f32(B["y"], [4.0] * n)
    READS["pdl"] = [("t", n), ("out", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32", "fk_copy_bytes")
    s = cu.stream_create()
    full = ((1, 1, 1), (n, 1, 1))
    cu.begin_capture(s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["t"]), (c_int, n)], stream=s)
    cu.launch_ex(K["fk_scale_f32"], *full, [("ptr", B["t"]), (c_float, 2.0), (c_int, n)], stream=s, programmatic=True)
    cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B["out"]), ("ptr", B["t"]), (c_uint64, 4 * n)],
              stream=s)
    cu.launch_ex(K["fk_scale_f32"], *full, [("ptr", B["out"]), (c_float, 0.5), (c_int, n)], stream=s,
                 programmatic=True)
    add_graph("pdl", cu.end_capture(s))
    """,
)


def test_programmatic_edges_rebuilt_with_their_edge_data_despite_driver_bug(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    # FAKECUDA_EDGE_DATA_BUG=1 at LOAD: a bulk cuGraphAddDependencies_v2 would give every edge the
    # first edge's data, so the edges come back right only if LOAD adds them grouped by edge data.
    rt = roundtrip(app_json, PDL, tmp_path / "arch", load_env={"FAKECUDA_EDGE_DATA_BUG": "1"})
    check_roundtrip(rt, "pdl")
    programmatic = [1, 0, 1]  # (from_port PROGRAMMATIC, to_port 0, type PROGRAMMATIC)
    assert rt.save["structure"]["pdl"]["edges"] == [[0, 1, programmatic], [1, 2, [0, 0, 0]], [2, 3, programmatic]]
    assert rt.load["structure"]["pdl"]["edges"] == rt.save["structure"]["pdl"]["edges"]


CHILD = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("t", 4 * n); buf("out", 4 * n); buf("flag", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [1.0 + i + k for i in range(n)])
        cu.write_f32(B["y"], [-0.5 * i for i in range(n)])
    READS["nested"] = [("t", n), ("out", n)]
    READS["manual"] = [("t", n), ("flag", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32", "fk_copy_bytes")
    s = cu.stream_create()
    full = ((1, 1, 1), (n, 1, 1))
    # inner: t = x + y
    cu.begin_capture(s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["t"]), (c_int, n)], stream=s)
    inner = cu.end_capture(s)
    # middle: launch(inner) [a child-graph node], t *= 3
    cu.begin_capture(s)
    cu.graph_launch(cu.instantiate(inner), s)
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["t"]), (c_float, 3.0), (c_int, n)], stream=s)
    middle = cu.end_capture(s)
    # nested: launch(middle), out = t
    cu.begin_capture(s)
    cu.graph_launch(cu.instantiate(middle), s)
    cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B["out"]), ("ptr", B["t"]), (c_uint64, 4 * n)],
              stream=s)
    add_graph("nested", cu.end_capture(s))
    # manual: cuGraphCreate + cuGraphAddChildGraphNode(middle) -> empty node -> memset node
    g = c_void_p(); call("cuGraphCreate", byref(g), 0)
    child = c_void_p(); call("cuGraphAddChildGraphNode", byref(child), g, None, 0, middle)
    empty = c_void_p(); call("cuGraphAddEmptyNode", byref(empty), g, (c_void_p * 1)(child.value), 1)
    mp = CUDA_MEMSET_NODE_PARAMS(B["flag"], 0, f32_bits(7.0), 4, n, 1)
    ms = c_void_p(); call("cuGraphAddMemsetNode", byref(ms), g, (c_void_p * 1)(empty.value), 1, byref(mp), cu.ctx)
    add_graph("manual", g.value)
    """,
)


def test_child_graph_nodes_nested_and_manual_roundtrip(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, CHILD, tmp_path / "arch")
    check_roundtrip(rt, "nested")
    check_roundtrip(rt, "manual")
    nested = rt.load["structure"]["nested"]
    assert [n["type"] for n in nested["nodes"]] == ["graph", "kernel"]
    middle = nested["nodes"][0]["child"]
    assert [n["type"] for n in middle["nodes"]] == ["graph", "kernel"]
    assert [n["name"] for n in middle["nodes"][0]["child"]["nodes"]] == ["fk_add_f32"]
    manual = rt.load["structure"]["manual"]
    assert [n["type"] for n in manual["nodes"]] == ["graph", "empty", "memset"]
    assert manual["edges"] == [[0, 1, [0, 0, 0]], [1, 2, [0, 0, 0]]]
    assert rt.meta("nested")["stats"]["child_graph"] == 2
    for k in (0, 1):
        t = [3.0 * (f32(1.0 + i + k) + (-0.5 * i)) for i in range(N)]
        assert rt.loaded("nested")[k] == {"t": t, "out": t}
        assert rt.loaded("manual")[k] == {"t": t, "flag": [7.0] * N}


EVENTS = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("t", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i) for i in range(n)])
        cu.write_f32(B["y"], [float(k + 1)] * n)
    READS["events"] = [("t", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32")
    s = cu.stream_create()
    ev = cu.event_create()
    full = ((1, 1, 1), (n, 1, 1))
    cu.begin_capture(s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["t"]), (c_int, n)], stream=s)
    call("cuEventRecordWithFlags", ev, s, 1)            # CU_EVENT_RECORD_EXTERNAL: an event-record node
    check(fn("cuStreamWaitEvent")(s, ev, 1), "wait")    # CU_EVENT_WAIT_EXTERNAL: an event-wait node
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["t"]), (c_float, -2.0), (c_int, n)], stream=s)
    add_graph("events", cu.end_capture(s))
    """,
)


def test_event_record_and_wait_nodes_roundtrip(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, EVENTS, tmp_path / "arch")
    check_roundtrip(rt, "events")
    nodes = rt.load["structure"]["events"]["nodes"]
    assert [n["type"] for n in nodes] == ["kernel", "event_record", "wait_event", "kernel"]
    assert nodes[1]["event"] == nodes[2]["event"]  # record and wait still name one (new) event
    assert rt.meta("events")["events"] == 1
    for k, run in enumerate(rt.loaded("events")):
        assert run["t"] == [-2.0 * (i + k + 1) for i in range(N)]


MODULES_AND_LIBRARIES = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("t", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [0.125 * i for i in range(n)])
        cu.write_f32(B["y"], [10.0 * (k + 1)] * n)
    READS["mixed"] = [("t", n)]
    """,
    capture="""
    M = module("fk_add_f32")
    L = library("fk_scale_f32", "fk_axpy_f32")
    LK = library("fk_scale_f32", "fk_fill_f32", functions=False)   # CUkernel handles launched directly
    from tests.fakecuda.images import fatbin_wrapper, make_ptx
    path = os.path.join(ARCH + "-src", "k.cubin")                 # a module loaded from a file
    os.makedirs(os.path.dirname(path)); open(path, "wb").write(make_cubin(["fk_scale_f32", "fk_sum_f32"]))
    mf = c_void_p(); call("cuModuleLoad", byref(mf), path.encode())
    FILE = cu.module_function(mf.value, "fk_scale_f32")
    PTX = cu.module_function(cu.load_module(make_ptx(["fk_scale_f32", "fk_copy_bytes"])), "fk_scale_f32")
    fat = ctypes.create_string_buffer(make_fatbin([("elf", make_cubin(["fk_scale_f32", "fk_sum_f32"]))]))
    wrapper = ctypes.create_string_buffer(fatbin_wrapper(ctypes.addressof(fat)))
    mw = c_void_p(); call("cuModuleLoadFatBinary", byref(mw), wrapper)
    WRAPPED = cu.module_function(mw.value, "fk_scale_f32")
    s = cu.stream_create()
    full = ((1, 1, 1), (n, 1, 1))
    cu.begin_capture(s)
    cu.launch(M["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["t"]), (c_int, n)], stream=s)
    cu.launch(L["fk_scale_f32"], *full, [("ptr", B["t"]), (c_float, 0.5), (c_int, n)], stream=s)
    cu.launch(L["fk_axpy_f32"], *full, [(c_float, 2.0), ("ptr", B["x"]), ("ptr", B["t"]), (c_int, n)], stream=s)
    cu.launch(LK["fk_scale_f32"], *full, [("ptr", B["t"]), (c_float, 4.0), (c_int, n)], stream=s)
    cu.launch(FILE, *full, [("ptr", B["t"]), (c_float, 0.5), (c_int, n)], stream=s)
    cu.launch(PTX, *full, [("ptr", B["t"]), (c_float, -1.0), (c_int, n)], stream=s)
    cu.launch(WRAPPED, *full, [("ptr", B["t"]), (c_float, 0.25), (c_int, n)], stream=s)
    add_graph("mixed", cu.end_capture(s))
    """,
)


def test_kernels_from_modules_and_libraries_roundtrip(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, MODULES_AND_LIBRARIES, tmp_path / "arch")
    check_roundtrip(rt, "mixed")
    meta = rt.meta("mixed")
    assert sorted(fmt for _, fmt in meta["images"].values()) == ["elf", "elf", "fatbin", "fatbin", "fatbin", "ptx"]
    by_name = {(f[1], f[0]) for f in meta["functions"]}
    assert len(by_name) == 7  # fk_scale_f32 from five images: five functions
    for sha, (size, _) in meta["images"].items():
        data = (rt.arch / "images" / f"{sha}.bin").read_bytes()
        assert len(data) == size and hashlib.sha256(data).hexdigest() == sha
    for k, run in enumerate(rt.loaded("mixed")):
        want = []
        for i in range(N):
            x = 0.125 * i
            want.append(f32(f32(f32(f32((x + 10.0 * (k + 1)) * 0.5) + 2.0 * x) * 4.0) * 0.5) * -0.25)
        assert run["t"] == want


# ------------------------------------------------------------------------------------------- RNG
RNG = Scenario(
    alloc=f"""
    n = {N}
    buf("seed", 8); buf("offset", 8); buf("r", 4 * n)
    SEEDS = [(1234, 10), (987654321, 7000), (42, 1 << 40)]
    INPUT_SETS = (0, 1) if SAVE else (0, 1, 2)
    def set_inputs(k):
        cu.write_u64(B["seed"], SEEDS[k][0])
        cu.write_u64(B["offset"], SEEDS[k][1])
    READS["rng"] = [("r", n)]
    """,
    capture="""
    K = module("fk_philox_f32")
    s = cu.stream_create()
    cu.begin_capture(s)
    cu.launch(K["fk_philox_f32"], (1, 1, 1), (n, 1, 1),
              [("ptr", B["seed"]), ("ptr", B["offset"]), (c_uint, 3), ("ptr", B["r"]), (c_int, n)], stream=s)
    add_graph("rng", cu.end_capture(s), rng=RngSpec(B["seed"], B["offset"], 4))
    """,
)


def test_rng_reads_seed_and_offset_from_device_memory_at_load(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, RNG, tmp_path / "arch")
    native, loaded = rt.native("rng"), rt.loaded("rng")
    assert loaded[:2] == native
    seeds = [(1234, 10), (987654321, 7000), (42, 1 << 40)]
    for (seed, offset), run in zip(seeds, loaded, strict=True):
        assert run["r"] == [philox_ref(seed, offset + 3, i) for i in range(N)]
    assert len({tuple(run["r"]) for run in loaded}) == 3  # new seed/offset values give new numbers
    buffers = rt.save["buffers"]
    assert rt.meta("rng")["rng"] == {
        "seed_address": buffers["seed"],
        "offset_address": buffers["offset"],
        "increment": 4,
    }
    assert rt.load["structure"]["rng"] == rt.save["structure"]["rng"]


# ----------------------------------------------------------------------------------- state memory
STATE = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("out", 4 * n)
    if SAVE:                                # weights: made (and warmed up) only by the SAVE process
        buf("weights", 4 * n)
        cu.write_f32(B["weights"], [float(i % 13) for i in range(n)])
    def set_inputs(k):
        cu.write_f32(B["x"], [100.0 * (k + 1) + i for i in range(n)])
    READS["state"] = [("out", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32")
    full = ((1, 1, 1), (n, 1, 1))
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["weights"]), (c_float, 1.5), (c_int, n)])  # warm-up
    s = cu.stream_create()
    cu.begin_capture(s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["weights"]), ("ptr", B["out"]), (c_int, n)],
              stream=s)
    add_graph("state", cu.end_capture(s))
    """,
    extra_load="""
    WEIGHTS = BASE + 2 * 2 * 1024 * 1024   # third allocation of SAVE (2 MiB granularity)
    cu.write_f32(B["x"], [5.0] * n)         # LOAD's own input, written before load_graph
    """,
)


def test_state_memory_restored_from_snapshot_without_overwriting_own_buffers(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    arch = tmp_path / "arch"
    save = run_save(app_json, STATE, arch)
    assert save["buffers"]["weights"] == BASE + 2 * 2 * 1024 * 1024
    memory = save["metas"]["state"]["memory"]
    assert memory is not None
    snapshot = arch / "memory" / f"{memory[0]}.bin"
    assert snapshot.stat().st_size == memory[1] and hashlib.sha256(snapshot.read_bytes()).hexdigest() == memory[0]
    r = app_json(_load_code(arch, STATE_LOAD))
    weights = [1.5 * (i % 13) for i in range(N)]
    assert r["weights"] == weights  # the LOAD process never allocated or wrote them
    assert r["x_after_load"] == [5.0] * N  # LOAD's own input survived the restore
    assert r["runs"] == [{"out": [v + w for v, w in zip(x, weights, strict=True)]} for x in _state_inputs()]
    assert r["runs"] == save["native"]["state"]
    assert r["late"] >= BASE + 3 * 2 * 1024 * 1024  # past SAVE's high-water mark


def test_snapshot_limit_zero_saves_no_state_memory(app_json: JsonRunner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    save = run_save(app_json, STATE, arch, env={"FOUNDRY_SNAPSHOT_LIMIT": "0"})
    assert save["metas"]["state"]["memory"] is None
    assert json.loads((arch / "state.json").read_text())["memory"] is None
    assert not (arch / "memory").exists()
    r = app_json(_load_code(arch, STATE_LOAD))
    # weights were mapped (they are SAVE's live memory) but not filled: out = x + 0.
    assert r["weights"] == [0.0] * N
    assert r["runs"] == [{"out": x} for x in _state_inputs()]
    assert r["runs"] != save["native"]["state"]


def _state_inputs() -> list[list[float]]:
    return [[100.0 * (k + 1) + i for i in range(N)] for k in (0, 1)]


STATE_LOAD = """
from foundry.graphs.load import load_graph
lg = load_graph(os.path.join(ARCH, "state.json"))
x_after = cu.read_f32(B["x"], n)
weights = cu.read_f32(WEIGHTS, n)
late = cu.malloc(4 * n)                 # allocated after LOAD: must not land on SAVE's memory
cu.write_f32(late, [99.0] * n)
runs = []
for k in INPUT_SETS:
    set_inputs(k); lg.launch(0); cu.sync(); runs.append(read("state"))
emit(weights=weights, x_after_load=x_after, runs=runs, late=late)
"""


def _load_code(arch: Path, body: str) -> str:
    return load_prefix(STATE, arch) + "\n" + body


# ----------------------------------------------------------------------- several graphs + manifest
FAMILY = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("a", 4 * n); buf("b", 4 * n); buf("c", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i - k) for i in range(n)])
        cu.write_f32(B["y"], [0.5 + 2.0 * k] * n)
    READS["scale2"] = [("a", n)]
    READS["scale3"] = [("b", n)]
    READS["add_scale"] = [("c", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32", "fk_copy_bytes")
    s = cu.stream_create()
    full = ((1, 1, 1), (n, 1, 1))
    def scaled(dst, factor):
        cu.begin_capture(s)
        cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B[dst]), ("ptr", B["x"]), (c_uint64, 4 * n)],
                  stream=s)
        cu.launch(K["fk_scale_f32"], *full, [("ptr", B[dst]), (c_float, factor), (c_int, n)], stream=s)
        return cu.end_capture(s)
    add_graph("scale2", scaled("a", 2.0))
    add_graph("scale3", scaled("b", 3.0))          # same topology, other arguments
    cu.begin_capture(s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["c"]), (c_int, n)], stream=s)
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["c"]), (c_float, 4.0), (c_int, n)], stream=s)
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["c"]), (c_float, 0.5), (c_int, n)], stream=s)
    add_graph("add_scale", cu.end_capture(s))
    """,
)


def test_several_graphs_manifest_groups_by_topology(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, FAMILY, tmp_path / "arch")
    for name in ("scale2", "scale3", "add_scale"):
        check_roundtrip(rt, name)
    manifest = json.loads((rt.arch / "graph_manifest.json").read_text())
    graphs = manifest["graphs"]
    assert [g["name"] for g in graphs] == ["scale2", "scale3", "add_scale"]
    assert [g["role"] for g in graphs] == ["template", "member", "template"]
    assert [g["group"] for g in graphs] == [0, 0, 1]
    topologies = [rt.meta(g["name"])["topology"] for g in graphs]
    assert topologies[0] == topologies[1] != topologies[2]
    groups = [{k: g[k] for k in ("topology", "template", "members")} for g in manifest["groups"]]
    assert groups == [
        {"topology": topologies[0], "template": 0, "members": [1]},
        {"topology": topologies[2], "template": 2, "members": []},
    ]
    for g in graphs:
        path = rt.arch / g["json"]
        meta = json.loads(path.read_text())
        assert g["json_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert g["record_sha256"] == meta["record"]["sha256"]
        assert g["nodes"] == meta["stats"]["nodes"] == len(rt.save["structure"][g["name"]]["nodes"])
    for sha, entry in manifest["images"].items():
        data = (rt.arch / entry["file"]).read_bytes()
        assert entry["file"] == f"images/{sha}.bin" and entry["bytes"] == len(data)
        assert hashlib.sha256(data).hexdigest() == sha


def test_archive_with_template_members_passes_check_archive(app_json: JsonRunner, tmp_path: Path) -> None:
    from foundry.archive import check_archive

    save = run_save(app_json, FAMILY, tmp_path / "arch")
    assert len(save["native"]) == 3
    assert check_archive(tmp_path / "arch") == []


IMAGES_ONLY = """
from foundry.kernels import registry
count = foundry.load_cuda_modules_and_libraries(ARCH)
emit(count=count, loaded=sorted(s for s in SHAS if registry.is_loaded(s)))
"""


def test_load_modules_and_libraries_with_and_without_manifest(app_json: JsonRunner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    save = run_save(app_json, FAMILY, arch)
    used = sorted(save["metas"]["scale2"]["images"])
    assert len(used) == 1
    # An image that no saved graph uses (copied in by hand): the manifest does not list it.
    stray = make_cubin(["fk_sum_f32"])
    stray_sha = hashlib.sha256(stray).hexdigest()
    (arch / "images" / f"{stray_sha}.bin").write_bytes(stray)
    code = prelude(arch) + f"\nSHAS = {[*used, stray_sha]!r}\n" + IMAGES_ONLY
    with_manifest = app_json(code)
    assert with_manifest == {"count": 1, "loaded": used}
    (arch / "graph_manifest.json").unlink()
    without = app_json(code)
    assert without == {"count": 2, "loaded": sorted([*used, stray_sha])}
    # Without a manifest the graphs still load and run.
    rt = RoundTrip(arch, save, run_load(app_json, FAMILY, arch, ["scale2", "scale3", "add_scale"]))
    for name in ("scale2", "scale3", "add_scale"):
        check_roundtrip(rt, name)


VARIANTS = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("a", 4 * n); buf("b", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [0.5 * i + 7.0 * k for i in range(n)])
    for v in ("v0", "v1", "v2", "v3"):
        READS[v] = [("a", n), ("b", n)]
    """,
    capture="""
    K = module("fk_axpy_f32", "fk_sum_f32")
    L = library("fk_axpy_f32")
    s = cu.stream_create()
    def chain(memset, kernel, src="a"):
        cu.begin_capture(s)
        memset(); kernel()
        call("cuMemcpyDtoDAsync_v2", B["b"], B[src], 4 * n, s)
        return cu.end_capture(s)
    def axpy(f, alpha, grid, block, extra=False):
        return lambda: cu.launch(f, grid, block, [(c_float, alpha), ("ptr", B["x"]), ("ptr", B["a"]), (c_int, n)],
                                 stream=s, use_extra=extra)
    d32 = lambda v: (lambda: call("cuMemsetD32Async", B["a"], f32_bits(v), n, s))
    # One topology (memset -> kernel -> memcpy), four parameter sets: values, grids, memset element
    # sizes, another kernel with another parameter layout in `extra` mode, a kernel from a library.
    add_graph("v0", chain(d32(1.0), axpy(K["fk_axpy_f32"], 2.0, (1, 1, 1), (n, 1, 1))))
    add_graph("v1", chain(lambda: call("cuMemsetD8Async", B["a"], 0x3F, 4 * n, s),
                          axpy(K["fk_axpy_f32"], 0.5, (2, 1, 1), (64, 1, 1))))
    add_graph("v2", chain(d32(-3.0), lambda: cu.launch(K["fk_sum_f32"], (1, 1, 1), (1, 1, 1),
                          [("ptr", B["x"]), ("ptr", B["a"]), (c_int, n)], stream=s, use_extra=True)))
    add_graph("v3", chain(d32(2.0), axpy(L["fk_axpy_f32"], -1.0, (1, 1, 1), (n // 2, 1, 1), extra=True), src="x"))
    """,
)

INTERLEAVED = """
from foundry.graphs.load import load_graph
graphs = {name: load_graph(os.path.join(ARCH, name + ".json")) for name in ("v0", "v1", "v2", "v3")}
runs = []
for k in INPUT_SETS:
    set_inputs(k)
    for name in ("v2", "v0", "v3", "v1", "v2", "v1", "v0"):
        graphs[name].launch(0); cu.sync(); runs.append([name, k, read(name)])
emit(runs=runs)
"""


def test_same_topology_members_load_as_themselves_in_any_launch_order(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, VARIANTS, tmp_path / "arch")
    names = ["v0", "v1", "v2", "v3"]
    for name in names:
        check_roundtrip(rt, name)
    assert len({rt.meta(n)["topology"] for n in names}) == 1
    manifest = json.loads((rt.arch / "graph_manifest.json").read_text())
    assert [(g["group"], g["role"]) for g in manifest["graphs"]] == [
        (0, "template"), (0, "member"), (0, "member"), (0, "member")
    ]  # fmt: skip
    assert [(g["template"], g["members"]) for g in manifest["groups"]] == [(0, [1, 2, 3])]
    # All four loaded into one process, then launched interleaved: each launch gives that graph's output.
    r = app_json(load_prefix(VARIANTS, rt.arch) + INTERLEAVED)
    for name, k, out in r["runs"]:
        assert out == rt.native(name)[k], (name, k)
    x = [[0.5 * i + 7.0 * k for i in range(N)] for k in (0, 1)]
    assert rt.native("v2")[1]["a"][0] == f32(sum(x[1]))
    assert rt.native("v3")[0]["b"] == x[0]


CHILD_EVENTS = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("t", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i * (k + 2)) for i in range(n)])
    READS["child_events"] = [("t", n)]
    """,
    capture="""
    K = module("fk_copy_bytes", "fk_scale_f32")
    s = cu.stream_create()
    ev, other = cu.event_create(), cu.event_create()
    full = ((1, 1, 1), (n, 1, 1))
    cu.begin_capture(s)                                     # child: wait(ev), t *= 0.25, record(other)
    check(fn("cuStreamWaitEvent")(s, ev, 1), "wait")
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["t"]), (c_float, 0.25), (c_int, n)], stream=s)
    call("cuEventRecordWithFlags", other, s, 1)
    child = cu.instantiate(cu.end_capture(s))
    cu.begin_capture(s)                                     # parent: t = x, record(ev), child
    cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B["t"]), ("ptr", B["x"]), (c_uint64, 4 * n)],
              stream=s)
    call("cuEventRecordWithFlags", ev, s, 1)
    cu.graph_launch(child, s)
    add_graph("child_events", cu.end_capture(s))
    """,
)


def test_event_nodes_inside_child_graphs_share_events_with_the_parent(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, CHILD_EVENTS, tmp_path / "arch")
    check_roundtrip(rt, "child_events")
    parent = rt.load["structure"]["child_events"]["nodes"]
    assert [n["type"] for n in parent] == ["kernel", "event_record", "graph"]
    child = parent[2]["child"]["nodes"]
    assert [n["type"] for n in child] == ["wait_event", "kernel", "event_record"]
    assert parent[1]["event"] == child[0]["event"] != child[2]["event"]
    assert rt.meta("child_events")["events"] == 2


def test_graph_json_outside_the_archive_directory(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, EVENTS, tmp_path / "arch", json_dir=tmp_path / "graphs")
    check_roundtrip(rt, "events")
    assert sorted(p.name for p in (tmp_path / "graphs").iterdir()) == ["events.cugraph", "events.json"]
    assert json.loads((tmp_path / "graphs" / "events.json").read_text())["archive_dir"] == "../arch"
    manifest = json.loads((tmp_path / "arch" / "graph_manifest.json").read_text())
    assert [g["json"] for g in manifest["graphs"]] == ["../graphs/events.json"]
    # The two directories moved together still load (every path in them is relative).
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.move(tmp_path / "arch", moved / "arch")
    shutil.move(tmp_path / "graphs", moved / "graphs")
    load = run_load(app_json, EVENTS, moved / "arch", ["events"], json_dir=moved / "graphs")
    assert load["errors"] == {} and load["loaded"]["events"] == rt.native("events")


RESAVE = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("t", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i + k) for i in range(n)])
    READS["g0"] = [("t", n)]
    """,
    capture="""
    K = module("fk_axpy_f32", "fk_fill_f32")
    s = cu.stream_create()
    def graph(alpha):
        cu.begin_capture(s)
        cu.launch(K["fk_fill_f32"], (1, 1, 1), (n, 1, 1), [("ptr", B["t"]), (c_float, 1.0), (c_int, n)], stream=s)
        cu.launch(K["fk_axpy_f32"], (1, 1, 1), (n, 1, 1), [(c_float, alpha), ("ptr", B["x"]), ("ptr", B["t"]),
                  (c_int, n)], stream=s)
        return cu.end_capture(s)
    first = graph(2.0)
    save_graph(first, os.path.join(ARCH, "g0.json"), archive_dir=ARCH)   # saved, then saved over
    add_graph("g0", graph(-3.0))
    """,
)


def test_graph_saved_twice_under_one_name_loads_the_last_save(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, RESAVE, tmp_path / "arch")
    manifest = json.loads((rt.arch / "graph_manifest.json").read_text())
    assert [g["name"] for g in manifest["graphs"]] == ["g0"]
    check_roundtrip(rt, "g0")
    assert rt.loaded("g0")[0]["t"] == [1.0 - 3.0 * i for i in range(N)]


SMEM_GROWS = Scenario(
    alloc=f"""
    n = {N}
    buf("small", 4 * n); buf("big", 4 * n); buf("x", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i * (k + 1)) for i in range(n)])
    READS["small"] = [("small", n)]
    READS["big"] = [("big", n)]
    """,
    capture="""
    K = module("fk_bigsmem_f32", "fk_add_f32")
    s = cu.stream_create()
    def graph(out, shared, threads):
        cu.begin_capture(s)
        cu.launch(K["fk_bigsmem_f32"], (1, 1, 1), (threads, 1, 1), [("ptr", B[out]), (c_int, n)], shared=shared,
                  stream=s)
        cu.launch(K["fk_add_f32"], (1, 1, 1), (n, 1, 1), [("ptr", B[out]), ("ptr", B["x"]), ("ptr", B[out]),
                  (c_int, n)], stream=s)
        return cu.end_capture(s)
    # Saved right after capture, while the kernel's attribute is still the default ...
    save_now("small", graph("small", 16 * 1024, 100))
    # ... then the program raises it for a later, bigger launch of the same kernel.
    cu.set_func_attr(K["fk_bigsmem_f32"], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 * 1024)
    save_now("big", graph("big", 64 * 1024, 200))
    """,
)

LOAD_ALL_THEN_RUN = """
from foundry.graphs.load import load_graph
loaded = {name: attempt(lambda: load_graph(os.path.join(ARCH, name + ".json"))) for name in ORDER}
runs = {}
for name in ORDER:
    if "error" in loaded[name]:
        runs[name] = loaded[name]
        continue
    runs[name] = []
    for k in INPUT_SETS:
        set_inputs(k)
        runs[name].append(attempt(lambda: (loaded[name]["ok"].launch(0), cu.sync(), read(name))[2]))
emit(runs=runs)
"""


def test_function_attributes_recorded_as_they_are_at_each_save(app_json: JsonRunner, tmp_path: Path) -> None:
    save = run_save(app_json, SMEM_GROWS, tmp_path / "arch", manifest=False)
    assert [f[2][0] for f in save["metas"]["small"]["functions"]] == [0, 0]
    assert [f[2][0] for f in save["metas"]["big"]["functions"]] == [64 * 1024, 0]


@pytest.mark.parametrize(
    "order",
    [
        pytest.param(["big"], id="big-alone"),
        pytest.param(["small", "big"], id="small-first"),
        pytest.param(["big", "small"], id="big-first"),
    ],
)
def test_kernel_attribute_raised_between_saves_serves_every_loaded_graph(
    app_json: JsonRunner, tmp_path: Path, order: list[str]
) -> None:
    save = run_save(app_json, SMEM_GROWS, tmp_path / "arch", manifest=False)
    r = app_json(load_prefix(SMEM_GROWS, tmp_path / "arch") + f"ORDER = {order!r}\n" + LOAD_ALL_THEN_RUN)
    for name in order:
        assert r["runs"][name] == [{"ok": out} for out in save["native"][name]], name
