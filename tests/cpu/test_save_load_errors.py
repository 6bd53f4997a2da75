"""How SAVE and LOAD fail: the exception type, a message that names the problem and the next step,
and, for SAVE, no graph file written (and a good archive already on disk left as it was).

Every SAVE and every LOAD runs in its own process on the fake CUDA driver.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.graphs import (
    BASE,
    archive_files,
    copy_archive,
    flip_byte,
    graph_files,
    prelude,
    truncate,
)
from tests.support.subproc import run_json

Runner = Callable[..., Any]

N = 256
# Buffers of three different sizes, so that a different order is a different layout.
ALLOCS = f"""
n = {N}
buf("a", 4 * n); buf("b", 8 * n); buf("out", 16 * n)
def set_inputs(k):
    cu.write_f32(B["a"], [float(i) + 10.0 * k for i in range(n)])
    cu.write_f32(B["b"], [2.0 - k] * n)
READS["g0"] = [("out", n)]
"""

KERNELS = """
K = module("fk_add_f32", "fk_scale_f32", "fk_fill_f32")
s = cu.stream_create()
full = ((1, 1, 1), (n, 1, 1))
def add():
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["a"]), ("ptr", B["b"]), ("ptr", B["out"]), (c_int, n)], stream=s)
def scale():
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["out"]), (c_float, 3.0), (c_int, n)], stream=s, use_extra=True)
"""

GOOD_CAPTURE = """
cu.begin_capture(s); add(); scale(); g = cu.end_capture(s)
"""

SAVE_ATTEMPT = """
from foundry.graphs.save import save_graph
from foundry.graphs.archive_ops import save_graph_manifest
outputs = [OutputSpec(OUT_ADDR(), (n,), (1,), "float32", 4 * n)]
saved = attempt(lambda: save_graph(g, os.path.join(ARCH, "g0.json"), outputs=outputs, archive_dir=ARCH) and None)
manifest = attempt(lambda: save_graph_manifest(ARCH) and None)
native = []
if "ok" in saved:
    ex = cu.instantiate(g)
    for k in INPUT_SETS:
        set_inputs(k); cu.graph_launch(ex, 0); cu.sync(); native.append(cu.read_f32(B["out"], n))
emit(saved=saved, manifest=manifest, native=native)
"""


def save_code(arch: Path, capture: str, region: bool = True, out_addr: str = 'B["out"]') -> str:
    head = 'foundry.set_allocation_region(BASE, "1GB")\n' if region else ""
    return "\n".join(
        [
            prelude(arch),
            "SAVE = True",
            head,
            ALLOCS,
            KERNELS,
            textwrap.dedent(capture),
            f"OUT_ADDR = lambda: {out_addr}",
            SAVE_ATTEMPT,
        ]
    )


LOAD_ATTEMPT = """
from foundry.graphs.load import load_graph
def steps():
    if LOAD_IMAGES:
        foundry.load_cuda_modules_and_libraries(ARCH)
    return load_graph(os.path.join(ARCH, "g0.json"), **LOAD_KWARGS)
r = attempt(steps)
runs = []
if "ok" in r:
    lg = r["ok"]
    r["ok"] = None
    for k in INPUT_SETS:
        set_inputs(k); lg.launch(0); cu.sync(); runs.append(cu.read_f32(B["out"], n))
