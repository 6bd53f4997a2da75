"""The interposer: every way an application looks up a driver entry point reaches Foundry's hooks.

The application is the ctypes harness (tests/support/fakecu.py) on the fake driver, with libfoundry
preloaded. "Reaches the hook" is checked by behaviour: an allocation made through the pointer the
lookup returned lands in the region and is logged; the pointer itself differs from the driver's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.region import span
from tests.support.scenarios import (
    BASE,
    CUDA_ERROR_NOT_FOUND,
    EV_ALLOC,
    EV_ASYNC_ALLOC,
    EV_ASYNC_FREE,
    EV_FREE,
    GRAN,
    build_shared_object,
    scenario,
)
from tests.support.subproc import run_python

AppJson = Callable[..., Any]


def test_dlsym_of_the_versioned_symbol_returns_the_hook_and_allocations_land_in_the_region(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
        hooked = symbol_address("cuMemAlloc_v2")
        real = native().fdy_driver_symbol(b"cuMemAlloc_v2")
        rc, p = alloc_raw(1000)
        rc2, q = alloc_raw(3 * MIB)
        out(distinct=hooked != real and hooked != 0 and real != 0, rc=[rc, rc2], ptrs=[p, q], events=events())
        """)
    )
    assert r["distinct"]
    assert r["rc"] == [0, 0]
    assert r["ptrs"] == [BASE, BASE + GRAN]
    assert r["events"] == [[EV_ALLOC, 0, 1000, span(1000)], [EV_ALLOC, GRAN, 3 << 20, 2 * GRAN]]


def test_get_proc_address_hands_out_hooks_for_current_abis_and_per_thread_variants(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
        res = {}
        # the runtime's path: cuGetProcAddress_v2("cuMemAlloc", 13000, 0)
        rc, addr, status = proc_address("cuMemAlloc", 13000, 0)
        res["alloc_symbol"] = proc_symbol("cuMemAlloc", 13000, 0)
        res["alloc_not_real"] = addr != native().fdy_driver_symbol(b"cuMemAlloc_v2")
        p = DP(0)
        res["alloc"] = [int(proc("cuMemAlloc")(ctypes.byref(p), 100)), p.value]
        # the lowest version with the 64-bit ABI is hooked too
        res["alloc_3020"] = proc_symbol("cuMemAlloc", 3020, 0)
        # per-thread default stream: the _ptsz hook, which is not the legacy-stream hook
        res["async_pt_symbol"] = proc_symbol("cuMemAllocAsync", 13000, PT)
        res["async_symbol"] = proc_symbol("cuMemAllocAsync", 13000, 0)
        res["async_pt_not_real"] = (proc_address("cuMemAllocAsync", 13000, PT)[1]
                                    != native().fdy_driver_symbol(b"cuMemAllocAsync_ptsz"))
        res["async_distinct"] = proc_address("cuMemAllocAsync", 13000, PT)[1] != proc_address("cuMemAllocAsync")[1]
        q = DP(0)
        res["async"] = [int(proc("cuMemAllocAsync", 13000, PT)(ctypes.byref(q), 5000, None)), q.value]
        res["free_async"] = int(proc("cuMemFreeAsync", 13000, PT)(q.value, None))
        # the 4-argument cuGetProcAddress (what runtimes older than 12.0 ask for) and lookups through it
        res["v1_symbol"] = proc_symbol("cuGetProcAddress", 11080, 0)
        v1 = proc("cuGetProcAddress", 11080)
        h = ctypes.c_void_p()
        res["v1_rc"] = int(v1(b"cuMemAlloc", ctypes.byref(h), 11080, 0))
        res["v1_is_hook"] = h.value == symbol_address("cuMemAlloc_v2")
        p2 = DP(0)
        res["v1_alloc"] = [int(ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(DP), ctypes.c_size_t)(h.value)(
            ctypes.byref(p2), 7)), p2.value]
        # cuGetProcAddress itself comes back hooked, so nested lookups stay hooked
        res["v2_symbol"] = proc_symbol("cuGetProcAddress", 13000, 0)
        res["v2_not_real"] = proc_address("cuGetProcAddress")[1] != native().fdy_driver_symbol(b"cuGetProcAddress_v2")
        # a version newer than Foundry's headers still gets the hook when the driver answers with the
        # very symbol whose ABI the hook implements
        res["future"] = proc_symbol("cuMemAlloc", 99990, 0)
        # names the driver does not know stay unknown
        rc_unknown, addr_unknown, _ = proc_address("cuNoSuchEntryPoint")
        res["unknown"] = [rc_unknown, addr_unknown]
        res["events"] = events()
        out(**res)
        """)
    )
    assert r["alloc_symbol"] == "cuMemAlloc_v2" and r["alloc_not_real"]
    assert r["alloc"] == [0, BASE]
    assert r["alloc_3020"] == "cuMemAlloc_v2"
    assert r["async_pt_symbol"] == "cuMemAllocAsync_ptsz" and r["async_pt_not_real"]
    assert r["async_symbol"] == "cuMemAllocAsync" and r["async_distinct"]
    assert r["async"] == [0, BASE + span(100)]  # beside the first: small allocations share a granule
    assert r["free_async"] == 0
    assert r["v1_symbol"] == "cuGetProcAddress" and r["v1_rc"] == 0 and r["v1_is_hook"]
    assert r["v1_alloc"] == [0, BASE + span(100) + span(5000)]
    assert r["v2_symbol"] == "cuGetProcAddress_v2" and r["v2_not_real"]
    assert r["future"] == "cuMemAlloc_v2"
    assert r["unknown"] == [CUDA_ERROR_NOT_FOUND, 0]
    assert r["events"] == [
        [EV_ALLOC, 0, 100, span(100)],
        [EV_ASYNC_ALLOC, span(100), 5000, span(5000)],
        [EV_ASYNC_FREE, span(100), 5000, span(5000)],
        [EV_ALLOC, span(100) + span(5000), 7, span(7)],
    ]


def test_old_32_bit_abi_is_not_hooked_and_still_works(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
        res = {}
        old = proc("cuMemAlloc", 3000)  # the v1 ABI: 32-bit pointer and size
        res["symbol"] = proc_symbol("cuMemAlloc", 3000, 0)
        res["is_real"] = proc_address("cuMemAlloc", 3000)[1] == native().fdy_driver_symbol(b"cuMemAlloc")
        p32 = ctypes.c_uint32(0)
        res["rc"] = int(old(ctypes.byref(p32), 4096))
        cu.memcpy_htod(p32.value, b"v1 memory")
        res["data"] = cu.memcpy_dtoh(p32.value, 9).decode()
        # dlsym of the unversioned name is passed through as well
        res["dlsym_is_real"] = symbol_address("cuMemAlloc") == native().fdy_driver_symbol(b"cuMemAlloc")
        q32 = ctypes.c_uint32(0)
        res["rc_dlsym"] = int(fn("cuMemAlloc")(ctypes.byref(q32), 64))
        res["ptrs"] = [p32.value, q32.value]
        res["free"] = [int(fn("cuMemFree")(p32.value)), int(fn("cuMemFree")(q32.value))]
        res["events"] = events()
        out(**res)
        """)
    )
    assert r["symbol"] == "cuMemAlloc" and r["is_real"] and r["dlsym_is_real"]
    assert r["rc"] == 0 and r["rc_dlsym"] == 0
    assert r["data"] == "v1 memory"
    assert all(0 < p < 1 << 32 for p in r["ptrs"])
    assert r["free"] == [0, 0]
    assert r["events"] == []  # nothing went through the region


