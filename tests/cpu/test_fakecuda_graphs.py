"""Tests of the fake CUDA driver itself (no Foundry): graph edges and edge data, node attributes,
instantiate validation, exec update, child graphs and event/host/memset/alloc nodes."""

from __future__ import annotations

from pathlib import Path

from tests.support.fakecuda_helpers import (
    EXEC_UPDATE_FAILURE,
    INVALID_CLUSTER_SIZE,
    INVALID_HANDLE,
    INVALID_VALUE,
    LOSSY_QUERY,
    run,
)


def test_programmatic_edges_and_lossy_query(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    s = cu.stream_create()
    a = cu.malloc(64)
    args = [("ptr", a), (c_float, 1.0), (c_int, 4)]
    cu.begin_capture(s)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), args, stream=s)
    cu.launch_ex(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), args, stream=s, programmatic=True)
    cu.launch_ex(F["fk_cluster_add_f32"], (2, 1, 1), (2, 1, 1), [("ptr", a), ("ptr", a), ("ptr", a), (c_int, 4)],
                 stream=s, cluster=(2, 1, 1))
    g = cu.end_capture(s)
    n0, n1, n2 = cu.graph_nodes(g)
    edges = [(cu.graph_nodes(g).index(f), cu.graph_nodes(g).index(t), d) for f, t, d in cu.graph_edges(g)]
    cnt = c_size_t()
    count_q = fn("cuGraphGetEdges_v2")(g, None, None, None, byref(cnt))
    fr, to = (c_void_p * 2)(), (c_void_p * 2)()
    k = c_size_t(2)
    lossy = fn("cuGraphGetEdges_v2")(g, fr, to, None, byref(k))
    k1 = c_size_t(2)
    lossy_v1 = fn("cuGraphGetEdges")(g, fr, to, byref(k1))
    v = CUlaunchAttributeValue()
    call("cuGraphKernelNodeGetAttribute", n2, 4, byref(v))
    cluster = list(v.u32[:3])
    call("cuGraphKernelNodeGetAttribute", n1, 4, byref(v))
    unset = list(v.u32[:3])
    v.u32[0] = 7
    call("cuGraphKernelNodeSetAttribute", n0, 8, byref(v))        # priority
    v2 = CUlaunchAttributeValue()
    call("cuGraphKernelNodeGetAttribute", n0, 8, byref(v2))
    pss_attr = fn("cuGraphKernelNodeSetAttribute")(n0, 6, byref(v))
    out(edges=edges, count_q=[count_q, cnt.value], lossy=[lossy, k.value, fr[0] == n0], lossy_v1=lossy_v1,
        cluster=cluster, unset=unset, prio=v2.u32[0], pss_attr=pss_attr)
    """,
    )
    assert r["edges"] == [[0, 1, [1, 0, 1]], [1, 2, [0, 0, 0]]]
    assert r["count_q"] == [0, 2]
    assert r["lossy"] == [LOSSY_QUERY, 2, True] and r["lossy_v1"] == LOSSY_QUERY
    assert r["cluster"] == [2, 1, 1] and r["unset"] == [0, 0, 0] and r["prio"] == 7
    assert r["pss_attr"] == INVALID_VALUE


ADD_DEPS = """
g = c_void_p(); call("cuGraphCreate", byref(g), 0); g = g.value
def kernel_node(v, deps=()):
    o = cu.malloc(16)
    objs = [c_uint64(o), c_float(v), c_int(4)]
    arr = (c_void_p * 3)(*[ctypes.cast(ctypes.pointer(x), c_void_p) for x in objs])
    p = CUDA_KERNEL_NODE_PARAMS(F["fk_fill_f32"], 1, 1, 1, 4, 1, 1, 0, arr, None, None, None)
    d = (c_void_p * max(len(deps), 1))(*deps)
    nd = c_void_p()
    call("cuGraphAddKernelNode_v2", byref(nd), g, d, len(deps), byref(p))
    return nd.value, o
