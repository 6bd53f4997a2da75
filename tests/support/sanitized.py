"""libfoundry and the fake driver built under AddressSanitizer + UBSan, and a scenario run against them
(the sanitized tests; the build is shared by a session fixture, tests/cpu/conftest.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakecuda.build import build_fake_cuda
from tests.support.scenarios import REPO_ROOT, build_sanitized_foundry, libasan_path, scenario
from tests.support.subproc import child_env

__all__ = ["SANITIZER_MARKERS", "SKIPS", "Sanitized", "build_sanitized"]

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer", "SUMMARY: ")

SKIPS = [
    pytest.mark.skipif(libasan_path() is None, reason="the C compiler has no AddressSanitizer runtime"),
    pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed"),
]


class Sanitized:
    def __init__(self, foundry: Path, fakecuda: Path) -> None:
        self.foundry = foundry
        self.fakecuda = fakecuda

    def run(self, body: str, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
        libasan = libasan_path()
        assert libasan is not None
        extra = {
            # libasan must come first; libfoundry is the interposer, as under `foundry run`
            "LD_PRELOAD": f"{libasan} {self.foundry}",
            "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86:detect_odr_violation=0",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87",
            "FOUNDRY_LIB": str(self.foundry),
            **(env or {}),
        }
        proc = subprocess.run(
            [sys.executable, "-c", scenario(body)],
            env=child_env(self.fakecuda, extra),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(REPO_ROOT),
        )
        reports = [m for m in SANITIZER_MARKERS if m in proc.stderr]
        assert proc.returncode == 0 and not reports, (
            f"exit {proc.returncode}, sanitizer markers {reports}\n--- stdout ---\n{proc.stdout[-3000:]}\n"
            f"--- stderr ---\n{proc.stderr[-8000:]}"
        )
        return json.loads(proc.stdout.strip().splitlines()[-1])


def build_sanitized(root: Path) -> Sanitized:
    fakecuda = root / "fakecuda"
    build_fake_cuda(fakecuda, sanitize=True)
    return Sanitized(build_sanitized_foundry(root / "foundry"), fakecuda)
