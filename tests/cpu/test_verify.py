"""`foundry verify` as a function (foundry.archive.verify.verify_archive), on small archives built here
from foundry.archive.samples: each defect is found, named, and reported by the check it belongs to."""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import (
    Delta,
    GraphEntry,
    GraphRecord,
    GraphRole,
    Group,
    ImageEntry,
    ImageFormat,
    KernelNode,
    Manifest,
    MemorySpec,
    TemplateRef,
    check_archive,
    encode_delta,
    encode_record,
    image_path,
    parse_record,
    read_graph,
    read_meta,
    sha256_bytes,
    sha256_file,
    write_graph,
    write_image,
    write_manifest,
)
from foundry.archive.problems import Check, ProblemKind
from foundry.archive.samples import REGION_BASE, sample_identity, sample_meta, sample_record
from foundry.archive.signed_archive import sign_manifest
from foundry.archive.signing import SigningKey
from foundry.archive.verify import Report, verify_archive
from foundry.errors import ArchiveCorruptError
from tests.fakecuda.images import make_cubin, make_ptx

# Real cubins, so that kernel names are checked: function i of sample_meta lives in image i % 2.
IMAGES = (make_cubin(["_Z6kernel0Pf", "_Z6kernel2Pf"]), make_cubin(["_Z6kernel1Pf"]))
VARYING = (0, 5)  # the top-level kernel nodes of sample_record
LIVE_END = REGION_BASE + 0x60_0000  # sample_meta's live memory is [base, base + 6 MiB)
OUTSIDE = REGION_BASE + 0x800_0000  # in the region, not live


# ------------------------------------------------------------------------------------------- building
def member_record(base: GraphRecord) -> GraphRecord:
    """Same topology, other grids and argument bytes in the top-level kernels (pointers XOR 0x40 leave
    the region, so they are not scanned)."""
    nodes = tuple(
        dataclasses.replace(n, grid=(128, 1, 1), args=bytes(b ^ 0x40 for b in n.args))
        if isinstance(n, KernelNode)
        else n
        for n in base.nodes
    )
    return dataclasses.replace(base, nodes=nodes)


def remanifest(directory: Path, varying: tuple[int, ...] = VARYING, key: SigningKey | None = None) -> Manifest:
    """Writes the manifest for graph_0 (template) and graph_1 (member) as they are on disk now: every
    checksum recomputed, as a forger would."""
    metas = [read_meta(directory / f"graph_{i}.json") for i in range(2)]
    entries = []
    for i, m in enumerate(metas):
        assert m.record is not None
        entries.append(
            GraphEntry(
                m.name,
                f"graph_{i}.json",
                sha256_file(directory / f"graph_{i}.json"),
                m.record.sha256,
                m.stats_dict()["nodes"],
                m.topology,
                0,
                GraphRole.TEMPLATE if i == 0 else GraphRole.MEMBER,
            )
        )
    images = {ref.sha256: ImageEntry.from_ref(ref) for m in metas for ref in m.images}
    manifest = Manifest(
        "0.1.0",
        "2025-01-01T00:00:00+00:00",
        sample_identity(),
        metas[0].region,
        tuple(images.values()),
        tuple(entries),
        (Group(entries[0].topology, 0, (1,), varying),),
    )
    if key is not None:
        manifest = sign_manifest(manifest, key)
    write_manifest(directory, manifest)
    return manifest


def write_member(
    directory: Path,
    delta: Delta,
    record: GraphRecord,
    template: str = "graph_0.json",
    images: tuple[bytes, ...] = IMAGES,
) -> None:
    meta = sample_meta("graph_1", record, images, ".")
    meta = dataclasses.replace(meta, template=TemplateRef(template, delta.template_sha256))
    write_graph(directory / "graph_1.json", meta, encode_delta(delta))


def member_delta(template_sha256: str, member: GraphRecord) -> Delta:
    return Delta(template_sha256, 3, tuple((i, member.nodes[i]) for i in VARYING))


