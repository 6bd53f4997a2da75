"""A kernel's dynamic shared-memory limit lowered after a capture (as FlashInfer leaves it): SAVE records the
lowered limit, and LOAD in a fresh process, foreground and background, still builds the graph's node that needs
more and replays bit-identically (csrc/record.h, FDY_WITH_SMEM_LIMIT; docs/DESIGN.md, "A kernel's shared-memory
limit"). The processes run tests/gpu/smem_limit.py under `foundry run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import run_mode

pytest.importorskip("cupy", reason="needs cupy (cupy-cuda13x) for RawModule")

SCRIPT = "tests/gpu/smem_limit.py"


@pytest.fixture(scope="module")
def saved(artifacts: Path) -> tuple[Path, dict[str, Any]]:
    out = artifacts / "smem_limit"
    return out, run_mode(SCRIPT, "save", out)


def test_save_records_the_limit_the_program_left(saved: tuple[Path, dict[str, Any]]) -> None:
    _, result = saved
    assert result["limit_after_capture"] == 1024 and result["recorded"] == [1024], result


@pytest.mark.parametrize("mode", ["load", "loadbg"])
def test_a_node_above_the_recorded_limit_loads_and_replays_bit_identically(
    saved: tuple[Path, dict[str, Any]], mode: str
) -> None:
    out, _ = saved
    assert run_mode(SCRIPT, mode, out)["identical"] == [True, True]
