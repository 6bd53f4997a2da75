"""``foundry verify`` and ``foundry inspect`` on an archive that carries module variables (saved on the
fake driver by tests/cpu/test_roundtrip_fake_variables.py's scenario): verify proves each carried value is
stored whole, is a variable of its image with the image's size, and that the manifest agrees; inspect
lists them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foundry.verify import Check, ProblemKind, Report, verify_archive
from tests.cpu.test_roundtrip_fake_variables import VARS
from tests.support.archive_damage import edit_doc, edit_stored, flip_byte, relist, stored_doc
from tests.support.graphs import run_save
from tests.support.subproc import child_env


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, fakecuda_dir: Path, foundry_lib: Path) -> Path:
    """An archive saved once; each test works on its own copy."""
    from tests.support.subproc import run_python

    arch = tmp_path_factory.mktemp("variables") / "arch"

    def app_json(code: str, **kwargs: Any) -> Any:
        out = run_python(code, lib_dir=fakecuda_dir, preload=foundry_lib, **kwargs)
        return json.loads(out.strip().splitlines()[-1])

    run_save(app_json, VARS, arch)
    return arch


@pytest.fixture
def archive(saved: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "arch"
    shutil.copytree(saved, copy)
    return copy


def _carried(archive: Path) -> list[dict[str, Any]]:
    doc = stored_doc(archive / "vars.json")
    (image,) = doc["images"].values()
    variables: list[dict[str, Any]] = image["variables"]
    return variables


def _problems(report: Report, check: Check, kind: ProblemKind, fragment: str) -> list[str]:
    return [p.message for p in report.problems if p.check == check and p.kind == kind and fragment in p.message]


def test_a_sound_archive_passes_and_inspect_lists_the_variables(archive: Path) -> None:
    report = verify_archive(archive)
    assert report.ok, [str(p) for p in report.problems]
    assert {c.check: c.status for c in report.checks}[Check.VARIABLES] == "passed"
    assert verify_archive(archive / "vars.json").ok
    env = child_env()
    out = subprocess.run([sys.executable, "-m", "foundry.cli", "inspect", "--json", str(archive)], env=env,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    listed = json.loads(out)["variables"]
    assert [(v["name"], v["bytes"], v["graphs"]) for v in listed] == [
        ("counter", 4, 1),
        ("ctab", 64, 1),
        ("dtab", 64, 1),
    ]
    text = subprocess.run([sys.executable, "-m", "foundry.cli", "inspect", str(archive)], env=env,
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "module variables LOAD writes" in text and "ctab" in text


def test_a_missing_or_damaged_value_is_a_files_problem(archive: Path) -> None:
    counter, ctab, _ = _carried(archive)
    (archive / "memory" / f"{counter['sha256']}.bin").unlink()
    flip_byte(archive / "memory" / f"{ctab['sha256']}.bin", 3)
    report = verify_archive(archive)
    assert _problems(report, Check.FILES, ProblemKind.MISSING, counter["sha256"])
    assert _problems(report, Check.FILES, ProblemKind.CHECKSUM, "module variable value's content SHA-256")


def test_a_variable_the_image_does_not_define_is_reported(archive: Path) -> None:
    def rename(doc: dict[str, Any]) -> None:
        (image,) = doc["images"].values()
        image["variables"][0]["name"] = "a_counter"  # still sorted, now unknown to the image

    edit_stored(archive / "vars.json", rename)
    relist(archive / "vars.json")  # as a forger would: a JSON the manifest does not list is not read further
    report = verify_archive(archive)
    assert _problems(report, Check.VARIABLES, ProblemKind.MISMATCH, "variable a_counter (4 bytes) of kernel image")
    # The manifest still says counter: the graph disagrees with it, as LOAD finds before the GPU.
    assert _problems(report, Check.FILES, ProblemKind.MISMATCH, "disagree: the module variables")


def test_a_size_the_image_does_not_give_is_reported(archive: Path) -> None:
    def resize(doc: dict[str, Any]) -> None:
        for image in doc["images"].values():
            image["variables"][0]["bytes"] = 8  # counter is 4 bytes in the image

    edit_stored(archive / "vars.json", resize)
    edit_doc(archive / "graph_manifest.json", resize)
    relist(archive / "vars.json")
    report = verify_archive(archive)
    assert _problems(report, Check.VARIABLES, ProblemKind.MISMATCH, "carries module variable counter (8 bytes)")


def test_a_manifest_listing_other_variables_is_reported(archive: Path) -> None:
    def drop(doc: dict[str, Any]) -> None:
        (image,) = doc["images"].values()
        image["variables"].pop()

    edit_doc(archive / "graph_manifest.json", drop)
    report = verify_archive(archive)
    assert _problems(report, Check.FILES, ProblemKind.MISMATCH, "load_cuda_modules_and_libraries writes")


def test_loads_pre_gpu_checks_read_the_values_and_check_the_listings(archive: Path) -> None:
    """preflight applies verify's rules: a damaged value, or a variable the image does not define, is
    refused before any image is loaded (LOAD itself would find it only once the image is in)."""
    from foundry import _state
    from foundry.errors import ArchiveError
    from foundry.load import preflight

    graph = archive / "vars.json"
    _, ctab, _ = _carried(archive)
    value = archive / "memory" / f"{ctab['sha256']}.bin"
    good = value.read_bytes()
    flip_byte(value, 3)
    with pytest.raises(ArchiveError, match="module variable value"):
        preflight([graph])
    value.write_bytes(good)
    _state.reset_all()
    assert [s.meta.name for s in preflight([graph])] == ["vars"]

    def rename(doc: dict[str, Any]) -> None:
        for image in doc["images"].values():
            image["variables"][0]["name"] = "a_counter"

    edit_stored(graph, rename)
    edit_doc(archive / "graph_manifest.json", rename)
    relist(graph)
    with pytest.raises(ArchiveError, match=r"variable a_counter \(4 bytes\) of kernel image"):
        preflight([graph])