def build_archive(directory: Path, images: tuple[bytes, ...] = IMAGES, key: SigningKey | None = None) -> Path:
    """graph_0 (sample_record) and graph_1 (a member stored as a delta overriding its two top-level kernels)."""
    directory.mkdir(parents=True)
    for image in images:
        write_image(directory, image, ImageFormat.ELF)
    base = sample_record()
    template = write_graph(directory / "graph_0.json", sample_meta("graph_0", base, images, "."), encode_record(base))
    assert template.record is not None
    other = member_record(base)
    write_member(directory, member_delta(template.record.sha256, other), other, images=images)
    remanifest(directory, key=key)
    return directory


def rewrite(
    directory: Path, name: str, record: GraphRecord | None = None, retarget: bool = True, **changes: Any
) -> None:
    """Rewrites graph ``name`` with another record and/or metadata, then, as a forger would, the member's
    delta against the rewritten template (unless ``retarget`` is False) and the manifest."""
    meta, payload = read_graph(directory / f"{name}.json")
    if record is not None:
        payload = encode_record(record)
    written = write_graph(directory / f"{name}.json", dataclasses.replace(meta, **changes), payload)
    if name == "graph_0" and retarget:
        assert written.record is not None
        write_member(directory, member_delta(written.record.sha256, member_record(sample_record())),
                     member_record(sample_record()))  # fmt: skip
    remanifest(directory)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return build_archive(tmp_path / "arch")


def only_failure(report: Report, check: Check) -> list[Any]:
    """The problems of ``report``, after asserting that ``check`` is the one check that failed."""
    failed = {c.check for c in report.checks if c.status == "failed"}
    assert failed == {check}, [str(p) for p in report.problems]
    assert not report.ok
    return list(report.problems)


def problem(report: Report, check: Check, kind: ProblemKind, path_end: str, *fragments: str) -> Any:
    """The first problem of that check and kind whose path ends with ``path_end`` and names every fragment."""
    for p in report.problems:
        if p.check == check and p.kind == kind and p.path.endswith(path_end) and all(f in p.message for f in fragments):
            return p
    raise AssertionError(f"no {check.value}/{kind.value} problem at *{path_end} with {fragments}: {report.problems}")


# ---------------------------------------------------------------------------------------- sound archive
def test_sound_archive_with_a_member_passes_every_check(archive: Path) -> None:
    report = verify_archive(archive, current_identity=sample_identity())
    assert report.ok, [str(p) for p in report.problems]
    assert report.mode == "archive" and report.graphs == 2 and report.images == 2
    status = {c.check: c.status for c in report.checks}
    assert status == {**{c: "passed" for c in Check}, Check.SIGNATURE: "skipped"}
    assert report.notes == ()  # real cubins: every kernel name was looked up
    assert report.verdict.startswith("OK:") and "skipped: signature" in report.verdict
    assert (archive / "graph_1.cugraph").read_bytes()[64:68] == b"FGD1"  # the member really is a delta
    assert check_archive(archive) == []
    doc = report.to_json()
    assert json.loads(json.dumps(doc)) == doc and doc["ok"] is True and doc["problems"] == []


def test_single_member_graph_json_is_verified_with_its_template(archive: Path) -> None:
    report = verify_archive(archive / "graph_1.json", current_identity=sample_identity())
    assert report.ok, [str(p) for p in report.problems]
    assert report.mode == "graph" and report.graphs == 2 and report.images == 2
    status = {c.check: c.status for c in report.checks}
    assert status[Check.FOREIGN] == "skipped" and status[Check.TEMPLATES] == status[Check.POINTERS] == "passed"
    assert "unsigned" in next(c.reason for c in report.checks if c.check == Check.SIGNATURE)


