"""Tests of the fake CUDA driver itself (no Foundry): devices, memory, VMM, kernels, capture, graphs.

Every scenario runs in a fresh subprocess with LD_LIBRARY_PATH pointing at the fake libcuda.so.1.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import pytest  # noqa: E402

from tests.support.fakecuda_fixture import fakecuda_build_dir  # noqa: E402
from tests.support.subproc import run_json  # noqa: E402


@pytest.fixture(scope="session")
def fakecuda_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fakecuda_build_dir(tmp_path_factory)


INVALID_VALUE = 1
OUT_OF_MEMORY = 2
NOT_INITIALIZED = 3
INVALID_IMAGE = 200
INVALID_CONTEXT = 201
INVALID_HANDLE = 400
LOSSY_QUERY = 402
NOT_FOUND = 500
ILLEGAL_ADDRESS = 700
NOT_SUPPORTED = 801
CAPTURE_UNSUPPORTED = 900
CAPTURE_INVALIDATED = 901
CAPTURE_UNJOINED = 904
EXEC_UPDATE_FAILURE = 910
INVALID_CLUSTER_SIZE = 912

PRE = """
import ctypes, json, struct, sys
from ctypes import byref, c_float, c_int, c_uint, c_uint64, c_double, c_size_t, c_void_p, c_char_p
from tests.support.fakecu import *
from tests.fakecuda.images import *
def out(**kw):
    print(json.dumps(kw))
"""

ALL = [
    "fk_fill_f32", "fk_add_f32", "fk_axpy_f32", "fk_scale_f32", "fk_sum_f32", "fk_philox_f32",
    "fk_copy_bytes", "fk_cluster_add_f32", "fk_bigsmem_f32", "fk_struct_arg",
]  # fmt: skip

# Loads one cubin with every builtin and binds F[name] -> CUfunction.
FUNCS = f"""
cu = Cuda()
MOD = cu.load_module(make_cubin({ALL!r} + ["fk_unknown_kernel"]))
F = {{n: cu.module_function(MOD, n) for n in {ALL!r} + ["fk_unknown_kernel"]}}
"""


def run(lib_dir: Path, body: str, env: dict[str, str] | None = None, funcs: bool = True, prefix: str = "") -> Any:
    code = PRE + (FUNCS if funcs else "") + prefix + textwrap.dedent(body)
    return run_json(code, lib_dir=lib_dir, env=env)


# ------------------------------------------------------------------------------------ init & devices
def test_init_devices_and_env_knobs(fakecuda_dir: Path) -> None:
    body = """
    lib = driver()
    v = c_int()
    pre = fn("cuDeviceGetCount")(byref(v))          # before cuInit
    fn("cuDriverGetVersion")(byref(v)); ver = v.value
    cu = Cuda()
    fn("cuDeviceGetCount")(byref(v)); count = v.value
    name = ctypes.create_string_buffer(64)
    fn("cuDeviceGetName")(name, 64, 0)
    def attr(a):
        fn("cuDeviceGetAttribute")(byref(v), a, 0); return v.value
    uuid = ctypes.create_string_buffer(16)
    fn("cuDeviceGetUuid_v2")(uuid, 0)
    tm = c_size_t(); fn("cuDeviceTotalMem_v2")(byref(tm), 0)
    bad = fn("cuDeviceGetAttribute")(byref(v), 16, 7)
    out(pre=pre, ver=ver, count=count, name=name.value.decode(), sm=attr(16), major=attr(75), minor=attr(76),
        vmm=attr(102), uuid=uuid.raw.hex(), total=tm.value, bad=bad)
    """
    r = run(fakecuda_dir, body, funcs=False)
    assert r["pre"] == NOT_INITIALIZED
    assert (r["ver"], r["count"], r["name"], r["sm"], r["major"], r["minor"], r["vmm"]) == (
        13000, 1, "Fake GPU", 132, 9, 0, 1)  # fmt: skip
    assert r["bad"] == 101 and r["total"] > 0 and len(r["uuid"]) == 32
    env = {"FAKECUDA_DRIVER_VERSION": "12080", "FAKECUDA_DEVICE_COUNT": "2", "FAKECUDA_DEVICE_NAME": "NVIDIA H100",
           "FAKECUDA_SM_COUNT": "8", "FAKECUDA_CC": "8.6"}  # fmt: skip
    r = run(fakecuda_dir, body, env=env, funcs=False)
    assert (r["ver"], r["count"], r["name"], r["sm"], r["major"], r["minor"], r["bad"]) == (
        12080, 2, "NVIDIA H100", 8, 8, 6, 101)  # fmt: skip


def test_context_is_thread_local_and_required(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    import threading
    call("cuInit", 0)
    p = c_uint64()
    no_ctx = fn("cuMemAlloc_v2")(byref(p), 16)
    cu = Cuda()
    res = {}
    def worker():
        q = c_uint64()
        res["before"] = fn("cuMemAlloc_v2")(byref(q), 16)
        cu.make_current()
        res["after"] = fn("cuMemAlloc_v2")(byref(q), 16)
    t = threading.Thread(target=worker); t.start(); t.join()
    c = c_void_p(); fn("cuCtxGetCurrent")(byref(c))
    out(no_ctx=no_ctx, ctx_same=c.value == cu.ctx, **res)
    """,
        funcs=False,
    )
    assert r == {"no_ctx": INVALID_CONTEXT, "ctx_same": True, "before": INVALID_CONTEXT, "after": 0}


