"""Issue-2 GPU tier: deterministic allocation offsets across processes, every kernel the workload
launched is in the registry and reloads in a fresh process, and the interposer costs < 1% eagerly."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_foundry


@pytest.fixture(scope="module")
def records(artifacts: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    first, second = artifacts / "record1", artifacts / "record2"
    for out in (first, second):
        out.mkdir(parents=True, exist_ok=True)
        run_foundry(["tests/gpu/kernels_workload.py", "record", str(out)])
    return first, json.loads((first / "record.json").read_text()), json.loads((second / "record.json").read_text())


def test_allocation_offsets_are_identical_in_two_processes(records: Any, figures: dict[str, Any]) -> None:
    _, a, b = records
    assert len(a["events"]) > 5
    assert a["events"] == b["events"]
    assert not [e for e in a["events"] if e[0] == 13], "the region refused an allocation"
    figures["allocation_events"] = len(a["events"])


def test_every_launched_kernel_is_in_the_registry(records: Any, figures: dict[str, Any]) -> None:
    _, a, _ = records
    assert a["unresolved"] == []
    assert len(a["kernels"]["traced"]) >= 3 and len(a["kernels"]["graph"]) >= 3
    figures["registry"] = {**a["registry"], "sdpa_backend": a["sdpa_backend"], "resolve_s": a["resolve_s"]}


def test_recorded_kernels_reload_in_a_fresh_process(records: Any, figures: dict[str, Any]) -> None:
    out, _, _ = records
    run_foundry(["tests/gpu/kernels_workload.py", "reload", str(out)])
    result = json.loads((out / "reload.json").read_text())
    assert result["failures"] == []
    figures["kernels_reloaded"] = result["kernels"]


def test_hooks_cost_under_one_percent_on_launch_and_allocation_paths(figures: dict[str, Any]) -> None:
    """Same process, same calls, hooked vs real entry points, interleaved: the interposer's own cost."""
    result = json.loads(run_foundry(["tests/gpu/hook_overhead.py"]).strip().splitlines()[-1])
    figures["hook_overhead"] = result
    assert result["launch_overhead"] < 0.01, result
    assert result["alloc_overhead"] < 0.01, result


@pytest.mark.slow
def test_an_eager_step_under_the_interposer_computes_what_it_computes_without(figures: dict[str, Any]) -> None:
    """End to end, in separate processes: the interposer is really mapped into the preloaded ones and leaves an
    eager decoder step's output unchanged, bit for bit. The step's time is recorded, not asserted: process to
    process it spreads by more than what it would measure (17.9-30.4 ms in one call, where the paired in-process
    hook cost above read +0.2%), and more on a machine whose CPUs other work shares; the paired measurement
    above is the one that guards the hooks' cost."""
    plain, hooked = [], []
    # Three pairs: each process costs ~11 s (torch and CUDA start); the bits need one, the recorded times a few.
    for _ in range(3):
        plain.append(run_foundry(["tests/gpu/eager_timing.py"], preload=False).split()[-3:])
        hooked.append(run_foundry(["tests/gpu/eager_timing.py"]).split()[-3:])
    assert {p[0] for p in plain} == {"0"} and {h[0] for h in hooked} == {"1"}, (plain, hooked)
    assert len({r[1] for r in plain + hooked}) == 1, (plain, hooked)
    plain_ms, hooked_ms = [float(p[2]) for p in plain], [float(h[2]) for h in hooked]
    overhead = statistics.median(hooked_ms) / statistics.median(plain_ms) - 1
    figures["eager_overhead"] = {"plain_ms": plain_ms, "preloaded_ms": hooked_ms, "median_overhead": overhead}
