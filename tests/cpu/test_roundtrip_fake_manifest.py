"""SAVE -> LOAD round trips on the fake driver: several graphs, templates and members, the manifest.

Graphs grouped by topology (a template and its members), the manifest's hashes, loading
images with and without a manifest, members launched interleaved in one process.

See tests/support/roundtrip_fake.py for what every round trip checks.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from tests.fakecuda.images import make_cubin
from tests.support.archive_damage import load_doc, stored, unbundle, write_doc
from tests.support.graphs import (
    JsonRunner,
    RoundTrip,
    Scenario,
    f32,
    load_prefix,
    prelude,
    roundtrip,
    run_load,
    run_save,
)
from tests.support.roundtrip_fake import N, check_roundtrip

FAMILY = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("y", 4 * n); buf("a", 4 * n); buf("b", 4 * n); buf("c", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i - k) for i in range(n)])
        cu.write_f32(B["y"], [0.5 + 2.0 * k] * n)
    READS["scale2"] = [("a", n)]
    READS["scale3"] = [("b", n)]
    READS["add_scale"] = [("c", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32", "fk_copy_bytes")
    s = cu.stream_create()
    full = ((1, 1, 1), (n, 1, 1))
    def scaled(dst, factor):
        cu.begin_capture(s)
        cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B[dst]), ("ptr", B["x"]), (c_uint64, 4 * n)],
                  stream=s)
        cu.launch(K["fk_scale_f32"], *full, [("ptr", B[dst]), (c_float, factor), (c_int, n)], stream=s)
        return cu.end_capture(s)
    add_graph("scale2", scaled("a", 2.0))
    add_graph("scale3", scaled("b", 3.0))          # same topology, other arguments
    cu.begin_capture(s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["c"]), (c_int, n)], stream=s)
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["c"]), (c_float, 4.0), (c_int, n)], stream=s)
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["c"]), (c_float, 0.5), (c_int, n)], stream=s)
    add_graph("add_scale", cu.end_capture(s))
    """,
)


def test_several_graphs_manifest_groups_by_topology(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, FAMILY, tmp_path / "arch")
    for name in ("scale2", "scale3", "add_scale"):
        check_roundtrip(rt, name)
    manifest = json.loads((rt.arch / "graph_manifest.json").read_text())
    graphs = manifest["graphs"]
    assert [g["name"] for g in graphs] == ["scale2", "scale3", "add_scale"]
    assert [g["role"] for g in graphs] == ["template", "member", "template"]
    assert [g["group"] for g in graphs] == [0, 0, 1]
    topologies = [rt.meta(g["name"])["topology"] for g in graphs]
    assert topologies[0] == topologies[1] != topologies[2]
    groups = [{k: g[k] for k in ("topology", "template", "members")} for g in manifest["groups"]]
    assert groups == [
        {"topology": topologies[0], "template": 0, "members": [1]},
        {"topology": topologies[2], "template": 2, "members": []},
    ]
    assert [g["stored"] for g in graphs] == ["bundle"] * 3  # saved in the archive directory: stored once, there
    for g in graphs:
        path = rt.arch / g["json"]
        assert not path.exists() and not path.with_suffix(".cugraph").exists()
        json_bytes, _ = stored(path)
        meta = json.loads(json_bytes)
        assert g["json_sha256"] == hashlib.sha256(json_bytes).hexdigest()
        assert g["record_sha256"] == meta["record"]["sha256"]
        assert g["nodes"] == meta["stats"]["nodes"] == len(rt.save["structure"][g["name"]]["nodes"])
    for sha, entry in manifest["images"].items():
        data = (rt.arch / entry["file"]).read_bytes()
        assert entry["file"] == f"images/{sha}.bin" and entry["bytes"] == len(data)
        assert hashlib.sha256(data).hexdigest() == sha


def test_archive_with_template_members_passes_check_archive(app_json: JsonRunner, tmp_path: Path) -> None:
    from foundry.verify import check_archive

    save = run_save(app_json, FAMILY, tmp_path / "arch")
    assert len(save["native"]) == 3
    assert check_archive(tmp_path / "arch") == []


IMAGES_ONLY = """
from foundry.kernels import registry
count = foundry.load_cuda_modules_and_libraries(ARCH)
foundry.load.wait_for_startup()  # the driver work runs in the background; LOAD waits for it the same way
emit(count=count, loaded=sorted(s for s in SHAS if registry.is_loaded(s)),
     looked_up=sorted(k for s in SHAS for k in KERNELS if registry.is_looked_up(registry.KernelRef(s, k))))
"""


