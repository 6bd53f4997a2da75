"""The kernel-image registry: what the application loads is recorded exactly, and every CUfunction
maps back to (image, entry name), in this process (test_registry_archive.py: through an archive, in
another one).

Image sizes are checked against tests/fakecuda/images.py's ``image_size`` oracle, which reads the
same headers the driver reads; every image is handed over with trailing bytes after it, so a size
taken from the buffer instead of the headers is caught.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fakecuda.images import image_size, make_cubin, make_fatbin, make_ptx
from tests.support.scenarios import scenario

AppJson = Callable[..., Any]


def test_images_of_every_form_are_recorded_with_the_size_their_headers_give(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        forms = {
            "cubin": images.make_cubin(["fk_fill_f32", "fk_add_f32"]),
            "cubin_phdrs_last": images.make_cubin(["fk_scale_f32"], payload=b"x" * 300, phdrs_last=True),
            "fatbin": images.make_fatbin([("elf", images.make_cubin(["fk_axpy_f32"])),
                                          ("ptx", images.make_ptx(["fk_axpy_f32"]))]),
            "ptx": images.make_ptx(["fk_sum_f32", "fk_copy_bytes"]),
        }
        TRAILER = b"\\xa5" * 4096   # bytes after the image that are not part of it
        keep, res = [], {}
        def load(how, data):
            buf = ctypes.create_string_buffer(data + TRAILER, len(data) + len(TRAILER))
            keep.append(buf)
            h = ctypes.c_void_p()
            if how == "module":
                rc = fn("cuModuleLoadData")(ctypes.byref(h), buf)
            elif how == "module_ex":
                rc = fn("cuModuleLoadDataEx")(ctypes.byref(h), buf, 0, None, None)
            elif how == "fatbinary":
                rc = fn("cuModuleLoadFatBinary")(ctypes.byref(h), buf)
            else:
                rc = fn("cuLibraryLoadData")(ctypes.byref(h), buf, None, None, 0, None, None, 0)
            assert rc == 0, (how, rc)
            return h.value
        for name, data in forms.items():
            for how in ("module", "module_ex", "library"):
                load(how, data)
                rec = registry.recorded_images()[-1]
                res[f"{name}/{how}"] = [rec.size, rec.format.name.lower(), rec.kind, rec.loaded,
                                        bytes(registry.image_bytes(rec.index)).hex()]
        # the runtime's form: a __fatBinC_Wrapper_t pointing at the fatbin
        fat = ctypes.create_string_buffer(forms["fatbin"] + TRAILER, len(forms["fatbin"]) + len(TRAILER))
        keep.append(fat)
        wrapper = images.fatbin_wrapper(ctypes.addressof(fat))
        for how in ("fatbinary", "module"):
            load(how, wrapper)
            rec = registry.recorded_images()[-1]
            res[f"wrapper/{how}"] = [rec.size, rec.format.name.lower(), rec.kind, rec.loaded,
                                     bytes(registry.image_bytes(rec.index)).hex()]
        out(**res)
        """)
    )
    forms = {
        "cubin": make_cubin(["fk_fill_f32", "fk_add_f32"]),
        "cubin_phdrs_last": make_cubin(["fk_scale_f32"], payload=b"x" * 300, phdrs_last=True),
        "fatbin": make_fatbin([("elf", make_cubin(["fk_axpy_f32"])), ("ptx", make_ptx(["fk_axpy_f32"]))]),
        "ptx": make_ptx(["fk_sum_f32", "fk_copy_bytes"]),
    }
    fmt = {"cubin": "elf", "cubin_phdrs_last": "elf", "fatbin": "fatbin", "ptx": "ptx"}
    # the phdrs-last cubin really ends with its program headers (the case the oracle exists for)
    phdrs = forms["cubin_phdrs_last"]
    (phoff,), (phnum,) = struct.unpack_from("<Q", phdrs, 0x20), struct.unpack_from("<H", phdrs, 0x38)
    (shoff,) = struct.unpack_from("<Q", phdrs, 0x28)
    assert shoff < phoff and phoff + 56 * phnum == len(phdrs) == image_size(phdrs)
    for name, data in forms.items():
        for how in ("module", "module_ex", "library"):
            kind = "library" if how == "library" else "module"
            assert r[f"{name}/{how}"] == [image_size(data), fmt[name], kind, True, data.hex()], (name, how)
    for how in ("fatbinary", "module"):
        # the wrapper is only the runtime's handle: what is recorded is the fatbin it points at
        assert r[f"wrapper/{how}"] == [len(forms["fatbin"]), "fatbin", "module", True, forms["fatbin"].hex()]


