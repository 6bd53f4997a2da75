"""`foundry verify` as a function (foundry.verify.verify_archive), on small archives built in
tests/support/verify_archives.py: forged pointers (kernel arguments, member overrides, `extra` buffers,
memsets, outputs, RNG state) are found by the pointer scan and named; an identity mismatch names both
values. Files, kernels and templates: test_verify_files.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from foundry.archive import read_graph, read_meta
from foundry.records import Delta, KernelNode, parse_record
from foundry.verify import Check, ProblemKind, verify_archive
from tests.support.samples import sample_identity, sample_record
from tests.support.verify_archives import (
    LIVE_END,
    OUTSIDE,
    build_archive,
    member_record,
    only_failure,
    remanifest,
    rewrite,
    write_member,
)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return build_archive(tmp_path / "arch")


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
    assert "graph 'graph_0', node 0 (kernel _Z6kernel0Pf), parameter 1" in msg and f"{OUTSIDE:#x}" in msg
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
    assert p.path.endswith("graph_1.json") and "graph 'graph_1', node 0 (kernel _Z6kernel0Pf)" in p.message


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
    (message,) = [p.message for p in problems]  # the manifest and both graphs share one identity: reported once
    assert message.startswith("graph 'graph_0' was saved on a different machine")  # as LOAD names it
    assert "'NVIDIA H100 80GB HBM3'" in message and "'NVIDIA A100-SXM4-80GB'" in message
    assert "9.0" in message and "8.0" in message and "JIT" in message
    assert dict(problems[0].details)["differences"] == [
        {"field": "gpu_name", "saved": "NVIDIA H100 80GB HBM3", "current": "NVIDIA A100-SXM4-80GB"},
        {"field": "compute_capability", "saved": (9, 0), "current": (8, 0)},
    ]
