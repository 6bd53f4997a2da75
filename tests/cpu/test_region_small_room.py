"""The room the driver's page has for small allocations (``small_allocation_room``), and the region's granule
for them opened early with that much room (``open_small_allocation_granule``): an engine that sizes its KV cache
from the memory grown since a snapshot (vLLM) sees a SAVE grow by what a native process grows, where natively
the driver's partly used page takes the first small allocations after the snapshot.

The fake driver packs small ``cuMemAlloc``s into 2 MiB pages the way the driver does when
``FAKECUDA_SMALL_PAGE_ROOM`` says how much room its first page has (tests/fakecuda/README.md).
"""

from __future__ import annotations

import pytest

from tests.support.region import SMALL_ALIGN, AppJson, run_in_region
from tests.support.scenarios import GRAN, scenario

STEP = 4096  # the measurement's allocation size (csrc/region_api.c)


def test_the_fake_driver_packs_small_allocations_into_pages_with_the_room_it_is_given(app_json: AppJson) -> None:
    r = app_json(
        scenario(
            """
            cu = Cuda()
            def free():
                f, t = ctypes.c_size_t(), ctypes.c_size_t()
                call("cuMemGetInfo_v2", ctypes.byref(f), ctypes.byref(t))
                return f.value
            start = free()
            a = cu.malloc(100_000)     # in the first page's room: no memory taken
            after_a = free()
            b = cu.malloc(100_000)     # does not fit what is left: a new page, taken whole
            after_b = free()
            cu.free(a)
            cu.free(b)                 # the pages stay with the driver
            out(a=start - after_a, b=start - after_b, freed=start - free())
            """
        ),
        env={"FAKECUDA_SMALL_PAGE_ROOM": "150000"},
        preload=False,
    )
    assert r == {"a": 0, "b": GRAN, "freed": GRAN}


@pytest.mark.parametrize(
    ("room", "expected"),
    [(None, 0), ("0", 0), ("150000", 150000 // STEP * STEP), ("4096", STEP), (str(8 * GRAN), GRAN)],
)
def test_the_room_is_measured_without_touching_the_region(app_json: AppJson, room: str | None, expected: int) -> None:
    r = run_in_region(
        app_json,
        """
        before = state()
        room = region.small_allocation_room()
        after = state()
        out(room=room, events=events(), cursor=(before["cursor"], after["cursor"]),
            mapped=(before["mapped_bytes"], after["mapped_bytes"]))
        """,
        env={"FAKECUDA_SMALL_PAGE_ROOM": room} if room is not None else None,
    )
    # without a page model every byte counts (the first 4 KiB already takes memory): no room
    assert r["room"] == expected
    assert r["events"] == [] and r["cursor"] == [0, 0] and r["mapped"] == [0, 0]


def test_small_allocations_fill_the_opened_room_then_open_the_next_granule(app_json: AppJson) -> None:
    room = 3 * SMALL_ALIGN + 100  # rounded down to whole slots: three
    r = run_in_region(
        app_json,
        f"""
        region.open_small_allocation_granule({room})
        opened = state()
        ptrs = [cu.malloc(n) - BASE for n in ({SMALL_ALIGN}, {2 * SMALL_ALIGN}, 1, 3 * MIB)]
        out(opened=[opened["cursor"], opened["mapped_bytes"]], ptrs=ptrs, cursor=state()["cursor"],
            mapped=state()["mapped_bytes"])
        """,
    )
    assert r["opened"] == [GRAN, GRAN]  # mapped now, the cursor past it
    first = GRAN - 3 * SMALL_ALIGN
    assert r["ptrs"][:2] == [first, first + SMALL_ALIGN]  # the granule's last slots, from where its room starts
    assert r["ptrs"][2] == GRAN  # the room is spent: the next granule at the cursor
    assert r["ptrs"][3] == 2 * GRAN  # a large one past it
    assert r["mapped"] == 2 * GRAN + 4 * (1 << 20)


def test_no_room_opens_nothing_and_bad_calls_are_refused_by_name(app_json: AppJson) -> None:
    r = app_json(
        scenario(
            """
            cu = Cuda()
            res = {}
            try:
                region.open_small_allocation_granule(4096)
            except errors.RegionStateError as e:
                res["unset"] = str(e)
            region.set_allocation_region(BASE, "1GB")
            region.open_small_allocation_granule(0)
            res["after_zero"] = [state()["cursor"], state()["mapped_bytes"]]
            res["first_small"] = cu.malloc(100) - BASE   # a granule of its own at the cursor, as without the call
            try:
                region.open_small_allocation_granule(-1)
            except ValueError as e:
                res["negative"] = str(e)
            out(**res)
            """
        )
    )
    assert "no active region" in r["unset"] and "set_allocation_region" in r["unset"]
    assert r["after_zero"] == [0, 0] and r["first_small"] == 0
    assert "0 or more" in r["negative"]
