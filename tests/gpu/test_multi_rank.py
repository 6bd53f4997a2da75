"""Two ranks with an NCCL all-reduce in a captured graph: saved per rank, loaded in fresh processes on
every rank, bit-identical to the native graph (tests/gpu/multi_rank.py). Skipped with fewer than 2 GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_foundry


def test_an_all_reduce_graph_saved_per_rank_loads_bit_identically(tmp_path: Path, figures: dict[str, Any]) -> None:
    import torch  # the GPU tier's conftest skips this module's tests where torch is missing

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    out = json.loads(run_foundry(["tests/gpu/multi_rank.py", str(tmp_path)], timeout=900).strip().splitlines()[-1])
    figures["multi_rank"] = out
    assert [o.get("saved") for o in out["save"]] == [True, True], out["save"]
    assert all(o["peers"] > 0 and o["saved_rank"]["world_size"] == 2 for o in out["save"]), out["save"]
    assert [o.get("identical") for o in out["load"]] == [True, True], out["load"]
