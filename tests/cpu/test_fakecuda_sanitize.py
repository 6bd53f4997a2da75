"""Runs the fake-driver test suite again against an ASan + UBSan build of the fake driver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
_FILES = [
    "test_fakecuda_devices.py",
    "test_fakecuda_memory.py",
    "test_fakecuda_kernels.py",
    "test_fakecuda_capture.py",
    "test_fakecuda_graphs.py",
    "test_fakecuda_misc.py",
    "test_fakecuda_images.py",
    "test_fakecuda_procaddr.py",
]


def _libasan() -> str | None:
    try:
        proc = subprocess.run(["cc", "-print-file-name=libasan.so"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = proc.stdout.strip()
    return path if proc.returncode == 0 and os.path.isabs(path) and os.path.exists(path) else None


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get("FAKECUDA_SANITIZE")), reason="already running sanitized")
@pytest.mark.skipif(_libasan() is None, reason="the C compiler has no AddressSanitizer runtime")
def test_suite_under_address_sanitizer(tmp_path: Path) -> None:
    env = dict(os.environ, FAKECUDA_SANITIZE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "bt"),
           *[str(Path(__file__).parent / f) for f in _FILES]]  # fmt: skip
    proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
