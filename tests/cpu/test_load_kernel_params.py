"""LOAD proves that every kernel node gives its kernel the parameters the kernel takes, as the driver reports
them for the loaded function, before the driver sees the node: a node whose table is a parameter short, or a
parameter of another size, or whose ``extra`` buffer ends before the kernel's last parameter, is refused by
name (``ArchiveCorruptError``: the graph, the node, the kernel, what it takes and what the record gives), on
both LOAD paths (``load_graph``, what ``CUDAGraph.load`` runs; ``Loader``, what ``start_graph_builds`` /
``finish_graph_loads`` run), in a template's record, in a member's delta and in an exec update. The archive
is edited as a forger would (records canonical, every checksum, the manifest and the bundle written again:
tests/support/reseal.py), so nothing but this check stands between the record and the driver, which reads
the kernel's own list through the node's pointers (the fake driver does, tests/fakecuda/launch.c): without
the check the LOAD process dies or runs the wrong arguments.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.graphs import load_prefix, save_script
from tests.support.reseal import edit_kernel, fewer_params, resize_last_param, shorten_args
from tests.support.subproc import run_json

NAMES = ["v0", "v1", "v2", "v3"]  # one group: v0 (template) and its members; node 1 of each is its kernel
KERNEL = 1
AXPY = "[0:4 8:8 16:8 24:4]"  # fk_axpy_f32(float alpha, const float *x, float *y, int n), offset:size
ALTERED = "The archive was altered or saved by another Foundry: run SAVE again"

# Each LOAD path, run on the graphs it is given: the outputs of every graph on every input set, or the
# error LOAD raised (the background loader's LoadError names its cause).
REPLAY = """
def replay(launchers):
    outs = []
    for k in INPUT_SETS:
        set_inputs(k)
        for n, launch in zip(GRAPHS, launchers):
            launch(0); cu.sync(); outs.append([n, k, read(n)])
    return outs
"""

LOAD_GRAPH = """
from foundry.load import load_graph
def run():
    return replay([load_graph(os.path.join(ARCH, n + ".json")).launch for n in GRAPHS])
emit(result=attempt(run))
"""

BACKGROUND = """
from foundry.load import Loader
def run():
    p = Loader.start([os.path.join(ARCH, n + ".json") for n in GRAPHS], num_threads=2)
    try:
        handles = [p.wait_group(i) for i in range(len(GRAPHS))]
        p.wait_all()
    except foundry.LoadError as exc:
        cause = exc.__cause__
        raise type(cause)(f"LoadError: {exc}") from None
    return replay([h.launch for h in handles])
emit(result=attempt(run))
"""

PATHS = {"load_graph": REPLAY + LOAD_GRAPH, "background": REPLAY + BACKGROUND}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, fakecuda_dir: Path, foundry_lib: Path) -> tuple[Path, Any]:
    """VARIANTS saved once (its native outputs with it); each test edits a copy."""
    arch = tmp_path_factory.mktemp("saved") / "arch"
    save = run_json(save_script(VARIANTS, arch), lib_dir=fakecuda_dir, preload=foundry_lib)
    return arch, save["native"]


Loader = Callable[..., dict[str, Any]]


@pytest.fixture
def load(fakecuda_dir: Path, foundry_lib: Path) -> Loader:
    """Runs a LOAD path on graphs of an archive in a fresh process; returns ``attempt``'s report."""

    def run(arch: Path, path: str, graphs: list[str], env: dict[str, str] | None = None, body: str = "") -> Any:
        code = load_prefix(VARIANTS, arch) + f"\nGRAPHS = {graphs!r}\n" + (body or PATHS[path])
        return run_json(code, lib_dir=fakecuda_dir, preload=foundry_lib, env=env)["result"]

    return run


@pytest.fixture
def arch(saved: tuple[Path, Any], tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved[0], tmp_path / "arch"))


def refused(result: dict[str, Any], error: str, *needles: str) -> str:
    """The message of a LOAD refused with ``error``, after checking it names every needle."""
    assert "error" in result, f"LOAD went on: {json.dumps(result)[:400]}"
    assert result["error"] == error, result
    message: str = result["message"]
    missing = [n for n in needles if n not in message]
    assert not missing, (missing, message)
    return message


