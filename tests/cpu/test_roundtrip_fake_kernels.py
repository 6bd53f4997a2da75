"""SAVE -> LOAD round trips on the fake driver: kernel launches and their parameters.

Parameter buffers and `extra`, struct arguments, grids, cluster/cooperative/priority launches,
big shared memory, memset/memcpy nodes, kernels from modules and libraries of every image format.

See tests/support/roundtrip_fake.py for what every round trip checks.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

from tests.support.graphs import JsonRunner, Scenario, f32, roundtrip
from tests.support.roundtrip_fake import N, check_roundtrip


def kernel_nodes(structure: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in structure["nodes"] if n["type"] == "kernel"]


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
    assert [f[2][0] for f in functions] == [48 * 1024, 64 * 1024, 48 * 1024, 48 * 1024]
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