emit(result=r, runs=runs)
"""


def load_code(
    arch: Path,
    region: str = 'foundry.set_allocation_region(BASE, "1GB")',
    allocs: str = ALLOCS,
    load_images: bool = False,
    kwargs: str = "{}",
) -> str:
    return "\n".join(
        [
            prelude(arch),
            "SAVE = False",
            region,
            allocs,
            f"LOAD_IMAGES = {load_images!r}",
            f"LOAD_KWARGS = {kwargs}",
            LOAD_ATTEMPT,
        ]
    )


@pytest.fixture(scope="module")
def run_app(fakecuda_dir: Path, foundry_lib: Path) -> Runner:
    """Runs application code under the interposer on the fake driver; returns its last JSON line."""

    def run(code: str, env: dict[str, str] | None = None) -> Any:
        return run_json(code, lib_dir=fakecuda_dir, env=env, preload=foundry_lib)

    return run


@pytest.fixture(scope="module")
def good_archive(run_app: Runner, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[float]]]:
    """An archive of one graph (add, then scale) with its manifest, and the native outputs."""
    arch = tmp_path_factory.mktemp("good") / "arch"
    r = run_app(save_code(arch, GOOD_CAPTURE))
    assert r["saved"] == {"ok": None} and r["manifest"] == {"ok": None}, r
    return arch, r["native"]


@pytest.fixture
def archive(good_archive: tuple[Path, list[list[float]]], tmp_path: Path) -> Path:
    """A private copy of the good archive, free to damage."""
    return copy_archive(good_archive[0], tmp_path / "arch")


def expect_error(result: dict[str, Any], kind: str, *fragments: str) -> str:
    assert "error" in result, f"expected {kind}, got {result}"
    assert result["error"] == kind, result
    for fragment in fragments:
        assert fragment in result["message"], f"{fragment!r} not in: {result['message']}"
    return str(result["message"])


def native_output(k: int) -> list[float]:
    return [(float(i) + 10.0 * k + (2.0 - k)) * 3.0 for i in range(N)]


def test_good_archive_loads_and_matches_native(run_app: Runner, archive: Path, good_archive: Any) -> None:
    """The baseline every failure below departs from."""
    r = run_app(load_code(archive, load_images=True))
    assert r["result"] == {"ok": None}
    assert r["runs"] == good_archive[1] == [native_output(0), native_output(1)]


# ------------------------------------------------------------------------------------ SAVE failures
def assert_nothing_written(r: dict[str, Any], root: Path) -> None:
    assert graph_files(root) == [], "a failed SAVE must not leave graph or manifest files"
    assert archive_files(root) == {}, "a failed SAVE must not write images or memory either"
    expect_error(r["manifest"], "FoundryError", "saved no graphs")


def test_save_refuses_host_callback_node_naming_the_kernel_before_it(run_app: Runner, tmp_path: Path) -> None:
    capture = """
    cu.begin_capture(s); add(); scale()
    cu.launch_host(s, lambda: None)
    g = cu.end_capture(s)
    """
    r = run_app(save_code(tmp_path / "arch", capture))
    msg = expect_error(r["saved"], "UnsupportedNodeError", "host callback", "fk_scale_f32", "Nothing was written")
    assert "out of the captured region" in msg  # the next step
    assert "CodecError" in r["saved"]["bases"]
    assert_nothing_written(r, tmp_path)


def test_save_refuses_memory_allocation_node(run_app: Runner, tmp_path: Path) -> None:
    # With the region stopped, a stream-ordered allocation during capture reaches the driver and
    # becomes a memory-allocation node.
    capture = """
foundry.stop_allocation_region()
cu.begin_capture(s); add()
p = c_uint64(); call("cuMemAllocAsync", byref(p), 4 * n, s)
cu.launch(K["fk_fill_f32"], *full, [("ptr", p.value), (c_float, 1.0), (c_int, n)], stream=s)
call("cuMemFreeAsync", p.value, s)
g = cu.end_capture(s)
assert [cu.node_type(x) for x in cu.graph_nodes(g)] == ["kernel", "mem_alloc", "kernel", "mem_free"]
"""
    r = run_app(save_code(tmp_path / "arch", capture))
    expect_error(r["saved"], "UnsupportedNodeError", "memory allocation", "fk_add_f32", "Nothing was written")
    assert_nothing_written(r, tmp_path)


def test_save_refuses_host_to_device_copy_node(run_app: Runner, tmp_path: Path) -> None:
    capture = """
