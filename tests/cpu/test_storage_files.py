"""The storage a graph's files are written and found through: atomic writes that never leave a damaged or
partial file, the SHA-256 helpers, and real paths memoized within a batch (the graph files themselves:
test_archive_files.py)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from foundry.storage import TEMP_SUFFIX, sha256_bytes, sha256_file, write_atomic


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(TEMP_SUFFIX)]


# ---------------------------------------------------------------- atomic


def test_write_atomic_creates_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    write_atomic(target, b"one")
    write_atomic(target, memoryview(b"two-two"))
    assert target.read_bytes() == b"two-two"
    assert leftovers(tmp_path) == []
    assert (target.stat().st_mode & 0o777) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_failed_rename_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old content")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, b"new content that never lands")
    assert target.read_bytes() == b"old content"
    assert leftovers(tmp_path) == []


def test_failed_write_midway_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old content")

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output"):
        write_atomic(target, b"x" * 100_000)
    assert target.read_bytes() == b"old content"
    assert leftovers(tmp_path) == []


def test_any_exception_during_write_cleans_up(tmp_path: Path) -> None:
    class Exploding:
        def __buffer__(self, flags: int) -> memoryview:  # pragma: no cover - 3.12+ protocol only
            raise KeyboardInterrupt

    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    with pytest.raises((KeyboardInterrupt, TypeError)):
        write_atomic(target, Exploding())  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_sha256_helpers(tmp_path: Path) -> None:
    data = os.urandom(3 * (1 << 20) + 17)  # spans several read chunks
    path = tmp_path / "big"
    path.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert sha256_file(path) == sha256_bytes(data) == sha256_bytes(memoryview(data)) == expected


# ---------------------------------------------------------------- real paths


def test_memoized_real_paths_resolve_as_realpath_does(tmp_path: Path) -> None:
    """Inside a batch a plain name resolves through its directory's memoized real path (one lstat): links
    anywhere, relative links, '..' after a link, missing files and doubled slashes all still resolve as
    os.path.realpath resolves them."""
    from foundry.storage import real_path, real_paths_memoized

    d = tmp_path
    (d / "x" / "y").mkdir(parents=True)
    (d / "x" / "y" / "f").write_text("")
    (d / "ly").symlink_to(d / "x" / "y")
    (d / "x" / "lf").symlink_to(d / "x" / "y" / "f")
    (d / "x" / "y" / "rel").symlink_to("../y/f")
    cases = [f"{d}/ly/f", f"{d}/x/lf", f"{d}/x/y/rel", f"{d}/ly/../x", f"{d}/x/./y/f", f"{d}/x/y/missing",
             f"{d}/ly/", f"{d}//x//y//f", f"{d}/ly/rel"]  # fmt: skip
    with real_paths_memoized():
        for case in cases:
            assert real_path(case) == Path(os.path.realpath(case)), case
        # Memoized: a link changed within the batch is not seen again there, and is outside it.
        (d / "x" / "lf").unlink()
        (d / "x" / "lf").symlink_to(d / "x")
        real = Path(os.path.realpath(d))
        assert real_path(f"{d}/x/lf") == real / "x" / "y" / "f"
    assert real_path(f"{d}/x/lf") == real / "x"
