"""Kernel parameters read from kernel images (foundry/images/kparams.py), on real compiler output, and
``foundry verify`` holding each kernel node to them: a node LOAD would refuse (a parameter short, one of
another size, an ``extra`` buffer that ends before the last parameter) is reported without a GPU.

tests/fixtures/kparams holds cubins ptxas 13.5 (the nvidia-cuda-nvcc 13.5.37 wheel) built from the PTX beside
them:

    ptxas -arch=sm_90 kparams.ptx -o kparams.sm_90.cubin
    (kparams.ptx with .target sm_120)  ptxas -arch=sm_120 -o kparams.sm_120.cubin
    ptxas -arch=sm_90 sample0.ptx -o sample0.sm_90.cubin; ptxas -arch=sm_90 sample1.ptx -o sample1.sm_90.cubin

and tests/fixtures/images the nvcc 13.0 images of tests/cpu/test_image_variables.py.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from foundry.archive import read_meta
from foundry.gate.findings import Findings, GraphUnderCheck, ImageInfo
from foundry.gate.params import check_kernel_params, note_unchecked
from foundry.images import ImageFormat, detect_format
from foundry.images.elf import Section
from foundry.images.kparams import elf_kernel_params
from foundry.images.scan import kernel_names
from foundry.records import ChildGraphNode, GraphRecord, KernelNode
from foundry.verify import Check, ProblemKind, verify_archive
from tests.support.samples import sample_meta, sample_record
from tests.support.verify_archives import (
    build_archive,
    forge_graph,
    member_delta,
    member_record,
    problem,
    remanifest,
    write_member,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KPARAMS = FIXTURES / "kparams"
SAMPLE_IMAGES = tuple((KPARAMS / f"sample{i}.sm_90.cubin").read_bytes() for i in (0, 1))

# kparams.ptx's kernels: (offset, size) of each parameter, as cuFuncGetParamInfo reports them
EXPECTED = {
    "k_axpy": ((0, 4), (8, 8), (16, 8), (24, 4)),
    "k_none": (),
    "k_char": ((0, 1), (8, 8), (16, 2), (24, 8)),
    "k_struct": ((0, 24),),
    "k_big": ((0, 8000), (8000, 8)),  # past 4 KiB: EIATTR_KPARAM_INFO_V2
    "k_a16": ((0, 1), (16, 16), (32, 8)),
    "k_used": ((0, 8), (8, 4)),
}
ALTERED = "The archive was altered or saved by another Foundry: run SAVE again"


@pytest.mark.parametrize("arch", ["sm_90", "sm_120"])
def test_parameters_are_read_from_ptxas_cubins(arch: str) -> None:
    data = (KPARAMS / f"kparams.{arch}.cubin").read_bytes()
    assert detect_format(data) == ImageFormat.ELF
    assert dict(kernel_names(data, ImageFormat.ELF).params) == EXPECTED


@pytest.mark.parametrize("image", ["module_variables.sm_90.cubin", "module_variables.zstd.fatbin"])
def test_parameters_are_read_from_nvcc_images(image: str) -> None:
    """read_tables(float *out, int n): a cubin, and a fatbin whose compressed entry is decompressed."""
    if image.endswith(".fatbin"):
        pytest.importorskip("zstandard")
    data = (FIXTURES / "images" / image).read_bytes()
    fmt = detect_format(data)
    assert fmt is not None
    assert kernel_names(data, fmt).params["read_tables"] == ((0, 8), (8, 4))


def _section_of(body: bytes) -> tuple[bytes, list[Section]]:
    return body, [Section(1, ".nv.info.k", 0x70000000, 0, 0, len(body), 0, 0, 0)]


def _kparam(ordinal: int, offset: int, size: int) -> bytes:
    return bytes([4, 0x17]) + struct.pack("<HIHHI", 12, 0, ordinal, offset, size << 18 | 0x1F000)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(_kparam(0, 0, 8) + _kparam(0, 8, 4), id="an-ordinal-twice"),
        pytest.param(_kparam(1, 8, 4), id="an-ordinal-missing"),
        pytest.param(_kparam(0, 0, 8)[:-1], id="cut-short"),
        pytest.param(bytes([9, 0x17, 0, 0]), id="an-unknown-format"),
        pytest.param(bytes([4, 0x17]) + struct.pack("<HI", 4, 0), id="a-record-of-another-length"),
        pytest.param(_kparam(0, 0, 8) + bytes([3, 0x19]) + struct.pack("<H", 12), id="bytes-unaccounted-for"),
    ],
)
def test_metadata_that_cannot_be_read_with_certainty_is_not_known(body: bytes) -> None:
    assert elf_kernel_params(*_section_of(body)) == {"k": None}


def test_sound_metadata_in_any_order_is_read() -> None:
    body = _kparam(1, 8, 4) + bytes([3, 0x19]) + struct.pack("<H", 12) + _kparam(0, 0, 8)
    assert elf_kernel_params(*_section_of(body)) == {"k": ((0, 8), (8, 4))}


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    """graph_0 (sample_record) and its member graph_1, their kernels in ptxas cubins that state the very
    parameters the records hold."""
    return build_archive(tmp_path / "sample", images=SAMPLE_IMAGES)


def test_an_archive_whose_nodes_match_their_kernels_passes(sample: Path) -> None:
    report = verify_archive(sample)
    assert report.ok, [str(p) for p in report.problems]
    assert report.notes == ()  # every kernel node was checked


def _replaced(record: GraphRecord, index: int, node: KernelNode | ChildGraphNode) -> GraphRecord:
    return dataclasses.replace(record, nodes=(*record.nodes[:index], node, *record.nodes[index + 1 :]))


def _kernel(record: GraphRecord, index: int) -> KernelNode:
    node = record.nodes[index]
    assert isinstance(node, KernelNode)
    return node


def _child(record: GraphRecord, index: int) -> ChildGraphNode:
    node = record.nodes[index]
    assert isinstance(node, ChildGraphNode)
    return node


def test_a_node_with_a_parameter_too_few_is_reported(sample: Path) -> None:
    record = sample_record()
    node = _kernel(record, 0)
    forge_graph(sample, "graph_0", _replaced(record, 0, dataclasses.replace(node, params=node.params[:-1])))
    for target in (sample, sample / "graph_0.json"):
        problem(
            verify_archive(target), Check.KERNELS, ProblemKind.MISMATCH, "graph_0.json", "kernel node 0 ",
            "(kernel _Z6kernel0Pf)", "takes 4 parameters [0:8 8:8 16:4 20:4]", "gives it 3 [0:8 8:8 16:4]",
            "LOAD refuses the node", ALTERED,
        )  # fmt: skip


def test_a_node_with_a_parameter_of_another_size_in_a_child_graph_is_reported(sample: Path) -> None:
    """Kernel node 4 > 1 > 0: the first node of the child graph of node 1 of the child graph of node 4."""
    record = sample_record()
    child = _child(record, 4)
    inner = _child(child.record, 1)
    kernel = _kernel(inner.record, 0)
    wrong = dataclasses.replace(kernel, params=((0, 8), (8, 2)), args=kernel.args[:10])
    inner = dataclasses.replace(inner, record=_replaced(inner.record, 0, wrong))
    child = dataclasses.replace(child, record=_replaced(child.record, 1, inner))
    forge_graph(sample, "graph_0", _replaced(record, 4, child))
    problem(
        verify_archive(sample), Check.KERNELS, ProblemKind.MISMATCH, "graph_0.json", "kernel node 4 > 1 > 0",
        "(kernel _Z6kernel2Pf)", "takes 2 parameters [0:8 8:4]", "gives it 2 [0:8 8:2]",
    )  # fmt: skip


def test_an_extra_buffer_shorter_than_its_kernels_parameters_is_reported(sample: Path) -> None:
    record = sample_record()
    node = _kernel(record, 5)  # function 2 (a pointer, an int) in a 12-byte `extra` buffer
    forge_graph(sample, "graph_0", _replaced(record, 5, dataclasses.replace(node, args=node.args[:8])))
    problem(
        verify_archive(sample), Check.KERNELS, ProblemKind.MISMATCH, "graph_0.json", "kernel node 5 ",
        "`extra` argument buffer holds 8 bytes", "2 parameters [0:8 8:4]", "span 12",
    )  # fmt: skip


def test_an_extra_buffer_that_fills_its_last_parameter_in_part_is_not_reported(sample: Path) -> None:
    """As NCCL launches its kernels: the buffer reaches into the last parameter (the int) without covering it."""
    record = sample_record()
    node = _kernel(record, 5)
    forge_graph(sample, "graph_0", _replaced(record, 5, dataclasses.replace(node, args=node.args[:9])))
    assert not [p for p in verify_archive(sample).problems if p.check == Check.KERNELS], "a partial last parameter"


def test_a_members_override_is_held_to_its_kernel(sample: Path) -> None:
    """graph_1 overrides top-level kernel nodes 0 and 5 of its template; a short override is the member's."""
    template = read_meta(sample / "graph_0.json")
    assert template.record is not None
    member = member_record(sample_record())
    node = _kernel(member, 0)
    member = _replaced(member, 0, dataclasses.replace(node, params=node.params[:-1]))
    write_member(sample, member_delta(template.record.sha256, member), member, images=SAMPLE_IMAGES)
    remanifest(sample)
    report = verify_archive(sample)
    problem(
        report, Check.KERNELS, ProblemKind.MISMATCH, "graph_1.json", "override of kernel node 0 ", "_Z6kernel0Pf",
        "gives it 3",
    )  # fmt: skip
    assert not any(p.check == Check.KERNELS and p.path.endswith("graph_0.json") for p in report.problems)


def test_kernels_of_ptx_images_are_not_checked_and_said_so() -> None:
    record = sample_record()
    meta = sample_meta("g", record, SAMPLE_IMAGES, ".")
    graph = GraphUnderCheck(Path("g.json"), "graph 'g'", meta, "", record=record)
    images = {ref.sha256: ImageInfo(ref.sha256, Path("x"), True, ImageFormat.PTX) for ref in meta.images}
    found = Findings()
    assert check_kernel_params(graph, images, found) == (4, 0)  # every kernel node of sample_record
    note_unchecked(4, 0, found)
    assert found.problems == [] and "4 whose image is PTX only" in found.notes[0]