host = (c_float * n)(*range(n))
cu.begin_capture(s); add()
call("cuMemcpyHtoDAsync_v2", B["a"], host, 4 * n, s)
scale(); g = cu.end_capture(s)
"""
    r = run_app(save_code(tmp_path / "arch", capture))
    expect_error(
        r["saved"], "UnsupportedNodeError", "host memory to device memory", "fk_add_f32", "stage the data in a device"
    )
    assert_nothing_written(r, tmp_path)


def test_save_refuses_kernel_without_parameter_info_naming_it(run_app: Runner, tmp_path: Path) -> None:
    env = {"FAKECUDA_NO_PARAM_INFO": "fk_add_f32"}
    r = run_app(save_code(tmp_path / "arch", GOOD_CAPTURE), env=env)
    msg = expect_error(r["saved"], "ParamIntrospectionError", "fk_add_f32", "cuFuncGetParamInfo")
    assert "driver" in msg  # the next step: a driver that can describe parameters
    assert_nothing_written(r, tmp_path)


def test_save_of_extra_buffer_launch_needs_no_parameter_info(run_app: Runner, tmp_path: Path) -> None:
    # The `extra` buffer carries the argument bytes whole, so introspection is not needed for it.
    env = {"FAKECUDA_NO_PARAM_INFO": "fk_scale_f32"}
    r = run_app(save_code(tmp_path / "arch", GOOD_CAPTURE), env=env)
    assert r["saved"] == {"ok": None}
    r = run_app(load_code(tmp_path / "arch"), env=env)
    assert r["result"] == {"ok": None} and r["runs"] == [native_output(0), native_output(1)]


UNLOADED = """
cu.begin_capture(s); add(); scale(); g = cu.end_capture(s)
call("cuModuleUnload", K_MODULE)
"""


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("params", id="kernelParams"),
        pytest.param("extra", id="extra"),
    ],
)
def test_save_of_kernel_from_unloaded_module_says_so(run_app: Runner, tmp_path: Path, mode: str) -> None:
    kernels = KERNELS.replace('K = module("fk_add_f32", "fk_scale_f32", "fk_fill_f32")', UNLOADED_MODULE)
    if mode == "extra":  # every kernel passes its arguments in one `extra` buffer: no parameter introspection
        kernels = kernels.replace("(c_int, n)], stream=s)", "(c_int, n)], stream=s, use_extra=True)")
    code = save_code(tmp_path / "arch", UNLOADED).replace(KERNELS, kernels)
    r = run_app(code)
    expect_error(r["saved"], "KernelNotFoundError", "unloaded", "Next step: save graphs before unloading")
    assert_nothing_written(r, tmp_path)


UNLOADED_MODULE = """K_MODULE = cu.load_module(make_cubin(["fk_add_f32", "fk_scale_f32"]))
K = {n: cu.module_function(K_MODULE, n) for n in ("fk_add_f32", "fk_scale_f32")}"""


def test_save_refuses_output_outside_the_region(run_app: Runner, tmp_path: Path) -> None:
    capture = """
