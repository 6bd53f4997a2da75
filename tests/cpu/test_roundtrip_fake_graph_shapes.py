"""SAVE -> LOAD round trips on the fake driver: graph shapes.

Two-stream fork/join, programmatic (PDL) edges, nested and hand-built child graphs, event
record/wait nodes, also inside child graphs.

See tests/support/roundtrip_fake.py for what every round trip checks.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.graphs import JsonRunner, Scenario, f32, roundtrip
from tests.support.roundtrip_fake import EVENTS, N, check_roundtrip

FORK_JOIN = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("t", 4 * n); buf("sum", 4); buf("o2", 4 * n); buf("o3", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i) for i in range(n)])
        cu.write_f32(B["y"], [1.5 * k - 0.5] * n)
    READS["fork_join"] = [("sum", 1), ("o2", n), ("o3", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32", "fk_sum_f32", "fk_copy_bytes")
    s1, s2 = cu.stream_create(), cu.stream_create()
    e1, e2 = cu.event_create(), cu.event_create()
    full = ((2, 1, 1), (160, 1, 1))
    cu.begin_capture(s1)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["t"]), (c_int, n)], stream=s1)
    cu.event_record(e1, s1)
    cu.stream_wait_event(s2, e1)                                                        # fork
    cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B["o2"]), ("ptr", B["t"]), (c_uint64, 4 * n)],
              stream=s2)
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["o2"]), (c_float, 2.0), (c_int, n)], stream=s2)
    cu.launch(K["fk_sum_f32"], (1, 1, 1), (1, 1, 1), [("ptr", B["t"]), ("ptr", B["sum"]), (c_int, n)], stream=s1)
    cu.event_record(e2, s2)
    cu.stream_wait_event(s1, e2)                                                        # join
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["o2"]), ("ptr", B["t"]), ("ptr", B["o3"]), (c_int, n)], stream=s1)
    add_graph("fork_join", cu.end_capture(s1))
    """,
)


def test_two_stream_fork_join_roundtrip(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, FORK_JOIN, tmp_path / "arch")
    check_roundtrip(rt, "fork_join")
    structure = rt.load["structure"]["fork_join"]
    names = [n["name"] for n in structure["nodes"]]
    assert names == ["fk_add_f32", "fk_copy_bytes", "fk_scale_f32", "fk_sum_f32", "fk_add_f32"]
    assert [e[:2] for e in structure["edges"]] == [[0, 1], [0, 3], [1, 2], [2, 4], [3, 4]]
    for k, run in enumerate(rt.loaded("fork_join")):
        t = [float(i) + (1.5 * k - 0.5) for i in range(N)]
        assert run["sum"] == [f32(sum(t))]
        assert run["o2"] == [2.0 * v for v in t] and run["o3"] == [3.0 * v for v in t]


PDL = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("t", 4 * n); buf("out", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i) * (k + 1) for i in range(n)])
        cu.write_f32(B["y"], [4.0] * n)
    READS["pdl"] = [("t", n), ("out", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32", "fk_copy_bytes")
    s = cu.stream_create()
    full = ((1, 1, 1), (n, 1, 1))
    cu.begin_capture(s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["t"]), (c_int, n)], stream=s)
    cu.launch_ex(K["fk_scale_f32"], *full, [("ptr", B["t"]), (c_float, 2.0), (c_int, n)], stream=s, programmatic=True)
    cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B["out"]), ("ptr", B["t"]), (c_uint64, 4 * n)],
              stream=s)
    cu.launch_ex(K["fk_scale_f32"], *full, [("ptr", B["out"]), (c_float, 0.5), (c_int, n)], stream=s,
                 programmatic=True)
    add_graph("pdl", cu.end_capture(s))
    """,
)


def test_programmatic_edges_rebuilt_with_their_edge_data_despite_driver_bug(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    # FAKECUDA_EDGE_DATA_BUG=1 at LOAD: a bulk cuGraphAddDependencies_v2 would give every edge the
    # first edge's data, so the edges come back right only if LOAD adds them grouped by edge data.
    rt = roundtrip(app_json, PDL, tmp_path / "arch", load_env={"FAKECUDA_EDGE_DATA_BUG": "1"})
    check_roundtrip(rt, "pdl")
    programmatic = [1, 0, 1]  # (from_port PROGRAMMATIC, to_port 0, type PROGRAMMATIC)
    assert rt.save["structure"]["pdl"]["edges"] == [[0, 1, programmatic], [1, 2, [0, 0, 0]], [2, 3, programmatic]]
    assert rt.load["structure"]["pdl"]["edges"] == rt.save["structure"]["pdl"]["edges"]


CHILD = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("t", 4 * n); buf("out", 4 * n); buf("flag", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [1.0 + i + k for i in range(n)])
        cu.write_f32(B["y"], [-0.5 * i for i in range(n)])
    READS["nested"] = [("t", n), ("out", n)]
    READS["manual"] = [("t", n), ("flag", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32", "fk_copy_bytes")
    s = cu.stream_create()
    full = ((1, 1, 1), (n, 1, 1))
    # inner: t = x + y
    cu.begin_capture(s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["t"]), (c_int, n)], stream=s)
    inner = cu.end_capture(s)
    # middle: launch(inner) [a child-graph node], t *= 3
    cu.begin_capture(s)
    cu.graph_launch(cu.instantiate(inner), s)
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["t"]), (c_float, 3.0), (c_int, n)], stream=s)
    middle = cu.end_capture(s)
    # nested: launch(middle), out = t
    cu.begin_capture(s)
    cu.graph_launch(cu.instantiate(middle), s)
    cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B["out"]), ("ptr", B["t"]), (c_uint64, 4 * n)],
              stream=s)
    add_graph("nested", cu.end_capture(s))
    # manual: cuGraphCreate + cuGraphAddChildGraphNode(middle) -> empty node -> memset node
    g = c_void_p(); call("cuGraphCreate", byref(g), 0)
    child = c_void_p(); call("cuGraphAddChildGraphNode", byref(child), g, None, 0, middle)
    empty = c_void_p(); call("cuGraphAddEmptyNode", byref(empty), g, (c_void_p * 1)(child.value), 1)
    mp = CUDA_MEMSET_NODE_PARAMS(B["flag"], 0, f32_bits(7.0), 4, n, 1)
    ms = c_void_p(); call("cuGraphAddMemsetNode", byref(ms), g, (c_void_p * 1)(empty.value), 1, byref(mp), cu.ctx)
    add_graph("manual", g.value)
    """,
)


