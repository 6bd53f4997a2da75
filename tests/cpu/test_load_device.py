"""LOAD runs on the device whose context ``load_cuda_modules_and_libraries`` loaded the kernel images with.

That call makes device 0's context when none is current, so a rank of a multi-GPU job that calls it before
selecting its own device would build its graphs from device 0's kernels and write its module variables into
device 0's copies. Both LOAD paths refuse that by name (``DeviceMismatchError``), naming both GPUs and the
order that works; selecting the device first loads and replays as saved (two fake devices)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.graphs import JsonRunner, prelude

TWO_DEVICES = {"FAKECUDA_DEVICE_COUNT": "2"}

LOAD = """
from foundry.load import Loader, load_graph
{order}
foundry.set_allocation_region(BASE, "1GB")
{alloc}
def run():
    if PATH == "foreground":
        g = load_graph(os.path.join(ARCH, "v0.json"))
    else:
        p = Loader.start([os.path.join(ARCH, "v0.json")], num_threads=2)
        g = p.wait_group(0)
    set_inputs(0); g.launch(0); cu.sync()
    return read("v0")
emit(result=attempt(run))
"""

LATE = "foundry.load_cuda_modules_and_libraries(ARCH)\ncu = Cuda(1)  # the rank selects its device afterwards"
FIRST = "cu = Cuda(1)  # the rank selects its device first\nfoundry.load_cuda_modules_and_libraries(ARCH)"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, fakecuda_dir: Path, foundry_lib: Path) -> tuple[Path, Any]:
    from tests.support.graphs import save_script
    from tests.support.subproc import run_json

    arch = tmp_path_factory.mktemp("device") / "arch"
    save = run_json(save_script(VARIANTS, arch), lib_dir=fakecuda_dir, preload=foundry_lib, env=TWO_DEVICES)
    return arch, save["native"]


def _load(app_json: JsonRunner, arch: Path, order: str, path: str) -> Any:
    code = prelude(arch) + f"PATH = {path!r}\n" + LOAD.format(order=order, alloc=textwrap.dedent(VARIANTS.alloc))
    return app_json(code, env=TWO_DEVICES)["result"]


@pytest.mark.parametrize("path", ["foreground", "background"])
def test_a_load_on_another_device_than_the_images_were_loaded_for_is_refused_by_name(
    app_json: JsonRunner, saved: tuple[Path, Any], path: str
) -> None:
    result = _load(app_json, saved[0], LATE, path)
    assert result.get("error") == "DeviceMismatchError", result
    message = result["message"]
    for needle in ("PCI 0000:18:00.0", "PCI 0000:19:00.0", "Select the device first", "torch.cuda.set_device"):
        assert needle in message, (needle, message)


@pytest.mark.parametrize("path", ["foreground", "background"])
def test_selecting_the_device_first_loads_and_replays_as_saved(
    app_json: JsonRunner, saved: tuple[Path, Any], path: str
) -> None:
    assert _load(app_json, saved[0], FIRST, path) == {"ok": saved[1]["v0"][0]}