def test_error_names_and_strings(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    s = c_char_p()
    names = {}
    for code in (0, 1, 2, 200, 201, 400, 402, 500, 700, 801, 900, 901, 904, 910, 912, 999):
        assert fn("cuGetErrorName")(code, byref(s)) == 0
        names[code] = s.value.decode()
        assert fn("cuGetErrorString")(code, byref(s)) == 0 and s.value
    out(names=names, unknown=fn("cuGetErrorName")(12345, byref(s)))
    """,
        funcs=False,
    )
    assert r["names"]["402"] == "CUDA_ERROR_LOSSY_QUERY"
    assert r["names"]["912"] == "CUDA_ERROR_INVALID_CLUSTER_SIZE"
    assert r["unknown"] == INVALID_VALUE


# ------------------------------------------------------------------------------------ memory
def test_linear_memory(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    cu = Cuda()
    a = cu.malloc(1000); b = cu.malloc(1000)
    cu.memcpy_htod(a, bytes(range(200)) * 5)
    call("cuMemcpyDtoD_v2", b, a, 1000)
    same = cu.memcpy_dtoh(b, 1000) == bytes(range(200)) * 5
    cu.memset_d32(b + 8, 0x01020304, 2)
    call("cuMemsetD8_v2", b, 0xAB, 4)
    head = cu.memcpy_dtoh(b, 16).hex()
    base, size = c_uint64(), c_size_t()
    call("cuMemGetAddressRange_v2", byref(base), byref(size), a + 123)
    pitch, pp = c_size_t(), c_uint64()
    call("cuMemAllocPitch_v2", byref(pp), byref(pitch), 100, 3, 4)
    fr, tot = c_size_t(), c_size_t()
    call("cuMemGetInfo_v2", byref(fr), byref(tot))
    cu.free(a)
    double_free = fn("cuMemFree_v2")(a)
    bad_copy = fn("cuMemcpyHtoD_v2")(a, b"xx", 2)       # freed memory is not device memory
    # legacy (CUDA < 3.2) ABI: 32-bit pointers and sizes
    v1 = proc("cuMemAlloc", 3000)
    p32 = ctypes.c_uint32()
    r1 = v1(byref(p32), 4096)
    free_v1 = proc("cuMemFree", 3000)(p32.value)
    out(same=same, head=head, range=[base.value == a, size.value], pitch=pitch.value, mem=[fr.value < tot.value],
        double_free=double_free, bad_copy=bad_copy, v1=[r1, 0 < p32.value < 2**32, free_v1],
        v1_symbol=proc_symbol("cuMemAlloc", 3000), v2_symbol=proc_symbol("cuMemAlloc", 3020))
    """,
        funcs=False,
    )
    assert r["same"]
    assert r["head"] == "abababab" + "04050607" + "04030201" * 2
    assert r["range"] == [True, 1000]
    assert r["pitch"] == 512
    assert r["mem"] == [True]
    assert r["double_free"] == INVALID_VALUE and r["bad_copy"] == INVALID_VALUE
    assert r["v1"] == [0, True, 0]
    assert (r["v1_symbol"], r["v2_symbol"]) == ("cuMemAlloc", "cuMemAlloc_v2")


