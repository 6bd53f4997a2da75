"""The application behind tests/cpu/errors/test_save_errors.py and test_load_errors.py: one graph (add, then
scale) over three buffers of different sizes, and the Python of a SAVE process and of a LOAD process
that report what happened (``{"ok": ...}`` or the exception) as one JSON line.

The test modules' fixtures are thin wrappers around ``app_runner`` and ``save_good_archive``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.graphs import prelude
from tests.support.subproc import run_json

Runner = Callable[..., Any]

N = 256
# Buffers of three different sizes, so that a different order is a different layout: two small ones, which
# share a granule, and one of more than a granule (2 MiB on the fake driver).
ALLOCS = f"""
n = {N}
buf("a", 4 * n); buf("b", 8 * n); buf("out", (1 << 21) + 16 * n)
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
from foundry.save import save_graph
from foundry.save import save_graph_manifest
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
from foundry.load import load_graph
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


def app_runner(fakecuda_dir: Path, foundry_lib: Path) -> Runner:
    """Runs application code under the interposer on the fake driver; returns its last JSON line."""

    def run(code: str, env: dict[str, str] | None = None) -> Any:
        return run_json(code, lib_dir=fakecuda_dir, env=env, preload=foundry_lib)

    return run


def save_good_archive(run_app: Runner, arch: Path) -> tuple[Path, list[list[float]]]:
    """An archive of one graph (add, then scale) with its manifest, and the native outputs."""
    r = run_app(save_code(arch, GOOD_CAPTURE))
    assert r["saved"] == {"ok": None} and r["manifest"] == {"ok": None}, r
    return arch, r["native"]


def expect_error(result: dict[str, Any], kind: str, *fragments: str) -> str:
    assert "error" in result, f"expected {kind}, got {result}"
    assert result["error"] == kind, result
    for fragment in fragments:
        assert fragment in result["message"], f"{fragment!r} not in: {result['message']}"
    return str(result["message"])


def native_output(k: int) -> list[float]:
    return [(float(i) + 10.0 * k + (2.0 - k)) * 3.0 for i in range(N)]
