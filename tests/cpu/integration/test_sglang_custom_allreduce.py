"""SGLang's custom all-reduce (CustomAllReduceV2, its CUDA default at tensor parallel) under SAVE and LOAD over
the fake SGLang (tests/support/fakesglang_allreduce.py), taken by default: SAVE reads back the rows of
``graph_params`` the decode capture registered and declares the peer mappings they opened the program's; LOAD
writes the rows again, one pointer a rank, once every runner has its graphs and before the prefill warm-up
replays; the other setting and SGLang's legacy one are refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from foundry.integration.sglang import warmup
from foundry.integration.sglang.metadata import GRAPH_PARAMS_ROWS, custom_all_reduce_from_json, read_metadata
from foundry.integration.shared.errors import ArchiveMetadataError, ArchiveMismatchError, UnsupportedConfigError
from tests.support.fakefoundry import FakeFoundry
from tests.support.fakesglang import server_args

TP2 = {"tp_size": 2}


def _save_both(sglang_engines: Any) -> list[Any]:
    fakes = []
    for rank in range(2):
        fake = sglang_engines.prepare("save")
        fake.start_scheduler(server_args(**TP2), tp_rank=rank)
        fakes.append(fake)
    return fakes


def test_save_keeps_the_captures_rows_and_load_writes_them_before_the_warm_up(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = _save_both(sglang_engines)
    assert "register_graph_inputs:4" in saved[0].trace.events  # the decode runner's four sizes, one context
    meta = read_metadata(sglang_engines.archive / "rank_1")
    (kept,) = meta.custom_all_reduce or ()
    assert kept.first_slot == 0 and len(kept.inputs) == 4  # graph_params from row 0, SGLang's _graph_counter
    # every peer mapping the registration opened is declared the program's to map again
    assert saved[1].memory.remapped == saved[1].memory.peers.maps and saved[1].memory.remapped
    for rank in range(2):
        on_disk = read_metadata(sglang_engines.archive / f"rank_{rank}")
        fake = sglang_engines.prepare("load", FakeFoundry(high_water_saved=on_disk.high_water))
        memory = fake.memory
        warm = warmup.warm_prefill
        monkeypatch.setattr(warmup, "warm_prefill", lambda r, m=memory, w=warm: m.calls.append("warm_up") or w(r))
        runner = fake.start_scheduler(server_args(**TP2), tp_rank=rank)
        assert memory.rewritten == list(on_disk.custom_all_reduce or ()) and memory.rewritten_width == 2
        rewrite = memory.calls.index("rewrite_peer_registrations:4")
        assert memory.calls.index("start_builds deferred") < rewrite < memory.calls.index("warm_up")
        assert "register_graph_inputs" not in " ".join(fake.trace.events)  # LOAD captures nothing
        ca = fake.module("sglang.srt.distributed.parallel_state").get_tp_group().ca_comm
        assert ca._graph_counter == 4  # as SGLang's capture left it
        assert runner.prefill_cuda_graph_runner is not None


def test_load_refuses_an_archive_saved_with_the_other_all_reduce_before_the_weights(sglang_engines: Any) -> None:
    _save_both(sglang_engines)
    high_water = read_metadata(sglang_engines.archive / "rank_0").high_water
    fake = sglang_engines.prepare("load", FakeFoundry(high_water_saved=high_water))
    with pytest.raises(ArchiveMismatchError, match=r"custom all-reduce on, and it is off here.*--disable-custom"):
        fake.start_scheduler(server_args(tp_size=2, disable_custom_all_reduce=True), tp_rank=0)
    assert "load_model" not in fake.trace.events


def test_sglangs_legacy_custom_all_reduce_is_refused_by_name(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2", "0")
    fake = sglang_engines.prepare("save")
    with pytest.raises(UnsupportedConfigError, match=r"legacy custom all-reduce.*--disable-custom-all-reduce"):
        fake.start_scheduler(server_args(**TP2))
    assert "load_model" not in fake.trace.events


def test_the_entry_is_checked_against_graph_params_rows() -> None:
    ok = {"registrations": [{"first_slot": 0, "inputs": [0x6000_0000_1000]}]}
    (reg,) = custom_all_reduce_from_json(ok) or ()
    assert reg.first_slot == 0  # row 0 is SGLang's first, where vLLM's slot 0 is taken
    for doc, problem in (
        ({"registrations": [{"first_slot": GRAPH_PARAMS_ROWS, "inputs": [1]}]}, "inside the 131072 slots"),
        ({"registrations": [{"first_slot": 0, "inputs": [1]}, {"first_slot": 0, "inputs": [2]}]}, "not after"),
        ({"registrations": [{"first_slot": 0}]}, "malformed"),
    ):
        with pytest.raises(ArchiveMetadataError, match=problem):
            custom_all_reduce_from_json(doc)
    assert custom_all_reduce_from_json(None) is None
