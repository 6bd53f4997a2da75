"""``foundry verify`` and LOAD stay bounded whatever an archive claims: a graph JSON listing 100,000 kernels
that no image defines, or a manifest listing thousands of images none of which is there, is reported in a
page, with the repeated findings summarised and counted, not listed one by one; a graph JSON its manifest
does not commit to is never decoded, however large; and one too large to decode in the memory a process
has is refused by name."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from foundry import _state
from foundry.archive import MANIFEST_NAME
from foundry.cli.verify import render
from foundry.errors import ArchiveCorruptError
from foundry.gate.findings import MAX_LISTED, MAX_NOTES, MAX_PER_FILE, Findings
from foundry.load import preflight
from foundry.load.source import read_source
from foundry.schema import jsondocs
from foundry.schema.jsondocs import seal
from foundry.verify import Check, ProblemKind, Report, verify_archive, verify_graphs
from tests.support.archive_damage import edit_doc, load_doc, relist, write_doc
from tests.support.steps import steps
from tests.support.subproc import child_env

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"
CLAIMED = 100_000


def test_a_graph_claiming_many_kernels_gets_a_short_report_with_exact_counts(tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    shutil.copytree(FIXTURE, arch)

    def claim(doc: dict[str, Any]) -> None:
        first = doc["functions"][0]
        doc["functions"] = [dict(first, name=f"k{i}") for i in range(CLAIMED)]

    edit_doc(arch / "ew_bs64.json", claim)
    relist(arch / "ew_bs64.json")  # as a forger would: a JSON the manifest does not list is not decoded
    # The work is counted in steps (tests/support/steps.py), not timed: some 40 a kernel claimed, and a
    # walk of the problems found so far for each new one would take thousands.
    done: list[tuple[Report, str]] = []

    def verify() -> None:
        report = verify_archive(arch)
        done.append((report, render(report)))

    assert steps(verify, budget=100 * CLAIMED) < 100 * CLAIMED
    ((report, text),) = done
    counts = {c.check: c.problems for c in report.checks}
    # Each kernel is missing from its image and from the manifest's kernel list: all counted.
    assert counts[Check.KERNELS] >= 2 * CLAIMED - 2
    kernels = report.problems_of(Check.KERNELS)
    assert len(kernels) == MAX_PER_FILE + 1
    summary = kernels[-1]
    assert f"{counts[Check.KERNELS] - MAX_PER_FILE} more kernels problems in this file" in summary.message
    assert dict(summary.details)["more"] == counts[Check.KERNELS] - MAX_PER_FILE
    assert f"FAILED: {sum(counts.values())} problems" in report.verdict
    assert len(text) < 20_000, len(text)


def test_many_files_with_problems_give_a_bounded_report(tmp_path: Path) -> None:
    """A manifest listing 5,000 images, none of them there: each is a problem in a file of its own, so past
    the problems listed only one summary more is given (it was one per file: 54 MB for 200,000 images)."""
    arch = tmp_path / "arch"
    shutil.copytree(FIXTURE, arch)
    doc = load_doc(arch / MANIFEST_NAME)
    for i in range(5000):
        sha = hashlib.sha256(str(i).encode()).hexdigest()
        doc["images"][sha] = {"file": f"images/{sha}.bin", "bytes": 1024, "format": "elf"}
    write_doc(arch / MANIFEST_NAME, doc)
    report = verify_archive(arch)
    files = [p for p in report.problems if p.check == Check.FILES]
    assert {c.check: c.problems for c in report.checks}[Check.FILES] >= 5000
    assert MAX_LISTED <= len(report.problems) <= MAX_LISTED + len(Check)
    (beyond,) = [p for p in files if "in this and other files" in p.message]
    assert dict(beyond.details)["more"] == {c.check: c.problems for c in report.checks}[Check.FILES] - len(files) + 1
    assert len(json.dumps(report.to_json())) < 1_000_000


def test_findings_stay_bounded_in_problems_summaries_and_notes() -> None:
    found = Findings()
    for i in range(20_000):
        found.add(Check.FILES, ProblemKind.MISSING, f"/a/{i}", "missing")
        found.add(Check.KERNELS, ProblemKind.MISMATCH, "/a/one", "no such kernel")
        found.note(f"note {i}")
    assert len(found.problems) == MAX_LISTED and len(found.summaries()) <= 3
    assert sum(dict(p.details)["more"] for p in found.summaries()) + MAX_LISTED == 40_000
    notes = found.all_notes()
    assert len(notes) == MAX_NOTES + 1 and notes[-1].startswith(f"{20_000 - MAX_NOTES} more note")


def test_a_graph_json_its_manifest_does_not_commit_to_is_never_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listed graph JSON replaced by other bytes (here 8 MB that would decode): refused by its SHA-256
    against the manifest before anything decodes it, by LOAD, the preflight and verify in both modes."""
    _state.reset_all()
    arch = tmp_path / "arch"
    shutil.copytree(FIXTURE, arch)
    doc = load_doc(arch / "ew_bs64.json")
    doc["functions"] = doc["functions"] * 20_000
    (arch / "ew_bs64.json").write_bytes(seal(doc))
    decoded: list[int] = []
    real = jsondocs.decode

    def spy(text: str, parts: Any = None) -> Any:
        decoded.append(len(text))
        return real(text, parts)

    monkeypatch.setattr(jsondocs, "decode", spy)
    with pytest.raises(ArchiveCorruptError) as refused:
        read_source(arch / "ew_bs64.json", lazy=True)
    assert all(n < 1_000_000 for n in decoded), "LOAD decoded a JSON the manifest does not list"
    assert re.search(r"SHA-256 is .* lists .* changed after the manifest", str(refused.value))
    _state.reset_all()
    with pytest.raises(ArchiveCorruptError, match="changed after the manifest"):
        preflight([arch / "ew_bs64.json"])
    assert not verify_archive(arch).ok and not verify_graphs([arch / "ew_bs64.json"]).ok
    assert all(n < 1_000_000 for n in decoded), "a JSON the manifest does not list was decoded"