def test_missing_path_and_non_archive_directory(tmp_path: Path) -> None:
    report = verify_archive(tmp_path / "nothing.json")
    problem(report, Check.FILES, ProblemKind.MISSING, "nothing.json", "cannot read")
    assert {c.status for c in report.checks if c.check != Check.FILES} == {"skipped"}
    empty = tmp_path / "empty"
    empty.mkdir()
    report = verify_archive(empty)
    problem(report, Check.FILES, ProblemKind.CORRUPT, "empty", "graph_manifest.json")


# --------------------------------------------------------------------------------------------- files
def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def patch(path: Path, offset: int, data: bytes) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[:offset] + data + raw[offset + len(data) :])


def image0(a: Path) -> Path:
    return image_path(a, sha256_bytes(IMAGES[0]))


def edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def add_memory(a: Path) -> Path:
    data = bytes(range(256)) * 16
    sha = sha256_bytes(data)
    (a / "memory").mkdir()
    (a / "memory" / f"{sha}.bin").write_bytes(data)
    rewrite(a, "graph_0", memory=MemorySpec(sha, len(data), ((0x1000, len(data)),)))
    assert verify_archive(a).ok
    return a / "memory" / f"{sha}.bin"


FILE_DAMAGE = [
    pytest.param(lambda a: flip(image0(a), 200), ProblemKind.CHECKSUM, ".bin", "content SHA-256", id="image-bitflip"),
    pytest.param(lambda a: truncate(image0(a), 100), ProblemKind.CHECKSUM, ".bin", "100 bytes", id="image-truncated"),
    pytest.param(lambda a: image0(a).unlink(), ProblemKind.MISSING, ".bin", "cannot be read", id="image-missing"),
    pytest.param(
        lambda a: flip(a / "graph_0.cugraph", -3), ProblemKind.CORRUPT, "graph_0.json", "damaged", id="record-bitflip"
    ),
    pytest.param(
        lambda a: truncate(a / "graph_0.cugraph", 90),
        ProblemKind.CORRUPT,
        "graph_0.json",
        "truncated",
        id="record-truncated",
    ),
    pytest.param(
        lambda a: flip(a / "graph_1.cugraph", 100), ProblemKind.CORRUPT, "graph_1.json", "damaged", id="delta-bitflip"
    ),
    pytest.param(
        lambda a: flip(a / "graph_0.json", 40),
        ProblemKind.CHECKSUM,
        "graph_0.json",
        "the manifest says",
        id="json-bitflip",
    ),
    pytest.param(
        lambda a: truncate(a / "graph_1.json", 50), ProblemKind.CHECKSUM, "graph_1.json", "SHA-256", id="json-truncated"
    ),
    pytest.param(
        lambda a: edit_json(a / "graph_0.json", lambda d: d.update(format_version=2)),
        ProblemKind.VERSION,
        "graph_0.json",
        "format_version 2",
        id="json-version",
    ),
    pytest.param(
        lambda a: edit_json(a / "graph_manifest.json", lambda d: d.update(format_version=9)),
        ProblemKind.VERSION,
        "arch",
        "format_version 9",
        id="manifest-version",
    ),
    pytest.param(
        lambda a: patch(a / "graph_0.cugraph", 8, struct.pack("<I", 7)),
        ProblemKind.VERSION,
        "graph_0.json",
        "container version",
        id="container-version",
    ),
    pytest.param(lambda a: flip(add_memory(a), 7), ProblemKind.CHECKSUM, ".bin", "state memory", id="memory-bitflip"),
    pytest.param(lambda a: add_memory(a).unlink(), ProblemKind.MISSING, ".bin", "state memory", id="memory-missing"),
]