def test_vmm_reserve_at_hint_map_access_unmap(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    cu = Cuda()
    G = cu.granularity()
    probe = cu.reserve(8 * G)            # find a free, aligned address, then give it back
    cu.address_free(probe, 8 * G)
    base = cu.reserve(8 * G, addr=probe)
    at_hint = base == probe
    h = cu.mem_create(2 * G)
    before = fn("cuMemcpyHtoD_v2")(base, b"x", 1)           # reserved, not mapped
    cu.mem_map(base + G, 2 * G, h)
    no_access = fn("cuMemcpyHtoD_v2")(base + G, b"x", 1)    # mapped, PROT_NONE until cuMemSetAccess
    cu.set_access(base + G, 2 * G)
    cu.write_f32(base + G, [1.0, 2.0, 3.0])
    data = cu.read_f32(base + G, 3)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", base + 2 * G), (c_float, 7.0), (c_int, 4)])
    filled = cu.read_f32(base + 2 * G, 4)
    rng = c_uint64(); sz = c_size_t()
    call("cuMemGetAddressRange_v2", byref(rng), byref(sz), base + G + 100)
    misuse = dict(
        outside=fn("cuMemMap")(base + 8 * G, G, 0, h, 0),
        overlap=fn("cuMemMap")(base + 2 * G, G, 0, h, 0),
        unaligned=fn("cuMemMap")(base + 100, G, 0, h, 0),
        too_big=fn("cuMemMap")(base + 4 * G, 4 * G, 0, h, 0),
        access_unmapped=fn("cuMemSetAccess")(base + 5 * G, G, byref(CUmemAccessDesc(CUmemLocation(1, 0), 3)), 1),
        unmap_partial=fn("cuMemUnmap")(base + G, G),
        free_mapped=fn("cuMemAddressFree")(base, 8 * G),
        bad_size=fn("cuMemCreate")(byref(ctypes.c_ulonglong()), G + 1, byref(Cuda._prop()), 0),
    )
    cu.mem_release(h)                   # memory lives on while mapped
    still = cu.read_f32(base + G, 3)
    cu.unmap(base + G, 2 * G)
    after = fn("cuMemcpyDtoH_v2")(ctypes.create_string_buffer(4), base + G, 4)
    twice = fn("cuMemRelease")(h)
    cu.address_free(base, 8 * G)
    out(G=G, at_hint=at_hint, before=before, no_access=no_access, data=data, filled=filled,
        range=[rng.value - base, sz.value], misuse=misuse, still=still, after=after, twice=twice)
    """,
    )
    G = 2 << 20
    assert r["G"] == G and r["at_hint"]
    assert r["before"] == INVALID_VALUE and r["no_access"] == INVALID_VALUE
    assert r["data"] == [1.0, 2.0, 3.0] and r["filled"] == [7.0] * 4
    assert r["range"] == [G, 2 * G]
    assert all(v == INVALID_VALUE for v in r["misuse"].values()), r["misuse"]
    assert r["still"] == [1.0, 2.0, 3.0]
    assert r["after"] == INVALID_VALUE and r["twice"] == INVALID_VALUE


def test_vmm_shared_physical_memory_and_limit(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    cu = Cuda()
    G = cu.granularity()
    va = cu.reserve(4 * G)
    h = cu.mem_create(G)
    cu.mem_map(va, G, h); cu.mem_map(va + 2 * G, G, h)     # the same physical page twice
    cu.set_access(va, G); cu.set_access(va + 2 * G, G)
    cu.write_f32(va, [42.0])
    alias = cu.read_f32(va + 2 * G, 1)
    h2 = cu.mem_create(G)
    hh = ctypes.c_ulonglong()
    third = fn("cuMemCreate")(byref(hh), G, byref(Cuda._prop()), 0)   # limit is 2 granules
    cu.mem_release(h2)
    fourth = fn("cuMemCreate")(byref(hh), G, byref(Cuda._prop()), 0)
    out(alias=alias, third=third, fourth=fourth)
    """,
        env={"FAKECUDA_PHYS_LIMIT": str(4 << 20)},
    )
    assert r == {"alias": [42.0], "third": OUT_OF_MEMORY, "fourth": 0}


