"""Capture-side behaviour of the torch API on a real GPU."""

from __future__ import annotations

import json
from typing import Any

from .conftest import run_foundry


def test_capture_after_every_graph_of_the_shared_pool_was_reset_or_deleted() -> None:
    out = run_foundry(["tests/gpu/recapture.py"], timeout=300)
    results = json.loads(out.strip().splitlines()[-1])
    assert results == {"after_reset": True, "after_delete": True, "shared_while_alive": True}


def test_a_capture_empties_the_allocator_cache_as_torch_does_and_as_the_program_has_it() -> None:
    """foundry.graph gives the caching allocator's free blocks back before a capture, as torch.cuda.graph does
    (so that SAVE's capture holds native's memory), and not when the program switched empty_cache off (vLLM,
    for every capture but its first): then both keep the 256 MiB freed before the capture."""
    out = json.loads(run_foundry(["tests/gpu/capture_empties_cache.py"], timeout=300).strip().splitlines()[-1])
    mib = 1 << 20
    assert out["torch"] < 256 * mib and out["foundry"] < 256 * mib, out
    assert out["torch_patched"] >= 256 * mib and out["foundry_patched"] >= 256 * mib, out
    assert abs(out["foundry"] - out["torch"]) <= 2 * mib, out  # the same preparation, one granule apart at most


def test_saving_a_graph_never_runs_it_nor_slows_it(figures: dict[str, Any]) -> None:
    """SAVE finds a graph's generator state by replays whose launches the interposer drops: the program's
    memory is as it was (a replay would have advanced the counter), the graph still replays in full
    afterwards, and the random-number graph is still recognised as one. The program's exec is left as it
    was, so its graph replays as fast as an unsaved capture; so does one saved the other way (work
    switched off, then a fresh exec), where switching alone left it 13-22% slower (docs/DESIGN.md)."""
    out = json.loads(run_foundry(["tests/gpu/save_side_effects.py"], timeout=300).strip().splitlines()[-1])
    assert out["launches_dropped"], "PyTorch's launches did not reach the interposer's cuGraphLaunch hook"
    speed = out["chain_us"]
    figures["saved_chain_replay_us"] = speed
    assert speed["dropped"] < 1.05 * speed["control"], speed
    assert speed["switched"] < 1.05 * speed["control"], speed
    assert out["before"] == [1.0] * 4
    assert out["after_save"] == [1.0] * 4, out
    assert out["after_replay"] == [2.0] * 4, out
    assert out["rng"] == [False, True], out
    assert out["offset_restored"], out
    assert 0.4 < out["dropout_zeros_fraction"] < 0.6, out


def test_saving_while_another_process_memory_is_mapped_is_refused() -> None:
    """A graph that reads a tensor another process shared (CUDA IPC) is refused at SAVE with
    PeerMemoryError and nothing is written: LOAD, in a third process, could not map that memory."""
    out = json.loads(run_foundry(["tests/gpu/peer_memory.py"], timeout=300).strip().splitlines()[-1])
    assert out.get("error") == "PeerMemoryError", out
    assert out["written"] == [] and out["copied"], out