@pytest.mark.parametrize(("damage", "kind", "path_end", "fragment"), FILE_DAMAGE)
def test_damaged_file_is_found_by_the_files_check(
    archive: Path, damage: Callable[[Path], None], kind: ProblemKind, path_end: str, fragment: str
) -> None:
    damage(archive)
    report = verify_archive(archive)
    problem(report, Check.FILES, kind, path_end, fragment)
    assert Check.FILES in {c.check for c in report.checks if c.status == "failed"}
    assert report.verdict.startswith("FAILED:") and "files" in report.verdict


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("notes.txt", "not part of the archive"),
        ("images/helper.so", "not part of the archive"),
        (".graph_0.json.0123456789ab.foundry-tmp", "interrupted write"),
        ("graph_7.json", "does not list"),
    ],
)
def test_foreign_file_is_named(archive: Path, name: str, fragment: str) -> None:
    (archive / name).write_bytes(b"\x7fELF not ours")
    problems = only_failure(verify_archive(archive), Check.FOREIGN)
    assert [(p.kind, Path(p.path).name) for p in problems] == [(ProblemKind.FOREIGN, Path(name).name)]
    assert fragment in problems[0].message


def test_unused_image_left_by_an_earlier_save_is_only_noted(archive: Path) -> None:
    stale = make_cubin(["_Z5stalev"])
    write_image(archive, stale, ImageFormat.ELF)
    report = verify_archive(archive)
    assert report.ok
    assert any(sha256_bytes(stale) in n and "LOAD ignores it" in n for n in report.notes)


# ------------------------------------------------------------------------------------------- kernels
def test_kernel_missing_from_its_image_is_named(tmp_path: Path) -> None:
    images = (make_cubin(["_Z6kernel0Pf"]), IMAGES[1])  # function 2 lives in image 0, which lacks it
    report = verify_archive(build_archive(tmp_path / "arch", images))
    problems = only_failure(report, Check.KERNELS)
    assert [Path(p.path).name for p in problems] == ["graph_0.json", "graph_1.json"]  # both use the kernel
    for p in problems:
        assert p.kind == ProblemKind.MISSING and "function 2 (_Z6kernel2Pf)" in p.message
        assert sha256_bytes(images[0]) in p.message and "LOAD would not find the kernel" in p.message


def test_image_of_another_format_than_recorded(tmp_path: Path) -> None:
    images = (make_ptx(["_Z6kernel0Pf", "_Z6kernel2Pf"]), IMAGES[1])  # PTX recorded as ELF
    report = verify_archive(build_archive(tmp_path / "arch", images))
    problems = only_failure(report, Check.KERNELS)
    assert [p.kind for p in problems] == [ProblemKind.MISMATCH]
    assert "recorded as elf" in problems[0].message and "are ptx" in problems[0].message


# ----------------------------------------------------------------------------------------- templates
def test_delta_whose_template_was_saved_again(archive: Path) -> None:
    base = sample_record()
    resaved = dataclasses.replace(base, nodes=(dataclasses.replace(base.nodes[0], grid=(1, 1, 1)), *base.nodes[1:]))
    rewrite(archive, "graph_0", resaved, retarget=False)  # every checksum of the archive is consistent again
    (p,) = only_failure(verify_archive(archive), Check.TEMPLATES)
    assert p.kind == ProblemKind.MISMATCH and p.path.endswith("graph_1.json")
    assert "saved again after this member" in p.message and "LOAD refuses it" in p.message


def test_override_of_a_node_of_another_type_or_that_does_not_exist(archive: Path) -> None:
    template_sha = read_meta(archive / "graph_0.json").record.sha256  # type: ignore[union-attr]
    other = member_record(sample_record())
    kernel = other.nodes[0]
    write_member(archive, Delta(template_sha, 3, ((0, kernel), (1, kernel))), other)  # node 1 is a memset
    remanifest(archive, varying=(0, 1))
    problems = only_failure(verify_archive(archive), Check.TEMPLATES)
    assert any("replaces node 1, a memset node" in p.message for p in problems)
    write_member(archive, Delta(template_sha, 3, ((0, kernel), (99, kernel))), other)
    remanifest(archive, varying=(0, 99))
    problems = only_failure(verify_archive(archive), Check.TEMPLATES)
    assert any("overrides node 99; the template has 7 nodes" in p.message for p in problems)