def test_image_from_a_heap_buffer_is_copied_before_the_buffer_is_reused(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        import gc
        cu = Cuda()
        data = images.make_cubin(["fk_fill_f32"], payload=b"jit" * 100)
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        heap = libc.malloc(len(data))           # what a JIT compiler hands the driver
        ctypes.memmove(heap, data, len(data))
        mod = ctypes.c_void_p()
        call("cuModuleLoadData", ctypes.byref(mod), heap)
        ctypes.memset(heap, 0x5A, len(data))    # the JIT reuses its buffer ...
        libc.free(heap)                         # ... and frees it
        py = ctypes.create_string_buffer(images.make_ptx(["fk_scale_f32"]))
        lib = ctypes.c_void_p()
        call("cuLibraryLoadData", ctypes.byref(lib), py, None, None, 0, None, None, 0)
        ctypes.memset(py, 0x20, len(py))
        del py
        gc.collect()
        recs = registry.recorded_images()
        fill = cu.module_function(mod.value, "fk_fill_f32")
        out(owned=[r.owned for r in recs], data_at_heap=recs[0].data == heap,
            equal=[bytes(registry.image_bytes(0)) == data,
                   bytes(registry.image_bytes(1)) == images.make_ptx(["fk_scale_f32"])],
            hashes=[registry.image_hash(0), registry.image_hash(1)], resolved=resolve(fill))
        """)
    )
    assert r["owned"] == [True, True] and r["data_at_heap"] is False
    assert r["equal"] == [True, True]
    assert r["hashes"] == [
        hashlib.sha256(make_cubin(["fk_fill_f32"], payload=b"jit" * 100)).hexdigest(),
        hashlib.sha256(make_ptx(["fk_scale_f32"])).hexdigest(),
    ]
    assert r["resolved"] == [0, "fk_fill_f32"]


def test_images_loaded_from_files_are_recorded(app_json: AppJson, tmp_path: Path) -> None:
    cubin = make_cubin(["fk_fill_f32", "fk_add_f32"], phdrs_last=True)
    fatbin = make_fatbin([("elf", make_cubin(["fk_scale_f32"]))])
    (tmp_path / "kernels.cubin").write_bytes(cubin)
    (tmp_path / "kernels.fatbin").write_bytes(fatbin)
    r = app_json(
        scenario(f"""
        cu = Cuda()
        mod = ctypes.c_void_p()
        call("cuModuleLoad", ctypes.byref(mod), {str(tmp_path / "kernels.cubin")!r}.encode())
        lib = ctypes.c_void_p()
        call("cuLibraryLoadFromFile", ctypes.byref(lib), {str(tmp_path / "kernels.fatbin")!r}.encode(),
             None, None, 0, None, None, 0)
        missing = int(fn("cuModuleLoad")(ctypes.byref(ctypes.c_void_p()), b"/nonexistent/kernels.cubin"))
        recs = registry.recorded_images()
        k = cu.library_kernel(lib.value, "fk_scale_f32")
        out(recs=[[r.kind, r.format.name.lower(), r.size, r.owned, r.handle] for r in recs],
            handles=[mod.value, lib.value], missing=missing,
            data=[bytes(registry.image_bytes(i)).hex() for i in range(len(recs))],
            resolved=[resolve(cu.module_function(mod.value, "fk_add_f32")),
                      resolve(cu.kernel_function(k))])
        """)
    )
    assert r["missing"] != 0
    assert [rec[:4] for rec in r["recs"]] == [
        ["module", "elf", image_size(cubin), True],
        ["library", "fatbin", image_size(fatbin), True],
    ]
    assert [rec[4] for rec in r["recs"]] == r["handles"]
    assert r["data"] == [cubin.hex(), fatbin.hex()]
    assert r["resolved"] == [[0, "fk_add_f32"], [1, "fk_scale_f32"]]


def test_resolve_maps_module_functions_and_library_kernels_to_their_own_image(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        m1 = cu.load_module(images.make_cubin(["fk_fill_f32", "fk_add_f32"]))
        m2 = cu.load_module(images.make_cubin(["fk_fill_f32"], payload=b"other build"))  # same name, other image
        l1 = cu.load_library(images.make_fatbin([("elf", images.make_cubin(["fk_scale_f32", "fk_fill_f32"]))]))
        l2 = cu.load_library(images.make_ptx(["fk_scale_f32"]))
        res = {}
        res["m1_fill"] = resolve(cu.module_function(m1, "fk_fill_f32"))
        res["m1_add"] = resolve(cu.module_function(m1, "fk_add_f32"))
        res["m2_fill"] = resolve(cu.module_function(m2, "fk_fill_f32"))
        k1 = cu.library_kernel(l1, "fk_scale_f32")
        k2 = cu.library_kernel(l2, "fk_scale_f32")
        res["l1_scale"] = resolve(cu.kernel_function(k1))
        res["l2_scale"] = resolve(cu.kernel_function(k2))
        res["l1_kernel_handle"] = resolve(k1)          # a CUkernel used as a CUfunction
        res["l1_fill"] = resolve(cu.kernel_function(cu.library_kernel(l1, "fk_fill_f32")))
        # kernels the application found without cuLibraryGetKernel
        n = ctypes.c_uint()
        call("cuLibraryGetKernelCount", ctypes.byref(n), l2)
        ks = (ctypes.c_void_p * n.value)()
        call("cuLibraryEnumerateKernels", ks, n.value, l2)
        res["enumerated"] = [resolve(cu.kernel_function(k)) for k in ks]
        res["again"] = resolve(cu.module_function(m2, "fk_fill_f32"))   # cached answer
        res["unknown"] = error_of(resolve, 0x1234)
        # all in one call, as SAVE asks: names, images and attributes in order; an unknown one fails the call
        fs = [cu.module_function(m1, "fk_add_f32"), cu.kernel_function(k2), cu.module_function(m2, "fk_fill_f32")]
        res["batch"] = [[i.image, i.name, list(i.attrs) == list(registry.function_attrs(f))]
                        for i, f in zip(registry.describe_functions(fs), fs)]
        res["batch_unknown"] = error_of(registry.describe_functions, [fs[0], 0x1234])
        res["batch_empty"] = registry.describe_functions([])
        out(**res)
        """)
    )
    assert r["m1_fill"] == [0, "fk_fill_f32"] and r["m1_add"] == [0, "fk_add_f32"]
    assert r["m2_fill"] == [1, "fk_fill_f32"]
    assert r["l1_scale"] == [2, "fk_scale_f32"] and r["l2_scale"] == [3, "fk_scale_f32"]
    assert r["l1_kernel_handle"] == [2, "fk_scale_f32"]
    assert r["l1_fill"] == [2, "fk_fill_f32"]
    assert r["enumerated"] == [[3, "fk_scale_f32"]]
    assert r["again"] == [1, "fk_fill_f32"]
    assert r["unknown"][0] == "KernelNotFoundError"
    assert r["batch"] == [[0, "fk_add_f32", True], [3, "fk_scale_f32", True], [1, "fk_fill_f32", True]]
    assert r["batch_unknown"][0] == "KernelNotFoundError" and r["batch_empty"] == []