def test_child_graph_nodes_nested_and_manual_roundtrip(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, CHILD, tmp_path / "arch")
    check_roundtrip(rt, "nested")
    check_roundtrip(rt, "manual")
    nested = rt.load["structure"]["nested"]
    assert [n["type"] for n in nested["nodes"]] == ["graph", "kernel"]
    middle = nested["nodes"][0]["child"]
    assert [n["type"] for n in middle["nodes"]] == ["graph", "kernel"]
    assert [n["name"] for n in middle["nodes"][0]["child"]["nodes"]] == ["fk_add_f32"]
    manual = rt.load["structure"]["manual"]
    assert [n["type"] for n in manual["nodes"]] == ["graph", "empty", "memset"]
    assert manual["edges"] == [[0, 1, [0, 0, 0]], [1, 2, [0, 0, 0]]]
    assert rt.meta("nested")["stats"]["child_graph"] == 2
    for k in (0, 1):
        t = [3.0 * (f32(1.0 + i + k) + (-0.5 * i)) for i in range(N)]
        assert rt.loaded("nested")[k] == {"t": t, "out": t}
        assert rt.loaded("manual")[k] == {"t": t, "flag": [7.0] * N}


def test_event_record_and_wait_nodes_roundtrip(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, EVENTS, tmp_path / "arch")
    check_roundtrip(rt, "events")
    nodes = rt.load["structure"]["events"]["nodes"]
    assert [n["type"] for n in nodes] == ["kernel", "event_record", "wait_event", "kernel"]
    assert nodes[1]["event"] == nodes[2]["event"]  # record and wait still name one (new) event
    assert rt.meta("events")["events"] == 1
    for k, run in enumerate(rt.loaded("events")):
        assert run["t"] == [-2.0 * (i + k + 1) for i in range(N)]


CHILD_EVENTS = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("t", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i * (k + 2)) for i in range(n)])
    READS["child_events"] = [("t", n)]
    """,
    capture="""
    K = module("fk_copy_bytes", "fk_scale_f32")
    s = cu.stream_create()
    ev, other = cu.event_create(), cu.event_create()
    full = ((1, 1, 1), (n, 1, 1))
    cu.begin_capture(s)                                     # child: wait(ev), t *= 0.25, record(other)
    check(fn("cuStreamWaitEvent")(s, ev, 1), "wait")
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["t"]), (c_float, 0.25), (c_int, n)], stream=s)
    call("cuEventRecordWithFlags", other, s, 1)
    child = cu.instantiate(cu.end_capture(s))
    cu.begin_capture(s)                                     # parent: t = x, record(ev), child
    cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B["t"]), ("ptr", B["x"]), (c_uint64, 4 * n)],
              stream=s)
    call("cuEventRecordWithFlags", ev, s, 1)
    cu.graph_launch(child, s)
    add_graph("child_events", cu.end_capture(s))
    """,
)


def test_event_nodes_inside_child_graphs_share_events_with_the_parent(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, CHILD_EVENTS, tmp_path / "arch")
    check_roundtrip(rt, "child_events")
    parent = rt.load["structure"]["child_events"]["nodes"]
    assert [n["type"] for n in parent] == ["kernel", "event_record", "graph"]
    child = parent[2]["child"]["nodes"]
    assert [n["type"] for n in child] == ["wait_event", "kernel", "event_record"]
    assert parent[1]["event"] == child[0]["event"] != child[2]["event"]
    assert rt.meta("child_events")["events"] == 2
