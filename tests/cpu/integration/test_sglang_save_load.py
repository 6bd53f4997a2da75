"""The SGLang adapter inside a fake SGLang 0.5.17 scheduler process (tests/support/fakesglang.py): SAVE
captures both graph sets through Foundry and writes the archive; LOAD skips measurement and capture, puts
every tensor where SAVE had it and hands SGLang's runners the loaded graphs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from foundry.integration.sglang import read_metadata
from tests.support.fakefoundry import FakeFoundryGraph
from tests.support.fakesglang import server_args
from tests.support.fakesglang_graphs import LAYERS

SAVE_PHASES = [
    "distributed", "load_model", "memory_pool", "attention_backends", "prefill_buffers", "prefill_capture",
    "decode_buffers_start", "decode_buffers", "decode_capture", "graphs",
]  # fmt: skip


def _save(engines: Any, **args: Any) -> Any:
    fake = engines.prepare("save")
    return fake, fake.start_scheduler(server_args(**args))


def test_save_captures_both_graph_sets_with_foundry(sglang_engines: Any) -> None:
    fake, runner = _save(sglang_engines)
    assert "torch.capture" not in fake.trace.events
    decode = runner.decode_cuda_graph_runner.backend
    assert sorted(k.size for k in decode._graphs) == [1, 2, 4, 8]
    assert all(isinstance(g, FakeFoundryGraph) and g.captured for g in decode._graphs.values())
    prefill = runner.prefill_cuda_graph_runner.backend
    for graph in prefill._graphs.values():
        assert len(graph._segments) == LAYERS + 1 and len(graph._break_fns) == LAYERS
        assert all(isinstance(s, FakeFoundryGraph) and s.captured for s in graph._segments)
    # SGLang's own torch and device module are back once capture is over
    assert type(fake.module("sglang.srt.model_executor.runner_backend.full_cuda_graph_backend").torch).__name__ == (
        "SimpleNamespace"
    )
    assert decode._device_module is runner.decode_cuda_graph_runner.device_module
    # the decode runner's buffers came from fresh allocator segments
    assert sglang_engines.isolated == 1


def test_save_writes_phases_pool_graphs_and_eager_steps(sglang_engines: Any) -> None:
    _, runner = _save(sglang_engines)
    meta = read_metadata(sglang_engines.archive)
    assert [p.name for p in meta.phases] == SAVE_PHASES
    assert (meta.available_bytes, meta.max_total_num_tokens) == (64 << 12, 64)
    assert meta.prefill_gate_skip is False
    keys = [g.key_dict() for g in meta.graphs]
    prefill = [k for k in keys if k["runner"] == "prefill"]
    assert len(prefill) == 3 * (LAYERS + 1) and prefill[0] == {
        "runner": "prefill", "size": 16, "stream": None, "variant": None, "segment": 0, "segments": LAYERS + 1,
    }  # fmt: skip
    assert [k["size"] for k in keys if k["runner"] == "decode"] == [1, 2, 4, 8]
    assert all(k["fields"] == "next_token_logits" for k in keys if k["runner"] == "decode")
    # every segment but a graph's last is followed by an eager step, described with its tensors' indices
    assert len(meta.breaks) == 3 * LAYERS
    step = meta.breaks[meta.graphs[0].json]
    assert step == {
        "fn": "sglang.srt.layers.radix_attention:unified_attention_with_output",
        "args": [{"t": 0}, {"t": 1}, {"t": 2}, {"t": 3}, {"v": True}, {"v": 0}],
        "kwargs": {"use_mha_companion": {"v": False}, "key_value_num_tokens": {"v": None}},
    }
    doc = json.loads((sglang_engines.archive / meta.graphs[0].json).read_text())
    assert len(doc["outputs"]) == 4  # q, k, v and the attention output, at SAVE's addresses
    last = meta.graphs[LAYERS]
    assert last.key_dict()["segment"] == LAYERS and last.json not in meta.breaks
    assert last.output_address == runner.prefill_cuda_graph_runner.backend._shared_output_buffer.address


def test_load_skips_measurement_and_capture_and_serves_the_loaded_graphs(sglang_engines: Any) -> None:
    saved_fake, saved = _save(sglang_engines)
    meta = read_metadata(sglang_engines.archive)
    fake = sglang_engines.prepare_load()
    runner = fake.start_scheduler(server_args())
    assert "profile" not in fake.trace.events and "torch.capture" not in fake.trace.events
    assert fake.memory.captures == 0 and fake.memory.graphs_made == 0
    assert fake.memory.calls[:3] == ["load_modules", "set_region", "start_builds deferred"]
    assert fake.memory.calls.count("build_dedicated") >= 1  # own execs once every graph is installed
    # every tensor SGLang made lies where SAVE's did
    for name in ("kv_cache", "req_to_token_pool"):
        assert getattr(runner, name).address == getattr(saved, name).address, name
    assert runner.graph_shared_output.buffer.address == saved.graph_shared_output.buffer.address
    assert runner.attn_backend.cuda_graph_kv_indices.address == saved.attn_backend.cuda_graph_kv_indices.address
    for which in ("prefill_cuda_graph_runner", "decode_cuda_graph_runner"):
        assert getattr(runner, which).input_ids.address == getattr(saved, which).input_ids.address
    # and everything allocated after start-up lands past SAVE's memory
    assert fake.memory.cursor_at >= meta.high_water

    decode = runner.decode_cuda_graph_runner
    out = decode.execute(3)  # bucket 4, as SGLang pads
    replayed = [g for g in decode.backend._graphs.values() if g.replays]
    assert len(replayed) == 1 and replayed[0].loaded_from.endswith("_decode_bs4.json")
    assert (
        out.next_token_logits.address
        == saved.decode_cuda_graph_runner.backend._outputs[
            next(k for k in saved.decode_cuda_graph_runner.backend._outputs if k.size == 4)
        ].next_token_logits.address
    )

    saved_fake.trace.events.clear()
    saved.prefill_cuda_graph_runner.execute(50)  # SAVE's own graphs, for the reference
    prefill = runner.prefill_cuda_graph_runner
    before = len(fake.trace.events)
    out = prefill.execute(50)  # bucket 64
    attention = fake.trace.events[before:]
    assert attention == saved_fake.trace.events == [e for e in attention if e.startswith("attention:")]
    assert len(attention) == LAYERS
    graph = next(g for k, g in prefill.backend._graphs.items() if k.size == 64)
    assert all(s.replays == 1 for s in graph._segments)
    assert out.data_ptr() == saved.prefill_cuda_graph_runner.backend._shared_output_buffer.address


def test_load_installs_prefill_graphs_before_decode_ones(sglang_engines: Any) -> None:
    _save(sglang_engines)
    fake = sglang_engines.prepare_load()
    fake.start_scheduler(server_args())
    from foundry.integration.sglang import session as sessions

    s = sessions.current()
    assert [m.name for m in s.tracker.marks] == [
        "distributed", "load_model", "memory_pool", "attention_backends", "prefill_buffers", "prefill_graphs",
        "decode_buffers", "decode_graphs",
    ]  # fmt: skip
    assert s.state.loaded_runners == {"prefill", "decode"}


def test_decode_graphs_only_when_prefill_graphs_are_disabled(sglang_engines: Any) -> None:
    _, saved = _save(sglang_engines, prefill_backend="disabled")
    meta = read_metadata(sglang_engines.archive)
    assert {g.key_dict()["runner"] for g in meta.graphs} == {"decode"} and meta.breaks == {}
    assert "prefill_capture" not in [p.name for p in meta.phases]
    fake = sglang_engines.prepare_load()
    runner = fake.start_scheduler(server_args(prefill_backend="disabled"))
    assert runner.decode_cuda_graph_runner.input_ids.address == saved.decode_cuda_graph_runner.input_ids.address
    logits = runner.decode_cuda_graph_runner.execute(8).next_token_logits
    assert logits.address == saved.graph_shared_output.buffer.address


def test_sglang_default_graph_sizes_save_and_load(sglang_engines: Any) -> None:
    """SGLang's own sizes on an H100 (ServerArgs): 36 decode batch sizes up to 256, 58 prefill token counts up
    to 8192; every one saved, loaded and served, the largest prefill through the shared output buffer."""
    decode = [1, 2, 4, 8, 12, *range(16, 257, 8)]
    prefill = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
               *range(1280, 4097, 256), *range(4608, 8193, 512)]  # fmt: skip
    assert (len(decode), len(prefill), prefill[-1]) == (36, 58, 8192)
    sizes = {"decode_bs": decode, "prefill_bs": prefill}
    fake = sglang_engines.prepare("save")
    saved = fake.start_scheduler(server_args(**sizes))
    meta = read_metadata(sglang_engines.archive)
    assert len(meta.graphs) == 36 + 58 * (LAYERS + 1) and len(meta.breaks) == 58 * LAYERS
    out = saved.prefill_cuda_graph_runner.backend._shared_output_buffer
    assert out.nbytes >= 8192 * 64  # sized for the largest token count
    load = sglang_engines.prepare_load().start_scheduler(server_args(**sizes))
    assert load.prefill_cuda_graph_runner.execute(8000).data_ptr() == out.address  # bucket 8192
    logits = load.decode_cuda_graph_runner.execute(250).next_token_logits  # bucket 256
    assert logits.address == saved.graph_shared_output.buffer.address


def test_load_warms_the_prefill_graphs_eager_steps_unless_told_not_to(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default, once every graph is SGLang's, LOAD replays the smallest prefill graph on the dummy batch
    SGLang's capture builds, so that its eager steps (attention) run before the first request, as capture's
    warm-up runs them natively; with FOUNDRY_SGLANG_WARM_UP=0 nothing is replayed."""
    from foundry.integration.sglang import session as sessions

    _save(sglang_engines)
    for asked in (False, True):
        monkeypatch.setenv("FOUNDRY_SGLANG_WARM_UP", "1" if asked else "0")
        fake = sglang_engines.prepare_load()
        runner = fake.start_scheduler(server_args())
        prefill = runner.prefill_cuda_graph_runner
        replays = {k.size: [seg.replays for seg in g._segments] for k, g in prefill.backend._graphs.items()}
        attention = [e for e in fake.trace.events if e.startswith("attention:")]
        timings = sessions.current().timings
        if not asked:
            assert set(map(tuple, replays.values())) == {(0,) * (LAYERS + 1)} and attention == []
            assert "warm_up_s" not in timings
        else:  # the smallest of 16, 64, 128 tokens, every segment once, the eager step between each pair
            assert replays == {16: [1] * (LAYERS + 1), 64: [0] * (LAYERS + 1), 128: [0] * (LAYERS + 1)}
            assert len(attention) == LAYERS and timings["warm_up_s"] >= 0
            assert fake.trace.events.index(attention[0]) > fake.trace.events.index("init_cuda_graphs")