def test_kernels_with_very_long_mangled_names_resolve(app_json: AppJson) -> None:
    """Templated kernels can have mangled names of many kilobytes."""
    r = app_json(
        scenario("""
        cu = Cuda()
        long_name = "_ZN7cutlass6KernelINS_4gemm" + "N3cute5tupleIJNS_1CILi128EEE" * 300 + "EEEvNT_6ParamsE"
        mod = cu.load_module(images.make_cubin(["fk_fill_f32", long_name]))
        lib = cu.load_library(images.make_ptx([long_name]))
        out(n=len(long_name),
            module=resolve(cu.module_function(mod, long_name)) == (0, long_name),
            library=resolve(cu.kernel_function(cu.library_kernel(lib, long_name))) == (1, long_name),
            entries=long_name in registry.image_entries(0))
        """)
    )
    assert r["n"] > 8192
    assert r == {"n": r["n"], "module": True, "library": True, "entries": True}


def test_image_entries_list_the_kernels_and_unloading_forgets_the_image(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        names = ["fk_fill_f32", "fk_add_f32", "_Z10my_kernelPfi"]
        mod = cu.load_module(images.make_cubin(names))
        lib = cu.load_library(images.make_ptx(["fk_scale_f32", "fk_sum_f32"]))
        f = cu.module_function(mod, "fk_add_f32")
        g = cu.kernel_function(cu.library_kernel(lib, "fk_sum_f32"))
        res = {"entries": [sorted(registry.image_entries(0)), sorted(registry.image_entries(1))],
               "before": [resolve(f), resolve(g)]}
        call("cuModuleUnload", mod)
        call("cuLibraryUnload", lib)
        recs = registry.recorded_images()
        res["loaded"] = [r.loaded for r in recs]
        res["entries_after"] = [error_of(registry.image_entries, 0), error_of(registry.image_entries, 1)]
        res["resolve_after"] = [error_of(resolve, f)[0], error_of(resolve, g)[0]]
        # a new image loaded afterwards resolves normally, its index after the unloaded ones
        mod2 = cu.load_module(images.make_cubin(["fk_add_f32"]))
        res["new"] = resolve(cu.module_function(mod2, "fk_add_f32"))
        call("cuModuleUnload", mod2)
        res["count"] = len(registry.recorded_images())
        out(**res)
        """)
    )
    assert r["entries"] == [sorted(["fk_fill_f32", "fk_add_f32", "_Z10my_kernelPfi"]), ["fk_scale_f32", "fk_sum_f32"]]
    assert r["before"] == [[0, "fk_add_f32"], [1, "fk_sum_f32"]]
    assert r["loaded"] == [False, False]
    for err in r["entries_after"]:
        assert err[0] == "RegistryError" and "is not loaded" in err[1]
    assert r["resolve_after"] == ["KernelNotFoundError", "KernelNotFoundError"]
    assert r["new"] == [2, "fk_add_f32"]
    assert r["count"] == 3


def test_launch_trace_records_the_functions_launched_inside_it(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        mod = cu.load_module(images.make_cubin(["fk_fill_f32", "fk_add_f32", "fk_scale_f32"]))
        fill, add, scale = (cu.module_function(mod, n) for n in ("fk_fill_f32", "fk_add_f32", "fk_scale_f32"))
        a, b, c = cu.malloc(64), cu.malloc(64), cu.malloc(64)
        n16 = (ctypes.c_int, 16)
        cu.launch(scale, (1, 1, 1), (16, 1, 1), [("ptr", a), (ctypes.c_float, 1.0), n16])  # before: not traced
        with registry.launch_trace() as t:
            cu.launch(fill, (1, 1, 1), (16, 1, 1), [("ptr", a), (ctypes.c_float, 1.5), n16])
            cu.launch(fill, (1, 1, 1), (16, 1, 1), [("ptr", b), (ctypes.c_float, 2.0), n16])
            cu.launch_ex(add, (1, 1, 1), (16, 1, 1), [("ptr", a), ("ptr", b), ("ptr", c), n16])
        cu.launch(scale, (1, 1, 1), (16, 1, 1), [("ptr", c), (ctypes.c_float, 2.0), n16])  # after: not traced
        with registry.launch_trace() as t2:
            pass
        out(traced=sorted(t.functions) == sorted([fill, add]), count=len(t.functions), empty=t2.functions,
            result=cu.read_f32(c, 2))
        """)
    )
    assert r["traced"] and r["count"] == 2
    assert r["empty"] == []
    assert r["result"] == [7.0, 7.0]  # the launches really ran: (1.5 + 2.0) * 2


