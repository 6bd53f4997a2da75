"""The fake CUDA driver, built once per test session (tests/conftest.py's ``fakecuda_dir`` fixture).

Tests run CUDA code in subprocesses with ``LD_LIBRARY_PATH=fakecuda_dir`` (tests/support/subproc.py
does that, and preloads libasan for a sanitized build).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakecuda.build import build_fake_cuda


def sanitize_requested() -> bool:
    """FAKECUDA_SANITIZE=1: build the fake driver with ASan + UBSan."""
    return os.environ.get("FAKECUDA_SANITIZE", "") not in ("", "0")


def fakecuda_build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding libcuda.so.1 (built on first use; rebuilt only when a source changed)."""
    sanitize = sanitize_requested()
    out = tmp_path_factory.getbasetemp() / ("fakecuda-asan" if sanitize else "fakecuda")
    build_fake_cuda(out, sanitize=sanitize)
    return out
