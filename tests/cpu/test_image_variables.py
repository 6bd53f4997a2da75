"""Module variables read from kernel images (foundry.images.module_variables), checked on real nvcc output.

tests/fixtures/images holds images nvcc 13.0 built from module_variables.cu (a few KB each):

    nvcc -cubin -arch=sm_90 -o module_variables.sm_90.cubin module_variables.cu
    nvcc -fatbin -Xfatbin -compress-all -gencode arch=compute_90,code=sm_90 \\
         -gencode arch=compute_80,code=compute_80 -o module_variables.zstd.fatbin module_variables.cu
    (the same with -compress-mode=speed)   -> module_variables.lz4.fatbin
    nvcc -ptx -arch=compute_90 -o module_variables.ptx module_variables.cu

Where nvcc and readelf are installed, the images are also built afresh and the reader is compared with
readelf's symbol table (CI has no nvcc: the committed images stand in).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from foundry.images import ImageFormat, detect_format, module_variables
from foundry.images.fatbin import FATBIN_COMPRESSED_LZ4, FATBIN_COMPRESSED_ZSTD, fatbin_entries
from foundry.images.scan import kernel_names
from tests.fakecuda.images import Variable, make_cubin, make_fatbin, make_ptx

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "images"
SOURCE = FIXTURES / "module_variables.cu"

# name -> (state space, size in bytes), as module_variables.cu defines them
EXPECTED = {
    "ctab": ("constant", 64),
    "cinit": ("constant", 16),
    "dtab": ("global", 32),
    "dinit": ("global", 12),
    "dptr": ("global", 8),
    "mvar": ("managed", 4),
    "_ZN2ns5scaleE": ("global", 16),
}


def _read(name: str) -> bytes:
    data = (FIXTURES / name).read_bytes()
    return data + b"\0" if name.endswith(".ptx") else data  # PTX images end with their NUL


def _found(data: bytes) -> dict[str, tuple[str, int]]:
    fmt = detect_format(data)
    assert fmt is not None
    scan = module_variables(data, fmt)
    assert scan.complete, scan.problem
    assert all(len(d.sizes) == 1 for d in scan.variables.values()), scan.variables
    return {name: (d.space, next(iter(d.sizes))) for name, d in scan.variables.items()}


@pytest.mark.parametrize(
    "name",
    ["module_variables.sm_90.cubin", "module_variables.zstd.fatbin", "module_variables.lz4.fatbin",
     "module_variables.ptx"],
)  # fmt: skip
def test_every_variable_of_a_real_image_is_found(name: str) -> None:
    data = _read(name)
    assert _found(data) == EXPECTED
    assert "read_tables" in kernel_names(data, detect_format(data) or ImageFormat.PTX).names


@pytest.mark.parametrize(
    ("name", "flag", "magic"),
    [("module_variables.zstd.fatbin", FATBIN_COMPRESSED_ZSTD, b"\x28\xb5\x2f\xfd"),
     ("module_variables.lz4.fatbin", FATBIN_COMPRESSED_LZ4, None)],
)  # fmt: skip
def test_compressed_fatbin_entries_are_decompressed(name: str, flag: int, magic: bytes | None) -> None:
    """Every entry of both fatbins is compressed (the flag at byte 40 of its header): the ELF with
    -compress-all, the PTX always. Zstandard payloads open with the frame magic; LZ4 blocks have none."""
    data = _read(name)
    at = struct.unpack_from("<H", data, 6)[0]
    flags = []
    while at < len(data):
        _, _, header, size = struct.unpack_from("<HHIQ", data, at)
        flags.append(struct.unpack_from("<Q", data, at + 40)[0])
        if magic is not None:
            assert data[at + header : at + header + 4] == magic
        at += header + size
    assert len(flags) == 2 and all(f & flag for f in flags)
    entries, stopped = fatbin_entries(data)
    assert stopped is None
    assert [e.kind for e in entries] == [2, 1] and [e.sm_arch for e in entries] == [90, 80]
    assert entries[0].payload is not None and entries[0].payload[:4] == b"\x7fELF"
    assert entries[1].payload is not None and b".entry read_tables" in entries[1].payload


def test_a_missing_decompressor_makes_the_image_unreadable_not_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard now raises ImportError
    data = _read("module_variables.zstd.fatbin")
    scan = module_variables(data, ImageFormat.FATBIN)
    assert not scan.complete and scan.problem is not None and "pip install zstandard" in scan.problem
    assert not kernel_names(data, ImageFormat.FATBIN).complete


def test_a_damaged_compressed_entry_is_reported() -> None:
    data = bytearray(_read("module_variables.zstd.fatbin"))
    header = struct.unpack_from("<H", data, 6)[0]
    entry_header = struct.unpack_from("<I", data, header + 4)[0]
    data[header + entry_header + 8 : header + entry_header + 16] = b"\xff" * 8  # inside the first frame
    scan = module_variables(bytes(data), ImageFormat.FATBIN)
    assert not scan.complete and scan.problem is not None and "fatbin entry 0 (sm_90, Zstandard)" in scan.problem


def test_fake_driver_images_declare_their_variables() -> None:
    variables = [
        Variable("ctab", 64, "constant", b"\x01"),
        Variable("dtab", 32),
        Variable("dinit", 12, "init", b"\x07"),
        Variable("dptr", 8, "init", pointer_to=("dinit", 4)),
    ]
    cubin = make_cubin(["fk_read_var"], variables=variables)
    want = {"ctab": ("constant", 64), "dtab": ("global", 32), "dinit": ("global", 12), "dptr": ("global", 8)}
    assert _found(cubin) == want
    assert _found(make_fatbin([("elf", cubin), ("ptx", make_ptx(["fk_read_var"]))])) == want
    assert _found(make_cubin(["fk_add_f32"])) == {}


def test_ptx_definitions() -> None:
    ptx = b"""