def test_vmm_reserve_at_taken_address_returns_another(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    import mmap
    cu = Cuda()
    G = cu.granularity()
    a = cu.reserve(4 * G)
    b = cu.reserve(4 * G, addr=a)                  # taken by our own reservation
    m = mmap.mmap(-1, 8 * G)                       # taken by someone else in the process
    host = ctypes.addressof(ctypes.c_char.from_buffer(m))
    hint = (host + G - 1) // G * G
    c = cu.reserve(2 * G, addr=hint)
    out(b_differs=b != a, b_aligned=b % G == 0, c_differs=c != hint, c_aligned=c % G == 0,
        overlap=(a < b + 4 * G and b < a + 4 * G))
    """,
    )
    assert r == {"b_differs": True, "b_aligned": True, "c_differs": True, "c_aligned": True, "overlap": False}


# ------------------------------------------------------------------------------------ kernels
def test_builtin_kernels_compute(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    n = 8
    a, b, o = cu.malloc(4 * n), cu.malloc(4 * n), cu.malloc(4 * n)
    cu.write_f32(a, [float(i) for i in range(n)]); cu.write_f32(b, [10.0] * n)
    res = {}
    cu.launch(F["fk_add_f32"], (2, 1, 1), (4, 1, 1), [("ptr", a), ("ptr", b), ("ptr", o), (c_int, n)])
    res["add"] = cu.read_f32(o, n)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (3, 1, 1), [("ptr", o), (c_float, -1.0), (c_int, n)])  # grid too small
    res["partial_fill"] = cu.read_f32(o, n)
    cu.launch(F["fk_axpy_f32"], (1, 1, 1), (n, 1, 1), [(c_float, 2.0), ("ptr", a), ("ptr", b), (c_int, n)])
    res["axpy"] = cu.read_f32(b, n)
    cu.launch(F["fk_scale_f32"], (1, 1, 1), (n, 1, 1), [("ptr", b), (c_float, 0.5), (c_int, n)], use_extra=True)
    res["scale"] = cu.read_f32(b, n)
    cu.launch(F["fk_sum_f32"], (1, 1, 1), (1, 1, 1), [("ptr", a), ("ptr", o), (c_int, n)])
    res["sum"] = cu.read_f32(o, 1)
    seed, off = cu.malloc(8), cu.malloc(8)
    cu.write_u64(seed, 1234); cu.write_u64(off, 40)
    cu.launch(F["fk_philox_f32"], (1, 1, 1), (n, 1, 1),
              [("ptr", seed), ("ptr", off), (c_uint, 2), ("ptr", o), (c_int, n)])
    res["philox"] = cu.read_f32(o, n) == [philox_ref(1234, 42, i) for i in range(n)]
    res["philox_range"] = all(0.0 <= x < 1.0 for x in cu.read_f32(o, n))
    cu.launch(F["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", o), ("ptr", a), (c_uint64, 4 * n)])
    res["copy"] = cu.read_f32(o, n)
    class S(ctypes.Structure):
        _fields_ = [("out", c_uint64), ("scale", c_float), ("n", c_int), ("bias", c_double)]
    cu.launch(F["fk_struct_arg"], (1, 1, 1), (4, 1, 1), [(S, (o, 2.0, 4, 0.5))])
    res["struct"] = cu.read_f32(o, 4)
    cu.launch(F["fk_struct_arg"], (1, 1, 1), (4, 1, 1), [(S, (o, 3.0, 4, 1.0))], use_extra=True)
    res["struct_extra"] = cu.read_f32(o, 4)
    fill = F["fk_fill_f32"]
    res["illegal"] = cu.launch_raw(fill, (1, 1, 1), (4, 1, 1), [("ptr", 0x1000), (c_float, 1.0), (c_int, 4)])
    res["unknown"] = cu.launch_raw(F["fk_unknown_kernel"], (1, 1, 1), (1, 1, 1), [])
    res["zero_grid"] = cu.launch_raw(fill, (0, 1, 1), (4, 1, 1), [("ptr", o), (c_float, 1.0), (c_int, 4)])
    res["big_block"] = cu.launch_raw(fill, (1, 1, 1), (2048, 1, 1), [("ptr", o), (c_float, 1.0), (c_int, 4)])
    out(**res)
    """,
    )
    assert r["add"] == [10.0 + i for i in range(8)]
    assert r["partial_fill"] == [-1.0] * 3 + [10.0 + i for i in range(3, 8)]
    assert r["axpy"] == [10.0 + 2 * i for i in range(8)]
    assert r["scale"] == [5.0 + i for i in range(8)]
    assert r["sum"] == [28.0]
    assert r["philox"] and r["philox_range"]
    assert r["copy"] == [float(i) for i in range(8)]
    assert r["struct"] == [0.5, 2.5, 4.5, 6.5] and r["struct_extra"] == [1.0, 4.0, 7.0, 10.0]
    assert r["illegal"] == ILLEGAL_ADDRESS and r["unknown"] == NOT_SUPPORTED
    assert r["zero_grid"] == INVALID_VALUE and r["big_block"] == INVALID_VALUE


def test_cluster_and_shared_memory_rules(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    n = 4
    a, b, o = cu.malloc(16), cu.malloc(16), cu.malloc(16)
    cu.write_f32(a, [1.0] * n); cu.write_f32(b, [2.0] * n)
    args = [("ptr", a), ("ptr", b), ("ptr", o), (c_int, n)]
    res = {}
    res["plain"] = cu.launch_raw(F["fk_cluster_add_f32"], (2, 1, 1), (2, 1, 1), args)
    res["ex_no_attr"] = cu.launch_ex_raw(F["fk_cluster_add_f32"], (2, 1, 1), (2, 1, 1), args)
    res["ex_wrong"] = cu.launch_ex_raw(F["fk_cluster_add_f32"], (2, 1, 1), (2, 1, 1), args, cluster=(1, 1, 1))
    res["ex_indivisible"] = cu.launch_ex_raw(F["fk_add_f32"], (3, 1, 1), (2, 1, 1), args, cluster=(2, 1, 1))
    res["ex_ok"] = cu.launch_ex_raw(F["fk_cluster_add_f32"], (2, 1, 1), (2, 1, 1), args, cluster=(2, 1, 1))
    res["out"] = cu.read_f32(o, n)
    big = [("ptr", o), (c_int, n)]
    res["smem_48k"] = cu.launch_raw(F["fk_bigsmem_f32"], (1, 1, 1), (n, 1, 1), big, shared=48 * 1024)
    res["smem_64k"] = cu.launch_raw(F["fk_bigsmem_f32"], (1, 1, 1), (n, 1, 1), big, shared=64 * 1024)
    res["set_too_big"] = fn("cuFuncSetAttribute")(F["fk_bigsmem_f32"], 8, 227 * 1024 + 1)
    cu.set_func_attr(F["fk_bigsmem_f32"], 8, 64 * 1024)
    res["smem_64k_attr"] = cu.launch_raw(F["fk_bigsmem_f32"], (1, 1, 1), (n, 1, 1), big, shared=64 * 1024)
    res["big_out"] = cu.read_f32(o, n)
    out(**res)
    """,
    )
    assert r["plain"] == r["ex_no_attr"] == r["ex_wrong"] == r["ex_indivisible"] == INVALID_CLUSTER_SIZE
    assert r["ex_ok"] == 0 and r["out"] == [3.0] * 4
    assert r["smem_48k"] == 0 and r["smem_64k"] == INVALID_VALUE and r["set_too_big"] == INVALID_VALUE
    assert r["smem_64k_attr"] == 0 and r["big_out"] == [0.0, 1.0, 2.0, 3.0]


def test_param_info_and_function_attributes(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    info = {n: cu.param_info(F[n]) for n in F if n != "fk_add_f32"}
    off, size = c_size_t(), c_size_t()
    hidden = fn("cuFuncGetParamInfo")(F["fk_add_f32"], 0, byref(off), byref(size))
    attrs = {a: cu.func_attr(F["fk_add_f32"], a) for a in (0, 8, 9, 10, 11, 12, 13, 14, 15)}
    cu.set_func_attr(F["fk_add_f32"], 9, 50)
    ro = fn("cuFuncSetAttribute")(F["fk_add_f32"], 0, 512)     # read-only attribute
    out(info=info, hidden=hidden, attrs=attrs, carveout=cu.func_attr(F["fk_add_f32"], 9), ro=ro,
        cluster_must=cu.func_attr(F["fk_cluster_add_f32"], 10))
    """,
        env={"FAKECUDA_NO_PARAM_INFO": "fk_add_f32,fk_other"},
    )
    info = r["info"]
    assert info["fk_cluster_add_f32"] == [[0, 8], [8, 8], [16, 8], [24, 4]]
    assert r["hidden"] == NOT_SUPPORTED
    assert info["fk_fill_f32"] == [[0, 8], [8, 4], [12, 4]]
    assert info["fk_axpy_f32"] == [[0, 4], [8, 8], [16, 8], [24, 4]]
    assert info["fk_philox_f32"] == [[0, 8], [8, 8], [16, 4], [24, 8], [32, 4]]
    assert info["fk_copy_bytes"] == [[0, 8], [8, 8], [16, 8]]
    assert info["fk_struct_arg"] == [[0, 24]]
    assert info["fk_unknown_kernel"] == []
    assert r["attrs"] == {"0": 1024, "8": 0, "9": -1, "10": 0, "11": 0, "12": 0, "13": 0, "14": 0, "15": 0}
    assert r["carveout"] == 50 and r["ro"] == INVALID_VALUE and r["cluster_must"] == 1


