"""SAVE probes a graph's random numbers by replaying it while the interposer drops the launch
(foundry.save.rngprobe, csrc/hooks_graph.c), or, where it cannot, with the exec's work switched off (one
native call over the graph's record: csrc/codec_probe.c), and reads the argument words that point at
live memory in one call: the driver calls they are built on, on the fake driver. The GPU tier checks the
whole save, and that the program's exec replays as fast after it (tests/gpu/test_capture_gpu.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.graphs import JsonRunner, prelude

SWITCH = """
from foundry.native import codec
from foundry.save import extract, pointed_words, work_disabled
n = 64
K = module("fk_scale_f32")
x, y, z = buf("x", 4 * n), buf("y", 4 * n), buf("z", 4 * n)
cu.write_f32(x, [1.0] * n); cu.write_f32(y, [0.0] * n); cu.write_f32(z, [0.0] * n)
s = cu.stream_create()
cu.begin_capture(s)
call("cuMemsetD32Async", y, f32_bits(7.0), n, s)
cu.launch(K["fk_scale_f32"], (1, 1, 1), (n, 1, 1), [("ptr", x), (c_float, 2.0), (c_int, n)], stream=s)
call("cuMemcpyDtoDAsync_v2", z, x, 4 * n, s)
g = cu.end_capture(s)
empty = c_void_p()
call("cuGraphAddEmptyNode", byref(empty), g, None, 0)
e = cu.instantiate(g)
extracted = extract(g)
state = lambda: [cu.read_f32(b, 1)[0] for b in (x, y, z)]
with work_disabled(g, e, extracted):
    for _ in range(3):
        cu.graph_launch(e)
    cu.sync()
    off = state()
cu.graph_launch(e)
cu.sync()
on = state()
# a record of another graph (one node fewer) is refused, and nothing is switched
cu.begin_capture(s)
cu.launch(K["fk_scale_f32"], (1, 1, 1), (n, 1, 1), [("ptr", x), (c_float, 2.0), (c_int, n)], stream=s)
small = cu.end_capture(s)
refused = attempt(lambda: codec.set_work_enabled(g, e, extract(small).record, False))
region = foundry.region_state()
words = pointed_words(extracted, region.base, foundry.region.live_ranges_now())
cu.write_u64(z, 0x1234_5678)
outside = pointed_words(extracted, region.base, [(x - region.base, 8)])
emit(off=off, on=on, refused=refused, words={hex(k): v for k, v in words.items()},
     x=hex(x), z=hex(z), outside={hex(k): v for k, v in outside.items()})
"""


def test_an_exec_with_its_work_switched_off_changes_no_memory(app_json: JsonRunner, tmp_path: Path) -> None:
    out = app_json(prelude(tmp_path) + "foundry.set_allocation_region(BASE, '1GB')\n" + SWITCH)
    assert out["off"] == [1.0, 0.0, 0.0]  # three launches: the memset, kernel and copy switched off
    assert out["on"] == [2.0, 7.0, 2.0]  # switched back on: one launch does all of it
    assert out["refused"]["error"] == "CodecError" and "another graph's" in out["refused"]["message"]


def test_the_words_the_arguments_point_at_are_read_in_one_call(app_json: JsonRunner, tmp_path: Path) -> None:
    out = app_json(prelude(tmp_path) + "foundry.set_allocation_region(BASE, '1GB')\n" + SWITCH)
    # The kernel's only pointer argument is x; its first word holds two floats of 2.0 (0x40000000 each).
    assert out["words"] == {out["x"]: 0x4000000040000000}
    # A live range that holds only x's first word: the same word, nothing else.
    assert out["outside"] == {out["x"]: 0x4000000040000000}


DROP = """
import threading
from foundry.native import codec
from foundry.save import can_drop_launches, launches_dropped
n = 16
K = module("fk_scale_f32")
x = buf("x", 4 * n)
cu.write_f32(x, [1.0] * n)
s = cu.stream_create()
cu.begin_capture(s)
cu.launch(K["fk_scale_f32"], (1, 1, 1), (n, 1, 1), [("ptr", x), (c_float, 2.0), (c_int, n)], stream=s)
g = cu.end_capture(s)
e, other = cu.instantiate(g), cu.instantiate(g)
cu.graph_launch(e)  # x = 2: the hook passes launches through
cu.sync()
handed = can_drop_launches()
with launches_dropped(e) as dropped:
    for _ in range(3):
        cu.graph_launch(e)  # dropped: x stays 2
    cu.sync()
    kept = cu.read_f32(x, 1)[0]
    codec.launch(e, 0)  # Foundry's own launch runs: 4
    cu.graph_launch(other)  # another exec runs: 8
    def elsewhere():
        call("cuCtxSetCurrent", cu.ctx)
        cu.graph_launch(e)
    t = threading.Thread(target=elsewhere)  # another thread's launch runs: 16
    t.start(); t.join()
    cu.sync()
    inside = cu.read_f32(x, 1)[0]
    during = dropped.count
cu.graph_launch(e)  # armed no more: 32
cu.sync()
emit(handed=handed, kept=kept, inside=inside, during=during, count=dropped.count, after=cu.read_f32(x, 1)[0])
"""


def test_the_interposer_drops_only_this_threads_launches_of_the_armed_exec(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    out = app_json(prelude(tmp_path) + "foundry.set_allocation_region(BASE, '1GB')\n" + DROP)
    assert out["handed"] is True  # the test's driver calls came through dlsym, so through the hook
    assert out["kept"] == 2.0  # three launches of the armed exec did nothing
    assert out["inside"] == 16.0  # Foundry's own launch, another exec and another thread's launch all ran
    assert out["during"] == 0 and out["count"] == 3  # the count is known once the block ends
    assert out["after"] == 32.0
