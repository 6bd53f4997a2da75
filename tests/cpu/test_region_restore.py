"""The deterministic allocation region: mapping restored ranges (as LOAD does) next to the program's memory.

Every scenario runs in its own process with libfoundry preloaded (tests/support/scenarios.py).
"""

from __future__ import annotations

from tests.support.region import AppJson, run_in_region
from tests.support.scenarios import CUDA_ERROR_OUT_OF_MEMORY, EV_ALLOC, EV_CURSOR, EV_RESTORE, GRAN, MIB


def test_map_range_maps_only_the_unmapped_gaps(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        lib = native()
        a = cu.malloc(GRAN)                         # [0, 2 MiB): the program's own allocation
        cu.memcpy_htod(a, b"program data")
        region.set_current_alloc_offset(8 * MIB)
        res = {"rc": lib.fdy_region_map_range(MIB, 7 * MIB)}   # LOAD restores [0, 8 MiB)
        res["mapped"] = state()["mapped_bytes"]
        res["own_data"] = cu.memcpy_dtoh(a, 12).decode()
        cu.memcpy_htod(BASE + 8 * MIB - 8, b"restored")
        res["restored_data"] = cu.memcpy_dtoh(BASE + 8 * MIB - 8, 8).decode()
        res["again"] = lib.fdy_region_map_range(0, 8 * MIB)
        res["mapped_again"] = state()["mapped_bytes"]
        res["cursor"] = state()["cursor"]
        res["beyond"] = lib.fdy_region_map_range(1 << 30, GRAN)
        res["beyond_msg"] = lib.last_error()
        res["events"] = events()
        out(**res)
        """,
    )
    assert r["rc"] == 0
    assert r["mapped"] == 8 * MIB  # 2 MiB of the allocation + the 6 MiB gap
    assert r["own_data"] == "program data"
    assert r["restored_data"] == "restored"
    assert r["again"] == 0 and r["mapped_again"] == 8 * MIB
    assert r["cursor"] == 8 * MIB  # restoring moves nothing else
    assert r["beyond"] != 0 and "Use the region size SAVE used" in r["beyond_msg"]
    assert r["events"] == [
        [EV_ALLOC, 0, GRAN, GRAN],
        [EV_CURSOR, 8 * MIB, 0, 0],
        [EV_RESTORE, 0, 7 * MIB, 8 * MIB],
        [EV_RESTORE, 0, 8 * MIB, 8 * MIB],
    ]


def test_failed_restore_keeps_what_an_earlier_restore_mapped(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        lib = native()
        res = {"first": lib.fdy_region_map_range(4 * MIB, 2 * MIB)}
        cu.memcpy_htod(BASE + 4 * MIB, b"restored earlier")
        # [0, 4) fits in the 8 MiB of device memory, [6, 12) does not: the call fails part-way
        res["second"] = lib.fdy_region_map_range(0, 12 * MIB)
        res["mapped"] = state()["mapped_bytes"]
        buf = ctypes.create_string_buffer(16)
        res["copy"] = int(fn("cuMemcpyDtoH_v2")(buf, BASE + 4 * MIB, 16))
        res["data"] = buf.raw.decode(errors="replace")
        res["first_gap_unmapped"] = int(fn("cuMemsetD8_v2")(BASE, 0, 16)) != 0
        out(**res)
        """,
        env={"FAKECUDA_PHYS_LIMIT": str(8 * MIB)},
    )
    assert r["first"] == 0
    assert r["second"] == CUDA_ERROR_OUT_OF_MEMORY
    assert r["mapped"] == 2 * MIB  # only what the failed call mapped was undone
    assert r["copy"] == 0 and r["data"] == "restored earlier"
    assert r["first_gap_unmapped"]


def test_application_mapping_replaces_restored_pages_in_its_way(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        lib = native()
        res = {"restore": lib.fdy_region_map_range(0, 4 * MIB)}
        seg = cu.reserve(8 * MIB)                   # the program's segment lands on restored pages
        h = cu.mem_create(2 * MIB)
        res["map"] = int(fn("cuMemMap")(seg, 2 * MIB, 0, h, 0))
        cu.set_access(seg, 2 * MIB)
        cu.memcpy_htod(seg, b"mine")
        res["data"] = cu.memcpy_dtoh(seg, 4).decode()
        res["mapped_by_region"] = state()["mapped_bytes"]
        out(seg=seg - BASE, **res)
        """,
    )
    assert r["restore"] == 0 and r["seg"] == 0
    assert r["map"] == 0 and r["data"] == "mine"
    assert r["mapped_by_region"] == 0  # the restored pages were given up


def test_restored_covers_only_saves_live_memory_that_load_mapped(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
        from foundry.schema import RegionSpec
        from foundry.region import restore_region, restored_covers
        spec = RegionSpec(BASE, 1 << 30, GRAN, 12 * MIB, ((0, 4 * MIB), (4 * MIB, 2 * MIB), (8 * MIB, 4 * MIB)), (),
                          region.region_state().small_align)
        res = {"before": restored_covers(BASE, MIB)}
        restore_region(spec)
        res["inside"] = restored_covers(BASE + MIB, MIB)
        res["across_adjacent"] = restored_covers(BASE + 3 * MIB, 2 * MIB)  # [0, 6) is live as one
        res["into_gap"] = restored_covers(BASE + 5 * MIB, 2 * MIB)  # [6, 8) was not live
        res["in_gap"] = restored_covers(BASE + 6 * MIB, MIB)
        res["last"] = restored_covers(BASE + 8 * MIB, 4 * MIB)
        res["past_end"] = restored_covers(BASE + 8 * MIB, 4 * MIB + 1)
        res["empty"] = restored_covers(BASE, 0)
        region.release_allocation_region()
        region.set_allocation_region(BASE, "1GB")
        res["after_release"] = restored_covers(BASE + MIB, MIB)
        out(**res)
        """,
    )
    assert r == {
        "before": False,
        "inside": True,
        "across_adjacent": True,
        "into_gap": False,
        "in_gap": False,
        "last": True,
        "past_end": False,
        "empty": False,
        "after_release": False,
    }