# ------------------------------------------------------------------------------------ capture & graphs
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


def test_programmatic_edges_and_lossy_query(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    s = cu.stream_create()
    a = cu.malloc(64)
    args = [("ptr", a), (c_float, 1.0), (c_int, 4)]
    cu.begin_capture(s)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), args, stream=s)
    cu.launch_ex(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), args, stream=s, programmatic=True)
    cu.launch_ex(F["fk_cluster_add_f32"], (2, 1, 1), (2, 1, 1), [("ptr", a), ("ptr", a), ("ptr", a), (c_int, 4)],
                 stream=s, cluster=(2, 1, 1))
    g = cu.end_capture(s)
    n0, n1, n2 = cu.graph_nodes(g)
    edges = [(cu.graph_nodes(g).index(f), cu.graph_nodes(g).index(t), d) for f, t, d in cu.graph_edges(g)]
    cnt = c_size_t()
    count_q = fn("cuGraphGetEdges_v2")(g, None, None, None, byref(cnt))
    fr, to = (c_void_p * 2)(), (c_void_p * 2)()
    k = c_size_t(2)
    lossy = fn("cuGraphGetEdges_v2")(g, fr, to, None, byref(k))
    k1 = c_size_t(2)
    lossy_v1 = fn("cuGraphGetEdges")(g, fr, to, byref(k1))
    v = CUlaunchAttributeValue()
    call("cuGraphKernelNodeGetAttribute", n2, 4, byref(v))
    cluster = list(v.u32[:3])
    call("cuGraphKernelNodeGetAttribute", n1, 4, byref(v))
    unset = list(v.u32[:3])
    v.u32[0] = 7
    call("cuGraphKernelNodeSetAttribute", n0, 8, byref(v))        # priority
    v2 = CUlaunchAttributeValue()
    call("cuGraphKernelNodeGetAttribute", n0, 8, byref(v2))
    pss_attr = fn("cuGraphKernelNodeSetAttribute")(n0, 6, byref(v))
    out(edges=edges, count_q=[count_q, cnt.value], lossy=[lossy, k.value, fr[0] == n0], lossy_v1=lossy_v1,
        cluster=cluster, unset=unset, prio=v2.u32[0], pss_attr=pss_attr)
    """,
    )
    assert r["edges"] == [[0, 1, [1, 0, 1]], [1, 2, [0, 0, 0]]]
    assert r["count_q"] == [0, 2]
    assert r["lossy"] == [LOSSY_QUERY, 2, True] and r["lossy_v1"] == LOSSY_QUERY
    assert r["cluster"] == [2, 1, 1] and r["unset"] == [0, 0, 0] and r["prio"] == 7
    assert r["pss_attr"] == INVALID_VALUE


ADD_DEPS = """
g = c_void_p(); call("cuGraphCreate", byref(g), 0); g = g.value
def kernel_node(v, deps=()):
    o = cu.malloc(16)
    objs = [c_uint64(o), c_float(v), c_int(4)]
    arr = (c_void_p * 3)(*[ctypes.cast(ctypes.pointer(x), c_void_p) for x in objs])
    p = CUDA_KERNEL_NODE_PARAMS(F["fk_fill_f32"], 1, 1, 1, 4, 1, 1, 0, arr, None, None, None)
    d = (c_void_p * max(len(deps), 1))(*deps)
    nd = c_void_p()
    call("cuGraphAddKernelNode_v2", byref(nd), g, d, len(deps), byref(p))
    return nd.value, o
