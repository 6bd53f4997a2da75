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

from foundry.native import _abi, _signatures
from foundry.native.lib import native
from foundry.records import _layout, _offsets, layout

ABI = _abi.ABI_VERSION  # the version the headers give now: the case below changes it on one side only

REPO = Path(__file__).resolve().parents[2]
GENERATOR = ["scripts/gen_abi.py", "scripts/abi_cuda.py", "scripts/abi_headers.py", "scripts/abi_layout.py",
             "csrc/include/foundry.h", "csrc/include/format.h", "pyproject.toml", "foundry/native/_abi.py",
             "foundry/native/_signatures.py", "foundry/records/_layout.py", "foundry/records/_offsets.py"]  # fmt: skip


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
        ("csrc/include/format.h", "#define FDY_FATBIN_COMPRESSED_LZ4 0x2000",
         "#define FDY_FATBIN_COMPRESSED_LZ4 0x4000", "FATBIN_COMPRESSED_LZ4 = 16384"),
        ("csrc/include/format.h", "  uint64_t fat_size;", "  uint32_t fat_size, more;", '("more", 12, "I")'),
        ("csrc/include/foundry.h", "FDY_ERR_TRUNCATED = 10010,", "FDY_ERR_TRUNCATED = 10011,", "TRUNCATED = 10011"),
        ("csrc/include/foundry.h", "  uint32_t tid;      /*", "  uint64_t tid;      /*", '("tid", ctypes.c_uint64)'),
        ("csrc/include/foundry.h", "FDY_EXPORT void fdy_free(void *p);", "FDY_EXPORT int fdy_free(void *p);",
         '"fdy_free": (ctypes.c_int'),
        ("foundry/native/_abi.py", f"ABI_VERSION = {ABI}", f"ABI_VERSION = {ABI + 1}", f"ABI_VERSION = {ABI}"),
        # the CUDA values and driver signatures Python uses come from cuda.h, through the lists that name them
        ("csrc/include/format.h", "X(CU_LAUNCH_ATTRIBUTE_, PRIORITY) ", "", "    PRIORITY = 8"),
        ("csrc/include/foundry.h", "X(cuInit) ", "", '"cuInit": [ctypes.c_uint]'),
        ("foundry/native/_signatures.py", '"cuCtxSetCurrent": [ctypes.c_void_p]', '"cuCtxSetCurrent": [ctypes.c_int]',
         '"cuCtxSetCurrent": [ctypes.c_void_p]'),
        ("foundry/records/_layout.py", "    CONDITIONAL = 13", "    CONDITIONAL = 14", "    CONDITIONAL = 13"),
        ("foundry/records/_offsets.py", '("total_bytes", 24, "Q")', '("total_bytes", 24, "I")',
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


SWAPPED = ("  uint32_t grid[3], block[3];", "  uint32_t block[3], grid[3];")


def _layout_registry(copy: Path, record: int, digest: str) -> None:
    """Raises the copy's record version to ``record`` and lists ``digest`` as that version's layout."""
    header = copy / "csrc/include/format.h"
    text = header.read_text().replace("#define FDY_RECORD_VERSION 1", f"#define FDY_RECORD_VERSION {record}")
    text = text.replace("#define FDY_LAYOUT_1_1", f'#define FDY_LAYOUT_{record}_1 "{digest}"\n#define FDY_LAYOUT_1_1')
    header.write_text(text)


def test_swapping_two_fields_fails_until_the_version_names_the_new_layout(copy: Path) -> None:
    header = copy / "csrc/include/format.h"
    text = header.read_text()
    assert SWAPPED[0] in text, "format.h no longer declares grid and block together: update this test"
    header.write_text(text.replace(*SWAPPED))
    checked = _check(copy)
    assert checked.returncode == 1
    assert "layout of format.h's record and delta structs changed" in checked.stdout, checked.stdout
    assert "Raise FDY_RECORD_VERSION" in checked.stdout
    written = subprocess.run([sys.executable, str(copy / "scripts/gen_abi.py")], capture_output=True, text=True,
                             cwd=copy)  # fmt: skip
    assert written.returncode == 1  # nothing is generated for a layout no version names
    assert (copy / "foundry/records/_layout.py").read_text() == (REPO / "foundry/records/_layout.py").read_text()
    digest = checked.stdout.split("digest is now ")[1].split(")")[0]
    assert digest != _layout.LAYOUT_DIGEST
    _layout_registry(copy, 2, digest)
    written = subprocess.run([sys.executable, str(copy / "scripts/gen_abi.py")], capture_output=True, text=True,
                             cwd=copy)  # fmt: skip
    assert written.returncode == 0, written.stdout + written.stderr
    generated = (copy / "foundry/records/_layout.py").read_text()
    assert "RECORD_VERSION = 2" in generated and f'LAYOUT_DIGEST = "{digest}"' in generated
    assert generated.index("    block: tuple[int, int, int]") < generated.index("    grid: tuple[int, int, int]")
    assert _check(copy).returncode == 0


def test_a_version_without_its_layout_fails(copy: Path) -> None:
    header = copy / "csrc/include/format.h"
    header.write_text(header.read_text().replace("#define FDY_DELTA_VERSION 1", "#define FDY_DELTA_VERSION 2"))
    checked = _check(copy)
    assert checked.returncode == 1
    assert f'add #define FDY_LAYOUT_1_2 "{_layout.LAYOUT_DIGEST}"' in checked.stdout, checked.stdout


def test_a_listed_layout_cannot_change(copy: Path) -> None:
    """A version's digest never changes: listing another one for the version in force fails."""
    header = copy / "csrc/include/format.h"
    text = header.read_text()
    header.write_text(text.replace(f'FDY_LAYOUT_1_1 "{_layout.LAYOUT_DIGEST}"', 'FDY_LAYOUT_1_1 "0123456789abcdef"'))
    assert _check(copy).returncode == 1


def test_ctypes_structs_match_the_compilers_layout() -> None:
    for name, offsets in _abi.OFFSETS.items():
        cls = getattr(_abi, name)
        assert ctypes.sizeof(cls) == _abi.SIZES[name], name
        for field, (offset, size) in offsets.items():
            descriptor = getattr(cls, field)
            assert (descriptor.offset, descriptor.size) == (offset, size), f"{name}.{field}"


def test_record_structs_match_the_compilers_layout() -> None:
    for name, (size, rows) in _offsets.LAYOUTS.items():
        fmt = "<" + "".join(code for _, _, code in rows)
        assert struct.calcsize(fmt) == size, name
        for i, (field, offset, _code) in enumerate(rows):
            prefix = "<" + "".join(code for _, _, code in rows[:i])
            assert struct.calcsize(prefix) == offset, f"{name}.{field}"
    assert layout.HEADER_SIZE == 32 and layout.DELTA_HEADER_SIZE == 64 and layout.KERNEL_HEAD_SIZE == 56


def test_named_structs_read_and_write_every_field_by_name() -> None:
    """Each generated struct type unpacks the bytes at the offsets the compiler gave its fields, and packs
    back the same bytes."""
    for name, (size, rows) in _offsets.LAYOUTS.items():
        cls = getattr(_layout, "".join(part.capitalize() for part in name.split("_")))
        data = bytes(range(1, size + 1))
        value = cls.unpack_from(data)
        assert value.pack() == data, name
        for field, offset, code in rows:
            got = getattr(value, field.replace(".", "_") + ("_" if field == "from" else ""))
            width = struct.calcsize("<" + code)
            raw = struct.unpack_from("<" + code, data, offset)
            want = raw[0] if len(raw) == 1 else raw
            assert got == want and offset + width <= size, f"{name}.{field}"


def test_every_exported_function_has_its_generated_signature() -> None:
    lib = native()
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    symbols = subprocess.run([nm, "-D", "--defined-only", lib.path], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in symbols.stdout.splitlines() if line.split()[-1].startswith("fdy_")}
    assert exported == set(_signatures.SIGNATURES), exported ^ set(_signatures.SIGNATURES)
    assert lib.fdy_abi_version() == _abi.ABI_VERSION


def test_the_allocation_logs_struct_format_is_the_generated_layout_field_for_field() -> None:
    """foundry.native.region unpacks the allocation log with one struct format made from the generated
    ``fdy_alloc_event`` layout, and foundry.region reads its tuples in that field order."""
    import ctypes
    import struct

    from foundry.native import region
    from foundry.native._abi import AllocEvent

    assert region.EVENT_FIELDS == ("seq", "offset", "size", "span", "kind", "tid")
    assert struct.calcsize(region._EVENT_FORMAT) == ctypes.sizeof(AllocEvent)
    one = AllocEvent(seq=7, offset=1 << 40, size=4096, span=8192, kind=3, tid=99)
    assert struct.unpack(region._EVENT_FORMAT, bytes(one)) == (7, 1 << 40, 4096, 8192, 3, 99)
