"""The deterministic allocation region: free, stop/resume, the cursor, address ranges, release.

Every scenario runs in its own process with libfoundry preloaded (tests/support/scenarios.py).
"""

from __future__ import annotations

from tests.support.region import SMALL_ALIGN, AppJson, run_in_region
from tests.support.scenarios import (
    BASE,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_FOUND,
    EV_ALLOC,
    EV_FREE,
    GRAN,
    MIB,
    scenario,
)


def test_free_unmaps_and_double_free_or_interior_free_is_rejected(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        res = {}
        a, b = cu.malloc(3 * MIB), cu.malloc(100)
        res["mapped_before"] = state()["mapped_bytes"]
        res["free"] = free_raw(a)
        res["mapped_after"] = state()["mapped_bytes"]
        res["unmapped_access"] = int(fn("cuMemsetD8_v2")(a, 1, 16))  # the memory is really gone
        seq = log_seq()
        res["double"] = free_raw(a)
        res["double_msg"] = log_since(seq)
        res["interior"] = free_raw(b + 64)
        res["still_live"] = address_range(b)
        res["next"] = cu.malloc(GRAN) - BASE           # the cursor never goes back
        res["kinds"] = [e[0] for e in events()]
        out(**res)
        """,
    )
    assert r["mapped_before"] == 6 * MIB and r["mapped_after"] == 2 * MIB
    assert r["free"] == 0
    assert r["unmapped_access"] != 0
    assert r["double"] == CUDA_ERROR_INVALID_VALUE
    assert "double free" in r["double_msg"] and "not the start of a live allocation" in r["double_msg"]
    assert r["interior"] == CUDA_ERROR_INVALID_VALUE
    assert r["still_live"] == [0, BASE + 4 * MIB, 100]
    assert r["next"] == 6 * MIB
    assert r["kinds"] == [EV_ALLOC, EV_ALLOC, EV_FREE, EV_ALLOC]


def test_stop_passes_allocations_through_and_resume_continues_at_the_cursor(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        res = {}
        res["stop_without_region"] = error_of(region.stop_allocation_region)
        res["resume_without_region"] = error_of(region.resume_allocation_region)
        region.set_allocation_region(BASE, "1GB")
        a = cu.malloc(100)
        region.stop_allocation_region()
        res["stopped"] = state()["active"]
        outside = cu.malloc(100)
        res["outside"] = in_region(outside)
        res["free_region_memory_while_stopped"] = free_raw(a)
        res["free_outside"] = free_raw(outside)
        region.resume_allocation_region()
        res["resumed"] = state()["active"]
        res["b"] = cu.malloc(100) - BASE
        res["events"] = events()
        out(**res)
        """)
    )
    assert r["stop_without_region"][0] == "RegionStateError" and "no region" in r["stop_without_region"][1]
    assert r["resume_without_region"][0] == "RegionStateError"
    assert "set_allocation_region()" in r["resume_without_region"][1]
    assert r["stopped"] is False and r["resumed"] is True
    assert r["outside"] is False
    assert r["free_region_memory_while_stopped"] == 0 and r["free_outside"] == 0
    assert r["b"] == GRAN
    # a's granule closed when a was freed (stopped or not): b opens the next at the cursor
    assert r["events"] == [[EV_ALLOC, 0, 100, SMALL_ALIGN], [EV_FREE, 0, 100, SMALL_ALIGN],
                           [EV_ALLOC, GRAN, 100, SMALL_ALIGN]]  # fmt: skip


