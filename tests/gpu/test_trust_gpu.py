"""Trust on the hardware: an archive saved on this GPU, damaged in copies, is refused by LOAD (each
attempt in a fresh process) with the right exception and a message naming the problem; the same
archive, signed, still loads in a fresh process and replays bit-identically to the native graphs."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import BUNDLE_NAME, read_manifest, write_manifest
from foundry.storage import sha256_file
from foundry.trust import KEY_ENV, SigningKey, sign_manifest
from tests.support.archive_damage import edit_doc, load_doc, unbundle

from .conftest import run_foundry

GRAPH = "dropout"  # cuBLAS, Philox RNG and state memory: the richest small graph


@pytest.fixture(scope="module")
def saved(artifacts: Path) -> Path:
    out = artifacts / "trust" / "saved"
    run_foundry(["tests/gpu/roundtrip.py", "save", str(out), "dropout", "elementwise"])
    return out


def _forge(archive: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edits the graph's JSON as a forger would: sealed again, the manifest's digest of it and (for an
    identity edit) the manifest's identity updated and the manifest sealed again, so that the check
    under test, not the seal or the listing, is what refuses it."""
    path = archive / f"{GRAPH}.json"
    edit_doc(path, edit)
    graph = load_doc(path)

    def relist(doc: dict[str, Any]) -> None:
        for entry in doc["graphs"]:
            if entry["json"] == path.name:
                entry["json_sha256"] = sha256_file(path)
        if isinstance(graph.get("identity"), dict):
            doc["identity"] = graph["identity"]

    edit_doc(archive / "graph_manifest.json", relist)


def _other_gpu() -> str:
    """A GPU name that is not this machine's."""
    import torch

    here = torch.cuda.get_device_name()
    return "NVIDIA H200" if "H100" in here else "NVIDIA H100 80GB HBM3"


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _largest_image(archive: Path) -> Path:
    return max((archive / "images").glob("*.bin"), key=lambda p: p.stat().st_size)


def _identity(field: str, value: object) -> Callable[[Path], None]:
    """``value`` may be a callable, called when the damage is made (on the GPU machine)."""
    return lambda a: _forge(a, lambda d: d["identity"].__setitem__(field, value() if callable(value) else value))


def _file_only(damage: Callable[[Path], None]) -> Callable[[Path], None]:
    """``damage`` done to a graph's own files: SAVE stores an archive directory's graphs once, in the graph
    bundle, so the archive is first turned into the form that stores them in their files (which the format
    allows: docs/FORMAT.md), and LOAD reads the damaged files."""

    def damaged(archive: Path) -> None:
        unbundle(archive)
        damage(archive)

    return damaged


def _flip_bundle(archive: Path) -> None:
    """One byte near the end of the graph bundle inverted: the last graph's record, the only copy there is."""
    _flip(archive / BUNDLE_NAME, -100)


def _foreign(archive: Path) -> None:
    """The graph's JSON replaced by another program's JSON, listed by the manifest as a forger would list it,
    so that what refuses it is the format check, not the checksum."""
    path = archive / f"{GRAPH}.json"
    path.write_text('{"model": "llama", "weights": []}')

    def relist(doc: dict[str, Any]) -> None:
        for entry in doc["graphs"]:
            if entry["json"] == path.name:
                entry["json_sha256"] = sha256_file(path)

    edit_doc(archive / "graph_manifest.json", relist)