def test_function_attributes_round_trip(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        mod = cu.load_module(images.make_cubin(["fk_bigsmem_f32", "fk_fill_f32"]))
        f = cu.module_function(mod, "fk_bigsmem_f32")
        g = cu.module_function(mod, "fk_fill_f32")
        from foundry.records import FUNC_ATTR_UNKNOWN, FuncAttr
        ids = [int(a) for a in FuncAttr]
        res = {"ids": ids, "initial": list(registry.function_attrs(f))}
        want = list(res["initial"])
        want[0], want[1], want[5] = 100 * 1024, 50, 1
        registry.set_function_attrs(f, want)
        res["after"] = list(registry.function_attrs(f))
        res["driver_view"] = [cu.func_attr(f, a) for a in ids]
        res["other_untouched"] = list(registry.function_attrs(g)) == res["initial"]
        skip = [FUNC_ATTR_UNKNOWN] * registry.FUNC_ATTR_COUNT
        registry.set_function_attrs(f, skip)                 # "unknown" values are never applied
        res["after_skip"] = list(registry.function_attrs(f))
        lower = list(res["after"])
        lower[0] = 1024                                      # the shared-memory limit is only ever raised
        registry.set_function_attrs(f, lower)
        res["after_lower"] = list(registry.function_attrs(f))
        bad = list(res["after"])
        bad[0] = 10 ** 9
        res["bad"] = error_of(registry.set_function_attrs, f, bad)
        # the attribute makes the big-shared-memory launch legal
        buf = cu.malloc(64)
        res["launch"] = cu.launch_raw(f, (1, 1, 1), (16, 1, 1), [("ptr", buf), (ctypes.c_int, 16)], shared=64 * 1024)
        out(**res)
        """)
    )
    assert r["ids"] == [8, 9, 11, 12, 13, 14, 15]  # the attributes FORMAT.md lists, in its order
    assert r["initial"][0] == 48 * 1024 and r["initial"][1] == -1
    expected = list(r["initial"])
    expected[0], expected[1], expected[5] = 100 * 1024, 50, 1
    assert r["after"] == expected and r["driver_view"] == expected
    assert r["other_untouched"]
    assert r["after_skip"] == expected
    assert r["after_lower"] == expected
    name, message = r["bad"]
    assert name == "DriverError" and "fk_bigsmem_f32" in message and "cuFuncSetAttribute" in message
    assert r["launch"] == 0