def outputs_of(native: dict[str, Any], graphs: list[str]) -> list[list[Any]]:
    return [[n, k, native[n][k]] for k in (0, 1) for n in graphs]


@pytest.mark.parametrize("path", PATHS)
def test_a_kernel_node_with_a_parameter_too_few_is_refused_by_name(arch: Path, load: Loader, path: str) -> None:
    edit_kernel(arch, "v0", KERNEL, fewer_params)
    graphs = ["v0"] if path == "load_graph" else NAMES
    refused(
        load(arch, path, graphs), "ArchiveCorruptError", "graph 'v0'", "v0.json", "kernel node 1",
        "(kernel fk_axpy_f32)", f"takes 4 parameters {AXPY}", "gives it 3 [0:4 8:8 16:8]", ALTERED,
    )  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
def test_a_kernel_node_with_a_parameter_of_another_size_is_refused_by_name(arch: Path, load: Loader, path: str) -> None:
    edit_kernel(arch, "v0", KERNEL, lambda node: resize_last_param(node, 2))
    graphs = ["v0"] if path == "load_graph" else NAMES
    refused(
        load(arch, path, graphs), "ArchiveCorruptError", "graph 'v0'", "kernel node 1", "fk_axpy_f32",
        f"takes 4 parameters {AXPY}", "gives it 4 [0:4 8:8 16:8 24:2]", ALTERED,
    )  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
def test_a_members_override_with_a_parameter_too_few_is_refused_by_name(
    arch: Path, load: Loader, saved: tuple[Path, Any], path: str
) -> None:
    """v1 is stored as a delta against v0: its override of the kernel node reaches the driver through the member's
    own graph (built from the template's) and, in the background, through the switch into the shared exec."""
    edit_kernel(arch, "v1", KERNEL, fewer_params)
    graphs = ["v1"] if path == "load_graph" else NAMES
    refused(
        load(arch, path, graphs), "ArchiveCorruptError", "graph 'v1'", "override of kernel node 1", "fk_axpy_f32",
        f"takes 4 parameters {AXPY}", "gives it 3", ALTERED,
    )  # fmt: skip
    # The template itself, and the members not edited, still load and run as saved.
    assert load(arch, path, ["v0", "v2"]) == {"ok": outputs_of(saved[1], ["v0", "v2"])}


@pytest.mark.parametrize("path", PATHS)
def test_an_extra_buffer_shorter_than_its_kernels_parameters_is_refused_by_name(
    arch: Path, load: Loader, path: str
) -> None:
    """v2 passes fk_sum_f32(const float *x, float *out, int n) its arguments in one `extra` buffer of 20 bytes
    (cuBLAS's nvjet kernels do so); 16 leave out n."""
    edit_kernel(arch, "v2", KERNEL, lambda node: shorten_args(node, 4))
    graphs = ["v2"] if path == "load_graph" else NAMES
    refused(
        load(arch, path, graphs), "ArchiveCorruptError", "graph 'v2'", "override of kernel node 1",
        "(kernel fk_sum_f32)", "`extra` argument buffer holds 16 bytes",
        "3 parameters [0:8 8:8 16:4] (offset:size) span 20", ALTERED,
    )  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
def test_an_extra_buffer_that_fills_its_last_parameter_in_part_loads_and_runs_as_saved(
    arch: Path, load: Loader, saved: tuple[Path, Any], path: str
) -> None:
    """NCCL launches its kernels with the bytes of their 4096-byte argument storage in use, and the driver takes
    the buffer at capture: v2's 20-byte buffer cut to 18 still gives n its low two bytes (the rest reads as
    zeros, and n is small), so LOAD hands it over and the graphs run as saved."""
    edit_kernel(arch, "v2", KERNEL, lambda node: shorten_args(node, 2))
    graphs = ["v2"] if path == "load_graph" else NAMES
    assert load(arch, path, graphs) == {"ok": outputs_of(saved[1], graphs)}