a, oa = kernel_node(1.0); b, ob = kernel_node(2.0); c, oc = kernel_node(3.0)
prog = CUgraphEdgeData(1, 0, 1); plain = CUgraphEdgeData(0, 0, 0)
fr = (c_void_p * 2)(a, a); to = (c_void_p * 2)(b, c)
data = (CUgraphEdgeData * 2)(prog, plain)
call("cuGraphAddDependencies_v2", g, fr, to, data, 2)
nodes = cu.graph_nodes(g)
edges = [(nodes.index(f), nodes.index(t), list(d)) for f, t, d in cu.graph_edges(g)]
"""


def test_add_dependencies_edge_data(fakecuda_dir: Path) -> None:
    body = """
    bad = (CUgraphEdgeData * 1)(CUgraphEdgeData(1, 0, 0))          # port without programmatic type
    e = c_void_p(); call("cuGraphAddEmptyNode", byref(e), g, None, 0)
    f1, t1 = (c_void_p * 1)(b), (c_void_p * 1)(c)
    r_bad = fn("cuGraphAddDependencies_v2")(g, f1, t1, bad, 1)
    fe, te = (c_void_p * 1)(e.value), (c_void_p * 1)(c)
    r_prog_empty = fn("cuGraphAddDependencies_v2")(g, fe, te, (CUgraphEdgeData * 1)(prog), 1)
    r_dup = fn("cuGraphAddDependencies_v2")(g, (c_void_p * 1)(a), (c_void_p * 1)(b), None, 1)
    roots = c_size_t(); call("cuGraphGetRootNodes", g, None, byref(roots))
    ex = cu.instantiate(g); cu.graph_launch(ex)
    out(edges=edges, r_bad=r_bad, r_prog_empty=r_prog_empty, r_dup=r_dup, roots=roots.value,
        ran=[cu.read_f32(oa, 4), cu.read_f32(oc, 4)])
    """
    r = run(fakecuda_dir, body, prefix=ADD_DEPS)
    assert r["edges"] == [[0, 1, [1, 0, 1]], [0, 2, [0, 0, 0]]]
    assert r["r_bad"] == r["r_prog_empty"] == r["r_dup"] == INVALID_VALUE
    assert r["roots"] == 2 and r["ran"] == [[1.0] * 4, [3.0] * 4]
    r = run(fakecuda_dir, "out(edges=edges)\n", env={"FAKECUDA_EDGE_DATA_BUG": "1"}, prefix=ADD_DEPS)
    assert r["edges"] == [[0, 1, [1, 0, 1]], [0, 2, [1, 0, 1]]]  # first edge's data applied to all


def test_instantiate_validation_and_snapshot(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        prefix=ADD_DEPS,
        body="""
    res = {}
    # snapshot: editing the graph after instantiation does not change the exec
    ex = cu.instantiate(g)
    p = cu.kernel_node_params(a)
    v = c_float(5.0); p.kernelParams[1] = ctypes.cast(ctypes.pointer(v), c_void_p)
    call("cuGraphKernelNodeSetParams_v2", a, byref(p))
    cu.graph_launch(ex); res["old"] = cu.read_f32(oa, 4)
    ex2 = cu.instantiate(g); cu.graph_launch(ex2); res["new"] = cu.read_f32(oa, 4)
    # cycle
    call("cuGraphAddDependencies_v2", g, (c_void_p * 1)(c), (c_void_p * 1)(a), None, 1)
    e = c_void_p()
    res["cycle"] = fn("cuGraphInstantiateWithFlags")(byref(e), g, 0)
    # cluster kernel without the attribute; big shared memory without the function attribute
    g2 = c_void_p(); call("cuGraphCreate", byref(g2), 0)
    o = cu.malloc(64)
    objs = [c_uint64(o), c_uint64(o), c_uint64(o), c_int(4)]
    arr = (c_void_p * 4)(*[ctypes.cast(ctypes.pointer(x), c_void_p) for x in objs])
    kp = CUDA_KERNEL_NODE_PARAMS(F["fk_cluster_add_f32"], 2, 1, 1, 2, 1, 1, 0, arr, None, None, None)
    nd = c_void_p(); call("cuGraphAddKernelNode_v2", byref(nd), g2, None, 0, byref(kp))
    res["cluster"] = fn("cuGraphInstantiateWithFlags")(byref(e), g2, 0)
    val = CUlaunchAttributeValue(); val.u32[0], val.u32[1], val.u32[2] = 2, 1, 1
    call("cuGraphKernelNodeSetAttribute", nd, 4, byref(val))
    res["cluster_ok"] = fn("cuGraphInstantiateWithFlags")(byref(e), g2, 0)
    ex_c = e.value
    # exec kernel-node set params: another function into a (2,1,1)-cluster node is fine; the cluster
    # kernel into a node without the cluster attribute is not
    kp2 = CUDA_KERNEL_NODE_PARAMS(F["fk_add_f32"], 2, 1, 1, 2, 1, 1, 0, arr, None, None, None)
    res["exec_set_add"] = fn("cuGraphExecKernelNodeSetParams_v2")(ex_c, nd, byref(kp2))
    ex_a = cu.instantiate(g2)
    g3 = c_void_p(); call("cuGraphCreate", byref(g3), 0)
    nd3 = c_void_p(); call("cuGraphAddKernelNode_v2", byref(nd3), g3, None, 0, byref(kp2))
    ex3 = cu.instantiate(g3.value)
    res["exec_set_cluster"] = fn("cuGraphExecKernelNodeSetParams_v2")(ex3, nd3, byref(kp))
    res["exec_set_foreign"] = fn("cuGraphExecKernelNodeSetParams_v2")(ex3, nd, byref(kp2))
    objs2 = [c_uint64(o), c_int(4)]
    arr2 = (c_void_p * 2)(*[ctypes.cast(ctypes.pointer(x), c_void_p) for x in objs2])
    kp3 = CUDA_KERNEL_NODE_PARAMS(F["fk_bigsmem_f32"], 1, 1, 1, 4, 1, 1, 64 * 1024, arr2, None, None, None)
    g4 = c_void_p(); call("cuGraphCreate", byref(g4), 0)
    nd4 = c_void_p()
    # The limit is checked where a node is made, as the driver does, not at instantiation: a node made while
    # the limit allowed it still instantiates after the program lowered the limit again.
    res["smem"] = fn("cuGraphAddKernelNode_v2")(byref(nd4), g4, None, 0, byref(kp3))
    cu.set_func_attr(F["fk_bigsmem_f32"], 8, 64 * 1024)
    res["smem_add"] = fn("cuGraphAddKernelNode_v2")(byref(nd4), g4, None, 0, byref(kp3))
    cu.set_func_attr(F["fk_bigsmem_f32"], 8, 32)
    res["smem_ok"] = fn("cuGraphInstantiateWithFlags")(byref(e), g4, 0)
    res["smem_set_lowered"] = fn("cuGraphKernelNodeSetParams_v2")(nd4, byref(kp3))
    cu.set_func_attr(F["fk_bigsmem_f32"], 8, 48 * 1024)
    # a function whose module was unloaded
    m2 = cu.load_module(make_cubin(["fk_fill_f32"]))
    f2 = cu.module_function(m2, "fk_fill_f32")
    objs5 = [c_uint64(o), c_float(1.0), c_int(4)]
    arr5 = (c_void_p * 3)(*[ctypes.cast(ctypes.pointer(x), c_void_p) for x in objs5])
    g5 = c_void_p(); call("cuGraphCreate", byref(g5), 0)
    nd5 = c_void_p()
    call("cuGraphAddKernelNode_v2", byref(nd5), g5, None, 0,
         byref(CUDA_KERNEL_NODE_PARAMS(f2, 1, 1, 1, 4, 1, 1, 0, arr5, None, None, None)))
    call("cuModuleUnload", m2)
    res["unloaded"] = fn("cuGraphInstantiateWithFlags")(byref(e), g5, 0)
    res["unloaded_launch"] = cu.launch_raw(f2, (1, 1, 1), (1, 1, 1), [("ptr", o), (c_float, 1.0), (c_int, 4)])
    out(**res)
    """,
    )
    assert r["old"] == [1.0] * 4 and r["new"] == [5.0] * 4
    assert r["cycle"] == INVALID_VALUE
    assert r["cluster"] == INVALID_CLUSTER_SIZE and r["cluster_ok"] == 0
    assert r["exec_set_add"] == 0
    assert r["exec_set_cluster"] == INVALID_CLUSTER_SIZE and r["exec_set_foreign"] == INVALID_VALUE
    assert r["smem"] == INVALID_VALUE and r["smem_add"] == 0 and r["smem_ok"] == 0
    assert r["smem_set_lowered"] == INVALID_VALUE
    assert r["unloaded"] == INVALID_HANDLE and r["unloaded_launch"] == INVALID_HANDLE


def test_exec_update(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    s = cu.stream_create()
    o = cu.malloc(64)
    def capture(v, extra_node=False, memset_instead=False):
        cu.begin_capture(s)
        if memset_instead:
            call("cuMemsetD32Async", o, 0, 4, s)
        else:
            cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, v), (c_int, 4)], stream=s)
        cu.launch(F["fk_scale_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, 2.0), (c_int, 4)], stream=s)
        if extra_node:
            call("cuMemsetD32Async", o + 16, 0, 4, s)
        return cu.end_capture(s)
    g1 = capture(1.0)
    ex = cu.instantiate(g1)
    info = CUgraphExecUpdateResultInfo()
    ok = fn("cuGraphExecUpdate_v2")(ex, capture(5.0), byref(info))
    ok_res = info.result
    cu.graph_launch(ex); val = cu.read_f32(o, 4)
    topo = fn("cuGraphExecUpdate_v2")(ex, capture(1.0, extra_node=True), byref(info))
    topo_res = info.result
    g_t = capture(1.0, memset_instead=True)
    typ = fn("cuGraphExecUpdate_v2")(ex, g_t, byref(info))
    typ_res = [info.result, info.errorNode == cu.graph_nodes(g_t)[0]]
    cu.graph_launch(ex); val2 = cu.read_f32(o, 4)
    out(ok=[ok, ok_res], val=val, topo=[topo, topo_res], typ=[typ] + typ_res, val2=val2)
    """,
    )
    assert r["ok"] == [0, 0] and r["val"] == [10.0] * 4
    assert r["topo"] == [EXEC_UPDATE_FAILURE, 2]  # CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
    assert r["typ"] == [EXEC_UPDATE_FAILURE, 3, True]  # CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
    assert r["val2"] == [10.0] * 4


