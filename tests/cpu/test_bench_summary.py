"""The benchmark's summary: which measurements its headline figures come from."""

from __future__ import annotations

from typing import Any

from foundry_bench import summarize
from foundry_bench.runner import _cold_table


def _workers(same_process: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    native: dict[str, Any] = {
        "latency_us": {"1": 100.0, "8": 200.0},
        "latency_direct_us": {"1": 100.0, "8": 200.0},
        "digests": {"1": "a", "8": "b"},
        "nodes": {"1": 10, "8": 10},
        "native_warmup_capture_s": 6.0, "native_warmup_s": 5.0, "native_capture_s": 1.0, "save_s": 1.5,
        "first_step_s": 9.0, "archive_bytes": 123, "deterministic": True,
    }  # fmt: skip
    if same_process:
        native["same_process_us"] = {"1": {"native": 100.0, "loaded": 100.5}, "8": {"native": 200.0, "loaded": 199.0}}
    loaded: dict[str, Any] = {
        "latency_us": {"1": 90.0, "8": 180.0},  # the LOAD process replays faster: process state
        "latency_template_us": {"1": 120.0, "8": 200.0},
        "digests": {"1": "a", "8": "b"},
        "digests_template": {"1": "a", "8": "x"},
        "modules_s": 0.1, "load_first_s": 0.2, "load_all_s": 0.3, "dedicated_s": 0.4, "first_step_s": 3.0,
        "timings": {}, "groups": 1, "switch_us": {},
    }  # fmt: skip
    return native, loaded


def test_headline_replay_ratio_is_the_same_process_one_when_measured() -> None:
    row = summarize("s", "eager", *_workers(same_process=True))
    assert row["replay_ratio_max"] == 100.5 / 100.0
    assert row["replay_ratio_max_cross_process"] == 0.9
    assert row["shared_over_own_exec_max"] == 120.0 / 90.0
    assert row["speedup"] == 6.0 / 0.3 and row["restore_us_per_node"] == 0.3 / 20 * 1e6
    # The images loaded before start_graph_builds are reported, and counted in the total.
    assert row["load_modules_s"] == 0.1 and row["load_total_s"] == 0.1 + 0.3 and row["speedup_total"] == 6.0 / 0.4
    assert row["bit_identical"] and not row["bit_identical_template"] and row["mismatched_bs_template"] == ["8"]


def test_without_a_same_process_measurement_the_cross_process_ratio_stands() -> None:
    row = summarize("s", "eager", *_workers(same_process=False))
    assert row["replay_ratio_max"] == row["replay_ratio_max_cross_process"] == 0.9


def test_the_cold_path_sets_loads_work_beside_the_floor_the_process_needs_anyway() -> None:
    native, loaded = _workers(same_process=False)
    native["cold"] = {"import_s": 3.0, "context_s": 0.5, "model_s": 1.0}
    loaded["cold"] = {"import_s": 3.1, "context_s": 0.4, "model_s": 0.9, "startup_phases_s": {"background": 0.25}}
    loaded["first_replay_us"] = {"1": 101.0, "8": 260.0}
    loaded["timings"] = {"startup_wait_s": 0.01}
    c = summarize("s", "eager", native, loaded)["cold_path"]
    assert c["floor_s"] == 3.1 + 0.4 + 0.9 and c["over_floor_s"] == 3.0 - c["floor_s"]
    assert c["modules_and_load_s"] == 0.1 + 0.3 and c["modules_background_s"] == 0.25
    assert c["load_us_per_node"] == 0.3 / 20 * 1e6
    assert c["first_replay_over_native_max"] == 260.0 / 200.0 and c["shared_over_own_max"] == 120.0 / 90.0
    assert c["save_over_capture"] == 1.5 / 1.0 and c["native_floor_s"] == 4.5


def test_first_replays_are_split_by_how_they_replayed() -> None:
    native, loaded = _workers(same_process=False)
    loaded["first_replay"] = {
        "1": {"exec": "shared", "us": 150.0, "again_us": 101.0, "host_us": 5.0},  # first launch: 49 us more
        "8": {"exec": "switch", "us": 560.0, "again_us": 260.0, "host_us": 280.0},  # the switch is host work
    }
    c = summarize("s", "eager", native, loaded)["cold_path"]
    assert c["first_replay_over_native_max_unswitched"] == 1.5
    assert c["first_replay_over_native_max_switched"] == 560.0 / 200.0
    assert c["second_replay_over_native_max"] == 260.0 / 200.0
    assert c["first_replay_execs"] == {"own": 0, "shared": 1, "switch": 1}
    assert c["first_replay_slowest"]["bs"] == "8" and c["first_replay_slowest"]["native_us"] == 200.0
    assert c["first_replay_slowest"]["host_us"] == 280.0


def test_the_cold_table_puts_own_exec_first_replays_under_their_own_column() -> None:
    """The target is the first replay on a graph's own exec; the replay before it is reported beside it, each
    under its own heading (a swapped column would show the window's cost as the target's figure)."""
    native, loaded = _workers(same_process=False)
    loaded["first_replay_us"] = {"1": 250.0}
    loaded["first_replay"] = {"1": {"exec": "switch", "us": 250.0, "again_us": 101.0, "host_us": 90.0}}
    loaded["first_replay_own"] = {"1": {"exec": "own", "us": 103.0, "again_us": 100.0, "host_us": 5.0}}
    row = summarize("s", "eager", native, loaded)
    lines = _cold_table([row]).splitlines()
    head, values = lines[0], lines[2].split()
    heads = [h for h in head.split("  ") if h.strip()]
    assert len(heads) == len(values), (heads, values)
    cell = dict(zip((h.strip() for h in heads), values, strict=True))
    assert cell["1st replay own/native max"] == "1.030"
    assert cell["1st replay before own/native max"] == "2.500"
