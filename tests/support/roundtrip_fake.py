"""What the SAVE -> LOAD round trips on the fake CUDA driver share (tests/cpu/test_roundtrip_fake_*.py).

Every test captures graphs natively in a SAVE process, runs them on two sets of input values, and
saves them; a fresh LOAD process makes the same persistent allocations, rebuilds the graphs from the
archive and runs them on the same input sets. The loaded graph's outputs must equal the native
graph's exactly, for both input sets (the second one written into the static inputs after LOAD), and
the rebuilt graph must have the same nodes, parameters and edges as the captured one.
"""

from __future__ import annotations

from tests.support.graphs import RoundTrip, Scenario

N = 320  # elements per buffer; the scenarios' grids cover fewer, so a lost grid/block shows in the output


def check_roundtrip(rt: RoundTrip, graph: str) -> None:
    """Loaded outputs == native outputs on every input set; rebuilt graph == captured graph."""
    native = rt.native(graph)
    assert rt.loaded(graph) == native
    assert len(native) >= 2 and native[0] != native[1], "the input sets must change the outputs"
    assert rt.load["structure"][graph] == rt.save["structure"][graph]
    assert rt.load["buffers"] == rt.save["buffers"]


# Event-record and event-wait nodes (a graph shape; also the graph the save-location test moves around).
EVENTS = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("t", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i) for i in range(n)])
        cu.write_f32(B["y"], [float(k + 1)] * n)
    READS["events"] = [("t", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32")
    s = cu.stream_create()
    ev = cu.event_create()
    full = ((1, 1, 1), (n, 1, 1))
    cu.begin_capture(s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["t"]), (c_int, n)], stream=s)
    call("cuEventRecordWithFlags", ev, s, 1)            # CU_EVENT_RECORD_EXTERNAL: an event-record node
    check(fn("cuStreamWaitEvent")(s, ev, 1), "wait")    # CU_EVENT_WAIT_EXTERNAL: an event-wait node
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["t"]), (c_float, -2.0), (c_int, n)], stream=s)
    add_graph("events", cu.end_capture(s))
    """,
)
