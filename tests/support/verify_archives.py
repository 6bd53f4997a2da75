"""Small archives for tests/cpu/test_verify_*.py (``foundry verify`` as a function), built from
tests.support.samples, and ways to rewrite them as a forger would (every checksum recomputed), plus
``only_failure`` / ``problem`` to pick a report's problems.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from foundry.archive import GraphStore, Manifest, read_graph, read_meta, write_graph, write_manifest
from foundry.images import ImageFormat
from foundry.records import Delta, GraphRecord, KernelNode, read_container_header
from foundry.records.container import pack_container
from foundry.schema import GraphEntry, GraphRole, Group, ImageEntry, RecordRef, TemplateRef
from foundry.schema.jsondocs import seal
from foundry.storage import sha256_file, write_image
from foundry.trust import SigningKey, sign_manifest
from foundry.verify import Check, ProblemKind, Report
from tests.fakecuda.images import make_cubin
from tests.support.encode import encode_delta, encode_record
from tests.support.samples import REGION_BASE, sample_identity, sample_meta, sample_record

# Real cubins, so that kernel names are checked: function i of sample_meta lives in image i % 2.
IMAGES = (make_cubin(["_Z6kernel0Pf", "_Z6kernel2Pf"]), make_cubin(["_Z6kernel1Pf"]))
VARYING = (0, 5)  # the top-level kernel nodes of sample_record
LIVE_END = REGION_BASE + 0x60_0000  # sample_meta's live memory is [base, base + 6 MiB)
OUTSIDE = REGION_BASE + 0x800_0000  # in the region, not live


# ------------------------------------------------------------------------------------------- building
def as_files() -> GraphStore:
    """Graphs read as their files say, whatever the manifest beside them lists (a forger rewrites both)."""
    return GraphStore(lambda directory: None)


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


def remanifest(
    directory: Path,
    varying: tuple[int, ...] = VARYING,
    key: SigningKey | None = None,
    documents: tuple[RecordRef, ...] = (),
) -> Manifest:
    """Writes the manifest for graph_0 (template) and graph_1 (member) as they are on disk now, listing
    ``documents``: every checksum recomputed, as a forger would."""
    metas = [read_meta(directory / f"graph_{i}.json", as_files()) for i in range(2)]
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
    kernels: dict[str, set[str]] = {}
    for m in metas:  # as save_graph_manifest lists them
        for fn in m.functions:
            kernels.setdefault(fn.image, set()).add(fn.name)
    images = {
        ref.sha256: dataclasses.replace(ImageEntry.from_ref(ref), kernels=tuple(sorted(kernels.get(ref.sha256, ()))))
        for m in metas
        for ref in m.images
    }
    manifest = Manifest(
        "0.1.0",
        "2025-01-01T00:00:00+00:00",
        sample_identity(),
        metas[0].region,
        tuple(images.values()),
        tuple(entries),
        (Group(entries[0].topology, 0, (1,), varying),),
        documents=documents,
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
    meta, payload = read_graph(directory / f"{name}.json", store=as_files())
    if record is not None:
        payload = encode_record(record)
    written = write_graph(directory / f"{name}.json", dataclasses.replace(meta, **changes), payload)
    if name == "graph_0" and retarget:
        assert written.record is not None
        write_member(directory, member_delta(written.record.sha256, member_record(sample_record())),
                     member_record(sample_record()))  # fmt: skip
    remanifest(directory)


def forge_graph(directory: Path, name: str, record: GraphRecord) -> None:
    """Replaces graph ``name``'s record with ``record`` whatever it says (``write_graph`` would refuse a
    record that disagrees with the metadata), with the checksums of the JSON and the manifest recomputed."""
    meta = read_meta(directory / f"{name}.json", as_files())
    container = pack_container(encode_record(record))
    header = read_container_header(container)
    (directory / f"{name}.cugraph").write_bytes(container)
    ref = RecordRef(f"{name}.cugraph", header.record_size, header.sha256)
    (directory / f"{name}.json").write_bytes(seal(dataclasses.replace(meta, record=ref).to_json()))
    if name == "graph_0":  # the member, stored against the forged template
        member = member_record(sample_record())
        write_member(directory, member_delta(header.sha256, member), member)
    remanifest(directory)


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