def test_load_modules_and_libraries_with_and_without_manifest(app_json: JsonRunner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    save = run_save(app_json, FAMILY, arch)
    used = sorted(save["metas"]["scale2"]["images"])
    assert len(used) == 1
    # An image that no saved graph uses (copied in by hand): the manifest does not list it.
    stray = make_cubin(["fk_sum_f32"])
    stray_sha = hashlib.sha256(stray).hexdigest()
    (arch / "images" / f"{stray_sha}.bin").write_bytes(stray)
    kernels = ["fk_add_f32", "fk_copy_bytes", "fk_scale_f32", "fk_sum_f32"]
    code = prelude(arch) + f"\nSHAS = {[*used, stray_sha]!r}\nKERNELS = {kernels!r}\n" + IMAGES_ONLY
    manifest = load_doc(arch / "graph_manifest.json")
    # The manifest names the kernels the graphs launch, and loading the images looks those up (the
    # driver loads kernels on their first lookup); the stray image is neither loaded nor looked into.
    launched = ["fk_add_f32", "fk_copy_bytes", "fk_scale_f32"]
    assert manifest["images"][used[0]]["kernels"] == launched
    with_manifest = app_json(code)
    assert with_manifest == {"count": 1, "loaded": used, "looked_up": launched}
    # A manifest naming a kernel its image lacks is refused, naming the kernel and the remedy.
    good = (arch / "graph_manifest.json").read_bytes()
    manifest["images"][used[0]]["kernels"] = [*launched, "fk_missing"]
    write_doc(arch / "graph_manifest.json", manifest)
    bad = app_json(prelude(arch) + "\nfoundry.load_cuda_modules_and_libraries(ARCH)\ntry:\n"
                   "    foundry.load.wait_for_startup()\n"
                   "except Exception as e:\n    emit(error=type(e).__name__, message=str(e))\n")  # fmt: skip
    assert bad["error"] == "ArchiveCorruptError", bad
    assert "fk_missing" in bad["message"] and "Save the archive again" in bad["message"]
    (arch / "graph_manifest.json").write_bytes(good)
    unbundle(arch)  # without its manifest a bundled graph has no name: the graphs as saved, in their files
    (arch / "graph_manifest.json").unlink()
    without = app_json(code)
    assert without == {"count": 2, "loaded": sorted([*used, stray_sha]), "looked_up": []}
    # Without a manifest the graphs still load and run.
    rt = RoundTrip(arch, save, run_load(app_json, FAMILY, arch, ["scale2", "scale3", "add_scale"]))
    for name in ("scale2", "scale3", "add_scale"):
        check_roundtrip(rt, name)


VARIANTS = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("a", 4 * n); buf("b", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [0.5 * i + 7.0 * k for i in range(n)])
    for v in ("v0", "v1", "v2", "v3"):
        READS[v] = [("a", n), ("b", n)]
    """,
    capture="""
    K = module("fk_axpy_f32", "fk_sum_f32")
    L = library("fk_axpy_f32")
    s = cu.stream_create()
    def chain(memset, kernel, src="a"):
        cu.begin_capture(s)
        memset(); kernel()
        call("cuMemcpyDtoDAsync_v2", B["b"], B[src], 4 * n, s)
        return cu.end_capture(s)
    def axpy(f, alpha, grid, block, extra=False):
        return lambda: cu.launch(f, grid, block, [(c_float, alpha), ("ptr", B["x"]), ("ptr", B["a"]), (c_int, n)],
                                 stream=s, use_extra=extra)
    d32 = lambda v: (lambda: call("cuMemsetD32Async", B["a"], f32_bits(v), n, s))
    # One topology (memset -> kernel -> memcpy), four parameter sets: values, grids, memset element
    # sizes, another kernel with another parameter layout in `extra` mode, a kernel from a library.
    add_graph("v0", chain(d32(1.0), axpy(K["fk_axpy_f32"], 2.0, (1, 1, 1), (n, 1, 1))))
    add_graph("v1", chain(lambda: call("cuMemsetD8Async", B["a"], 0x3F, 4 * n, s),
                          axpy(K["fk_axpy_f32"], 0.5, (2, 1, 1), (64, 1, 1))))
    add_graph("v2", chain(d32(-3.0), lambda: cu.launch(K["fk_sum_f32"], (1, 1, 1), (1, 1, 1),
                          [("ptr", B["x"]), ("ptr", B["a"]), (c_int, n)], stream=s, use_extra=True)))
    add_graph("v3", chain(d32(2.0), axpy(L["fk_axpy_f32"], -1.0, (1, 1, 1), (n // 2, 1, 1), extra=True), src="x"))
    """,
)


INTERLEAVED = """
from foundry.load import load_graph
graphs = {name: load_graph(os.path.join(ARCH, name + ".json")) for name in ("v0", "v1", "v2", "v3")}
runs = []
for k in INPUT_SETS:
    set_inputs(k)
    for name in ("v2", "v0", "v3", "v1", "v2", "v1", "v0"):
        graphs[name].launch(0); cu.sync(); runs.append([name, k, read(name)])
emit(runs=runs)
"""


def test_same_topology_members_load_as_themselves_in_any_launch_order(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, VARIANTS, tmp_path / "arch")
    names = ["v0", "v1", "v2", "v3"]
    for name in names:
        check_roundtrip(rt, name)
    assert len({rt.meta(n)["topology"] for n in names}) == 1
    manifest = json.loads((rt.arch / "graph_manifest.json").read_text())
    assert [(g["group"], g["role"]) for g in manifest["graphs"]] == [
        (0, "template"), (0, "member"), (0, "member"), (0, "member")
    ]  # fmt: skip
    assert [(g["template"], g["members"]) for g in manifest["groups"]] == [(0, [1, 2, 3])]
    # All four loaded into one process, then launched interleaved: each launch gives that graph's output.
    r = app_json(load_prefix(VARIANTS, rt.arch) + INTERLEAVED)
    for name, k, out in r["runs"]:
        assert out == rt.native(name)[k], (name, k)
    x = [[0.5 * i + 7.0 * k for i in range(N)] for k in (0, 1)]
    assert rt.native("v2")[1]["a"][0] == f32(sum(x[1]))
    assert rt.native("v3")[0]["b"] == x[0]


PREFETCH = """
import hashlib, time
from foundry.load import source, startup, startup_phases
reading = startup.open_image
def slow_read(*args, **kwargs):  # reads slower than the graphs' thread starts: the order below is not a race
    time.sleep(0.05)
    return reading(*args, **kwargs)
startup.open_image = slow_read
foundry.load_cuda_modules_and_libraries(ARCH)
foundry.load.wait_for_startup()
spans = startup_phases().spans
reserve_end = max(end for name, _, _, end in spans if name == "reserve")
first_read = min(start for name, _, start, _ in spans if name == "image_read")
cached = {name: hashlib.sha256(open(os.path.join(JSON_DIR, name + ".json"), "rb").read()).hexdigest()
          in source._STATE.get().meta for name in NAMES}
# The graphs' Python starts only once every image is read, and the images go into the driver in one call.
reads_end = max(end for name, _, _, end in spans if name == "image_read")
graphs_start = min(start for name, _, start, _ in spans if name == "graphs")
emit(reserve_before_reads=reserve_end <= first_read, cached=cached, reads_before_graphs=reads_end <= graphs_start,
     driver_loads=sum(name == "image_driver_load" for name, _, _, _ in spans),
     lookups=sum(name == "kernel_lookup" for name, _, _, _ in spans))
"""


def test_startup_holds_the_region_first_and_reads_graphs_saved_beside_the_archive(
    app_json: JsonRunner, tmp_path: Path
) -> None:
    """The seed README's layout (graph.json beside the archive directory): the graphs' metadata is read
    ahead at process start, so LOAD finds it parsed. The region is held before any reader thread starts:
    a thread's stack or an image read into memory can land where the region must go."""
    arch = tmp_path / "arch"
    run_save(app_json, FAMILY, arch, json_dir=tmp_path)
    names = ["scale2", "scale3", "add_scale"]
    manifest = load_doc(arch / "graph_manifest.json")
    assert sorted(g["json"] for g in manifest["graphs"]) == sorted(f"../{n}.json" for n in names)
    out = app_json(prelude(arch, tmp_path) + f"\nNAMES = {names!r}\n" + PREFETCH)
    # The images are all read before the graphs' Python starts beside the driver work (it would hold the
    # interpreter lock the readers need after every read), and loaded and looked up in one native call each.
    assert out == {
        "reserve_before_reads": True,
        "cached": dict.fromkeys(names, True),
        "reads_before_graphs": True,
        "driver_loads": 1,
        "lookups": 1,
    }
    # A graph the manifest names beside the archive that is no graph (here a FIFO: opening it to read
    # would block) is skipped without a word; LOAD reports it if the program asks for it.
    (tmp_path / "scale3.json").unlink()
    os.mkfifo(tmp_path / "scale3.json")
    out = app_json(prelude(arch, tmp_path) + "\nNAMES = ['scale2', 'add_scale']\n" + PREFETCH)
    assert out["reserve_before_reads"] and out["cached"] == {"scale2": True, "add_scale": True}
