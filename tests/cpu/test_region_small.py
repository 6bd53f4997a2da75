"""The deterministic allocation region: allocations smaller than a granule share granules, as the driver's own
cuMemAlloc packs them, so that a process under Foundry uses the memory a native one does.

Every scenario runs in its own process with libfoundry preloaded (tests/support/scenarios.py).
"""

from __future__ import annotations

import textwrap

from tests.support.region import SMALL_ALIGN, AppJson, mapped_for, offsets_for, run_in_region
from tests.support.scenarios import EV_ALLOC, EV_CURSOR, EV_FREE, GRAN, MIB, scenario


def test_small_allocations_share_a_granule_in_aligned_slots(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        sizes = [4096] * 64 + [100, 10, 3 * MIB, 700]
        ptrs = [cu.malloc(n) - BASE for n in sizes]
        out(ptrs=ptrs, mapped=state()["mapped_bytes"], cursor=state()["cursor"], events=events(),
            region=region.region_state().small_align)
        """,
    )
    sizes = [4096] * 64 + [100, 10, 3 * MIB, 700]
    assert r["region"] == SMALL_ALIGN
    # 64 allocations of 4 KiB take 256 KiB of one granule, as the driver packs them, not 64 granules
    assert r["ptrs"][:64] == [i * 4096 for i in range(64)]
    assert r["ptrs"][64:66] == [64 * 4096, 64 * 4096 + SMALL_ALIGN]  # 100 bytes take one 512-byte slot
    assert r["ptrs"][66] == GRAN  # a large allocation goes to the cursor, past the shared granule
    assert r["ptrs"][67] == 64 * 4096 + 2 * SMALL_ALIGN  # and a small one after it back into the granule
    assert r["ptrs"] == offsets_for(sizes)
    assert r["mapped"] == mapped_for(sizes) == GRAN + 4 * MIB
    assert r["cursor"] == 3 * GRAN
    assert r["events"][64] == [EV_ALLOC, 64 * 4096, 100, SMALL_ALIGN]
    assert r["events"][66] == [EV_ALLOC, GRAN, 3 * MIB, 4 * MIB]


def test_a_full_granule_opens_the_next_at_the_cursor(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        align = region.region_state().small_align
        sizes = [GRAN // 4 + 1] * 3 + [GRAN - align, align, 1]
        ptrs = [cu.malloc(n) - BASE for n in sizes]
        out(ptrs=ptrs, mapped=state()["mapped_bytes"])
        """,
    )
    quarter = GRAN // 4 + SMALL_ALIGN  # a quarter granule and a byte, in 512-byte slots
    sizes = [GRAN // 4 + 1] * 3 + [GRAN - SMALL_ALIGN, SMALL_ALIGN, 1]
    assert r["ptrs"] == offsets_for(sizes)
    assert r["ptrs"][:3] == [0, quarter, 2 * quarter]
    assert r["ptrs"][3] == GRAN  # does not fit the first granule's rest: a new granule
    assert r["ptrs"][4] == GRAN + GRAN - SMALL_ALIGN  # fills the second granule exactly
    assert r["ptrs"][5] == 2 * GRAN  # the third
    assert r["mapped"] == 3 * GRAN


def test_a_shared_granule_is_unmapped_with_its_last_allocation_and_not_reused(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        res = {}
        a, b = cu.malloc(1000), cu.malloc(2000)
        cu.memcpy_htod(b, b"still here")
        cu.free(a)
        res["after_first"] = state()["mapped_bytes"]
        res["b_data"] = cu.memcpy_dtoh(b, 10).decode()   # its neighbour's free left b mapped
        c = cu.malloc(100)
        res["c"] = c - BASE                               # the next slot: a's is not handed out again
        cu.free(b)
        cu.free(c)
        res["after_last"] = state()["mapped_bytes"]
        res["gone"] = int(fn("cuMemsetD8_v2")(b, 1, 16)) != 0
        res["d"] = cu.malloc(100) - BASE                  # the granule was given back: a new one at the cursor
        res["events"] = events()
        out(**res)
        """,
    )
    assert r["after_first"] == GRAN and r["b_data"] == "still here"
    assert r["c"] == 1024 + 2048
    assert r["after_last"] == 0 and r["gone"]
    assert r["d"] == GRAN
    assert r["events"][2] == [EV_FREE, 0, 1000, 1024]


def test_placement_of_small_allocations_does_not_depend_on_preallocation(app_json: AppJson) -> None:
    body = """
    cu = Cuda()
    region.set_allocation_region(BASE, "1GB")
    if PREALLOC:
        region.preallocate_region("8MB")
    a = cu.malloc(100)
    cu.free(a)                  # the last of its granule: the granule closes though it owns no mapping
    b, c = cu.malloc(100), cu.malloc(5 * MIB)
    d = cu.malloc(300)
    out(ptrs=[p - BASE for p in (a, b, c, d)], mapped=state()["mapped_bytes"])
    """
    pre = app_json(scenario("PREALLOC = True\n" + textwrap.dedent(body)))
    plain = app_json(scenario("PREALLOC = False\n" + textwrap.dedent(body)))
    assert pre["ptrs"] == plain["ptrs"] == [0, GRAN, 2 * GRAN, GRAN + SMALL_ALIGN]
    # c's 6 MiB straddle the preallocation's end: only [8, 10) MiB is mapped for it
    assert pre["mapped"] == 10 * MIB and plain["mapped"] == GRAN + 6 * MIB


def test_a_cursor_move_closes_the_shared_granule_even_to_the_cursor_itself(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        a = cu.malloc(100)
        region.set_current_alloc_offset(region.get_current_alloc_offset())
        b = cu.malloc(100)
        region.set_current_alloc_offset(16 * MIB)
        c = cu.malloc(100)
        out(ptrs=[p - BASE for p in (a, b, c)], events=events())
        """,
    )
    # the boundary a SAVE marks by moving the cursor to itself places the next phase's small allocations
    # as a LOAD that moved the cursor there from elsewhere does
    assert r["ptrs"] == [0, GRAN, 16 * MIB]
    assert [e[0] for e in r["events"]] == [EV_ALLOC, EV_CURSOR, EV_ALLOC, EV_CURSOR, EV_ALLOC]


def test_restored_memory_in_a_shared_granule_outlives_the_programs_own_allocations_there(
    app_json: AppJson,
) -> None:
    r = run_in_region(
        app_json,
        """
        lib = native()
        mine = cu.malloc(100)                       # LOAD's own small allocation opens granule [0, 2 MiB)
        res = {"rc": lib.fdy_region_map_range(4096, 512)}   # SAVE had another one live at 4 KiB
        cu.memcpy_htod(BASE + 4096, b"saved data")
        cu.free(mine)                               # the program's last allocation in the granule
        res["mapped"] = state()["mapped_bytes"]
        res["saved"] = cu.memcpy_dtoh(BASE + 4096, 10).decode()
        out(**res)
        """,
    )
    assert r["rc"] == 0
    assert r["mapped"] == GRAN  # the restore holds the granule now
    assert r["saved"] == "saved data"


def test_load_refuses_an_archive_whose_region_gave_each_small_allocation_a_granule(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        from foundry.schema import RegionSpec
        from foundry.region import restore_region
        res = {}
        for align in (0, 4096, region.region_state().small_align):
            spec = RegionSpec(BASE, 1 << 30, GRAN, GRAN, ((0, GRAN),), (), align)
            res[str(align)] = error_of(restore_region, spec)
        res["mapped"] = state()["mapped_bytes"]
        res["json"] = RegionSpec(BASE, 1 << 30, GRAN, GRAN, (), ()).to_json()
        out(**res)
        """,
    )
    # an archive saved before small allocations were packed has no "small_align": its program's small
    # allocations sat a granule apart, so this one's would not land where the graphs expect them
    name, msg = r["0"]
    assert name == "LayoutMismatchError"
    assert "each on a granule of its own" in msg and "512 bytes apart" in msg and "SAVE the archive again" in msg
    assert r["4096"][0] == "LayoutMismatchError" and "4096 bytes apart" in r["4096"][1]
    assert r[str(SMALL_ALIGN)] is None and r["mapped"] == GRAN  # the matching spec restores
    assert "small_align" not in r["json"]
