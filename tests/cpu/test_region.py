"""The deterministic allocation region, driven by an application on the fake driver.

Every scenario runs in its own process with libfoundry preloaded. Expected offsets are computed
from the allocation sizes and the device's granularity (a monotonic cursor, each allocation
rounded up), never copied from an earlier run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.support.scenarios import (
    BASE,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_NOT_SUPPORTED,
    CUDA_ERROR_OUT_OF_MEMORY,
    EV_ALLOC,
    EV_ASYNC_ALLOC,
    EV_ASYNC_FREE,
    EV_CURSOR,
    EV_FREE,
    EV_PREALLOC,
    EV_PREALLOC_FREE,
    EV_REFUSED,
    EV_RESTORE,
    EV_VMM_FREE,
    EV_VMM_MAP,
    EV_VMM_RESERVE,
    EV_VMM_UNMAP,
    GRAN,
    MIB,
    scenario,
)

AppJson = Callable[..., Any]


def span(n: int) -> int:
    return (n + GRAN - 1) // GRAN * GRAN


def offsets_for(sizes: list[int], start: int = 0) -> list[int]:
    """Where a monotonic, granularity-aligned cursor places allocations of these sizes."""
    out, cursor = [], start
    for n in sizes:
        out.append(cursor)
        cursor += span(n)
    return out


# ------------------------------------------------------------------------------------------- threads
THREADS = 4
PER_THREAD = 5


def thread_size(t: int, i: int) -> int:
    return (t * 7 + i * 3 + 1) * 700_000 % (9 * MIB) + 1


TURNS_BODY = f"""
cu = Cuda()
region.set_allocation_region(BASE, "1GB")
THREADS, PER_THREAD = {THREADS}, {PER_THREAD}
SIZES = {[[thread_size(t, i) for i in range(PER_THREAD)] for t in range(THREADS)]!r}
cond = threading.Condition()
turn = [0]
results = {{}}
tids = {{}}

def worker(t):
    cu.make_current()  # the context is per thread, like the runtime's
    tids[t] = threading.get_native_id()
    got = []
    for i in range(PER_THREAD):
        with cond:
            cond.wait_for(lambda: turn[0] % THREADS == t)
            rc, p = alloc_raw(SIZES[t][i])
            got.append([rc, p - BASE])
            if i % 2 == 1:  # free every second allocation: offsets must never be reused
                got.append([free_raw(p), -1])
            turn[0] += 1
            cond.notify_all()
    results[t] = got

threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
for th in threads:
    th.start()
for th in threads:
    th.join()
ev = region.allocation_events()
out(results=[results[t] for t in range(THREADS)],
    events=[[int(e.kind), e.offset, e.size, e.span] for e in ev],
    event_threads=[next(t for t in range(THREADS) if tids[t] == e.tid) for e in ev],
    mapped=state()["mapped_bytes"], seqs=[e.seq for e in ev])
