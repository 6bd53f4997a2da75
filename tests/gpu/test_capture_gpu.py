"""Capture-side behaviour of the torch API on a real GPU."""

from __future__ import annotations

import json

from .conftest import run_foundry


def test_capture_after_every_graph_of_the_shared_pool_was_reset_or_deleted() -> None:
    out = run_foundry(["tests/gpu/recapture.py"], timeout=300)
    results = json.loads(out.strip().splitlines()[-1])
    assert results == {"after_reset": True, "after_delete": True, "shared_while_alive": True}