RTLD_NEXT_CALLER = r"""
#include <dlfcn.h>
/* Defined here and again in the library loaded after this one. */
int fdytest_answer(void) { return 1; }
/* The classic wrapper idiom: find the definition that comes after ours. */
void *fdytest_next(const char *name) { return dlsym(RTLD_NEXT, name); }
int fdytest_next_answer(void) {
  int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "fdytest_answer");
  return next ? next() : -1;
}
"""

RTLD_NEXT_LATER = r"""
int fdytest_answer(void) { return 2; }
int fdytest_only_later(void) { return 3; }
"""

RTLD_NEXT_PROBE = """
import ctypes, json
g = ctypes.CDLL(None)
g.fdytest_next.restype = ctypes.c_void_p
g.fdytest_next.argtypes = [ctypes.c_char_p]
libc = ctypes.CDLL("libc.so.6")
def call(addr):
    return ctypes.CFUNCTYPE(ctypes.c_int)(addr)() if addr else None
print(json.dumps({
    "next_answer": g.fdytest_next_answer(),
    "answer_via_next": call(g.fdytest_next(b"fdytest_answer")),
    "only_later": call(g.fdytest_next(b"fdytest_only_later")),
    "missing": g.fdytest_next(b"fdytest_defined_nowhere"),
    "strlen_is_libc": g.fdytest_next(b"strlen") == ctypes.cast(libc.strlen, ctypes.c_void_p).value,
}))
"""


