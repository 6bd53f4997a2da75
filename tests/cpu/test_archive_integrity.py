"""Every byte LOAD uses is checked before the GPU is touched, key or no key: on the real archive in
tests/fixtures/gpu_archive, every single-bit flip of every JSON file is refused by LOAD's pre-GPU
checks (``foundry.load.preflight``) and by ``foundry verify`` in archive and graph mode, each time with
a named error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from foundry import _state
from foundry.errors import ArchiveError
from foundry.load import preflight
from foundry.verify import verify_archive

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"
JSONS = ["ew_bs32.json", "ew_bs64.json", "graph_manifest.json", "region.json"]


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("integrity") / "arch"
    shutil.copytree(FIXTURE, copy)
    return copy


def _graphs(archive: Path) -> list[Path]:
    return [archive / "ew_bs32.json", archive / "ew_bs64.json"]


def _flips(data: bytes, every_bit: bool) -> list[tuple[int, int]]:
    """(byte, bit) of each flip: every bit of every byte, or one bit per byte (rotating through the 8)."""
    return [(i, b) for i in range(len(data)) for b in (range(8) if every_bit else (i % 8,))]


def _forget_all_but_image_scans() -> None:
    """Nothing known from an earlier read, as in a fresh process, except what verify read from images
    whose bytes it proved to have their SHA-256 (a function of those bytes alone, and most of its time)."""
    for name, state in _state.states().items():
        if name != "gate.scans":
            state.reset()


def test_the_unflipped_archive_passes(archive: Path) -> None:
    assert len(preflight(_graphs(archive))) == 2
    assert verify_archive(archive).ok and verify_archive(archive / "ew_bs32.json").ok


@pytest.mark.slow
@pytest.mark.parametrize("name", JSONS)
def test_every_bit_flip_is_refused_by_loads_pre_gpu_checks(archive: Path, name: str) -> None:
    path = archive / name
    good = path.read_bytes()
    passed = []
    try:
        for i, bit in _flips(good, every_bit=True):
            flipped = bytearray(good)
            flipped[i] ^= 1 << bit
            path.write_bytes(flipped)
            _forget_all_but_image_scans()
            try:
                preflight(_graphs(archive))
            except ArchiveError as exc:
                assert str(exc), "a refusal names the problem"
                continue
            passed.append((i, bit))
    finally:
        path.write_bytes(good)
        _state.reset_all()
    assert passed == [], f"{len(passed)} of {len(good) * 8} flips of {name} passed: {passed[:10]}"


@pytest.mark.slow
@pytest.mark.parametrize("name", JSONS)
def test_bit_flips_are_refused_by_verify_in_archive_and_graph_mode(archive: Path, name: str) -> None:
    """One bit of every byte (``foundry verify`` reads and hashes the whole archive each time: all eight
    bits of every byte are left to the test above, whose checks verify shares)."""
    path = archive / name
    good = path.read_bytes()
    passed = []
    try:
        for i, bit in _flips(good, every_bit=False):
            flipped = bytearray(good)
            flipped[i] ^= 1 << bit
            path.write_bytes(flipped)
            whole = verify_archive(archive)
            one = verify_archive(archive / "ew_bs32.json")  # the member: it reads its template too
            if whole.ok or one.ok:
                passed.append((i, bit, whole.ok, one.ok))
            assert all(p.message for p in (*whole.problems, *one.problems))
    finally:
        path.write_bytes(good)
    assert passed == [], f"{len(passed)} flips of {name} passed verify: {passed[:10]}"
