"""The deterministic allocation region: preallocation.

Every scenario runs in its own process with libfoundry preloaded (tests/support/scenarios.py).
"""

from __future__ import annotations

from tests.support.region import REGION_1GB, AppJson, offsets_for, span
from tests.support.scenarios import EV_ALLOC, EV_FREE, EV_PREALLOC, EV_PREALLOC_FREE, GRAN, MIB, scenario

PREALLOC_BODY = (
    REGION_1GB
    + """
if PREALLOC:
    region.preallocate_region("16MB")
mapped0 = state()["mapped_bytes"]
ptrs, mapped = [], []
for n in (1000, 3 * MIB, 5 * MIB, 100):
    ptrs.append(cu.malloc(n) - BASE)
    mapped.append(state()["mapped_bytes"] - mapped0)
cu.free(BASE + ptrs[1])
mapped.append(state()["mapped_bytes"] - mapped0)
straddle = cu.malloc(9 * MIB) - BASE     # crosses the end of the 16 MiB preallocation
mapped.append(state()["mapped_bytes"] - mapped0)
cu.memcpy_htod(BASE + straddle + 9 * MIB - 4, b"tail")
tail = cu.memcpy_dtoh(BASE + straddle + 9 * MIB - 4, 4).decode()
out(ptrs=ptrs + [straddle], mapped=mapped, mapped0=mapped0, tail=tail, kinds=[e[0] for e in events()])
"""
)


def test_preallocation_maps_nothing_new_and_offsets_match_a_run_without_it(app_json: AppJson) -> None:
    pre = app_json(scenario("PREALLOC = True\n" + PREALLOC_BODY))
    plain = app_json(scenario("PREALLOC = False\n" + PREALLOC_BODY))
    sizes = [1000, 3 * MIB, 5 * MIB, 100, 9 * MIB]
    assert pre["ptrs"] == plain["ptrs"] == offsets_for(sizes)
    assert pre["mapped0"] == 16 * MIB and plain["mapped0"] == 0
    # inside the preallocation nothing new is mapped and a free unmaps nothing; the straddling
    # allocation at 12 MiB maps only its part beyond 16 MiB
    straddle_end = offsets_for(sizes)[-1] + span(9 * MIB)
    assert pre["mapped"] == [0, 0, 0, 0, 0, straddle_end - 16 * MIB]
    # the 100 bytes share the 1000's granule; freeing 3 MiB unmaps its 4
    assert plain["mapped"] == [GRAN, 3 * GRAN, 6 * GRAN, 6 * GRAN, 4 * GRAN, 4 * GRAN + span(9 * MIB)]
    assert pre["tail"] == plain["tail"] == "tail"
    assert pre["kinds"] == [EV_PREALLOC] + plain["kinds"]


def test_free_preallocated_region_refuses_while_allocations_live_inside(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        res = {}
        res["no_region"] = error_of(region.preallocate_region, "8MB")
        region.set_allocation_region(BASE, "1GB")
        res["nothing"] = error_of(region.free_preallocated_region)
        region.preallocate_region("8MB")
        res["twice"] = error_of(region.preallocate_region, "8MB")
        a = cu.malloc(GRAN)
        b = cu.malloc(GRAN)
        res["refused"] = error_of(region.free_preallocated_region)
        res["still_mapped"] = state()["mapped_bytes"]
        cu.free(a)
        res["refused_again"] = error_of(region.free_preallocated_region)
        cu.free(b)
        region.free_preallocated_region()
        st = state()
        res["after"] = [st["mapped_bytes"], st["prealloc_size"], st["cursor"]]
        res["too_big"] = error_of(region.preallocate_region, "2GB")
        res["events"] = events()
        out(**res)
        """)
    )
    assert r["no_region"][0] == "RegionStateError" and "no region" in r["no_region"][1]
    assert r["nothing"][0] == "RegionStateError" and "nothing is preallocated" in r["nothing"][1]
    assert r["twice"][0] == "RegionStateError" and "already preallocated" in r["twice"][1]
    name, msg = r["refused"]
    assert name == "RegionStateError" and "2 allocations still live" in msg and "free them first" in msg
    assert r["still_mapped"] == 8 * MIB
    assert "1 allocations still live" in r["refused_again"][1]
    assert r["after"] == [0, 0, 2 * GRAN]  # unmapped; the cursor is not rewound
    assert r["too_big"][0] == "RegionFullError"
    assert r["events"] == [
        [EV_PREALLOC, 0, 8 * MIB, 8 * MIB],
        [EV_ALLOC, 0, GRAN, GRAN],
        [EV_ALLOC, GRAN, GRAN, GRAN],
        [EV_FREE, 0, GRAN, GRAN],
        [EV_FREE, GRAN, GRAN, GRAN],
        [EV_PREALLOC_FREE, 0, 8 * MIB, 8 * MIB],
    ]
