"""Documents in an archive saved on the fake CUDA driver: a program writes one before
``save_graph_manifest(documents=[...])``, which lists it; the signature made with a configured key covers it;
``read_archive_document`` and ``foundry verify`` take it only as listed (tests/cpu/test_archive_documents.py has
the rules on small archives)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import foundry
from foundry.archive import read_manifest
from foundry.errors import ArchiveSignatureError
from foundry.storage import document_ref
from foundry.trust import SigningKey
from foundry.verify import Check, ProblemKind, verify_archive
from tests.cpu.test_verify_fake import FAMILY
from tests.support.graphs import Scenario, run_save
from tests.support.subproc import run_json
from tests.support.verify_archives import problem

SECRET = b"foundry test signing key, 32 b!"
NAME = "tool_plugin.json"
WITH_DOCUMENT = Scenario(
    alloc=FAMILY.alloc,
    capture=FAMILY.capture
    + """
    foundry.write_archive_document(ARCH, "tool_plugin.json", {"format": "tool", "steps": ["a", "b"]})
    MANIFEST_DOCUMENTS = ["tool_plugin.json"]
    """,
)


@pytest.fixture(scope="module")
def signed(fakecuda_dir: Path, foundry_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(an archive saved with a signing key configured and one document, the key file)."""
    root = tmp_path_factory.mktemp("documents")
    key = root / "foundry.key"
    key.write_bytes(SECRET)

    def runner(code: str, env: Mapping[str, str] | None = None) -> Any:
        return run_json(code, lib_dir=fakecuda_dir, env=env, preload=foundry_lib)

    run_save(runner, WITH_DOCUMENT, root / "arch", env={"FOUNDRY_SIGNING_KEY": str(key)})
    return root / "arch", key


@pytest.fixture
def archive(signed: tuple[Path, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(signed[0], tmp_path / "arch"))


def test_save_lists_the_document_and_signs_it_with_the_rest(signed: tuple[Path, Path]) -> None:
    archive, key = signed
    manifest = read_manifest(archive)
    assert manifest.documents == (document_ref(archive, NAME),) and manifest.signature is not None
    assert foundry.read_archive_document(archive, NAME, signing_key=key) == {"format": "tool", "steps": ["a", "b"]}
    report = verify_archive(archive, key=key)
    assert report.ok and {c.check: c.status for c in report.checks}[Check.FOREIGN] == "passed", report.problems


def test_a_document_changed_after_signing_is_refused_and_reported(archive: Path, signed: tuple[Path, Path]) -> None:
    key = SigningKey(SECRET)
    path = archive / NAME
    path.write_bytes(path.read_bytes().replace(b'"a"', b'"z"'))
    with pytest.raises(
        ArchiveSignatureError, match=r"tool_plugin\.json: the document's content SHA-256 is .* lists other"
    ):
        foundry.read_archive_document(archive, NAME, signing_key=key)
    report = verify_archive(archive, key=key)  # as LOAD refuses it: under the key, the signature's
    problem(report, Check.SIGNATURE, ProblemKind.SIGNATURE, NAME, "document's content SHA-256 is", "lists other bytes")