def test_child_graphs_events_host_and_alloc_nodes(fakecuda_dir: Path) -> None:
    r = run(
        fakecuda_dir,
        """
    s = cu.stream_create()
    o = cu.malloc(64)
    ev = cu.event_create()
    # child graph from a capture, then used by cuGraphAddChildGraphNode (cloned)
    cu.begin_capture(s)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", o), (c_float, 3.0), (c_int, 4)], stream=s)
    child = cu.end_capture(s)
    g = c_void_p(); call("cuGraphCreate", byref(g), 0); g = g.value
    cn = c_void_p(); call("cuGraphAddChildGraphNode", byref(cn), g, None, 0, child)
    inner = c_void_p(); call("cuGraphChildGraphNodeGetGraph", cn, byref(inner))
    call("cuGraphDestroy", child)                      # the node holds its own copy
    hits = []
    cb = HOSTFN(lambda _u: hits.append(1))
    hp = CUDA_HOST_NODE_PARAMS(cb, None)
    hn = c_void_p(); call("cuGraphAddHostNode", byref(hn), g, (c_void_p * 1)(cn.value), 1, byref(hp))
    er = c_void_p(); call("cuGraphAddEventRecordNode", byref(er), g, (c_void_p * 1)(hn.value), 1, ev)
    got = c_void_p(); call("cuGraphEventRecordNodeGetEvent", er, byref(got))
    mp = CUDA_MEMSET_NODE_PARAMS(o + 16, 0, 0x40000000, 4, 4, 1)
    mn = c_void_p(); call("cuGraphAddMemsetNode", byref(mn), g, None, 0, byref(mp), cu.ctx)
    mp2 = CUDA_MEMSET_NODE_PARAMS(); call("cuGraphMemsetNodeGetParams", mn, byref(mp2))
    cl = c_void_p(); call("cuGraphClone", byref(cl), g)
    ex = cu.instantiate(cl.value)
    cu.graph_launch(ex, s)
    q = fn("cuEventQuery")(ev)
    # stream-ordered allocation under capture: mem alloc / mem free nodes
    cu.begin_capture(s)
    p = c_uint64()
    call("cuMemAllocAsync", byref(p), 64, s)
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", p.value), (c_float, 6.0), (c_int, 4)], stream=s)
    call("cuMemcpyDtoDAsync_v2", o + 32, p.value, 16, s)
    call("cuMemFreeAsync", p.value, s)
    ga = cu.end_capture(s)
    exa = cu.instantiate(ga); cu.graph_launch(exa, s); cu.graph_launch(exa, s)
    # graph launch inside a capture becomes a child-graph node
    cu.begin_capture(s)
    cu.graph_launch(exa, s)
    gl = cu.end_capture(s)
    out(vals=cu.read_f32(o, 12), hits=len(hits), event=got.value == ev, query=q,
        inner=[cu.node_type(x) for x in cu.graph_nodes(inner.value)],
        memset=[mp2.dst == o + 16, mp2.value, mp2.elementSize, mp2.width],
        alloc_types=[cu.node_type(x) for x in cu.graph_nodes(ga)],
        captured_launch=[cu.node_type(x) for x in cu.graph_nodes(gl)])
    """,
    )
    assert r["vals"] == [3.0] * 4 + [2.0] * 4 + [6.0] * 4
    assert r["hits"] == 1 and r["event"] and r["query"] == 0
    assert r["inner"] == ["kernel"]
    assert r["memset"] == [True, 0x40000000, 4, 4]
    assert r["alloc_types"] == ["mem_alloc", "kernel", "memcpy", "mem_free"]
    assert r["captured_launch"] == ["graph"]