"""


def test_threads_taking_turns_get_identical_offsets_in_two_processes(app: Callable[..., str]) -> None:
    code = scenario(TURNS_BODY)
    first, second = app(code), app(code)
    assert first == second  # byte-identical, offsets and log included

    r = json.loads(first.strip().splitlines()[-1])
    order = [(t, i) for i in range(PER_THREAD) for t in range(THREADS)]  # the turn order
    sizes = [thread_size(t, i) for t, i in order]
    expected_offsets = dict(zip(order, offsets_for(sizes), strict=True))
    for t in range(THREADS):
        allocs = [x for x in r["results"][t] if x[1] != -1]
        assert allocs == [[0, expected_offsets[(t, i)]] for i in range(PER_THREAD)]
        assert all(x[0] == 0 for x in r["results"][t])  # frees succeeded
    # the log: one ALLOC per allocation in turn order, a FREE right after every second one
    expected_events, expected_threads = [], []
    for t, i in order:
        n = thread_size(t, i)
        expected_events.append([EV_ALLOC, expected_offsets[(t, i)], n, span(n)])
        expected_threads.append(t)
        if i % 2 == 1:
            expected_events.append([EV_FREE, expected_offsets[(t, i)], n, span(n)])
            expected_threads.append(t)
    assert r["events"] == expected_events
    assert r["event_threads"] == expected_threads  # tid is the allocating thread's
    assert r["seqs"] == list(range(1, len(expected_events) + 1))
    live = [span(thread_size(t, i)) for t, i in order if i % 2 == 0]
    assert r["mapped"] == sum(live)


def test_event_log_records_kind_offset_size_span_and_thread(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
        a = cu.malloc(1000)
        b = cu.malloc(3 * MIB)
        cu.free(a)
        box = {}
        def other():
            cu.make_current()
            box["tid"] = threading.get_native_id()
            box["p"] = cu.malloc(GRAN)
        th = threading.Thread(target=other)
        th.start()
        th.join()
        ev = region.allocation_events()
        out(ptrs=[a - BASE, b - BASE, box["p"] - BASE],
            log=[[e.seq, int(e.kind), e.offset, e.size, e.span] for e in ev],
            tids=[e.tid == threading.get_native_id() for e in ev[:3]] + [ev[3].tid == box["tid"]],
            kinds=[e.kind.name for e in ev], from_second=events(2))
        """)
    )
    assert r["ptrs"] == [0, GRAN, 3 * GRAN]
    assert r["log"] == [
        [1, EV_ALLOC, 0, 1000, GRAN],
        [2, EV_ALLOC, GRAN, 3 * MIB, 2 * GRAN],
        [3, EV_FREE, 0, 1000, GRAN],
        [4, EV_ALLOC, 3 * GRAN, GRAN, GRAN],
    ]
    assert r["tids"] == [True, True, True, True]
    assert r["kinds"] == ["ALLOC", "ALLOC", "FREE", "ALLOC"]
    assert r["from_second"] == [row[1:] for row in r["log"][2:]]


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
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
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
        """),
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


def test_free_unmaps_and_double_free_or_interior_free_is_rejected(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
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
        res["next"] = cu.malloc(10) - BASE             # the cursor never goes back
        res["kinds"] = [e[0] for e in events()]
        out(**res)
        """)
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
    assert r["events"] == [[EV_ALLOC, 0, 100, GRAN], [EV_FREE, 0, 100, GRAN], [EV_ALLOC, GRAN, 100, GRAN]]


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


PREALLOC_BODY = """
cu = Cuda()
region.set_allocation_region(BASE, "1GB")
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
    assert plain["mapped"] == [GRAN, 3 * GRAN, 6 * GRAN, 7 * GRAN, 5 * GRAN, 5 * GRAN + span(9 * MIB)]
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


def test_set_current_alloc_offset_moves_forward_and_refuses_to_move_below_live_allocations(
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
        b = cu.malloc(10)
        res["b"] = b - BASE
        res["below_live"] = error_of(region.set_current_alloc_offset, 2 * MIB)
        res["cursor_kept"] = region.get_current_alloc_offset()
        res["beyond"] = error_of(region.set_current_alloc_offset, 2 << 30)
        cu.free(b)
        region.set_current_alloc_offset(4 * MIB)     # back, over nothing live, is allowed
        res["back"] = cu.malloc(10) - BASE
        res["events"] = events()
        out(**res)
        """)
    )
    assert r["no_region"][0] == "RegionStateError"
    assert r["cursor"] == 12 * MIB and r["b"] == 12 * MIB
    name, msg = r["below_live"]
    assert name == "DriverError" and "live allocations reach offset 0xe00000" in msg
    assert r["cursor_kept"] == 14 * MIB
    assert "beyond the region size" in r["beyond"][1]
    assert r["back"] == 4 * MIB
    assert r["events"] == [
        [EV_ALLOC, 0, 3 * MIB, 4 * MIB],
        [EV_CURSOR, 12 * MIB, 0, 0],
        [EV_ALLOC, 12 * MIB, 10, GRAN],
        [EV_FREE, 12 * MIB, 10, GRAN],
        [EV_CURSOR, 4 * MIB, 0, 0],
        [EV_ALLOC, 4 * MIB, 10, GRAN],
    ]


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
    assert r["events"] == [[EV_ALLOC, 0, 1024 * 30, GRAN], [EV_ALLOC, GRAN, 5120 * 1000, span(5120 * 1000)]]


