"""vLLM's memory profile to the byte (vLLM logs it rounded to 0.01 GiB, and a SAVE whose KV cache is one 2 MiB
granule short of native's cannot be traced from that): SAVE's plugin logs what vLLM's
``determine_available_memory`` left on the worker (foundry/integration/vllm/memreport.py), the benchmark's native
runs the same through the site hook (stacksite/foundry_memory_profile.py), with the same keys, and the benchmark
reads both into the figures it compares run against run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from foundry.integration.vllm import memreport
from foundry_bench.serving.stacks import site_path
from foundry_bench.serving.stacksite import foundry_memory_profile as site
from foundry_bench.vllm.runs import log_numbers

WORKER = """
class Worker:
    def determine_available_memory(self):
        self.init_snapshot = type("Snapshot", (), {"non_torch_memory": 1_234_567})()
        self.non_torch_memory = 2_097_152
        self.peak_activation_memory = 300_000_000
        self.cudagraph_memory_estimate = 0
        self.available_kv_cache_memory_bytes = 51_029_999_616
        return self.available_kv_cache_memory_bytes
"""

PROGRAM = """
import importlib
worker = importlib.import_module("vllm.v1.worker.gpu_worker").Worker()
print("returned", worker.determine_available_memory(), flush=True)
"""


def _native(tmp_path: Path, on: bool) -> subprocess.CompletedProcess[str]:
    package = tmp_path / "engine" / "vllm" / "v1" / "worker"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").touch()
    (package / "gpu_worker.py").write_text(textwrap.dedent(WORKER))
    (tmp_path / "program.py").write_text(textwrap.dedent(PROGRAM))
    variables = {**os.environ, "PYTHONPATH": site_path(str(tmp_path / "engine"))}
    variables.pop(site.ENV, None)
    if on:
        variables[site.ENV] = "1"
    return subprocess.run([sys.executable, str(tmp_path / "program.py")], env=variables, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_a_native_run_logs_vllms_figures_whole_and_its_answer_is_unchanged(tmp_path: Path) -> None:
    run = _native(tmp_path, on=True)
    assert run.returncode == 0, run.stderr
    assert "returned 51029999616" in run.stdout
    (line,) = [x for x in run.stderr.splitlines() if "memory profile, bytes" in x]
    numbers = log_numbers(line)
    assert numbers["non_torch_increase_bytes"] == 2_097_152 and numbers["init_non_torch_bytes"] == 1_234_567
    assert numbers["kv_cache_bytes"] == 51_029_999_616 and numbers["cudagraph_estimate_bytes"] == 0
    assert "weights_bytes" not in numbers  # a figure the worker does not hold is left out, not made up


def test_without_the_variable_nothing_is_wrapped_or_logged(tmp_path: Path) -> None:
    run = _native(tmp_path, on=False)
    assert run.returncode == 0, run.stderr
    assert "memory profile" not in run.stderr and "returned 51029999616" in run.stdout


def test_the_plugin_and_the_site_hook_log_the_same_keys_from_the_same_places() -> None:
    assert memreport.KEYS == site.KEYS
    worker = SimpleNamespace(non_torch_memory=5, peak_activation_memory=6.0, model_runner=SimpleNamespace(),
                             available_kv_cache_memory_bytes=True)  # fmt: skip
    assert memreport.profile_bytes(worker) == {"non_torch_increase": 5, "torch_peak_increase": 6}
    assert memreport.line({"kv_cache": 7}) == "vLLM's memory profile, bytes: kv_cache=7"


def test_a_site_hook_wraps_a_method_once_however_often_it_is_asked() -> None:
    """The recorders share one wrapper (stacksite/foundry_site_hooks.py): a module already imported is wrapped at
    once, and asked again (a sitecustomize chained twice) it is left as it is, its original kept."""
    import types

    from foundry_bench.serving.stacksite import foundry_site_hooks as hooks

    class Worker:
        def determine_available_memory(self) -> int:
            return 7

    module = types.ModuleType("fake_engine_for_site_hooks")
    module.Worker = Worker  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    calls: list[int] = []

    def counting(original: Any) -> Any:
        return lambda self: calls.append(1) or original(self)

    try:
        for _ in range(2):
            hooks.wrap_after_import(module.__name__, "Worker", "determine_available_memory", counting)
    finally:
        del sys.modules[module.__name__]
    assert Worker().determine_available_memory() == 7 and calls == [1]
    assert Worker.determine_available_memory.__wrapped__(Worker()) == 7  # type: ignore[attr-defined]
