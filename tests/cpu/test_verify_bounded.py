"""``foundry verify`` stays bounded whatever an archive claims: a graph JSON listing 100,000 kernels that
no image defines is reported in a page, with the repeated findings summarised and counted, not
listed one by one."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from foundry.cli.verify import render
from foundry.verify import Check, verify_archive
from foundry.verify.findings import MAX_PER_FILE
from tests.support.archive_damage import edit_doc, relist

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
    start = time.perf_counter()
    report = verify_archive(arch)
    text = render(report)
    elapsed = time.perf_counter() - start
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
    assert elapsed < 30, elapsed  # a bound for a busy shared CPU; about 1 s on an idle one