def test_manifest_varying_list_must_match_the_deltas(archive: Path) -> None:
    remanifest(archive, varying=(0,))
    (p,) = only_failure(verify_archive(archive), Check.TEMPLATES)
    assert "overrides nodes [0, 5], but the manifest says nodes [0] vary in group 0" in p.message


def test_graph_stored_as_changes_to_itself(archive: Path) -> None:
    from foundry.graphs.load import read_source

    other = member_record(sample_record())
    delta = Delta("ab" * 32, 3, ((0, other.nodes[0]),))
    write_member(archive, delta, other, template="graph_1.json")
    remanifest(archive, varying=(0,))
    report = verify_archive(archive)
    only_failure(report, Check.TEMPLATES)
    problem(report, Check.TEMPLATES, ProblemKind.CORRUPT, "graph_1.json", "stored as changes to itself")
    with pytest.raises(ArchiveCorruptError, match="leads back to itself"):
        read_source(archive / "graph_1.json")


def test_template_cycle_is_refused_by_load_not_recursed(archive: Path) -> None:
    """graph_1 is changes to graph_0, and graph_0 (rewritten as a delta) changes to graph_1."""
    from foundry.graphs.load import read_source

    member_sha = read_meta(archive / "graph_1.json").record.sha256  # type: ignore[union-attr]
    base = sample_record()
    meta = dataclasses.replace(
        sample_meta("graph_0", base, IMAGES, "."), template=TemplateRef("graph_1.json", member_sha)
    )
    write_graph(archive / "graph_0.json", meta, encode_delta(Delta(member_sha, 3, ((0, base.nodes[0]),))))
    with pytest.raises(ArchiveCorruptError, match=r"graph_1\.json -> .*graph_0\.json -> .*graph_1\.json"):
        read_source(archive / "graph_1.json")
    remanifest(archive)
    report = verify_archive(archive)
    assert any("is itself stored as changes to another graph" in p.message for p in report.problems_of(Check.TEMPLATES))


# ------------------------------------------------------------------------------------------ pointers
def with_pointer(node: KernelNode, param: int, address: int) -> KernelNode:
    offset, size = node.params[param]
    assert size == 8
    args = node.args[:offset] + address.to_bytes(8, "little") + node.args[offset + 8 :]
    return dataclasses.replace(node, args=args)


def test_forged_kernel_argument_pointer_is_found_only_by_the_pointer_scan(archive: Path) -> None:
    record = parse_record(read_graph(archive / "graph_0.json")[1])
    child = record.nodes[4].record  # type: ignore[union-attr]
    forged_child = dataclasses.replace(child, nodes=(with_pointer(child.nodes[0], 1, OUTSIDE + 64), *child.nodes[1:]))
    nodes = list(record.nodes)
    nodes[0] = with_pointer(record.nodes[0], 1, OUTSIDE)  # type: ignore[arg-type]
    nodes[4] = dataclasses.replace(record.nodes[4], record=forged_child)  # type: ignore[call-arg]
    rewrite(archive, "graph_0", dataclasses.replace(record, nodes=tuple(nodes)))
    problems = only_failure(verify_archive(archive), Check.POINTERS)
    assert [p.kind for p in problems] == [ProblemKind.POINTER] * 3
    first, second, member = (dict(p.details) for p in problems)
    # The member is built from the template's record: it inherits the child graph (its overrides replace
    # node 0 only).
    assert member["graph"] == "graph_1" and member["node"] == (4, 0)
    assert first == {"graph": "graph_0", "node": (0,), "kernel": "_Z6kernel0Pf", "parameter": 1, "byte": 8,
                     "address": OUTSIDE, "end": OUTSIDE}  # fmt: skip
    assert second["node"] == (4, 0) and second["kernel"] == "_Z6kernel1Pf" and second["address"] == OUTSIDE + 64
    msg = problems[0].message
    assert "graph 0 (graph_0), node 0 (kernel _Z6kernel0Pf), parameter 1" in msg and f"{OUTSIDE:#x}" in msg
    assert "region offset 0x8000000" in msg and "not in its live memory" in msg
    assert "node 4 > 0 (kernel _Z6kernel1Pf), parameter 1" in problems[1].message