foundry.stop_allocation_region()
LATE = cu.malloc(4 * n)                          # not in the region: LOAD could not hand it back
cu.begin_capture(s); add(); scale(); g = cu.end_capture(s)
"""
    r = run_app(save_code(tmp_path / "arch", capture, out_addr="LATE"))
    msg = expect_error(r["saved"], "RegionStateError", "output 0", "not in the allocation region")
    assert "after stop_allocation_region()" in msg
    assert_nothing_written(r, tmp_path)


def test_save_without_region_says_to_set_one(run_app: Runner, tmp_path: Path) -> None:
    r = run_app(save_code(tmp_path / "arch", GOOD_CAPTURE, region=False))
    expect_error(r["saved"], "RegionStateError", "set_allocation_region(base, size)")
    assert_nothing_written(r, tmp_path)


def test_failed_save_leaves_existing_archive_intact(run_app: Runner, archive: Path, good_archive: Any) -> None:
    before = archive_files(archive)
    assert "graph_manifest.json" in before and "g0.json" in before and "g0.cugraph" in before
    host = "cu.begin_capture(s); add(); cu.launch_host(s, lambda: None); g = cu.end_capture(s)\n"
    r = run_app(save_code(archive, host))  # same archive, same graph name
    expect_error(r["saved"], "UnsupportedNodeError", "host callback")
    expect_error(r["manifest"], "FoundryError")
    assert archive_files(archive) == before
    outside = "foundry.stop_allocation_region()\nLATE = cu.malloc(4 * n)\n" + GOOD_CAPTURE
    r = run_app(save_code(archive, outside, out_addr="LATE"))
    expect_error(r["saved"], "RegionStateError")
    assert archive_files(archive) == before
    r = run_app(load_code(archive, load_images=True))
    assert r["result"] == {"ok": None} and r["runs"] == good_archive[1]


# ------------------------------------------------------------------------------------ LOAD failures
def test_load_without_region_names_saves_base(run_app: Runner, archive: Path) -> None:
    r = run_app(load_code(archive, region=""))
    expect_error(r["result"], "RegionStateError", f"set_allocation_region({BASE:#x}", "same order")


def test_load_with_other_region_base_names_both(run_app: Runner, archive: Path) -> None:
    r = run_app(load_code(archive, region='foundry.set_allocation_region(0x7e0000000000, "1GB")'))
    expect_error(r["result"], "LayoutMismatchError", "0x7e0000000000", f"{BASE:#x}", "same base address")


def test_load_with_region_smaller_than_saves_use_names_the_size_needed(run_app: Runner, archive: Path) -> None:
    allocs = ALLOCS.replace('; buf("out", 16 * n)', "")  # fits a 4 MiB region; SAVE used 6 MiB
    r = run_app(load_code(archive, region='foundry.set_allocation_region(BASE, "4MB")', allocs=allocs))
    expect_error(r["result"], "LayoutMismatchError", "4194304", "at least 6291456")


@pytest.mark.parametrize(
    ("allocs", "offset"),
    [
        pytest.param(
            ALLOCS.replace('buf("a", 4 * n); buf("b", 8 * n)', 'buf("b", 8 * n); buf("a", 4 * n)'), 0x0, id="order"
        ),
        pytest.param(ALLOCS.replace('buf("b", 8 * n)', 'buf("b", 12 * n)'), 0x200000, id="size"),
    ],
)
def test_load_with_other_allocations_names_the_offset(run_app: Runner, archive: Path, allocs: str, offset: int) -> None:
    assert allocs != ALLOCS
    r = run_app(load_code(archive, allocs=allocs))
    expect_error(r["result"], "LayoutMismatchError", f"region offset {offset:#x}", "same order and sizes")


@pytest.mark.parametrize(
    ("env", "field", "saved", "here"),
    [
        ({"FAKECUDA_DEVICE_NAME": "Other GPU"}, "gpu_name", "'Fake GPU'", "'Other GPU'"),
        ({"FAKECUDA_SM_COUNT": "100"}, "sm_count", "132", "100"),
        ({"FAKECUDA_DRIVER_VERSION": "12080"}, "driver_version", "13000", "12080"),
        ({"FAKECUDA_CC": "8.0"}, "compute_capability", "9.0", "8.0"),
    ],
    ids=["gpu_name", "sm_count", "driver_version", "compute_capability"],
)
def test_load_on_other_machine_names_both_values_and_allow_mismatch_accepts(
    run_app: Runner, archive: Path, good_archive: Any, env: dict[str, str], field: str, saved: str, here: str
) -> None:
    r = run_app(load_code(archive), env=env)
    msg = expect_error(r["result"], "IdentityMismatchError", saved, here, f"allow_mismatch={{{field!r}}}")
    assert "ArchiveError" in r["result"]["bases"] and "Re-run SAVE" in msg
    r = run_app(load_code(archive, kwargs=f"{{'allow_mismatch': {{{field!r}}}}}"), env=env)
    assert r["result"] == {"ok": None} and r["runs"] == good_archive[1]


def _image(archive: Path) -> Path:
    (image,) = (archive / "images").glob("*.bin")
    return image


def _memory(archive: Path) -> Path:
    (mem,) = (archive / "memory").glob("*.bin")
    return mem


def _json_missing_key(archive: Path) -> None:
    path = archive / "g0.json"
    doc = json.loads(path.read_text())
    del doc["functions"]
    path.write_text(json.dumps(doc))


def _json_other_record(archive: Path) -> None:
    path = archive / "g0.json"
    doc = json.loads(path.read_text())
    doc["record"]["sha256"] = "0" * 64
    path.write_text(json.dumps(doc))


Damage = Callable[[Path], None]
DAMAGES: list[Any] = [
    pytest.param(
        lambda a: _image(a).unlink(), ["kernel image", "is missing", "copy the archive completely"], id="image-missing"
    ),
    pytest.param(lambda a: flip_byte(_image(a), 100), ["damaged", "Save the graph again"], id="image-bitflip"),
    pytest.param(lambda a: truncate(_image(a), 64), ["damaged"], id="image-truncated"),
    pytest.param(lambda a: flip_byte(a / "g0.cugraph", -9), ["g0.cugraph"], id="cugraph-bitflip"),
    pytest.param(lambda a: truncate(a / "g0.cugraph", 100), ["g0.cugraph"], id="cugraph-truncated"),
    pytest.param(lambda a: (a / "g0.cugraph").unlink(), ["cannot read the graph record"], id="cugraph-missing"),
    pytest.param(lambda a: truncate(a / "g0.json", 200), ["g0.json"], id="json-truncated"),
    pytest.param(_json_missing_key, ["functions"], id="json-missing-key"),
    pytest.param(_json_other_record, ["different saves"], id="json-other-record"),
    pytest.param(lambda a: _memory(a).unlink(), ["state memory", "missing", "copy the archive"], id="memory-missing"),
    pytest.param(lambda a: flip_byte(_memory(a), 0), ["state memory", "damaged"], id="memory-bitflip"),
]


@pytest.mark.parametrize(("damage", "fragments"), DAMAGES)
def test_load_of_damaged_archive_raises_archive_corrupt(
    run_app: Runner, archive: Path, damage: Damage, fragments: list[str]
) -> None:
    damage(archive)
    r = run_app(load_code(archive))
    expect_error(r["result"], "ArchiveCorruptError", *fragments)


@pytest.mark.parametrize(
    ("damage", "fragments"),
    [
        pytest.param(lambda a: _image(a).unlink(), ["is missing", "copy the archive completely"], id="image-missing"),
        pytest.param(lambda a: flip_byte(_image(a), -1), ["damaged"], id="image-bitflip"),
        pytest.param(
            lambda a: truncate(a / "graph_manifest.json", 100), ["graph_manifest.json"], id="manifest-truncated"
        ),
    ],
)
def test_load_modules_and_libraries_refuses_damaged_archive(
    run_app: Runner, archive: Path, damage: Damage, fragments: list[str]
) -> None:
    damage(archive)
    r = run_app(load_code(archive, load_images=True))
    expect_error(r["result"], "ArchiveCorruptError", *fragments)


def test_load_modules_and_libraries_refuses_non_archive(run_app: Runner, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    r = run_app(load_code(tmp_path / "empty", load_images=True))
    expect_error(r["result"], "ArchiveError", "not a Foundry archive")


# ---------------------------------------------------------------------------- template members
FAMILY_SAVE = """
from foundry.graphs.save import save_graph
from foundry.graphs.archive_ops import save_graph_manifest
def graph(factor):
    cu.begin_capture(s); add()
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["out"]), (c_float, factor), (c_int, n)], stream=s)
    return cu.end_capture(s)
