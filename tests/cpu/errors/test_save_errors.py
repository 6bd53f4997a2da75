"""How SAVE fails: the exception type, a message that names the problem and the next step, no graph
file written, and a good archive already on disk left as it was.

Every SAVE (and the LOAD that checks an archive still works) runs in its own process on the fake CUDA
driver; the application is tests/support/errors_app.py. LOAD failures: test_load_errors.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.archive_damage import archive_files, graph_files
from tests.support.errors_app import (
    GOOD_CAPTURE,
    KERNELS,
    Runner,
    expect_error,
    load_code,
    native_output,
    save_code,
)


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
    assert "graph_manifest.json" in before and "graph_bundle.bin" in before  # g0 is stored in the bundle only
    assert "g0.json" not in before and "g0.cugraph" not in before
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