# The group loaded in the background; then an exec update (a member switched into the shared exec) with a delta
# whose first override (the memset) is sound and whose second (the kernel) is a parameter short. The update is
# refused before the driver sees either: the template still replays as saved on the shared exec, untouched.
EXEC_UPDATE = """
import dataclasses
from foundry.records import parse_delta
from foundry.load import Loader
from foundry.native import codec
from tests.support.encode import encode_delta
from tests.support.reseal import fewer_params
p = Loader.start([os.path.join(ARCH, n + ".json") for n in GRAPHS], num_threads=2, defer_dedicated=True)
handles = [p.wait_group(i) for i in range(len(GRAPHS))]
group, member = handles[0].group, handles[1]
delta = parse_delta(member.source.payload)
assert [i for i, _ in delta.overrides][:2] == [0, 1], delta.overrides
bad = dataclasses.replace(delta, overrides=tuple((i, fewer_params(n) if i == 1 else n) for i, n in delta.overrides))
update = attempt(lambda: codec.apply_overrides(group.exec, True, group.nodes, encode_delta(bad), member.functions,
                                               "graph 'v1'"))
outs = []
for k in INPUT_SETS:  # the template as it stands on the shared exec, then a sound switch to v1 and back
    set_inputs(k)
    for i in (0, 1, 0):
        handles[i].launch(0); cu.sync(); outs.append([GRAPHS[i], k, read(GRAPHS[i])])
p.build_dedicated(); p.wait_all()
emit(result={"update": update, "outs": outs})
"""


def test_an_exec_update_with_a_parameter_too_few_is_refused_before_any_node_changes(
    arch: Path, load: Loader, saved: tuple[Path, Any]
) -> None:
    r = load(arch, "background", NAMES, body=EXEC_UPDATE)
    refused(
        r["update"], "ArchiveCorruptError", "graph 'v1'", "override of kernel node 1", "fk_axpy_f32",
        f"takes 4 parameters {AXPY}", "gives it 3", ALTERED,
    )  # fmt: skip
    native = saved[1]
    assert r["outs"] == [[n, k, native[n][k]] for k in (0, 1) for n in ("v0", "v1", "v0")]


def test_a_kernel_the_driver_cannot_describe_is_refused_where_its_node_passes_kernel_params(
    arch: Path, load: Loader, saved: tuple[Path, Any]
) -> None:
    """Without the kernel's parameter list nothing bounds what the driver reads from kernelParams, so such a
    node is refused (SAVE refuses to record one: ParamIntrospectionError). An `extra` buffer carries its size,
    which the driver checks against the kernel itself: such a node loads (v2's fk_sum_f32)."""
    r = load(arch, "load_graph", ["v0"], env={"FAKECUDA_NO_PARAM_INFO": "fk_axpy_f32"})
    refused(
        r, "ParamIntrospectionError", "graph 'v0'", "kernel node 1", "(kernel fk_axpy_f32)", "cuFuncGetParamInfo",
        "CUDA_ERROR_NOT_SUPPORTED", "CUDA 12.4 or newer",
    )  # fmt: skip
    r = load(arch, "background", NAMES, env={"FAKECUDA_NO_PARAM_INFO": "fk_sum_f32"})
    assert r == {"ok": outputs_of(saved[1], NAMES)}


# One kernel launched both ways in one graph: its `extra` node first, then a kernelParams node.
TWO_MODES = """
import dataclasses
from foundry.records import ArgMode, GraphRecord, KernelNode
from foundry.native import codec
from tests.support.encode import encode_record
K = module("fk_axpy_f32")
extra = KernelNode(0, (1, 1, 1), (1, 1, 1), 0, ArgMode.EXTRA, (), (), bytes(28))
params = dataclasses.replace(extra, arg_mode=ArgMode.PARAMS, params=((0, 4), (8, 8), (16, 8), (24, 4)))
record = encode_record(GraphRecord((extra, params), (), function_count=1, event_count=0))
emit(result=attempt(lambda: codec.build(record, [K["fk_axpy_f32"]], "graph 'two'")))
"""


def test_a_kernel_params_node_is_refused_after_an_extra_node_of_the_same_undescribable_kernel(
    arch: Path, load: Loader
) -> None:
    """The `extra` node goes on; the kernelParams node that follows is refused for the kernel the driver
    cannot describe, not measured against an empty list."""
    r = load(arch, "", [], env={"FAKECUDA_NO_PARAM_INFO": "fk_axpy_f32"}, body=TWO_MODES)
    refused(r, "ParamIntrospectionError", "graph 'two'", "kernel node 1 (kernel fk_axpy_f32)", "cuFuncGetParamInfo")
