"""Spans of device memory read with one native call on the GPU (csrc/copies.c): the bytes of one synchronous
copy per span, after the work queued on the legacy default stream, with the batch entry point on a CUDA 13.0
driver. The process runs tests/gpu/device_read.py."""

from __future__ import annotations

import json
from typing import Any

from .conftest import run_foundry


def test_one_read_matches_synchronous_copies_and_waits_for_the_legacy_stream(figures: dict[str, Any]) -> None:
    result = json.loads(run_foundry(["tests/gpu/device_read.py"], preload=False).strip().splitlines()[-1])
    figures["device_read"] = {**result["figures"], "path": result["path"], "calls": result["calls"]}
    assert result["same"], "the bytes differ from one synchronous copy per span"
    assert result["ordered"], "the read did not wait for the work queued on the legacy stream"
    batch = result["driver"] >= 13000
    assert result["path"] == ("BATCH" if batch else "ASYNC"), result
    # the context, the legacy stream's event and the wait for it, the copies, the synchronization
    assert result["fallback"] == "" and result["calls"] == (5 if batch else result["figures"]["spans"] + 4), result
