"""Tests of the kernel-image generators and of the fake driver's image loading (all four forms)."""

from __future__ import annotations

import struct
import textwrap
from pathlib import Path
from typing import Any

from tests.fakecuda.images import (
    EM_CUDA,
    FATBIN_MAGIC,
    FATBIN_WRAPPER_MAGIC,
    fatbin_wrapper,
    image_size,
    make_cubin,
    make_fatbin,
    make_ptx,
)
from tests.support.subproc import run_json


def _elf_header(data: bytes) -> dict[str, int]:
    (e_type, e_machine, _, _, phoff, shoff, _, ehsize, phentsize, phnum, shentsize, shnum, shstrndx) = (
        struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
    )
    return dict(type=e_type, machine=e_machine, phoff=phoff, shoff=shoff, ehsize=ehsize, phentsize=phentsize,
                phnum=phnum, shentsize=shentsize, shnum=shnum, shstrndx=shstrndx)  # fmt: skip


def _sections(data: bytes) -> list[tuple[str, int, int, int, int]]:
    h = _elf_header(data)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, h["shoff"] + i * 64) for i in range(h["shnum"])]
    stroff = raw[h["shstrndx"]][4]

    def name(off: int) -> str:
        return data[stroff + off : data.index(b"\0", stroff + off)].decode()

    return [(name(s[0]), s[1], s[4], s[5], s[6]) for s in raw]


def _symbols(data: bytes) -> list[tuple[str, int]]:
    secs = _sections(data)
    out = []
    for _name, typ, off, size, link in secs:
        if typ != 2:
            continue
        stroff = secs[link][2]
        for k in range(0, size, 24):
            st_name, st_info = struct.unpack_from("<IB", data, off + k)
            if st_name:
                out.append((data[stroff + st_name : data.index(b"\0", stroff + st_name)].decode(), st_info))
    return out


def test_cubin_layout() -> None:
    data = make_cubin(["k_a", "k_b"], payload=b"\xaa" * 100)
    h = _elf_header(data)
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    assert h["machine"] == EM_CUDA and h["ehsize"] == 64 and h["shentsize"] == 64 and h["phnum"] == 0
    assert h["shoff"] + h["shnum"] * 64 == len(data)  # section headers at the very end
    names = [s[0] for s in _sections(data)]
    assert names == ["", ".shstrtab", ".strtab", ".symtab", ".text.k_a", ".text.k_b"]
    assert _symbols(data) == [("k_a", 0x12), ("k_b", 0x12)]  # STB_GLOBAL | STT_FUNC
    assert image_size(data) == len(data)
    assert make_cubin(["k_a"]) != make_cubin(["k_b"])
    assert make_cubin([])  # one plain .text


def test_cubin_with_trailing_program_headers() -> None:
    data = make_cubin(["k_a", "k_b", "k_c"], phdrs_last=True)
    h = _elf_header(data)
    assert h["phnum"] == 3 and h["phentsize"] == 56
    assert h["phoff"] == h["shoff"] + h["shnum"] * 64
    assert h["phoff"] + 3 * 56 == len(data)
    assert image_size(data) == len(data) and image_size(data + b"junk" * 10) == len(data)


def test_fatbin_ptx_and_wrapper_layout() -> None:
    elf = make_cubin(["k"])
    ptx = make_ptx(["k", "k2"])
    assert ptx.endswith(b"\0") and b".version 8.0" in ptx and b".target sm_90" in ptx
    assert ptx.count(b".visible .entry") == 2
    fb = make_fatbin([("ptx", ptx), ("elf", elf)])
    magic, version, hsize, fat = struct.unpack_from("<IHHQ", fb)
    assert (magic, version, hsize) == (FATBIN_MAGIC, 1, 16) and hsize + fat == len(fb) == image_size(fb)
    kind, flags, ehs, psize = struct.unpack_from("<HHIQ", fb, 16)
    assert (kind, flags, ehs, psize) == (1, 0, 64, len(ptx))
    second = 16 + 64 + (len(ptx) + 7) // 8 * 8
    assert struct.unpack_from("<HHIQ", fb, second) == (2, 0, 64, len(elf))
    assert fb[second + 64 : second + 64 + len(elf)] == elf
    w = fatbin_wrapper(0x1234_5678_9ABC)
    assert len(w) == 24 and struct.unpack("<iiQQ", w) == (FATBIN_WRAPPER_MAGIC, 1, 0x1234_5678_9ABC, 0)


LOAD = """
import ctypes, json
from ctypes import byref, c_float, c_int, c_uint, c_void_p, c_char_p
from tests.support.fakecu import *
from tests.fakecuda.images import *
cu = Cuda()
def names(mod):
    n = c_uint(); call("cuModuleGetFunctionCount", byref(n), mod)
    arr = (c_void_p * max(n.value, 1))()
    call("cuModuleEnumerateFunctions", arr, n.value, mod)
    return [cu.func_name(arr[i]) for i in range(n.value)]
def out(**kw):
    print(json.dumps(kw))
def load(image, how="data"):
    buf = ctypes.create_string_buffer(image, len(image))
    m = c_void_p()
    name = {"data": "cuModuleLoadData", "fat": "cuModuleLoadFatBinary"}[how]
    r = fn(name)(byref(m), buf)
    ctypes.memset(buf, 0, len(image))          # the driver must have copied the image
    return r, m.value
"""


def _run(lib_dir: Path, body: str) -> Any:
    return run_json(LOAD + textwrap.dedent(body), lib_dir=lib_dir)