DAMAGES: list[Any] = [
    pytest.param(lambda a: _flip(_largest_image(a), 4096), "ArchiveCorruptError", ["damaged"], id="image-bitflip"),
    pytest.param(
        _file_only(lambda a: (a / f"{GRAPH}.cugraph").write_bytes((a / f"{GRAPH}.cugraph").read_bytes()[:100])),
        "ArchiveCorruptError",
        [f"{GRAPH}.cugraph"],
        id="record-truncated",
    ),
    pytest.param(
        _file_only(lambda a: _flip(a / f"{GRAPH}.cugraph", -9)),
        "ArchiveCorruptError",
        [f"{GRAPH}.cugraph"],
        id="record-bitflip",
    ),
    pytest.param(_flip_bundle, "ArchiveCorruptError", [], id="bundle-bitflip"),
    pytest.param(
        _file_only(lambda a: _forge(a, lambda d: d.__setitem__("format_version", 99))),
        "ArchiveVersionError",
        ["format_version 99", "save again"],
        id="wrong-version",
    ),
    pytest.param(_file_only(_foreign), "ArchiveForeignError", ["not a Foundry"], id="foreign-file"),
    pytest.param(
        _file_only(_identity("gpu_name", _other_gpu)),
        "IdentityMismatchError",
        ["GPU model", "Re-run SAVE"],
        id="other-gpu",
    ),
    pytest.param(
        _file_only(lambda a: _flip(a / f"{GRAPH}.json", 200)),
        "ArchiveCorruptError",
        [f"{GRAPH}.json"],
        id="json-bitflip",
    ),
    pytest.param(
        _file_only(_identity("driver_version", 12080)),
        "IdentityMismatchError",
        ["12080", "Re-run SAVE"],
        id="other-driver",
    ),
    pytest.param(_file_only(_identity("sm_count", 78)), "IdentityMismatchError", ["78"], id="other-sm-count"),
]


def _attempt(archive: Path, *flags: str, env: dict[str, str] | None = None) -> dict[str, Any] | None:
    out = run_foundry(["tests/gpu/trust.py", str(archive), GRAPH, *flags], env=env)
    result: dict[str, Any] | None = json.loads(out.strip().splitlines()[-1])
    return result


def _expect(result: dict[str, Any] | None, error: str, fragments: list[str]) -> None:
    assert result is not None, f"LOAD accepted the archive; {error} expected"
    assert result["error"] == error, result
    for fragment in fragments:
        assert fragment.lower() in result["message"].lower(), (fragment, result["message"])


@pytest.mark.parametrize(("damage", "error", "fragments"), DAMAGES)
def test_damaged_archive_is_refused_by_load(
    saved: Path,
    tmp_path: Path,
    figures: dict[str, Any],
    request: pytest.FixtureRequest,
    damage: Callable[[Path], None],
    error: str,
    fragments: list[str],
) -> None:
    archive = shutil.copytree(saved / "archive", tmp_path / "archive")
    damage(archive)
    result = _attempt(archive)
    figures.setdefault("trust", {})[request.node.callspec.id] = (
        result and f"{result['error']}: {result['message'][:300]}"
    )
    _expect(result, error, fragments)


def test_region_base_already_taken_is_refused(saved: Path) -> None:
    result = _attempt(saved / "archive", "--take-base")
    _expect(result, "RegionBaseTakenError", ["0x600000000000"])


def test_signed_archive_loads_bit_identically_and_other_keys_are_refused(
    saved: Path, tmp_path: Path, figures: dict[str, Any]
) -> None:
    signed = shutil.copytree(saved, tmp_path / "signed")
    (tmp_path / "good.key").write_bytes(b"g" * 32)
    (tmp_path / "other.key").write_bytes(b"o" * 32)
    write_manifest(signed / "archive", sign_manifest(read_manifest(signed / "archive"), SigningKey(b"g" * 32)))
    env = dict(os.environ)

    unsigned = _attempt(saved / "archive", env={**env, KEY_ENV: str(tmp_path / "good.key")})
    _expect(unsigned, "ArchiveSignatureError", ["is not signed"])
    wrong = _attempt(signed / "archive", env={**env, KEY_ENV: str(tmp_path / "other.key")})
    _expect(wrong, "ArchiveSignatureError", ["not with the configured key"])

    # The good archive, with its key: a fresh process loads every graph and compares with native.
    run_foundry(["tests/gpu/roundtrip.py", "load", str(signed)], env={**env, KEY_ENV: str(tmp_path / "good.key")})
    loaded = json.loads((signed / "load.json").read_text())
    graphs = {k: v for k, v in loaded.items() if not k.startswith("_")}
    figures["trust_signed_load"] = {k: v.get("identical") for k, v in graphs.items()}
    assert graphs and all(v.get("identical") == [True, True] for v in graphs.values()), graphs
