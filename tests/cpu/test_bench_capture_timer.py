"""vLLM's capture timed to the millisecond in the benchmark's native runs (foundry_bench/serving/stacksite/
foundry_capture_timer.py): both model runners' ``capture_model`` wrapped once their module is imported, the
seconds written to the engine's log, the engine's answer unchanged; nothing where the variable is unset."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from foundry_bench.serving.stacks import SITE, site_path
from foundry_bench.serving.stacksite.foundry_capture_timer import ENV

RUNNER = """
import time

class GPUModelRunner:
    def capture_model(self):
        time.sleep(0.05)
        return 123456  # the bytes of graph memory vLLM's runner returns
"""

PROGRAM = """
import importlib, sys
runner = importlib.import_module(sys.argv[1]).GPUModelRunner()
print("returned", runner.capture_model(), type(runner).capture_model.__name__, flush=True)
"""


def _run(tmp_path: Path, module: str, timer: bool) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "engine" / Path(*module.split("."))
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in [path.parent, *path.parent.parents]:
        if parent == tmp_path / "engine":
            break
        (parent / "__init__.py").touch()
    path.with_suffix(".py").write_text(textwrap.dedent(RUNNER))
    (tmp_path / "program.py").write_text(textwrap.dedent(PROGRAM))
    variables = {**os.environ, "PYTHONPATH": site_path(str(tmp_path / "engine"))}
    variables.pop(ENV, None)
    if timer:
        variables[ENV] = "1"
    return subprocess.run([sys.executable, str(tmp_path / "program.py"), module], env=variables,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_both_runners_captures_are_timed_and_their_answer_kept(tmp_path: Path) -> None:
    for module in ("vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner"):
        run = _run(tmp_path / module, module, timer=True)
        assert run.returncode == 0, run.stderr
        assert "returned 123456 capture_model" in run.stdout
        (line,) = [x for x in run.stderr.splitlines() if x.startswith("foundry bench: capture_model took ")]
        seconds = float(line.split()[-2])
        assert 0.05 <= seconds < 30, line


def test_without_the_variable_the_capture_is_not_wrapped(tmp_path: Path) -> None:
    run = _run(tmp_path, "vllm.v1.worker.gpu.model_runner", timer=False)
    assert run.returncode == 0, run.stderr
    assert "foundry bench" not in run.stderr and "returned 123456" in run.stdout


def test_the_site_folder_goes_first_on_a_path_once() -> None:
    assert site_path("/a:/b") == f"{SITE}:/a:/b"
    assert site_path(f"/a:{SITE}:/b") == f"{SITE}:/a:/b"
    assert site_path("") == str(SITE)
