"""Tests of the fake driver's cuGetProcAddress table and of its exported symbol set."""

from __future__ import annotations

import struct
import textwrap
from pathlib import Path
from typing import Any

from tests.support.subproc import run_json

PRE = """
import ctypes, json
from tests.support.fakecu import *
def out(**kw):
    print(json.dumps(kw))
"""


def exported_functions(lib: Path) -> list[str]:
    """Defined global/weak FUNC symbols of a shared object's .dynsym (a tiny ELF64 reader)."""
    data = lib.read_bytes()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    (shnum,) = struct.unpack_from("<H", data, 0x3C)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * 64) for i in range(shnum)]
    names: list[str] = []
    for sec in secs:
        if sec[1] != 11:  # SHT_DYNSYM
            continue
        stroff = secs[sec[6]][4]
        for k in range(0, sec[5], 24):
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", data, sec[4] + k)
            if st_shndx != 0 and st_info & 0xF == 2 and st_info >> 4 in (1, 2):
                names.append(data[stroff + st_name : data.index(b"\0", stroff + st_name)].decode())
    return sorted(names)


def _run(lib_dir: Path, body: str) -> Any:
    return run_json(PRE + textwrap.dedent(body), lib_dir=lib_dir)


def test_abi_selected_by_version_and_flags(fakecuda_dir: Path) -> None:
    r = _run(
        fakecuda_dir,
        """
    PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
    cases = [("cuMemAlloc", 3000, 0), ("cuMemAlloc", 3020, 0), ("cuMemAlloc", 13000, 0),
             ("cuMemFree", 2000, 0), ("cuMemAllocPitch", 3010, 0), ("cuMemGetAddressRange", 3000, 0),
             ("cuGetProcAddress", 11080, 0), ("cuGetProcAddress", 12000, 0),
             ("cuGraphGetEdges", 12000, 0), ("cuGraphGetEdges", 13000, 0),
             ("cuGraphAddKernelNode", 11080, 0), ("cuGraphAddKernelNode", 12000, 0),
             ("cuGraphInstantiate", 11000, 0), ("cuGraphInstantiate", 12000, 0),
             ("cuStreamBeginCapture", 10000, 0), ("cuStreamBeginCapture", 13000, 0),
             ("cuStreamBeginCapture", 13000, PT), ("cuLaunchKernel", 13000, PT), ("cuLaunchKernelEx", 13000, PT),
             ("cuMemAllocAsync", 13000, PT), ("cuMemFreeAsync", 13000, PT), ("cuMemAllocFromPoolAsync", 13000, PT),
             ("cuGraphLaunch", 13000, PT), ("cuEventRecord", 13000, PT), ("cuEventRecord", 13000, 0),
             ("cuMemcpyHtoD", 13000, PT), ("cuMemcpyHtoDAsync", 13000, PT), ("cuStreamGetCaptureInfo", 13000, PT),
             ("cuEventDestroy", 13000, 0), ("cuEventElapsedTime", 13000, 0), ("cuGraphInstantiate", 13000, PT),
             ("cuInit", 13000, PT), ("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM)]
    syms = [proc_symbol(n, v, f) for n, v, f in cases]
    unknown = proc_address("cuNoSuchFunction")
    too_old = proc_address("cuGraphCreate", 9020)
    by_v2_name = proc_address("cuMemAlloc_v2")
    v1 = proc("cuGetProcAddress", 11080)
    p = ctypes.c_void_p()
    r_v1 = v1(b"cuInit", ctypes.byref(p), 13000, 0)
    out(syms=syms, unknown=[unknown[0], unknown[1], unknown[2]], too_old=[too_old[0], too_old[2]],
        by_v2_name=by_v2_name[0], v1=[r_v1, p.value == symbol_address("cuInit")])
    """,
    )
    assert r["syms"] == [
        "cuMemAlloc", "cuMemAlloc_v2", "cuMemAlloc_v2", "cuMemFree", "cuMemAllocPitch", "cuMemGetAddressRange",
        "cuGetProcAddress", "cuGetProcAddress_v2", "cuGraphGetEdges", "cuGraphGetEdges_v2",
        "cuGraphAddKernelNode", "cuGraphAddKernelNode_v2", "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags",
        "cuStreamBeginCapture", "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz", "cuLaunchKernel_ptsz",
        "cuLaunchKernelEx_ptsz", "cuMemAllocAsync_ptsz", "cuMemFreeAsync_ptsz", "cuMemAllocFromPoolAsync_ptsz",
        "cuGraphLaunch_ptsz", "cuEventRecord_ptsz", "cuEventRecord", "cuMemcpyHtoD_v2_ptds",
        "cuMemcpyHtoDAsync_v2_ptsz", "cuStreamGetCaptureInfo_v3_ptsz", "cuEventDestroy_v2",
        "cuEventElapsedTime_v2", "cuGraphInstantiateWithFlags", "cuInit", "cuLaunchKernel",
    ]  # fmt: skip
    assert r["unknown"] == [500, 0, 1]  # CUDA_ERROR_NOT_FOUND, NULL, SYMBOL_NOT_FOUND
    assert r["too_old"] == [500, 2]  # VERSION_NOT_SUFFICIENT
    assert r["by_v2_name"] == 500  # the table is keyed by base names, like the real driver
    assert r["v1"] == [0, True]


FAKE_ONLY = {"fakecuda_exec_counts"}  # tests/fakecuda/README.md, "Test hooks"


def test_every_export_is_reachable_through_get_proc_address(fakecuda_dir: Path) -> None:
    exported = exported_functions(fakecuda_dir / "libcuda.so.1")
    # Every export is a driver entry point but the fake's own test hooks, which no driver has.
    names = [n for n in exported if n not in FAKE_ONLY]
    assert set(exported) - set(names) == FAKE_ONLY
    assert names and all(n.startswith("cu") for n in names), [n for n in names if not n.startswith("cu")]
    r = _run(
        fakecuda_dir,
        f"""
    import re
    NAMES = {names!r}
    missing = []
    for name in NAMES:
        base = re.sub(r"(_v[0-9]+)?(_ptsz|_ptds)?$", "", name)
        want = symbol_address(name)
        bases = [base, "cuGraphInstantiate"] if base == "cuGraphInstantiateWithFlags" else [base]
        found = False
        for b in bases:
            for flags in (0, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM):
                for v in range(2000, 13001, 10):
                    rc, addr, _ = proc_address(b, v, flags)
                    if rc == 0 and addr == want:
                        found = True
                        break
                if found:
                    break
        if not found:
            missing.append(name)
    out(missing=missing, count=len(NAMES))
    """,
    )
    assert r["missing"] == [] and r["count"] == len(names)
