"""SAVE -> LOAD round trips on the fake driver: how and when graphs are saved.

Graph files beside the archive directory (and where SAVE refuses to put them), a graph saved twice
under one name, kernel attributes raised between two saves.

See tests/support/roundtrip_fake.py for what every round trip checks.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.archive_damage import load_doc
from tests.support.graphs import JsonRunner, Scenario, load_prefix, roundtrip, run_load, run_save
from tests.support.roundtrip_fake import EVENTS, N, check_roundtrip
from tests.support.subproc import SubprocessError


def test_graph_json_beside_the_archive_directory(app_json: JsonRunner, tmp_path: Path) -> None:
    """The seed README's layout: graph.json in a directory that holds the archive (hook_archive/)."""
    rt = roundtrip(app_json, EVENTS, tmp_path / "arch", json_dir=tmp_path)
    check_roundtrip(rt, "events")
    assert {"events.cugraph", "events.json"} <= {p.name for p in tmp_path.iterdir()}
    assert load_doc(tmp_path / "events.json")["archive_dir"] == "arch"
    # The manifest names the graph (so that LOAD checks its digest against it), but nothing reads it
    # through that path: a graph outside the archive is loaded by its own path.
    manifest = load_doc(tmp_path / "arch" / "graph_manifest.json")
    assert [g["json"] for g in manifest["graphs"]] == ["../events.json"]
    # Moved together, the two still load (every path in them is relative).
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("arch", "events.json", "events.cugraph"):
        shutil.move(tmp_path / name, moved / name)
    load = run_load(app_json, EVENTS, moved / "arch", ["events"], json_dir=moved)
    assert load["errors"] == {} and load["loaded"]["events"] == rt.native("events")


def test_graph_json_that_could_not_reach_its_archive_is_refused_at_save(app_json: JsonRunner, tmp_path: Path) -> None:
    """A graph JSON in a sibling of the archive would have to name it with '..', which LOAD refuses: SAVE
    refuses first, and writes nothing."""
    (tmp_path / "graphs").mkdir()
    with pytest.raises(SubprocessError) as refused:
        run_save(app_json, EVENTS, tmp_path / "arch", json_dir=tmp_path / "graphs")
    assert "SaveError" in refused.value.stderr and "not at or below the graph's own directory" in refused.value.stderr
    assert not any((tmp_path / "graphs").iterdir())


RESAVE = Scenario(
    alloc=f"""
    n = {N}
    buf("x", 4 * n); buf("t", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i + k) for i in range(n)])
    READS["g0"] = [("t", n)]
    """,
    capture="""
    K = module("fk_axpy_f32", "fk_fill_f32")
    s = cu.stream_create()
    def graph(alpha):
        cu.begin_capture(s)
        cu.launch(K["fk_fill_f32"], (1, 1, 1), (n, 1, 1), [("ptr", B["t"]), (c_float, 1.0), (c_int, n)], stream=s)
        cu.launch(K["fk_axpy_f32"], (1, 1, 1), (n, 1, 1), [(c_float, alpha), ("ptr", B["x"]), ("ptr", B["t"]),
                  (c_int, n)], stream=s)
        return cu.end_capture(s)
    first = graph(2.0)
    save_graph(first, os.path.join(ARCH, "g0.json"), archive_dir=ARCH)   # saved, then saved over
    add_graph("g0", graph(-3.0))
    """,
)


def test_graph_saved_twice_under_one_name_loads_the_last_save(app_json: JsonRunner, tmp_path: Path) -> None:
    rt = roundtrip(app_json, RESAVE, tmp_path / "arch")
    manifest = load_doc(rt.arch / "graph_manifest.json")
    assert [g["name"] for g in manifest["graphs"]] == ["g0"]
    check_roundtrip(rt, "g0")
    assert rt.loaded("g0")[0]["t"] == [1.0 - 3.0 * i for i in range(N)]


SMEM_GROWS = Scenario(
    alloc=f"""
    n = {N}
    buf("small", 4 * n); buf("big", 4 * n); buf("x", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i * (k + 1)) for i in range(n)])
    READS["small"] = [("small", n)]
    READS["big"] = [("big", n)]
    """,
    capture="""
    K = module("fk_bigsmem_f32", "fk_add_f32")
    s = cu.stream_create()
    def graph(out, shared, threads):
        cu.begin_capture(s)
        cu.launch(K["fk_bigsmem_f32"], (1, 1, 1), (threads, 1, 1), [("ptr", B[out]), (c_int, n)], shared=shared,
                  stream=s)
        cu.launch(K["fk_add_f32"], (1, 1, 1), (n, 1, 1), [("ptr", B[out]), ("ptr", B["x"]), ("ptr", B[out]),
                  (c_int, n)], stream=s)
        return cu.end_capture(s)
    # Saved right after capture, while the kernel's attribute is still the default ...
    save_now("small", graph("small", 16 * 1024, 100))
    # ... then the program raises it for a later, bigger launch of the same kernel.
    cu.set_func_attr(K["fk_bigsmem_f32"], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 * 1024)
    save_now("big", graph("big", 64 * 1024, 200))
    """,
)


