"""Many spans of device memory read with one native call (csrc/copies.c, foundry.native.read_device) on the
fake driver: the bytes are those of one synchronous copy per span, whichever way the spans go (one batch
call, one asynchronous copy a span where the driver has no batch entry point, one synchronous copy a span
when a fast way fails), a copy the driver refuses is named, and the copies join no capture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakecuda.build import build_fake_cuda
from tests.support.fakecuda_helpers import INVALID_VALUE, run


@pytest.fixture(scope="module")
def no_batch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fake driver without cuMemcpyBatchAsync_v2, as a driver older than CUDA 13.0."""
    out = tmp_path_factory.getbasetemp() / "fakecuda-no-batch"
    build_fake_cuda(out, defines=("FAKECUDA_NO_BATCH_COPY",))
    return out


# Three allocations with distinct bytes; spans in and across them, some a few bytes, one empty, laid out in
# the destination with gaps. `read(extra)` reads them (and `extra` spans); `same(result)` compares its bytes
# with one synchronous copy per span (after the read: a synchronous copy is what a capture forbids).
PRELUDE = """
from array import array
from foundry.native.copies import read_device
cu = Cuda()
a, b, c = cu.malloc(8192), cu.malloc(64), cu.malloc(3000)
cu.memcpy_htod(a, bytes(range(256)) * 32)
cu.memcpy_htod(b, bytes(range(64, 128)))
cu.memcpy_htod(c, bytes(reversed(range(250))) * 12)
SPANS = [(a, 16), (a + 4096, 100), (b, 64), (c + 7, 2000), (b + 60, 4), (a + 8000, 192), (c, 0), (c + 2999, 1)]

def read(extra=()):
    spans, at = array("Q"), 3
    for src, n in [*SPANS, *extra]:
        spans.extend((src, n, at))
        at += n + 5
    buffer = bytearray(at)
    got = read_device(spans, buffer)
    return dict(path=got.path.name, calls=got.calls, fallback=got.fallback, refused=got.refused,
                code=got.error.code if got.error else None, spans=list(spans), data=buffer.hex())

def same(result):
    spans, data = result.pop("spans"), bytes.fromhex(result.pop("data"))
    result["same"] = all(data[spans[i + 2] : spans[i + 2] + spans[i + 1]] == cu.memcpy_dtoh(spans[i], spans[i + 1])
                         for i in range(0, len(spans), 3))
    return result
"""


def _read(lib_dir: Path, body: str, env: dict[str, str] | None = None) -> Any:
    return run(lib_dir, body, env=env, prefix=PRELUDE)


def test_one_batch_call_reads_every_span(fakecuda_dir: Path) -> None:
    r = _read(fakecuda_dir, "out(first=same(read()), again=same(read()))")
    assert r["first"]["same"] and r["again"]["same"]
    assert r["first"]["path"] == r["again"]["path"] == "BATCH"
    # the context, the legacy stream's event and the wait for it, the batch, the synchronization; the first
    # read also makes its stream, its event and its pinned memory (in relaxed capture mode, and back)
    assert (r["first"]["calls"], r["again"]["calls"]) == (10, 5)
    assert r["again"]["fallback"] == "" and r["again"]["refused"] is None


def test_without_the_batch_entry_point_one_asynchronous_copy_a_span(no_batch_dir: Path) -> None:
    r = _read(no_batch_dir, "read(); out(**same(read()))")
    assert r["same"] and r["path"] == "ASYNC" and r["fallback"] == ""
    assert r["calls"] == 1 + 2 + 7 + 1  # the empty span is not copied


def test_a_refused_batch_goes_one_asynchronous_copy_a_span(fakecuda_dir: Path) -> None:
    r = _read(fakecuda_dir, "out(**same(read()))", env={"FAKECUDA_BATCH_COPY_MAX": "3"})
    assert r["same"] and r["path"] == "ASYNC" and r["fallback"] == "CUDA_ERROR_INVALID_VALUE"


@pytest.mark.parametrize("batch", [True, False])
def test_a_refused_copy_is_named(fakecuda_dir: Path, no_batch_dir: Path, batch: bool) -> None:
    # the last span runs past the end of `c` into memory no allocation holds
    r = _read(fakecuda_dir if batch else no_batch_dir, "out(**read([(b, 8), (c + 2990, 100), (a, 8)]))")
    assert (r["refused"], r["code"], r["path"], r["fallback"]) == (9, INVALID_VALUE, "SYNC", "CUDA_ERROR_INVALID_VALUE")


def test_a_span_larger_than_the_staging_memory_is_copied_straight(fakecuda_dir: Path) -> None:
    body = """
    big = cu.malloc(33 << 20)
    cu.memcpy_htod(big + (33 << 20) - 3, b"end")
    out(**same(read([(big, 33 << 20)])))
    """
    r = _read(fakecuda_dir, body)
    assert r["same"] and r["path"] == "SYNC" and r["fallback"] == ""


def test_reads_join_no_capture_and_make_no_call_capture_forbids(fakecuda_dir: Path) -> None:
    body = """
    s, out_buf = cu.stream_create(1), cu.malloc(16)  # non-blocking, as PyTorch's capture streams
    cu.begin_capture(s)  # global mode: a synchronous copy or a pinned allocation would end it
    cu.launch(F["fk_fill_f32"], (1, 1, 1), (4, 1, 1), [("ptr", out_buf), (c_float, 1.0), (c_int, 4)], stream=s)
    got = read()
    nodes = len(cu.graph_nodes(cu.end_capture(s)))
    out(read=same(got), nodes=nodes)
    """
    r = _read(fakecuda_dir, body)
    assert r["read"]["same"] and r["read"]["path"] == "BATCH"
    assert r["nodes"] == 1  # the kernel only, and the capture was not invalidated (end_capture succeeded)


def test_a_span_outside_the_destination_is_refused_before_any_copy(fakecuda_dir: Path) -> None:
    body = """
    try:
        read_device(array("Q", [a, 16, 10]), bytearray(20))
    except ValueError as exc:
        out(error=str(exc))
    """
    r = run(fakecuda_dir, body, prefix=PRELUDE)
    assert "lies outside the 20-byte destination" in r["error"]