def test_rtld_next_lookups_from_other_libraries_behave_as_without_foundry(
    fakecuda_dir: Path, foundry_lib: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    libs = tmp_path_factory.mktemp("rtld_next")
    caller = build_shared_object(RTLD_NEXT_CALLER, libs, "libfdytest_caller.so")
    later = build_shared_object(RTLD_NEXT_LATER, libs, "libfdytest_later.so")

    def probe(preload: list[Path]) -> Any:
        env = {"LD_PRELOAD": " ".join(str(p) for p in preload)}
        return json.loads(run_python(RTLD_NEXT_PROBE, lib_dir=fakecuda_dir, env=env).strip().splitlines()[-1])

    without = probe([caller, later])
    with_foundry = probe([foundry_lib, caller, later])
    assert without == {"next_answer": 2, "answer_via_next": 2, "only_later": 3, "missing": None,
                       "strlen_is_libc": True}  # fmt: skip
    assert with_foundry == without


def test_interposer_is_active_only_when_preloaded(app_json: AppJson, foundry_lib: Path) -> None:
    body = scenario("""
    cu = Cuda()
    lib = native()
    out(active=lib.fdy_interposer_active(), preloaded=lib.preloaded,
        error=error_of(region.set_allocation_region, BASE, "1GB"))
    """)
    preloaded = app_json(body)
    assert preloaded == {"active": 1, "preloaded": True, "error": None}

    loaded_by_python = app_json(body, preload=False)
    assert loaded_by_python["active"] == 0 and loaded_by_python["preloaded"] is False
    name, message = loaded_by_python["error"]
    assert name == "InterposerNotLoadedError"
    assert "foundry run -- python" in message
    assert f"LD_PRELOAD={foundry_lib}" in message


def test_without_a_region_allocations_pass_through_and_no_events_are_logged(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        res = {}
        rc, p = alloc_raw(1000)
        pitch = ctypes.c_size_t(0)
        q = DP(0)
        res["pitch_rc"] = int(fn("cuMemAllocPitch_v2")(ctypes.byref(q), ctypes.byref(pitch), 1000, 4, 4))
        a = DP(0)
        res["async_rc"] = int(proc("cuMemAllocAsync", 13000, PT)(ctypes.byref(a), 64, None))
        v = cu.reserve(4 * MIB)
        res["alloc"] = [rc, p != 0]
        res["range"] = address_range(p)
        res["events_before"] = events()
        res["state"] = state()
        # a region set afterwards does not claim the earlier memory, and freeing it passes through
        region.set_allocation_region(BASE, "1GB")
        res["outside"] = [not in_region(x) for x in (p, q.value, a.value, v)]
        res["frees"] = [free_raw(p), free_raw(q.value), int(proc("cuMemFreeAsync", 13000, PT)(a.value, None))]
        cu.address_free(v, 4 * MIB)
        res["events_after"] = events()
        out(**res)
        """)
    )
    assert r["alloc"] == [0, True] and r["pitch_rc"] == 0 and r["async_rc"] == 0
    assert r["range"][0] == 0 and r["range"][2] == 1000  # the driver's own answer
    assert r["events_before"] == []
    assert r["state"]["reserved"] is False and r["state"]["active"] is False and r["state"]["mapped_bytes"] == 0
    assert r["outside"] == [True, True, True, True]
    assert r["frees"] == [0, 0, 0]
    assert r["events_after"] == []


def test_launch_hooks_are_reached_through_dlsym_and_get_proc_address(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        mod = cu.load_module(images.make_cubin(["fk_fill_f32", "fk_scale_f32"]))
        fill = cu.module_function(mod, "fk_fill_f32")
        scale = cu.module_function(mod, "fk_scale_f32")
        buf = cu.malloc(64)
        args = [("ptr", buf), (ctypes.c_float, 2.0), (ctypes.c_int, 16)]
        with registry.launch_trace() as t:
            cu.launch(fill, (1, 1, 1), (16, 1, 1), args)            # dlsym("cuLaunchKernel")
        first = list(t.functions)
        launch_pt = proc("cuLaunchKernel", 13000, PT)              # cuGetProcAddress: the _ptsz hook
        objs = [ctypes.c_uint64(buf), ctypes.c_float(3.0), ctypes.c_int(16)]
        params = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.pointer(o), ctypes.c_void_p) for o in objs])
        with registry.launch_trace() as t2:
            rc = int(launch_pt(scale, 1, 1, 1, 16, 1, 1, 0, None, params, None))
        out(first=first == [fill], second=t2.functions == [scale], rc=rc,
            symbol=proc_symbol("cuLaunchKernel", 13000, PT), data=cu.read_f32(buf, 2))
        """)
    )
    assert r["first"] and r["second"] and r["rc"] == 0
    assert r["symbol"] == "cuLaunchKernel_ptsz"
    assert r["data"] == [6.0, 6.0]


def test_driver_errors_pass_through_the_hooks_unchanged(app_json: AppJson) -> None:
    """Driver errors pass through the hooks unchanged (here: a free of a pointer nobody allocated)."""
    r = app_json(
        scenario("""
        cu = Cuda()
        before = free_raw(0x1234000)
        region.set_allocation_region(BASE, "1GB")
        after = free_raw(0x1234000)
        out(codes=[before, after], events=events())
        """)
    )
    assert r["codes"][0] == r["codes"][1] != 0
    assert r["events"] == []


def test_free_of_region_memory_reaches_the_hook_through_every_lookup(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
        ptrs = [alloc_raw(10)[1] for _ in range(3)]
        codes = [free_raw(ptrs[0]), int(proc("cuMemFree")(ptrs[1])), int(proc("cuMemFree", 12000)(ptrs[2]))]
        out(codes=codes, kinds=[e[0] for e in events()], mapped=state()["mapped_bytes"])
        """)
    )
    assert r["codes"] == [0, 0, 0]
    assert r["kinds"] == [EV_ALLOC] * 3 + [EV_FREE] * 3
    assert r["mapped"] == 0
