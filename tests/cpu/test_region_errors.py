"""The deterministic allocation region: what it refuses, and running out of device memory.

Allocations escaping the region, a base already taken, invalid arguments; device memory running out
while the region maps an allocation.

Every scenario runs in its own process with libfoundry preloaded (tests/support/scenarios.py).
"""

from __future__ import annotations

from tests.support.region import AppJson, run_in_region
from tests.support.scenarios import BASE, CUDA_ERROR_OUT_OF_MEMORY, EV_ALLOC, EV_FREE, EV_REFUSED, GRAN, MIB, scenario


def test_allocation_escaping_the_region_is_refused_and_never_placed_elsewhere(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, 8 * MIB)
        res = {}
        res["first"] = alloc_raw(3 * MIB)              # 4 MiB of the 8 used
        seq = log_seq()
        res["escape"] = alloc_raw(5 * MIB)             # would need 6 MiB
        res["message"] = log_since(seq)
        res["after_escape"] = state()
        box = {}
        def other():
            cu.make_current()
            s = log_seq()
            box["escape"] = alloc_raw(64 * MIB)
            box["message"] = log_since(s)
        th = threading.Thread(target=other)
        th.start()
        th.join()
        res["thread_escape"] = box["escape"]
        res["thread_message"] = box["message"]
        res["main_sees_thread_message"] = log_since(seq)
        res["fits"] = alloc_raw(4 * MIB)               # exactly the rest still fits
        res["full"] = alloc_raw(1)
        res["events"] = events()
        res["state"] = state()
        out(**res)
        """)
    )
    assert r["first"] == [0, BASE]
    assert r["escape"] == [CUDA_ERROR_OUT_OF_MEMORY, 0]  # refused; the pointer is untouched
    msg = r["message"]
    assert "escapes the Foundry region" in msg and f"{BASE:#x}" in msg and "5242880 bytes" in msg
    assert "larger size" in msg  # the next step
    assert r["after_escape"]["cursor"] == 4 * MIB and r["after_escape"]["mapped_bytes"] == 4 * MIB
    assert r["thread_escape"] == [CUDA_ERROR_OUT_OF_MEMORY, 0]
    assert "escapes the Foundry region" in r["thread_message"] and "67108864 bytes" in r["thread_message"]
    assert r["main_sees_thread_message"] == r["thread_message"]  # the process-wide log
    assert r["fits"] == [0, BASE + 4 * MIB]
    assert r["full"] == [CUDA_ERROR_OUT_OF_MEMORY, 0]
    assert r["events"] == [
        [EV_ALLOC, 0, 3 * MIB, 4 * MIB],
        [EV_REFUSED, 4 * MIB, 5 * MIB, 6 * MIB],
        [EV_REFUSED, 4 * MIB, 64 * MIB, 64 * MIB],
        [EV_ALLOC, 4 * MIB, 4 * MIB, 4 * MIB],
        [EV_REFUSED, 8 * MIB, 1, GRAN],
    ]
    assert r["state"]["mapped_bytes"] == 8 * MIB and r["state"]["high_water"] == 8 * MIB


def test_base_already_taken_raises_region_base_taken_error_naming_base_and_next_step(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        squatter = cu.reserve(4 * MIB, addr=BASE + 64 * MIB)
        err = error_of(region.set_allocation_region, BASE, "1GB")
        after = state()
        other = BASE + (8 << 30)
        region.set_allocation_region(other, "1GB")   # another base works
        rc, p = alloc_raw(10)
        out(squatter=squatter - BASE, err=err, after=after, p=p - other, rc=rc)
        """)
    )
    assert r["squatter"] == 64 * MIB
    name, message = r["err"]
    assert name == "RegionBaseTakenError"
    assert f"{BASE:#x}" in message and "not available" in message
    assert "choose another base" in message and "same one for SAVE and LOAD" in message
    assert r["after"]["reserved"] is False and r["after"]["active"] is False
    assert [r["rc"], r["p"]] == [0, 0]


def test_out_of_device_memory_while_mapping_fails_cleanly_and_leaves_the_region_consistent(
    app_json: AppJson,
) -> None:
    r = run_in_region(
        app_json,
        """
        res = {}
        res["a"] = alloc_raw(4 * MIB)
        before = state()
        seq = log_seq()
        res["too_big"] = alloc_raw(6 * MIB)          # 4 + 6 > FAKECUDA_PHYS_LIMIT (8 MiB)
        res["message"] = log_since(seq)
        res["unchanged"] = [state()[k] == before[k] for k in ("cursor", "high_water", "mapped_bytes")]
        res["b"] = alloc_raw(4 * MIB)                # what still fits goes where the failed one would have
        cu.memcpy_htod(res["b"][1], b"still usable")
        res["data"] = cu.memcpy_dtoh(res["b"][1], 12).decode()
        res["free"] = free_raw(res["a"][1])          # gives the physical memory back
        res["c"] = alloc_raw(4 * MIB)
        res["events"] = events()
        res["mapped"] = state()["mapped_bytes"]
        out(**res)
        """,
        env={"FAKECUDA_PHYS_LIMIT": str(8 * MIB)},
    )
    assert r["a"] == [0, BASE]
    assert r["too_big"] == [CUDA_ERROR_OUT_OF_MEMORY, 0]
    assert "cuMemCreate" in r["message"] and "out of memory" in r["message"]
    assert r["unchanged"] == [True, True, True]
    assert r["b"] == [0, BASE + 4 * MIB]
    assert r["data"] == "still usable"
    assert r["free"] == 0
    assert r["c"] == [0, BASE + 8 * MIB]
    assert r["events"] == [
        [EV_ALLOC, 0, 4 * MIB, 4 * MIB],
        [EV_REFUSED, 4 * MIB, 6 * MIB, 6 * MIB],
        [EV_ALLOC, 4 * MIB, 4 * MIB, 4 * MIB],
        [EV_FREE, 0, 4 * MIB, 4 * MIB],
        [EV_ALLOC, 8 * MIB, 4 * MIB, 4 * MIB],
    ]
    assert r["mapped"] == 8 * MIB


def test_invalid_region_arguments_are_rejected_with_the_rule(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        out(unaligned=error_of(region.set_allocation_region, BASE + 4096, "1GB"),
            zero=error_of(region.set_allocation_region, 0, "1GB"), state=state()["reserved"])
        """)
    )
    assert r["unaligned"][0] == "DriverError" and "multiple of the device's mapping granularity" in r["unaligned"][1]
    assert r["zero"][0] == "DriverError"
    assert r["state"] is False
