"""The C/Python contract has one source of truth: the headers. The Python side is generated from them
(scripts/gen_abi.py); these tests fail when either side changes alone."""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from foundry.format import _layout, layout
from foundry.native import _abi, native

REPO = Path(__file__).resolve().parents[2]
GENERATOR = ["scripts/gen_abi.py", "csrc/include/foundry.h", "csrc/include/format.h", "pyproject.toml",
             "foundry/native/_abi.py", "foundry/format/_layout.py"]  # fmt: skip


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "scripts/gen_abi.py"), "--check"], capture_output=True, text=True, cwd=root
    )


def test_generated_files_are_what_the_headers_give() -> None:
    result = _check(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    for rel in GENERATOR:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    return tmp_path


@pytest.mark.parametrize(
    ("path", "old", "new", "needle"),
    [
        ("csrc/include/format.h", "#define FDY_DELTA_VERSION 1", "#define FDY_DELTA_VERSION 2", "DELTA_VERSION = 2"),
        ("csrc/include/format.h", "  uint32_t event, reserved;", "  uint64_t event;", '("event", 8, "Q")'),
        ("csrc/include/foundry.h", "FDY_ERR_TRUNCATED = 10010,", "FDY_ERR_TRUNCATED = 10011,", "TRUNCATED = 10011"),
        ("csrc/include/foundry.h", "  uint32_t tid;      /*", "  uint64_t tid;      /*", '("tid", ctypes.c_uint64)'),
        ("csrc/include/foundry.h", "FDY_EXPORT void fdy_free(void *p);", "FDY_EXPORT int fdy_free(void *p);",
         '"fdy_free": (ctypes.c_int'),
        ("foundry/native/_abi.py", "ABI_VERSION = 5", "ABI_VERSION = 6", "ABI_VERSION = 5"),
        ("foundry/format/_layout.py", '("total_bytes", 24, "Q")', '("total_bytes", 24, "I")',
         '("total_bytes", 24, "Q")'),
    ],
)  # fmt: skip
def test_changing_one_side_alone_fails_the_check(copy: Path, path: str, old: str, new: str, needle: str) -> None:
    target = copy / path
    text = target.read_text()
    assert old in text, f"{path} no longer holds {old!r}: update this test's example"
    target.write_text(text.replace(old, new, 1))
    result = _check(copy)
    assert result.returncode == 1
    assert needle in result.stdout  # the diff shows what the header gives


def test_ctypes_structs_match_the_compilers_layout() -> None:
    for name, offsets in _abi.OFFSETS.items():
        cls = getattr(_abi, name)
        assert ctypes.sizeof(cls) == _abi.SIZES[name], name
        for field, (offset, size) in offsets.items():
            descriptor = getattr(cls, field)
            assert (descriptor.offset, descriptor.size) == (offset, size), f"{name}.{field}"


def test_record_structs_match_the_compilers_layout() -> None:
    for name, (size, rows) in _layout.LAYOUTS.items():
        fmt = "<" + "".join(code for _, _, code in rows)
        assert struct.calcsize(fmt) == size, name
        for i, (field, offset, _code) in enumerate(rows):
            prefix = "<" + "".join(code for _, _, code in rows[:i])
            assert struct.calcsize(prefix) == offset, f"{name}.{field}"
    assert layout.HEADER.size == 32 and layout.DELTA_HEADER.size == 64 and layout.KERNEL_FIXED.size == 48


def test_every_exported_function_has_its_generated_signature() -> None:
    lib = native()
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    symbols = subprocess.run([nm, "-D", "--defined-only", lib.path], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in symbols.stdout.splitlines() if line.split()[-1].startswith("fdy_")}
    assert exported == set(_abi.SIGNATURES), exported ^ set(_abi.SIGNATURES)
    assert lib.fdy_abi_version() == _abi.ABI_VERSION
