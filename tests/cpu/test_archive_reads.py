"""Reads stay inside the archive, bounded, and never block: what an archive names is a path relative to
its root (absolute paths, '..' and symbolic links out of it are refused before anything is opened),
only regular files are read (a FIFO cannot hang a reader, /dev/zero cannot exhaust memory), and no
message echoes the bytes of a file outside the archive. Each case is checked for the readers, LOAD's
pre-GPU checks and ``foundry verify``."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foundry import _state
from foundry.archive import MANIFEST_NAME, read_manifest
from foundry.errors import ArchiveCorruptError, ArchiveError
from foundry.load import preflight
from foundry.storage import open_image, read_memory
from foundry.verify import verify_archive
from tests.support.archive_damage import edit_doc, relist

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"
SECRET = b"root:x:0:0:SECRET-BYTES-OUTSIDE-THE-ARCHIVE\n"


@pytest.fixture
def arch(tmp_path: Path) -> Path:
    _state.reset_all()
    copy = tmp_path / "arch"
    shutil.copytree(FIXTURE, copy)
    (tmp_path / "outside.txt").write_bytes(SECRET)
    return copy


def _image(arch: Path) -> Path:
    return next((arch / "images").iterdir())


def _memory(arch: Path) -> Path:
    return next((arch / "memory").iterdir())


def _within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``'s result or exception, failing the test if it does not return in time (a hang)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} blocked for {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _all_refuse(arch: Path, *needles: str) -> None:
    """LOAD's pre-GPU checks raise a named ArchiveError, and verify (archive and graph mode) reports a
    problem, without blocking, without running out of memory, and without echoing outside bytes."""
    graphs = [arch / "ew_bs32.json", arch / "ew_bs64.json"]
    with pytest.raises(ArchiveError) as refused:
        _within(10, lambda: preflight(graphs))
    message = str(refused.value)
    assert "SECRET" not in message and all(n in message for n in needles), message
    for target in (arch, arch / "ew_bs32.json"):
        _state.reset_all()
        report = _within(10, lambda t=target: verify_archive(t))
        assert not report.ok, f"verify passed {target}"
        assert not any("SECRET" in p.message for p in report.problems)


@pytest.mark.parametrize("which", ["cugraph", "image", "memory", "manifest"])
def test_a_fifo_in_place_of_a_file_is_refused_without_blocking(arch: Path, which: str) -> None:
    path = {
        "cugraph": arch / "ew_bs64.cugraph",
        "image": _image(arch),
        "memory": _memory(arch),
        "manifest": arch / MANIFEST_NAME,
    }[which]
    path.unlink()
    os.mkfifo(path)
    _all_refuse(arch, "FIFO")


@pytest.mark.parametrize("which", ["image", "memory", "manifest"])
def test_a_link_to_dev_zero_is_refused_without_reading_it(arch: Path, which: str) -> None:
    path = {"image": _image(arch), "memory": _memory(arch), "manifest": arch / MANIFEST_NAME}[which]
    path.unlink()
    path.symlink_to("/dev/zero")
    _all_refuse(arch)
    sha = path.stem
    reader = {
        "image": lambda: open_image(arch, sha, verify=False),
        "memory": lambda: read_memory(arch, sha, 1 << 21),
        "manifest": lambda: read_manifest(arch),
    }[which]
    with pytest.raises(ArchiveCorruptError, match=r"not a regular file|symbolic link"):
        _within(10, reader)


@pytest.mark.parametrize(
    ("file", "edit", "needle"),
    [
        ("ew_bs64.json", lambda d: d["record"].update(file="../outside.txt"), "not a bare file name"),
        ("ew_bs64.json", lambda d: d["record"].update(file="/etc/passwd"), "absolute"),
        ("ew_bs64.json", lambda d: d.update(archive_dir="../.."), "'..'"),
        ("ew_bs64.json", lambda d: d.update(archive_dir="/"), "absolute"),
        ("ew_bs32.json", lambda d: d["template"].update(json="../outside.txt"), "'..'"),
        ("ew_bs32.json", lambda d: d["template"].update(json="/etc/passwd"), "absolute"),
    ],
)
def test_paths_out_of_the_archive_are_refused_before_opening(
    arch: Path, file: str, edit: Callable[[dict[str, Any]], object], needle: str
) -> None:
    """Edited as a forger would (sealed again, and listed so): the path itself is refused, whatever lies there."""
    edit_doc(arch / file, edit)
    relist(arch / file)
    _all_refuse(arch, needle)


def test_a_manifest_naming_a_graph_outside_the_archive_never_reads_it(arch: Path) -> None:
    shutil.copy(arch / "ew_bs64.json", arch.parent / "ew_bs64.json")  # an identical copy outside
    edit_doc(arch / MANIFEST_NAME, lambda d: d["graphs"][0].update(json="../outside.txt"))
    report = verify_archive(arch)
    assert any("outside the archive directory" in n for n in report.notes)
    assert not any("SECRET" in p.message for p in report.problems)
    # LOAD finds the graph it is asked for unlisted (the manifest names another path for it).
    with pytest.raises(ArchiveCorruptError, match="not listed in the manifest"):
        preflight([arch / "ew_bs32.json", arch / "ew_bs64.json"])


@pytest.mark.parametrize("what", ["image", "images-dir"])
def test_images_linked_to_identical_copies_outside_are_refused(arch: Path, tmp_path: Path, what: str) -> None:
    if what == "image":
        image = _image(arch)
        copy = tmp_path / image.name
        shutil.copy(image, copy)
        image.unlink()
        image.symlink_to(copy)
    else:
        shutil.move(arch / "images", tmp_path / "images-copy")
        (arch / "images").symlink_to(tmp_path / "images-copy")
    _all_refuse(arch, "outside")


def test_a_file_larger_than_the_archive_says_is_not_read_past_its_size(arch: Path) -> None:
    image = _image(arch)
    with image.open("ab") as f:
        f.write(b"\0" * 4096)
    _all_refuse(arch, f"is {image.stat().st_size} bytes", "says")
