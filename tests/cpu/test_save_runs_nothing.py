"""SAVE probes a graph's random numbers by launching it with its work switched off
(foundry.capture.rng.work_disabled): the driver calls it is built on, on the fake driver. The GPU tier
checks the whole save (tests/gpu/test_capture_gpu.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.graphs import JsonRunner, prelude

SWITCH = """
from foundry.native import set_nodes_enabled, work_nodes
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
nodes = work_nodes(g)
state = lambda: [cu.read_f32(b, 1)[0] for b in (x, y, z)]
set_nodes_enabled(e, nodes, False)
for _ in range(3):
    cu.graph_launch(e)
cu.sync()
off = state()
set_nodes_enabled(e, nodes, True)
cu.graph_launch(e)
cu.sync()
emit(types=sorted(cu.node_type(n) for n in nodes), all_types=sorted(cu.node_type(n) for n in cu.graph_nodes(g)),
     off=off, on=state())
"""


def test_an_exec_with_its_work_switched_off_changes_no_memory(app_json: JsonRunner, tmp_path: Path) -> None:
    out = app_json(prelude(tmp_path) + SWITCH)
    # The empty node does no work and stays; the memset, kernel and copy are switched off.
    assert out["types"] == ["kernel", "memcpy", "memset"]
    assert sorted(out["all_types"]) == sorted([*out["types"], "empty"])
    assert out["off"] == [1.0, 0.0, 0.0]  # three launches: nothing written
    assert out["on"] == [2.0, 7.0, 2.0]  # switched back on: one launch does all of it