def test_allocation_region_context_manager_stops_the_region_on_exit(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        with region.allocation_region(BASE, "1GB", prealloc_size="8MB"):
            inside = cu.malloc(10)
            st = state()
        after = cu.malloc(10)
        out(inside=inside - BASE, prealloc=[st["prealloc_offset"], st["prealloc_size"]], mapped=st["mapped_bytes"],
            active=state()["active"], after_in_region=in_region(after), inside_data_ok=address_range(inside)[0])
        """)
    )
    assert r["inside"] == 0  # inside the preallocation: the cursor does not care about it
    assert r["prealloc"] == [0, 8 * MIB] and r["mapped"] == 8 * MIB
    assert r["active"] is False and r["after_in_region"] is False and r["inside_data_ok"] == 0


def test_set_current_alloc_offset_moves_either_way_and_placement_steps_over_live_memory(
    app_json: AppJson,
) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        res = {}
        res["no_region"] = error_of(region.set_current_alloc_offset, 0)
        region.set_allocation_region(BASE, "1GB")
        a = cu.malloc(3 * MIB)                       # [0, 4 MiB)
        region.set_current_alloc_offset(10 * MIB + 1)  # rounded up to the granularity
        res["cursor"] = region.get_current_alloc_offset()
        b = cu.malloc(10)                            # a granule of small allocations at 12 MiB
        res["b"] = b - BASE
        region.set_current_alloc_offset(2 * MIB)     # back below a, which is live
        res["moved_back"] = region.get_current_alloc_offset()
        res["c"] = cu.malloc(3 * MIB) - BASE         # steps over a: [4, 8 MiB)
        res["d"] = cu.malloc(6 * MIB) - BASE         # [8, 14) would hold b: past it
        region.set_current_alloc_offset(12 * MIB)
        res["e"] = cu.malloc(10) - BASE              # b's granule, then d, are live: a fresh granule past d
        res["beyond"] = error_of(region.set_current_alloc_offset, 2 << 30)
        cu.free(b)
        region.set_current_alloc_offset(12 * MIB)    # b's granule was given back with b: free again
        res["back"] = cu.malloc(10) - BASE
        res["ranges"] = [address_range(BASE + x)[:2] for x in (res["c"], res["d"], res["e"], res["back"])]
        out(**res)
        """)
    )
    assert r["no_region"][0] == "RegionStateError"
    assert r["cursor"] == 12 * MIB and r["b"] == 12 * MIB
    assert r["moved_back"] == 2 * MIB
    # nothing handed out twice: each allocation lands at the cursor or, where live memory is, just past it
    assert r["c"] == 4 * MIB and r["d"] == 14 * MIB and r["e"] == 20 * MIB
    assert "beyond the region size" in r["beyond"][1]
    assert r["back"] == 12 * MIB
    assert r["ranges"] == [[0, BASE + r[k]] for k in ("c", "d", "e", "back")]  # each its own allocation


def test_address_range_of_region_pointers_names_the_allocation(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        a = cu.malloc(1000)
        b = cu.malloc(5 * MIB)
        res = {"start": address_range(a), "inside": address_range(a + 999), "b_end": address_range(b + 5 * MIB - 1)}
        cu.free(a)
        res["freed"] = address_range(a)[0]
        res["unallocated"] = address_range(BASE + 100 * MIB)[0]
        out(**res)
        """,
    )
    assert r["start"] == [0, BASE, 1000] and r["inside"] == [0, BASE, 1000]
    assert r["b_end"] == [0, BASE + GRAN, 5 * MIB]
    assert r["freed"] == CUDA_ERROR_NOT_FOUND and r["unallocated"] == CUDA_ERROR_NOT_FOUND


def test_release_unmaps_everything_and_frees_the_range(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        res = {}
        a = cu.malloc(3 * MIB)
        region.preallocate_region("8MB")
        native().fdy_region_map_range(64 * MIB, GRAN)
        res["mapped"] = state()["mapped_bytes"]
        region.release_allocation_region()
        st = state()
        res["after"] = [st["reserved"], st["active"], st["mapped_bytes"]]
        res["gone"] = int(fn("cuMemsetD8_v2")(a, 0, 16)) != 0
        outside = cu.malloc(10)
        res["outside"] = in_region(outside)
        region.release_allocation_region()          # releasing nothing is fine
        region.set_allocation_region(BASE, "1GB")   # the range can be reserved again
        res["again"] = cu.malloc(10) - BASE
        res["twice"] = error_of(region.set_allocation_region, BASE, "1GB")
        out(**res)
        """,
    )
    assert r["mapped"] == 4 * MIB + 8 * MIB + GRAN
    assert r["after"] == [False, False, 0]
    assert r["gone"] and r["outside"] is False
    assert r["again"] == 0
    assert r["twice"][0] == "RegionStateError" and "already reserved" in r["twice"][1]


def test_a_region_set_again_after_release_starts_a_fresh_allocation_log(app_json: AppJson) -> None:
    """The log describes the current region: entries of a released one would read as live memory to
    SAVE's layout record and snapshot, and LOAD's restore would be skipped as already done."""
    r = run_in_region(
        app_json,
        """
        cu.malloc(3 * MIB)
        first = [e.offset for e in region.allocation_events()]
        epoch = region.region_epoch()
        region.release_allocation_region()
        region.set_allocation_region(BASE, "1GB")
        b = cu.malloc(5 * MIB)
        out(first=first, second=[(e.kind.name, e.offset, e.size) for e in region.allocation_events()],
            b=b - BASE, epochs=[epoch, region.region_epoch()])
        """,
    )
    assert r["first"] == [0]
    assert r["second"] == [["ALLOC", 0, 5 * MIB]]
    assert r["b"] == 0 and r["epochs"][1] == r["epochs"][0] + 1
