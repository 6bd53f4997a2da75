"""Tests of the fake CUDA driver itself (no Foundry): builtin kernels, launch rules (clusters, shared
memory), parameter info and function attributes, kernels from libraries."""

from __future__ import annotations

from pathlib import Path

from tests.support.fakecuda_helpers import ILLEGAL_ADDRESS, INVALID_CLUSTER_SIZE, INVALID_VALUE, NOT_SUPPORTED, run


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
    assert r["attrs"] == {"0": 1024, "8": 48 * 1024, "9": -1, "10": 0, "11": 0, "12": 0, "13": 0, "14": 0, "15": 0}
    assert r["carveout"] == 50 and r["ro"] == INVALID_VALUE and r["cluster_must"] == 1


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
