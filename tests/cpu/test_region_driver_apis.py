"""The deterministic allocation region under the driver's other allocation APIs.

Pitched allocations, VMM reservations and maps (as PyTorch's expandable segments use them),
stream-ordered and managed memory.

Every scenario runs in its own process with libfoundry preloaded (tests/support/scenarios.py).
"""

from __future__ import annotations

from tests.support.region import AppJson, run_in_region, span
from tests.support.scenarios import (
    BASE,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_SUPPORTED,
    EV_ALLOC,
    EV_ASYNC_ALLOC,
    EV_ASYNC_FREE,
    EV_REFUSED,
    EV_VMM_FREE,
    EV_VMM_MAP,
    EV_VMM_RESERVE,
    EV_VMM_UNMAP,
    GRAN,
    MIB,
    scenario,
)


def test_pitched_allocations_are_placed_in_the_region_with_the_drivers_pitch(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        def pitched(w, h, elem):
            p, pitch = DP(0), ctypes.c_size_t(0)
            rc = int(fn("cuMemAllocPitch_v2")(ctypes.byref(p), ctypes.byref(pitch), w, h, elem))
            return [rc, p.value, pitch.value]
        driver_rule = pitched(1000, 30, 4)         # no region yet: the driver's own answer
        region.set_allocation_region(BASE, "1GB")
        a = pitched(1000, 30, 4)
        b = pitched(5000, 1000, 16)
        bad = pitched(1000, 30, 3)                  # an element size the driver rejects
        cu.memcpy_htod(b[1] + b[2] * 999, b"last row")
        out(driver_pitch=driver_rule[2], a=[a[0], a[1] - BASE, a[2]], b=[b[0], b[1] - BASE, b[2]], bad=bad[0],
            last=cu.memcpy_dtoh(b[1] + b[2] * 999, 8).decode(), events=events())
        """)
    )
    assert r["driver_pitch"] == 1024
    assert r["a"] == [0, 0, 1024]
    assert r["b"] == [0, GRAN, 5120]
    assert r["bad"] == CUDA_ERROR_INVALID_VALUE
    assert r["last"] == "last row"
    assert r["events"] == [[EV_ALLOC, 0, 1024 * 30, span(1024 * 30)], [EV_ALLOC, GRAN, 5120 * 1000, span(5120 * 1000)]]


def test_vmm_reservations_are_carved_from_the_region_and_maps_are_logged(app_json: AppJson) -> None:
    """cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemUnmap / cuMemAddressFree, as PyTorch's
    expandable segments use them."""
    r = run_in_region(
        app_json,
        """
        res = {}
        first = cu.malloc(100)
        seg = cu.reserve(32 * MIB)                   # a segment: address space only
        res["seg"] = seg - BASE
        h = cu.mem_create(4 * MIB)
        cu.mem_map(seg, 4 * MIB, h)                 # the segment grows by 4 MiB
        cu.set_access(seg, 4 * MIB)
        cu.mem_release(h)
        cu.memcpy_htod(seg + 4 * MIB - 5, b"grown")
        res["data"] = cu.memcpy_dtoh(seg + 4 * MIB - 5, 5).decode()
        res["range"] = address_range(seg + 100)      # the driver answers for the application's mapping
        res["mapped_by_region"] = state()["mapped_bytes"]
        after = cu.malloc(GRAN)                      # placed after the reservation
        res["after"] = after - BASE
        seq = log_seq()
        res["free_while_mapped"] = int(fn("cuMemAddressFree")(seg, 32 * MIB))  # the driver refuses this too
        res["free_while_mapped_msg"] = log_since(seq)
        cu.unmap(seg, 4 * MIB)
        cu.address_free(seg, 32 * MIB)
        res["double_address_free"] = int(fn("cuMemAddressFree")(seg, 32 * MIB))
        res["free_malloc_as_reservation"] = int(fn("cuMemAddressFree")(first, GRAN))
        aligned = cu.reserve(4 * MIB, align=16 * MIB)
        res["aligned"] = aligned - BASE
        res["free_reservation_as_malloc"] = free_raw(aligned)
        res["events"] = events()
        out(**res)
        """,
    )
    assert r["seg"] == GRAN
    assert r["data"] == "grown"
    assert r["range"] == [0, BASE + GRAN, 4 * MIB]
    assert r["mapped_by_region"] == GRAN  # the application's own mapping is not the region's
    assert r["after"] == GRAN + 32 * MIB
    assert r["free_while_mapped"] == CUDA_ERROR_INVALID_VALUE and "cuMemUnmap" in r["free_while_mapped_msg"]
    assert r["double_address_free"] == CUDA_ERROR_INVALID_VALUE
    assert r["free_malloc_as_reservation"] == CUDA_ERROR_INVALID_VALUE
    assert r["free_reservation_as_malloc"] == CUDA_ERROR_INVALID_VALUE
    assert r["aligned"] == 48 * MIB  # 34 MiB rounded up to the requested 16 MiB alignment
    assert r["events"] == [
        [EV_ALLOC, 0, 100, span(100)],
        [EV_VMM_RESERVE, GRAN, 32 * MIB, 32 * MIB],
        [EV_VMM_MAP, GRAN, 4 * MIB, 4 * MIB],
        [EV_ALLOC, GRAN + 32 * MIB, GRAN, GRAN],
        [EV_VMM_UNMAP, GRAN, 4 * MIB, 4 * MIB],
        [EV_VMM_FREE, GRAN, 32 * MIB, 32 * MIB],
        [EV_VMM_RESERVE, 48 * MIB, 4 * MIB, 4 * MIB],
    ]


def test_expandable_segments_inside_a_preallocation_are_refused_with_a_next_step(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        region.preallocate_region("64MB")
        seq = log_seq()
        p = DP(0)
        rc = int(fn("cuMemAddressReserve")(ctypes.byref(p), 32 * MIB, 0, 0, 0))
        out(rc=rc, ptr=p.value, message=log_since(seq), kinds=[e[0] for e in events()])
        """,
    )
    assert r["rc"] == CUDA_ERROR_NOT_SUPPORTED and r["ptr"] == 0
    assert "preallocated" in r["message"] and "prealloc_size" in r["message"]
    assert r["kinds"][-1] == EV_REFUSED


