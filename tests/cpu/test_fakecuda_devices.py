"""Tests of the fake CUDA driver itself (no Foundry): initialization, devices, contexts, error names."""

from __future__ import annotations

from pathlib import Path

from tests.support.fakecuda_helpers import INVALID_CONTEXT, INVALID_VALUE, NOT_INITIALIZED, run


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