a, oa = kernel_node(1.0); b, ob = kernel_node(2.0); c, oc = kernel_node(3.0)
prog = CUgraphEdgeData(1, 0, 1); plain = CUgraphEdgeData(0, 0, 0)
fr = (c_void_p * 2)(a, a); to = (c_void_p * 2)(b, c)
data = (CUgraphEdgeData * 2)(prog, plain)
call("cuGraphAddDependencies_v2", g, fr, to, data, 2)
nodes = cu.graph_nodes(g)
edges = [(nodes.index(f), nodes.index(t), list(d)) for f, t, d in cu.graph_edges(g)]
"""


def test_add_dependencies_edge_data(fakecuda_dir: Path) -> None:
    body = """
    bad = (CUgraphEdgeData * 1)(CUgraphEdgeData(1, 0, 0))          # port without programmatic type
    e = c_void_p(); call("cuGraphAddEmptyNode", byref(e), g, None, 0)
    f1, t1 = (c_void_p * 1)(b), (c_void_p * 1)(c)
    r_bad = fn("cuGraphAddDependencies_v2")(g, f1, t1, bad, 1)
    fe, te = (c_void_p * 1)(e.value), (c_void_p * 1)(c)
    r_prog_empty = fn("cuGraphAddDependencies_v2")(g, fe, te, (CUgraphEdgeData * 1)(prog), 1)
    r_dup = fn("cuGraphAddDependencies_v2")(g, (c_void_p * 1)(a), (c_void_p * 1)(b), None, 1)
    roots = c_size_t(); call("cuGraphGetRootNodes", g, None, byref(roots))
    ex = cu.instantiate(g); cu.graph_launch(ex)
    out(edges=edges, r_bad=r_bad, r_prog_empty=r_prog_empty, r_dup=r_dup, roots=roots.value,
        ran=[cu.read_f32(oa, 4), cu.read_f32(oc, 4)])
    """
    r = run(fakecuda_dir, body, prefix=ADD_DEPS)
    assert r["edges"] == [[0, 1, [1, 0, 1]], [0, 2, [0, 0, 0]]]
    assert r["r_bad"] == r["r_prog_empty"] == r["r_dup"] == INVALID_VALUE
    assert r["roots"] == 2 and r["ran"] == [[1.0] * 4, [3.0] * 4]
    r = run(fakecuda_dir, "out(edges=edges)\n", env={"FAKECUDA_EDGE_DATA_BUG": "1"}, prefix=ADD_DEPS)
    assert r["edges"] == [[0, 1, [1, 0, 1]], [0, 2, [1, 0, 1]]]  # first edge's data applied to all


def test_instantiate_validation_and_snapshot(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        prefix=ADD_DEPS,
        body="""
    res = {}
    # snapshot: editing the graph after instantiation does not change the exec
    ex = cu.instantiate(g)
    p = cu.kernel_node_params(a)
    v = c_float(5.0); p.kernelParams[1] = ctypes.cast(ctypes.pointer(v), c_void_p)
    call("cuGraphKernelNodeSetParams_v2", a, byref(p))
    cu.graph_launch(ex); res["old"] = cu.read_f32(oa, 4)
    ex2 = cu.instantiate(g); cu.graph_launch(ex2); res["new"] = cu.read_f32(oa, 4)
    # cycle
    call("cuGraphAddDependencies_v2", g, (c_void_p * 1)(c), (c_void_p * 1)(a), None, 1)
    e = c_void_p()
    res["cycle"] = fn("cuGraphInstantiateWithFlags")(byref(e), g, 0)
    # cluster kernel without the attribute; big shared memory without the function attribute
    g2 = c_void_p(); call("cuGraphCreate", byref(g2), 0)
    o = cu.malloc(64)
    objs = [c_uint64(o), c_uint64(o), c_uint64(o), c_int(4)]
    arr = (c_void_p * 4)(*[ctypes.cast(ctypes.pointer(x), c_void_p) for x in objs])
    kp = CUDA_KERNEL_NODE_PARAMS(F["fk_cluster_add_f32"], 2, 1, 1, 2, 1, 1, 0, arr, None, None, None)
    nd = c_void_p(); call("cuGraphAddKernelNode_v2", byref(nd), g2, None, 0, byref(kp))
    res["cluster"] = fn("cuGraphInstantiateWithFlags")(byref(e), g2, 0)
    val = CUlaunchAttributeValue(); val.u32[0], val.u32[1], val.u32[2] = 2, 1, 1
    call("cuGraphKernelNodeSetAttribute", nd, 4, byref(val))
    res["cluster_ok"] = fn("cuGraphInstantiateWithFlags")(byref(e), g2, 0)
    ex_c = e.value
    # exec kernel-node set params: another function into a (2,1,1)-cluster node is fine; the cluster
    # kernel into a node without the cluster attribute is not
    kp2 = CUDA_KERNEL_NODE_PARAMS(F["fk_add_f32"], 2, 1, 1, 2, 1, 1, 0, arr, None, None, None)
    res["exec_set_add"] = fn("cuGraphExecKernelNodeSetParams_v2")(ex_c, nd, byref(kp2))
    ex_a = cu.instantiate(g2)
    g3 = c_void_p(); call("cuGraphCreate", byref(g3), 0)
    nd3 = c_void_p(); call("cuGraphAddKernelNode_v2", byref(nd3), g3, None, 0, byref(kp2))
    ex3 = cu.instantiate(g3.value)
    res["exec_set_cluster"] = fn("cuGraphExecKernelNodeSetParams_v2")(ex3, nd3, byref(kp))
    res["exec_set_foreign"] = fn("cuGraphExecKernelNodeSetParams_v2")(ex3, nd, byref(kp2))
    objs2 = [c_uint64(o), c_int(4)]
    arr2 = (c_void_p * 2)(*[ctypes.cast(ctypes.pointer(x), c_void_p) for x in objs2])
    kp3 = CUDA_KERNEL_NODE_PARAMS(F["fk_bigsmem_f32"], 1, 1, 1, 4, 1, 1, 64 * 1024, arr2, None, None, None)
    g4 = c_void_p(); call("cuGraphCreate", byref(g4), 0)
    nd4 = c_void_p(); call("cuGraphAddKernelNode_v2", byref(nd4), g4, None, 0, byref(kp3))
    res["smem"] = fn("cuGraphInstantiateWithFlags")(byref(e), g4, 0)
    cu.set_func_attr(F["fk_bigsmem_f32"], 8, 64 * 1024)
    res["smem_ok"] = fn("cuGraphInstantiateWithFlags")(byref(e), g4, 0)
    # a function whose module was unloaded
    m2 = cu.load_module(make_cubin(["fk_fill_f32"]))
    f2 = cu.module_function(m2, "fk_fill_f32")
    objs5 = [c_uint64(o), c_float(1.0), c_int(4)]
    arr5 = (c_void_p * 3)(*[ctypes.cast(ctypes.pointer(x), c_void_p) for x in objs5])
    g5 = c_void_p(); call("cuGraphCreate", byref(g5), 0)
    nd5 = c_void_p()
    call("cuGraphAddKernelNode_v2", byref(nd5), g5, None, 0,
         byref(CUDA_KERNEL_NODE_PARAMS(f2, 1, 1, 1, 4, 1, 1, 0, arr5, None, None, None)))
    call("cuModuleUnload", m2)
    res["unloaded"] = fn("cuGraphInstantiateWithFlags")(byref(e), g5, 0)
    res["unloaded_launch"] = cu.launch_raw(f2, (1, 1, 1), (1, 1, 1), [("ptr", o), (c_float, 1.0), (c_int, 4)])
    out(**res)
    """,
    )
    assert r["old"] == [1.0] * 4 and r["new"] == [5.0] * 4
    assert r["cycle"] == INVALID_VALUE
    assert r["cluster"] == INVALID_CLUSTER_SIZE and r["cluster_ok"] == 0
    assert r["exec_set_add"] == 0
    assert r["exec_set_cluster"] == INVALID_CLUSTER_SIZE and r["exec_set_foreign"] == INVALID_VALUE
    assert r["smem"] == INVALID_VALUE and r["smem_ok"] == 0
    assert r["unloaded"] == INVALID_HANDLE and r["unloaded_launch"] == INVALID_HANDLE


def test_exec_update(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    s = cu.stream_create()
    o = cu.malloc(64)
    def capture(v, extra_node=False, memset_instead=False):
        cu.begin_capture(s)
        if memset_instead:
            call("cuMemsetD32Async", o, 0, 4, s)
        else:
            cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, v), (c_int, 4)], stream=s)
        cu.launch(F["fk_scale_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, 2.0), (c_int, 4)], stream=s)
        if extra_node:
            call("cuMemsetD32Async", o + 16, 0, 4, s)
        return cu.end_capture(s)
    g1 = capture(1.0)
    ex = cu.instantiate(g1)
    info = CUgraphExecUpdateResultInfo()
    ok = fn("cuGraphExecUpdate_v2")(ex, capture(5.0), byref(info))
    ok_res = info.result
    cu.graph_launch(ex); val = cu.read_f32(o, 4)
    topo = fn("cuGraphExecUpdate_v2")(ex, capture(1.0, extra_node=True), byref(info))
    topo_res = info.result
    g_t = capture(1.0, memset_instead=True)
    typ = fn("cuGraphExecUpdate_v2")(ex, g_t, byref(info))
    typ_res = [info.result, info.errorNode == cu.graph_nodes(g_t)[0]]
    cu.graph_launch(ex); val2 = cu.read_f32(o, 4)
    out(ok=[ok, ok_res], val=val, topo=[topo, topo_res], typ=[typ] + typ_res, val2=val2)
    """,
    )
    assert r["ok"] == [0, 0] and r["val"] == [10.0] * 4
    assert r["topo"] == [EXEC_UPDATE_FAILURE, 2]  # CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
    assert r["typ"] == [EXEC_UPDATE_FAILURE, 3, True]  # CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
    assert r["val2"] == [10.0] * 4