def test_forged_pointer_in_a_member_override_names_the_members_kernel(archive: Path) -> None:
    template_sha = read_meta(archive / "graph_0.json").record.sha256  # type: ignore[union-attr]
    other = member_record(sample_record())
    forged = with_pointer(other.nodes[0], 0, OUTSIDE)  # type: ignore[arg-type]
    write_member(archive, Delta(template_sha, 3, ((0, forged), (5, other.nodes[5]))), other)
    remanifest(archive)
    (p,) = only_failure(verify_archive(archive), Check.POINTERS)
    assert dict(p.details)["graph"] == "graph_1" and dict(p.details)["parameter"] == 0
    assert p.path.endswith("graph_1.json") and "graph 1 (graph_1), node 0 (kernel _Z6kernel0Pf)" in p.message


def test_extra_buffer_words_are_scanned(archive: Path) -> None:
    record = parse_record(read_graph(archive / "graph_0.json")[1])
    node = record.nodes[5]
    assert isinstance(node, KernelNode) and node.arg_mode == 1
    forged = dataclasses.replace(node, args=OUTSIDE.to_bytes(8, "little") + node.args[8:])
    rewrite(archive, "graph_0", dataclasses.replace(record, nodes=(*record.nodes[:5], forged, *record.nodes[6:])))
    (p,) = only_failure(verify_archive(archive), Check.POINTERS)
    assert "node 5 (kernel _Z6kernel2Pf), argument bytes 0..8" in p.message and dict(p.details)["parameter"] == -1


def test_memset_running_past_live_memory(archive: Path) -> None:
    record = parse_record(read_graph(archive / "graph_0.json")[1])
    memset = dataclasses.replace(record.nodes[1], dst=LIVE_END - 64)  # 64 elements of 4 bytes: 192 bytes too far
    rewrite(archive, "graph_0", dataclasses.replace(record, nodes=(record.nodes[0], memset, *record.nodes[2:])))
    p, inherited = only_failure(verify_archive(archive), Check.POINTERS)
    assert dict(inherited.details)["graph"] == "graph_1"
    assert "node 1 (memset destination)" in p.message and f"{LIVE_END - 64:#x}..{LIVE_END + 192:#x}" in p.message


def test_output_and_rng_outside_live_memory(archive: Path) -> None:
    meta = read_meta(archive / "graph_0.json")
    outputs = (dataclasses.replace(meta.outputs[0], address=OUTSIDE),)
    rewrite(archive, "graph_0", outputs=outputs, rng=dataclasses.replace(meta.rng, offset_address=0x1000))  # type: ignore[type-var]
    problems = only_failure(verify_archive(archive), Check.POINTERS)
    assert [dict(p.details).get("output", dict(p.details).get("rng")) for p in problems] == [0, "offset"]
    assert "output 0: bytes" in problems[0].message and "cannot hand it back" in problems[0].message


# ------------------------------------------------------------------------------------------ identity
def test_identity_mismatch_names_both_values_and_the_consequence(archive: Path) -> None:
    here = sample_identity(gpu_name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0))
    problems = only_failure(verify_archive(archive, current_identity=here), Check.IDENTITY)
    messages = [p.message for p in problems]
    assert len(messages) == 2  # the manifest and both graphs share one identity: reported once
    assert "'NVIDIA H100 80GB HBM3'" in messages[0] and "'NVIDIA A100-SXM4-80GB'" in messages[0]
    assert "9.0" in messages[1] and "8.0" in messages[1] and "JIT" in messages[1]
    assert dict(problems[0].details) == {
        "field": "gpu_name", "saved": "NVIDIA H100 80GB HBM3", "current": "NVIDIA A100-SXM4-80GB"
    }  # fmt: skip
