"""Tests of the fake CUDA driver itself (no Foundry): linear memory and virtual memory management (VMM)."""

from __future__ import annotations

from pathlib import Path

from tests.support.fakecuda_helpers import INVALID_VALUE, OUT_OF_MEMORY, run


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