def test_child_graphs_events_host_and_alloc_nodes(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    s = cu.stream_create()
    o = cu.malloc(64)
    ev = cu.event_create()
    # child graph from a capture, then used by cuGraphAddChildGraphNode (cloned)
    cu.begin_capture(s)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, 3.0), (c_int, 4)], stream=s)
    child = cu.end_capture(s)
    g = c_void_p(); call("cuGraphCreate", byref(g), 0); g = g.value
    cn = c_void_p(); call("cuGraphAddChildGraphNode", byref(cn), g, None, 0, child)
    inner = c_void_p(); call("cuGraphChildGraphNodeGetGraph", cn, byref(inner))
    call("cuGraphDestroy", child)                      # the node holds its own copy
    hits = []
    cb = HOSTFN(lambda _u: hits.append(1))
    hp = CUDA_HOST_NODE_PARAMS(cb, None)
    hn = c_void_p(); call("cuGraphAddHostNode", byref(hn), g, (c_void_p * 1)(cn.value), 1, byref(hp))
    er = c_void_p(); call("cuGraphAddEventRecordNode", byref(er), g, (c_void_p * 1)(hn.value), 1, ev)
    got = c_void_p(); call("cuGraphEventRecordNodeGetEvent", er, byref(got))
    mp = CUDA_MEMSET_NODE_PARAMS(o + 16, 0, 0x40000000, 4, 4, 1)
    mn = c_void_p(); call("cuGraphAddMemsetNode", byref(mn), g, None, 0, byref(mp), cu.ctx)
    mp2 = CUDA_MEMSET_NODE_PARAMS(); call("cuGraphMemsetNodeGetParams", mn, byref(mp2))
    cl = c_void_p(); call("cuGraphClone", byref(cl), g)
    ex = cu.instantiate(cl.value)
    cu.graph_launch(ex, s)
    q = fn("cuEventQuery")(ev)
    # stream-ordered allocation under capture: mem alloc / mem free nodes
    cu.begin_capture(s)
    p = c_uint64()
    call("cuMemAllocAsync", byref(p), 64, s)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", p.value), (c_float, 6.0), (c_int, 4)], stream=s)
    call("cuMemcpyDtoDAsync_v2", o + 32, p.value, 16, s)
    call("cuMemFreeAsync", p.value, s)
    ga = cu.end_capture(s)
    exa = cu.instantiate(ga); cu.graph_launch(exa, s); cu.graph_launch(exa, s)
    # graph launch inside a capture becomes a child-graph node
    cu.begin_capture(s)
    cu.graph_launch(exa, s)
    gl = cu.end_capture(s)
    out(vals=cu.read_f32(o, 12), hits=len(hits), event=got.value == ev, query=q,
        inner=[cu.node_type(x) for x in cu.graph_nodes(inner.value)],
        memset=[mp2.dst == o + 16, mp2.value, mp2.elementSize, mp2.width],
        alloc_types=[cu.node_type(x) for x in cu.graph_nodes(ga)],
        captured_launch=[cu.node_type(x) for x in cu.graph_nodes(gl)])
    """,
    )
    assert r["vals"] == [3.0] * 4 + [2.0] * 4 + [6.0] * 4
    assert r["hits"] == 1 and r["event"] and r["query"] == 0
    assert r["inner"] == ["kernel"]
    assert r["memset"] == [True, 0x40000000, 4, 4]
    assert r["alloc_types"] == ["mem_alloc", "kernel", "memcpy", "mem_free"]
    assert r["captured_launch"] == ["graph"]


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


def test_kernels_from_libraries_and_ptsz_stream(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    lib = cu.load_library(make_fatbin([("elf", make_cubin(["fk_fill_f32", "fk_add_f32"]))]))
    k = cu.library_kernel(lib, "fk_fill_f32")
    f = cu.kernel_function(k)
    o = cu.malloc(16)
    # a CUkernel may be passed where a CUfunction is expected
    cu.launch(k, (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, 4.0), (c_int, 4)])
    v1 = cu.read_f32(o, 4)
    launch_ptsz = proc("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
    objs = [c_uint64(o), c_float(8.0), c_int(4)]
    arr = (c_void_p * 3)(*[ctypes.cast(ctypes.pointer(x), c_void_p) for x in objs])
    rp = launch_ptsz(f, 1, 1, 1, 4, 1, 1, 0, None, arr, None)
    out(v1=v1, rp=rp, v2=cu.read_f32(o, 4),
        sym=proc_symbol("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
    """,
    )
    assert r == {"v1": [4.0] * 4, "rp": 0, "v2": [8.0] * 4, "sym": "cuLaunchKernel_ptsz"}


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
