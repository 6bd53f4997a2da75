"""Run Python code in a fresh subprocess (a fresh "CUDA process") and return its stdout.

Tests that use the fake driver run each scenario in its own process: the driver's state is
per-process, like the real one, and LD_LIBRARY_PATH / LD_PRELOAD must be set before start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.fakecuda.build import runtime_env

REPO_ROOT = Path(__file__).resolve().parents[2]


class SubprocessError(AssertionError):
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(f"subprocess exited with {returncode}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}")


def child_env(lib_dir: Path | str | None = None, env: Mapping[str, str] | None = None,
              preload: Path | str | None = None) -> dict[str, str]:  # fmt: skip
    """os.environ + the repository on PYTHONPATH + lib_dir first on LD_LIBRARY_PATH (+ LD_PRELOAD).

    When lib_dir holds a sanitized build of the fake driver, libasan is preloaded first."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [e.get("PYTHONPATH")])])
    if lib_dir is not None:
        e["LD_LIBRARY_PATH"] = os.pathsep.join([str(lib_dir), *filter(None, [e.get("LD_LIBRARY_PATH")])])
        e.update(runtime_env(Path(lib_dir)))  # sanitized fake driver: preload libasan
    if preload is not None:
        e["LD_PRELOAD"] = " ".join(filter(None, [e.get("LD_PRELOAD"), str(preload)]))
    if env:
        e.update(env)
    return e


def run_python(code: str, lib_dir: Path | str | None = None, env: Mapping[str, str] | None = None,
               preload: Path | str | None = None, timeout: float = 120, check: bool = True,
               cwd: Path | str | None = None) -> str:  # fmt: skip
    """Run ``code`` (dedented) with ``python -c`` and return its stdout; raise SubprocessError on a
    non-zero exit when ``check``."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=child_env(lib_dir, env, preload),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(cwd or REPO_ROOT),
    )
    if check and proc.returncode != 0:
        raise SubprocessError(proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def run_script(path: Path | str, *args: str, lib_dir: Path | str | None = None, env: Mapping[str, str] | None = None,
               preload: Path | str | None = None, timeout: float = 120) -> str:  # fmt: skip
    """Run a Python script file in a subprocess and return its stdout."""
    proc = subprocess.run(
        [sys.executable, str(path), *args],
        env=child_env(lib_dir, env, preload),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO_ROOT),
    )
    if proc.returncode != 0:
        raise SubprocessError(proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def run_json(code: str, **kwargs: Any) -> Any:
    """Run ``code`` that prints one JSON document as its LAST stdout line; return it parsed."""
    out = run_python(code, **kwargs)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if not lines:
        raise AssertionError(f"subprocess printed nothing\n{out}")
    return json.loads(lines[-1])


def run_profiles(settings: str, bodies: list[str], env: Mapping[str, str] | None = None) -> None:
    """The profiling scripts' runs (scripts/profile_*.py): each body in its own process under the preloaded
    libfoundry and the fake driver, after the graphs' prelude for a scratch archive and ``settings``
    (Python assignments); prints what each printed, its last line (one JSON object) indented."""
    import tempfile

    from foundry.native.lib import library_path
    from tests.fakecuda.build import build_fake_cuda
    from tests.support.graphs import prelude

    lib_dir = build_fake_cuda(Path(tempfile.gettempdir()) / "foundry-fakecuda").parent
    with tempfile.TemporaryDirectory() as tmp:
        arch = Path(tmp) / "archive"
        arch.mkdir()
        head = prelude(arch) + textwrap.dedent(settings)
        for body in bodies:
            out = run_python(head + body, lib_dir=lib_dir, preload=library_path(), env=env, timeout=1800)
            *profile, last = out.strip().splitlines()
            print("\n".join(profile), flush=True)
            print(json.dumps(json.loads(last), indent=1), flush=True)


def foundry_cli(
    *args: str, lib_dir: Path | None = None, preload: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m foundry.cli ARGS``; the CLI process gets LD_PRELOAD=``preload`` (none by default)."""
    e = child_env(lib_dir)
    e.pop("LD_PRELOAD", None)
    if preload is not None:
        e["LD_PRELOAD"] = preload
    return subprocess.run(
        [sys.executable, "-m", "foundry.cli", *args],
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO_ROOT),
    )