LOAD_ALL_THEN_RUN = """
from foundry.load import load_graph
loaded = {name: attempt(lambda: load_graph(os.path.join(ARCH, name + ".json"))) for name in ORDER}
runs = {}
for name in ORDER:
    if "error" in loaded[name]:
        runs[name] = loaded[name]
        continue
    runs[name] = []
    for k in INPUT_SETS:
        set_inputs(k)
        runs[name].append(attempt(lambda: (loaded[name]["ok"].launch(0), cu.sync(), read(name))[2]))
emit(runs=runs)
"""


def test_function_attributes_recorded_as_they_are_at_each_save(app_json: JsonRunner, tmp_path: Path) -> None:
    save = run_save(app_json, SMEM_GROWS, tmp_path / "arch", manifest=False)
    assert [f[2][0] for f in save["metas"]["small"]["functions"]] == [48 * 1024, 48 * 1024]
    assert [f[2][0] for f in save["metas"]["big"]["functions"]] == [64 * 1024, 48 * 1024]


@pytest.mark.parametrize(
    "order",
    [
        pytest.param(["big"], id="big-alone"),
        pytest.param(["small", "big"], id="small-first"),
        pytest.param(["big", "small"], id="big-first"),
    ],
)
def test_kernel_attribute_raised_between_saves_serves_every_loaded_graph(
    app_json: JsonRunner, tmp_path: Path, order: list[str]
) -> None:
    save = run_save(app_json, SMEM_GROWS, tmp_path / "arch", manifest=False)
    r = app_json(load_prefix(SMEM_GROWS, tmp_path / "arch") + f"ORDER = {order!r}\n" + LOAD_ALL_THEN_RUN)
    for name in order:
        assert r["runs"][name] == [{"ok": out} for out in save["native"][name]], name


def _smem_set_per_launch(first: int, second: int) -> Scenario:
    """One capture launching one kernel twice, the program setting the kernel's dynamic shared-memory limit to
    each launch's exact size first, as FlashInfer does for one norm kernel over two row widths: the limit SAVE
    reads after the capture is the second size, below what the first node needs."""
    return Scenario(
        alloc=f"""
    n = {N}
    buf("out", 4 * n); buf("x", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i * (k + 1)) for i in range(n)])
    READS["g"] = [("out", n)]
    """,
        capture=f"""
    K = module("fk_bigsmem_f32", "fk_add_f32")
    s = cu.stream_create()
    cu.begin_capture(s)
    for shared, threads in (({first}, 100), ({second}, 200)):
        cu.set_func_attr(K["fk_bigsmem_f32"], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
        cu.launch(K["fk_bigsmem_f32"], (1, 1, 1), (threads, 1, 1), [("ptr", B["out"]), (c_int, n)], shared=shared,
                  stream=s)
        cu.launch(K["fk_add_f32"], (1, 1, 1), (n, 1, 1), [("ptr", B["out"]), ("ptr", B["x"]), ("ptr", B["out"]),
                  (c_int, n)], stream=s)
    save_now("g", cu.end_capture(s))
    """,
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(32, 8, id="both-below-the-default"),  # the limit SAVE read is below LOAD's fresh default
        pytest.param(64 * 1024, 16 * 1024, id="first-above-the-default"),  # LOAD raises it for the first node
    ],
)
def test_kernel_limit_lowered_after_its_first_launch_in_a_capture_loads_and_replays(
    app_json: JsonRunner, tmp_path: Path, first: int, second: int
) -> None:
    scenario = _smem_set_per_launch(first, second)
    save = run_save(app_json, scenario, tmp_path / "arch", manifest=False)
    assert save["metas"]["g"]["functions"][0][2][0] == second  # what the program left, as SAVE read it
    r = app_json(load_prefix(scenario, tmp_path / "arch") + 'ORDER = ["g"]\n' + LOAD_ALL_THEN_RUN)
    assert r["runs"]["g"] == [{"ok": out} for out in save["native"]["g"]]