def test_stream_ordered_allocations_come_from_the_region_and_are_refused_during_capture(
    app_json: AppJson,
) -> None:
    r = run_in_region(
        app_json,
        """
        res = {}
        s = cu.stream_create()
        alloc_async, free_async = fn("cuMemAllocAsync"), fn("cuMemFreeAsync")
        p = DP(0)
        res["alloc"] = [int(alloc_async(ctypes.byref(p), 3000, s)), p.value - BASE]
        res["free"] = int(free_async(p.value, s))
        cu.begin_capture(s)
        q = DP(0)
        seq = log_seq()
        res["in_capture"] = [int(alloc_async(ctypes.byref(q), 3000, s)), q.value]
        res["message"] = log_since(seq)
        cu.end_capture(s)
        res["after_capture"] = [int(alloc_async(ctypes.byref(q), 10, s)), q.value - BASE]
        res["events"] = events()
        out(**res)
        """,
    )
    assert r["alloc"] == [0, 0]
    assert r["free"] == 0
    assert r["in_capture"] == [CUDA_ERROR_NOT_SUPPORTED, 0]
    assert "graph capture" in r["message"] and "cannot persist" in r["message"]
    assert r["after_capture"] == [0, GRAN]
    assert r["events"] == [
        [EV_ASYNC_ALLOC, 0, 3000, span(3000)],
        [EV_ASYNC_FREE, 0, 3000, span(3000)],
        [EV_REFUSED, GRAN, 3000, 0],
        [EV_ASYNC_ALLOC, GRAN, 10, span(10)],  # the first granule closed with its last allocation
    ]


def test_managed_memory_is_refused_while_the_region_is_active(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        managed = fn("cuMemAllocManaged")
        def alloc_managed(n):
            p = DP(0)
            return [int(managed(ctypes.byref(p), ctypes.c_size_t(n), ctypes.c_uint(1))), p.value]
        res = {"before": alloc_managed(100)[0]}
        region.set_allocation_region(BASE, "1GB")
        seq = log_seq()
        res["active"] = alloc_managed(100)
        res["message"] = log_since(seq)
        region.stop_allocation_region()
        stopped = alloc_managed(100)
        res["stopped"] = [stopped[0], in_region(stopped[1])]
        res["events"] = events()
        out(**res)
        """)
    )
    assert r["before"] == 0
    assert r["active"] == [CUDA_ERROR_NOT_SUPPORTED, 0]
    assert "managed memory" in r["message"] and "stop_allocation_region()" in r["message"]
    assert r["stopped"] == [0, False]
    assert r["events"] == [[EV_REFUSED, 0, 100, 0]]
