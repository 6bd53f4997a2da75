"""The deterministic allocation region: threads, determinism across processes, the event log.

Every scenario runs in its own process with libfoundry preloaded (tests/support/scenarios.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.support.region import AppJson, RegionModel, run_in_region, span
from tests.support.scenarios import EV_ALLOC, EV_FREE, GRAN, MIB, scenario

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
    model = RegionModel()
    expected_offsets = {}
    for t, i in order:
        expected_offsets[(t, i)] = model.alloc(thread_size(t, i))
        if i % 2 == 1:
            model.free(expected_offsets[(t, i)])
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
    assert r["mapped"] == model.mapped


def test_event_log_records_kind_offset_size_span_and_thread(app_json: AppJson) -> None:
    r = run_in_region(
        app_json,
        """
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
        """,
    )
    assert r["ptrs"] == [0, GRAN, 3 * GRAN]
    assert r["log"] == [
        [1, EV_ALLOC, 0, 1000, span(1000)],
        [2, EV_ALLOC, GRAN, 3 * MIB, 2 * GRAN],
        [3, EV_FREE, 0, 1000, span(1000)],
        [4, EV_ALLOC, 3 * GRAN, GRAN, GRAN],
    ]
    assert r["tids"] == [True, True, True, True]
    assert r["kinds"] == ["ALLOC", "ALLOC", "FREE", "ALLOC"]
    assert r["from_second"] == [row[1:] for row in r["log"][2:]]