def test_driver_loads_all_four_forms(fakecuda_dir: Path) -> None:
    r = _run(
        fakecuda_dir,
        """
    KS = ["fk_fill_f32", "fk_scale_f32", "not_builtin"]
    cubin = make_cubin(KS, payload=b"x" * 300, phdrs_last=True)
    forms = {
        "elf": cubin + b"TRAILING GARBAGE",
        "fatbin_elf": make_fatbin([("ptx", make_ptx(["ptx_only"])), ("elf", cubin)]),
        "fatbin_ptx": make_fatbin([("ptx", make_ptx(KS))]),
        "ptx": make_ptx(KS),
    }
    res = {}
    for key, img in forms.items():
        rc, m = load(img)
        res[key] = [rc, names(m) if rc == 0 else None]
    fb = make_fatbin([("elf", cubin)])
    fb_buf = ctypes.create_string_buffer(fb, len(fb))
    wrapper = fatbin_wrapper(ctypes.addressof(fb_buf))
    for how in ("data", "fat"):
        rc, m = load(wrapper, how)
        res["wrapper_" + how] = [rc, names(m) if rc == 0 else None]
    o = cu.malloc(16)
    rc, m = load(make_fatbin([("elf", make_cubin(["fk_fill_f32"]))]))
    f = cu.module_function(m, "fk_fill_f32")
    cu.launch(f, (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, 2.0), (c_int, 4)])
    res["launch_after_free"] = cu.read_f32(o, 4)
    bad = {}
    for key, img in {
        "garbage": b"garbage\\0",
        "binary": bytes([0, 1, 2, 3, 4, 5, 6, 7]),
        "elf_wrong_machine": make_cubin(["k"])[:18] + b"\\x3e\\x00" + make_cubin(["k"])[20:],
        "fatbin_no_entries": make_fatbin([]),
        "fatbin_bad_entry": make_fatbin([("elf", b"not an elf at all")]),
    }.items():
        bad[key] = load(img)[0]
    p = c_void_p()
    bad["library_garbage"] = fn("cuLibraryLoadData")(byref(p), b"garbage\\0", None, None, 0, None, None, 0)
    missing = fn("cuModuleGetFunction")(byref(p), m, b"nope")
    out = dict(res=res, bad=bad, missing=missing)
    print(json.dumps(out))
    """,
    )
    ks = ["fk_fill_f32", "fk_scale_f32", "not_builtin"]
    assert r["res"]["elf"] == [0, ks]
    assert r["res"]["fatbin_elf"] == [0, ks]  # the ELF entry wins over the PTX one
    assert r["res"]["fatbin_ptx"] == [0, ks]
    assert r["res"]["ptx"] == [0, ks]
    assert r["res"]["wrapper_data"] == [0, ks] and r["res"]["wrapper_fat"] == [0, ks]
    assert r["res"]["launch_after_free"] == [2.0] * 4
    assert all(v == 200 for v in r["bad"].values()), r["bad"]
    assert r["missing"] == 500


def test_libraries_modules_and_files(fakecuda_dir: Path, tmp_path: Path) -> None:
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(make_cubin(["fk_fill_f32", "fk_add_f32"]))
    r = _run(
        fakecuda_dir,
        f"""
    PATH = {str(cubin)!r}
    img = make_fatbin([("elf", make_cubin(["fk_fill_f32", "fk_add_f32"]))])
    lib = cu.load_library(img)
    n = c_uint(); call("cuLibraryGetKernelCount", byref(n), lib)
    ks = (c_void_p * n.value)(); call("cuLibraryEnumerateKernels", ks, n.value, lib)
    knames = []
    for k in ks:
        s = c_char_p(); call("cuKernelGetName", byref(s), k); knames.append(s.value.decode())
    k = cu.library_kernel(lib, "fk_fill_f32")
    f = cu.kernel_function(k)
    lm, fm = c_void_p(), c_void_p()
    call("cuLibraryGetModule", byref(lm), lib); call("cuFuncGetModule", byref(fm), f)
    # the same kernel name in two different images: distinct functions
    m1 = cu.load_module(make_cubin(["fk_fill_f32"])); m2 = cu.load_module(make_ptx(["fk_fill_f32"]))
    f1, f2 = cu.module_function(m1, "fk_fill_f32"), cu.module_function(m2, "fk_fill_f32")
    m1b = c_void_p(); call("cuFuncGetModule", byref(m1b), f1)
    # kernel attributes go to the kernel's function
    call("cuKernelSetAttribute", 8, 70000, k, 0)
    via_func = cu.func_attr(f, 8)
    # files
    mf = c_void_p(); call("cuModuleLoad", byref(mf), PATH.encode())
    lf = c_void_p(); call("cuLibraryLoadFromFile", byref(lf), PATH.encode(), None, None, 0, None, None, 0)
    kf = cu.library_kernel(lf.value, "fk_add_f32")
    nofile = fn("cuModuleLoad")(byref(mf), b"/nonexistent/x.cubin")
    st = c_int(); call("cuFuncIsLoaded", byref(st), f)
    call("cuLibraryUnload", lib)
    after_unload = fn("cuKernelGetFunction")(byref(fm), k)
    out(count=n.value, knames=knames, same_module=lm.value == fm.value, distinct=f1 != f2,
        m1=m1b.value == m1, via_func=via_func, names_file=names(mf.value), kf=bool(kf), nofile=nofile,
        loaded=st.value, after_unload=after_unload)
    """,
    )
    assert r["count"] == 2 and r["knames"] == ["fk_fill_f32", "fk_add_f32"]
    assert r["same_module"] and r["distinct"] and r["m1"]
    assert r["via_func"] == 70000
    assert r["names_file"] == ["fk_fill_f32", "fk_add_f32"] and r["kf"]
    assert r["nofile"] == 301 and r["loaded"] == 1 and r["after_unload"] == 400
