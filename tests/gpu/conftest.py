"""GPU tier: needs torch with CUDA; skipped (not failed) elsewhere. Writes a machine-readable summary
of every test's outcome and the figures tests record to $FOUNDRY_GPU_TIER_JSON (results/gpu-tier.json
by default)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
_outcomes: list[dict[str, Any]] = []
_figures: dict[str, Any] = {}


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


HAS_GPU = _gpu_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA GPU and torch with CUDA")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.gpu)
            if not HAS_GPU:
                item.add_marker(skip)
    # The tests marked slow (each a minute or more of fresh processes compiling) run last: a tier bounded by
    # TIER_SECONDS then always covers the round trips and refusals, and leaves out the longest checks first.
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where tests keep their outputs: $FOUNDRY_GPU_ARTIFACTS (collected by scripts/gpu_tier.sh) or a temp dir."""
    env = os.environ.get("FOUNDRY_GPU_ARTIFACTS")
    path = Path(env) if env else tmp_path_factory.mktemp("artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def figures() -> dict[str, Any]:
    """Figures a test wants in the summary (e.g. the interposer's overhead)."""
    return _figures


def run_foundry(
    args: list[str], timeout: float = 900, preload: bool = True, env: dict[str, str] | None = None, cwd: Path = REPO
) -> str:
    """Runs ``python ARGS`` (under the interposer unless preload=False); returns stdout, fails the test
    with the tail of stderr otherwise."""
    full_env = dict(os.environ if env is None else env)
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), full_env.get("PYTHONPATH", "")])
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    cmd = [sys.executable, *args]
    if preload:
        cmd = [sys.executable, "-m", "foundry.cli", "run", "--", *cmd]
    proc = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(args)} exited {proc.returncode}\n--- stderr ---\n{proc.stderr[-6000:]}\n"
            f"--- stdout ---\n{proc.stdout[-3000:]}"
        )
    return proc.stdout


def run_mode(script: str, mode: str, out: Path) -> dict[str, Any]:
    """``python SCRIPT MODE OUT`` under the interposer (tests/gpu/cupy_processes.py's ``main``): its JSON line,
    the test failed with the process's trace where the mode raised."""
    result: dict[str, Any] = json.loads(run_foundry([script, mode, str(out)]).strip().splitlines()[-1])
    assert "failed" not in result, result.get("trace")
    return result


# FOUNDRY_GPU_TIER_DEADLINE (epoch seconds; scripts/gpu_tier.sh sets it from TIER_SECONDS): no test starts after
# it. A device call has a fixed length, and a tier cut short by the call's own bound brings nothing back; one
# that stops starting tests still writes its summary, naming the tests it did not run.
_DEADLINE = float(os.environ.get("FOUNDRY_GPU_TIER_DEADLINE") or "inf")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if time.time() > _DEADLINE:
        pytest.skip("not run: the tier's time ran out (TIER_SECONDS) before it started")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcomes.append({"test": report.nodeid, "outcome": report.outcome, "seconds": round(report.duration, 3)})
        # after every test, so that a tier killed from outside still leaves what it measured
        _write_summary(complete=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _write_summary(complete=True)


def _write_summary(complete: bool) -> None:
    if not HAS_GPU or not any("tests/gpu/" in o["test"] for o in _outcomes):
        return
    import torch

    path = Path(os.environ.get("FOUNDRY_GPU_TIER_JSON", REPO / "results" / "gpu-tier.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "complete": complete,
        "passed": sum(o["outcome"] == "passed" for o in _outcomes),
        "failed": sum(o["outcome"] == "failed" for o in _outcomes),
        "tests": _outcomes,
        "figures": _figures,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(path)
