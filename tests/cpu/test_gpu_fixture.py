"""The real format: an archive saved on an H100 (scripts/make_fixture.py, kept in
tests/fixtures/gpu_archive), read, inspected and verified on the CPU, then damaged in copies."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from foundry.archive import read_graph, read_manifest, write_graph, write_manifest
from foundry.errors import ArchiveCorruptError, ArchiveError
from foundry.load.source import read_source
from foundry.records import KernelNode, kernel_pointer_words, parse_delta, parse_record
from foundry.schema import Identity
from foundry.storage import sha256_file
from foundry.verify import Check, ProblemKind, verify_archive
from tests.support.encode import encode_delta, override_indices

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    copy = tmp_path / "archive"
    shutil.copytree(FIXTURE, copy)
    return copy


def test_real_archive_holds_a_template_a_member_rng_and_state_memory() -> None:
    manifest = read_manifest(FIXTURE)
    assert manifest.identity.gpu_name == "NVIDIA H100 80GB HBM3" and manifest.identity.torch_version.startswith("2.11")
    assert [(g.name, g.role.value) for g in manifest.graphs] == [("ew_bs64", "template"), ("ew_bs32", "member")]
    template_meta, template_payload = read_graph(FIXTURE / "ew_bs64.json")
    member_meta, member_payload = read_graph(FIXTURE / "ew_bs32.json")
    record = parse_record(template_payload)
    delta = parse_delta(member_payload)
    assert template_meta.record is not None and member_meta.template is not None
    assert delta.template_sha256 == template_meta.record.sha256 == member_meta.template.record_sha256
    assert [i for i, _ in delta.overrides] == list(manifest.groups[0].varying)
    assert all(isinstance(n, KernelNode) for n in record.nodes)
    # Dropout: PyTorch 2.11 passes the seed and the offset through pointers into region memory.
    for meta in (template_meta, member_meta):
        assert meta.rng is not None and meta.rng.increment > 0
        assert meta.rng.seed_address and meta.rng.offset_address
        assert meta.memory is not None and sha256_file(FIXTURE / "memory" / f"{meta.memory.sha256}.bin")


def test_real_archive_passes_every_static_check() -> None:
    report = verify_archive(FIXTURE)
    ran = {c.check: c.status for c in report.checks}
    assert report.ok, [str(p) for p in report.problems]
    for check in (Check.FILES, Check.FOREIGN, Check.KERNELS, Check.TEMPLATES, Check.POINTERS):
        assert ran[check] == "passed"


def test_inspect_summarises_the_real_archive() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "foundry.cli", "inspect", str(FIXTURE), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    summary = json.loads(out.stdout)
    assert summary["identity"]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert [g["name"] for g in summary["graphs"]] == ["ew_bs64", "ew_bs32"]
    assert summary["groups"] == 1 and summary["nodes"]["kernel"] == 4
    assert any("dropout" in k["name"] or "fused_dropout" in k["name"] for k in summary["kernels"])


def test_another_gpu_is_reported_with_both_values() -> None:
    saved = read_manifest(FIXTURE).identity
    here = dataclasses.replace(saved, gpu_name="NVIDIA H200", sm_count=132)
    report = verify_archive(FIXTURE, current_identity=Identity(**dataclasses.asdict(here)))
    problems = report.problems_of(Check.IDENTITY)
    assert problems and all(p.kind == ProblemKind.IDENTITY for p in problems)
    assert "NVIDIA H200" in problems[0].message and "NVIDIA H100 80GB HBM3" in problems[0].message


def test_flipped_byte_in_a_real_image_is_named(archive: Path) -> None:
    image = sorted((archive / "images").iterdir())[0]
    data = bytearray(image.read_bytes())
    data[len(data) // 2] ^= 0x01
    image.write_bytes(bytes(data))
    report = verify_archive(archive)
    assert not report.ok
    assert any(p.check == Check.FILES and image.name[:12] in p.path + p.message for p in report.problems)


def test_forged_pointer_in_the_real_member_is_caught_by_the_pointer_scan_alone(archive: Path) -> None:
    """A forger who rewrites the member's delta and every checksum above it: only the scan notices."""
    meta, payload = read_graph(archive / "ew_bs32.json")
    delta = parse_delta(payload)
    region = meta.region
    outside = region.base + region.high_water + (64 << 20)  # inside the region, beyond anything live
    # The first argument word of an override that points into the region (a real tensor pointer).
    position, index, node, param, off = next(
        (k, i, n, param, off)
        for k, (i, n) in enumerate(delta.overrides)
        if isinstance(n, KernelNode)
        for param, off, value in kernel_pointer_words(n)
        if region.base <= value < region.base + region.size
    )
    forged = dataclasses.replace(node, args=node.args[:off] + outside.to_bytes(8, "little") + node.args[off + 8 :])
    overrides = list(delta.overrides)
    overrides[position] = (index, forged)
    payload = encode_delta(dataclasses.replace(delta, overrides=tuple(overrides)))
    # The fixture is format version 2, which says nothing of module variables; rewritten as the current
    # version it states that its images carry none (its kernels read none).
    images = tuple(dataclasses.replace(ref, variables=()) for ref in meta.images)
    written = write_graph(archive / "ew_bs32.json", dataclasses.replace(meta, record=None, images=images), payload)
    assert written.record is not None
    manifest = read_manifest(archive)
    graphs = tuple(
        dataclasses.replace(g, json_sha256=sha256_file(archive / g.json), record_sha256=written.record.sha256)
        if g.name == "ew_bs32"
        else g
        for g in manifest.graphs
    )
    write_manifest(archive, dataclasses.replace(manifest, graphs=graphs))
    report = verify_archive(archive)
    failed = {c.check for c in report.checks if c.status == "failed"}
    assert failed == {Check.POINTERS}, [str(p) for p in report.problems]
    details = dict(report.problems_of(Check.POINTERS)[0].details)
    assert details["graph"] == "ew_bs32" and details["parameter"] == param and details["address"] == outside


def test_override_indices_of_the_real_member_match_its_parsed_delta() -> None:
    """LOAD's quick walk of a delta and the full parser agree; damage raises only archive errors."""
    _meta, payload = read_graph(FIXTURE / "ew_bs32.json")
    indices = override_indices(payload)
    assert indices == [i for i, _ in parse_delta(payload).overrides] and indices
    for cut in range(len(payload)):
        with pytest.raises(ArchiveError):
            override_indices(payload[:cut])
    for pos in range(len(payload)):
        flipped = bytearray(payload)
        flipped[pos] ^= 0xFF
        with contextlib.suppress(ArchiveError):  # a flip may still be a valid delta; nothing else may escape
            override_indices(bytes(flipped))
    huge = bytearray(payload)
    huge[8:12] = (1 << 31).to_bytes(4, "little")  # an override count far beyond the data
    with pytest.raises(ArchiveCorruptError, match=r"overrides cannot fit"):  # refused before any walk
        override_indices(bytes(huge))


def test_a_template_is_one_source_whether_listed_or_reached_from_its_member() -> None:
    member = read_source(FIXTURE / "ew_bs32.json", lazy=True)
    template = read_source(FIXTURE / "ew_bs64.json", lazy=True)
    assert member.template is template
    assert template.json_sha256 == sha256_file(FIXTURE / "ew_bs64.json")