for name, factor in GRAPHS:
    save_graph(graph(factor), os.path.join(ARCH, name + ".json"), archive_dir=ARCH)
save_graph_manifest(ARCH)
emit(roles=[g.role.value for g in foundry.archive.read_manifest(ARCH).graphs])
"""


def family_code(arch: Path, graphs: list[tuple[str, float]]) -> str:
    head = 'foundry.set_allocation_region(BASE, "1GB")\n'
    return "\n".join([prelude(arch), "SAVE = True", head, ALLOCS, KERNELS, f"GRAPHS = {graphs!r}", FAMILY_SAVE])


def test_member_whose_template_is_missing_or_resaved_is_refused(run_app: Runner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    r = run_app(family_code(arch, [("g1", 3.0), ("g0", 5.0)]))  # g0: a member of template g1
    assert r["roles"] == ["template", "member"]
    ok = run_app(load_code(arch))
    assert ok["result"] == {"ok": None}
    assert ok["runs"] == [[(float(i) + 10.0 * k + (2.0 - k)) * 5.0 for i in range(N)] for k in (0, 1)]
    # A later SAVE process re-saves only the template: the member's changes no longer apply to it.
    resaved = copy_archive(arch, tmp_path / "resaved")
    run_app(family_code(resaved, [("g1", 7.0)]))
    r = run_app(load_code(resaved))
    expect_error(r["result"], "ArchiveCorruptError", "g1.json", "different saves")
    # The template's record is gone.
    (arch / "g1.cugraph").unlink()
    r = run_app(load_code(arch))
    expect_error(r["result"], "ArchiveCorruptError", "g1.cugraph")