LIMIT_MB = 300
LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (@LIMIT@, @LIMIT@))
from foundry.load.source import read_source
try:
    read_source(sys.argv[1], lazy=True)
    print("loaded")
except Exception as exc:
    print(type(exc).__name__, str(exc)[:300])
"""


def test_a_graph_json_too_large_for_the_memory_at_hand_is_refused_by_name(tmp_path: Path) -> None:
    """No manifest lists it (its seal is what proves it): decoding 58 MB of JSON in a process limited to
    300 MB of address space runs out of memory, which LOAD names as the file's problem, not a bare
    MemoryError (as it would a JSON of up to 1 GiB under a limit of a few GiB)."""
    import subprocess
    import sys

    doc = load_doc(FIXTURE / "ew_bs64.json")
    doc["outputs"] = [[0] * 64] * 300_000  # the text is 58 MB, decoded several times that
    path = tmp_path / "huge.json"
    path.write_bytes(seal(doc))
    assert path.stat().st_size > 50_000_000
    code = LIMITED.replace("@LIMIT@", str(LIMIT_MB << 20))
    out = subprocess.run([sys.executable, "-c", code, str(path)], env=child_env(), capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ArchiveCorruptError") and "huge.json" in out.stdout, out.stdout
    assert "memory" in out.stdout


def test_a_background_failure_that_says_nothing_is_named_by_its_kind() -> None:
    """Start-up's background work failing with an error that has no message (a MemoryError) raises a LoadError
    that still says what happened (it was empty)."""
    from concurrent.futures import Future

    from foundry.errors import LoadError
    from foundry.load import startup, wait_for_startup

    _state.reset_all()
    job: Future[None] = Future()
    job.set_exception(MemoryError())
    startup._STATE.get().jobs[Path("/nowhere")] = job
    try:
        with pytest.raises(LoadError, match="failed in the background: MemoryError") as refused:
            wait_for_startup()
        assert isinstance(refused.value.__cause__, MemoryError)
    finally:
        _state.reset_all()