def test_vmm_reservations_are_carved_from_the_region_and_maps_are_logged(app_json: AppJson) -> None:
    """cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemUnmap / cuMemAddressFree, as PyTorch's
    expandable segments use them."""
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
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
        after = cu.malloc(100)                       # placed after the reservation
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
        """)
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
        [EV_ALLOC, 0, 100, GRAN],
        [EV_VMM_RESERVE, GRAN, 32 * MIB, 32 * MIB],
        [EV_VMM_MAP, GRAN, 4 * MIB, 4 * MIB],
        [EV_ALLOC, GRAN + 32 * MIB, 100, GRAN],
        [EV_VMM_UNMAP, GRAN, 4 * MIB, 4 * MIB],
        [EV_VMM_FREE, GRAN, 32 * MIB, 32 * MIB],
        [EV_VMM_RESERVE, 48 * MIB, 4 * MIB, 4 * MIB],
    ]


def test_expandable_segments_inside_a_preallocation_are_refused_with_a_next_step(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
        region.preallocate_region("64MB")
        seq = log_seq()
        p = DP(0)
        rc = int(fn("cuMemAddressReserve")(ctypes.byref(p), 32 * MIB, 0, 0, 0))
        out(rc=rc, ptr=p.value, message=log_since(seq), kinds=[e[0] for e in events()])
        """)
    )
    assert r["rc"] == CUDA_ERROR_NOT_SUPPORTED and r["ptr"] == 0
    assert "preallocated" in r["message"] and "prealloc_size" in r["message"]
    assert r["kinds"][-1] == EV_REFUSED


def test_stream_ordered_allocations_come_from_the_region_and_are_refused_during_capture(
    app_json: AppJson,
) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
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
        """)
    )
    assert r["alloc"] == [0, 0]
    assert r["free"] == 0
    assert r["in_capture"] == [CUDA_ERROR_NOT_SUPPORTED, 0]
    assert "graph capture" in r["message"] and "cannot persist" in r["message"]
    assert r["after_capture"] == [0, GRAN]
    assert r["events"] == [
        [EV_ASYNC_ALLOC, 0, 3000, GRAN],
        [EV_ASYNC_FREE, 0, 3000, GRAN],
        [EV_REFUSED, GRAN, 3000, 0],
        [EV_ASYNC_ALLOC, GRAN, 10, GRAN],
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


def test_address_range_of_region_pointers_names_the_allocation(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
        a = cu.malloc(1000)
        b = cu.malloc(5 * MIB)
        res = {"start": address_range(a), "inside": address_range(a + 999), "b_end": address_range(b + 5 * MIB - 1)}
        cu.free(a)
        res["freed"] = address_range(a)[0]
        res["unallocated"] = address_range(BASE + 100 * MIB)[0]
        out(**res)
        """)
    )
    assert r["start"] == [0, BASE, 1000] and r["inside"] == [0, BASE, 1000]
    assert r["b_end"] == [0, BASE + GRAN, 5 * MIB]
    assert r["freed"] == CUDA_ERROR_NOT_FOUND and r["unallocated"] == CUDA_ERROR_NOT_FOUND


def test_map_range_maps_only_the_unmapped_gaps(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
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
        """)
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
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
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
        """),
        env={"FAKECUDA_PHYS_LIMIT": str(8 * MIB)},
    )
    assert r["first"] == 0
    assert r["second"] == CUDA_ERROR_OUT_OF_MEMORY
    assert r["mapped"] == 2 * MIB  # only what the failed call mapped was undone
    assert r["copy"] == 0 and r["data"] == "restored earlier"
    assert r["first_gap_unmapped"]


def test_application_mapping_replaces_restored_pages_in_its_way(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
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
        """)
    )
    assert r["restore"] == 0 and r["seg"] == 0
    assert r["map"] == 0 and r["data"] == "mine"
    assert r["mapped_by_region"] == 0  # the restored pages were given up


def test_release_unmaps_everything_and_frees_the_range(app_json: AppJson) -> None:
    r = app_json(
        scenario("""
        cu = Cuda()
        region.set_allocation_region(BASE, "1GB")
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
        """)
    )
    assert r["mapped"] == 4 * MIB + 8 * MIB + GRAN
    assert r["after"] == [False, False, 0]
    assert r["gone"] and r["outside"] is False
    assert r["again"] == 0
    assert r["twice"][0] == "RegionStateError" and "already reserved" in r["twice"][1]


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
