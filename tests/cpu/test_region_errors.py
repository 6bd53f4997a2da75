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


SEED_BASE = 0x7F00_0000_0000  # the seed README's region base, where Linux also maps libraries
GUARD_BYTES = 64 << 30
SEED_GUARD = f"""
import ctypes
SEED = {SEED_BASE:#x}
def at_seed():  # the mapping that holds the seed base, as /proc/self/maps lists it: [start, end, permissions]
    for line in open("/proc/self/maps"):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= SEED < hi:
            return [lo, hi, line.split()[1]]
    return None
held = at_seed()
cu = Cuda()
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
# A later mapping that asks for the base only as a hint, as libraries and thread stacks are placed.
hinted = libc.mmap(SEED, 1 << 20, 3, 0x22, -1, 0)  # PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS
err = error_of(region.set_allocation_region, SEED, "1GB")
rc, p = alloc_raw(10) if err is None else (None, 0)
out(held=held, hinted=hinted, err=err, after=at_seed(), p=p - SEED if p else None, rc=rc)
"""


def test_the_seed_readme_base_is_kept_free_for_the_region(app_json: AppJson) -> None:
    # libfoundry, preloaded, maps a placeholder over the seed README's base before the program maps anything;
    # later mappings go around it, and set_allocation_region gives it back just before it reserves the range.
    r = app_json(scenario(SEED_GUARD))
    assert r["held"] == [SEED_BASE, SEED_BASE + GUARD_BYTES, "---p"]
    assert r["hinted"] != SEED_BASE
    assert r["err"] is None and [r["rc"], r["p"]] == [0, 0]
    assert r["after"] is not None and r["after"][0] == SEED_BASE and r["after"][1] - r["after"][0] < GUARD_BYTES


def test_without_the_placeholder_a_mapping_at_the_seed_base_takes_it_from_the_region(app_json: AppJson) -> None:
    # FOUNDRY_REGION_GUARD=0: what the placeholder prevents, a mapping the kernel placed at the base first.
    r = app_json(scenario(SEED_GUARD), env={"FOUNDRY_REGION_GUARD": "0"})
    assert r["held"] is None or r["held"][1] - r["held"][0] != GUARD_BYTES
    assert r["hinted"] == SEED_BASE
    assert r["err"][0] == "RegionBaseTakenError" and f"{SEED_BASE:#x}" in r["err"][1]