.version 8.0
.target sm_90
.address_size 64
.extern .global .align 4 .b8 elsewhere[16];
.global .texref tex;
.visible .global .align 16 .v4 .f32 quad[3];
.weak .const .align 8 .u64 handle;
.global .align 4 .b8 sized_by_initializer[] = {1, 2, 3};
.global .align 4 .u32 a, b;
.visible .entry k(.param .u64 p) { .reg .b64 %rd<2>; ld.global.u64 %rd1, [quad]; ret; }
\0"""
    scan = module_variables(ptx, ImageFormat.PTX)
    found = {name: (d.space, sorted(d.sizes)) for name, d in scan.variables.items()}
    assert found["quad"] == ("global", [48])
    assert found["handle"] == ("constant", [8])
    assert found["sized_by_initializer"] == ("global", [])  # its size is the driver's to tell
    assert found["a"] == found["b"] == ("global", [4])  # one definition of two variables
    assert "elsewhere" not in found and "tex" not in found  # a declaration, an opaque handle
    assert "%rd1" not in found and "k" not in found


def test_bank_zero_holds_parameters_not_variables() -> None:
    data = _read("module_variables.sm_90.cubin")
    assert ".nv.constant0.read_tables" in data.decode("latin-1")
    assert set(_found(data)) == set(EXPECTED)  # the parameter bank's symbols are not among them


@pytest.mark.skipif(not (shutil.which("nvcc") and shutil.which("readelf")), reason="needs nvcc and readelf")
@pytest.mark.parametrize("mode", ["none", "default", "speed", "size"])
def test_fresh_nvcc_output_matches_readelf(tmp_path: Path, mode: str) -> None:
    cubin, fatbin = tmp_path / "v.cubin", tmp_path / "v.fatbin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-o", str(cubin), str(SOURCE)], check=True)
    subprocess.run(
        ["nvcc", "-fatbin", "-Xfatbin", "-compress-all", f"-compress-mode={mode}", "-gencode",
         "arch=compute_90,code=sm_90", "-gencode", "arch=compute_80,code=compute_80", "-o", str(fatbin), str(SOURCE)],
        check=True,
    )  # fmt: skip
    want = _readelf_variables(cubin)
    assert want == {name: size for name, (_, size) in EXPECTED.items()}
    for image in (cubin, fatbin):
        assert {name: size for name, (_, size) in _found(image.read_bytes()).items()} == want


def _readelf_variables(path: Path) -> dict[str, int]:
    """STT_OBJECT symbols of the variable sections, as readelf lists them."""
    sections = subprocess.run(["readelf", "-SW", str(path)], check=True, capture_output=True, text=True).stdout
    wanted = set()
    for m in re.finditer(r"\[\s*(\d+)\]\s+(\S+)", sections):
        name = m.group(2)
        if name in (".nv.global", ".nv.global.init") or re.fullmatch(r"\.nv\.constant[1-9]\d*", name):
            wanted.add(m.group(1))
    symbols = subprocess.run(["readelf", "-sW", str(path)], check=True, capture_output=True, text=True).stdout
    out = {}
    for line in symbols.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[3] == "OBJECT" and parts[-2] in wanted:
            out[parts[-1]] = int(parts[2])
    return out


@pytest.mark.parametrize(
    ("device", "read"),
    [((9, 0), "both"), ((9, 9), "both"), ((8, 6), "ptx"), ((10, 0), "ptx"), ((7, 5), "none")],
)
def test_for_a_device_only_the_entries_it_could_load_are_read(device: tuple[int, int], read: str) -> None:
    """The zstd fatbin holds sm_90 SASS and compute_80 PTX. For a device, SASS counts only of its major
    version and no newer minor one, PTX of no newer version: the rest is not even decompressed, so a
    damaged entry of another architecture does not make the image unreadable."""
    data = bytearray(_read("module_variables.zstd.fatbin"))
    scan = module_variables(bytes(data), ImageFormat.FATBIN, device)
    assert scan.complete, scan.problem
    assert set(scan.variables) == (set() if read == "none" else set(EXPECTED))  # the PTX defines every one too
    header = struct.unpack_from("<H", data, 6)[0]
    entry_header = struct.unpack_from("<I", data, header + 4)[0]
    data[header + entry_header + 8 : header + entry_header + 16] = b"\xff" * 8  # damage the sm_90 entry
    damaged = module_variables(bytes(data), ImageFormat.FATBIN, device)
    assert damaged.complete == (device[0] != 9), damaged.problem
