"""The adapter inside a fake vLLM 0.26 start-up (tests/support/fakevllm.py): hooks land on vLLM's names,
call through, and SAVE and LOAD do what lifecycle.py says, for both model runners."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from foundry.integration.shared import hooks
from foundry.integration.vllm import (
    ArchiveMetadataError,
    ArchiveMismatchError,
    PhaseLayoutError,
    PluginConfigError,
    UnsupportedConfigError,
    read_metadata,
    support,
)
from foundry.integration.vllm.plugin import register
from tests.support.fakefoundry import FakeFoundry, FakeFoundryGraph
from tests.support.fakevllm_compile import CUDAGraphMode
from tests.support.fakevllm_config import make_config

SAVE_PHASES = ["init_device", "load_model", "profile", "kv_cache_start", "kv_cache", "warmup", "capture"]


def _save(engines: Any, runner: str = "v2", **config: Any) -> Any:
    fake = engines.prepare("save")
    worker = fake.start_engine(make_config(runner, **config))
    return fake, worker


def _load(engines: Any, runner: str = "v2", build_args: dict[str, Any] | None = None, **config: Any) -> Any:
    saved = read_metadata(engines.archive)
    memory = FakeFoundry(high_water_saved=saved.high_water)
    fake = engines.prepare("load", memory, **(build_args or {}))
    return fake, saved


def test_save_sets_the_region_before_distributed_setup_and_captures_with_foundry(engines: Any) -> None:
    fake, worker = _save(engines)
    # the first allocation of the process (communication scratch) is the region's first
    assert fake.memory.log[0] == ("ALLOC", 0, 1 << 20)
    assert "torch.cuda.graph" not in fake.trace.events
    assert fake.memory.captures == 4
    graphs = worker.model_runner.cudagraph_manager.graphs
    assert all(isinstance(g, FakeFoundryGraph) and g.captured for g in graphs.values())
    assert fake.trace.events.index("kernel_warmup") < fake.trace.events.index("v2.capture_model")
    assert fake.trace.events[-1] == "sampler_warmup"
    # vLLM's own torch is back in its module once capture is over
    assert fake.module("vllm.v1.worker.gpu.cudagraph_utils").torch.cuda.CUDAGraph.__name__ == "FakeTorchGraph"
    assert engines.isolated == 1


def test_save_writes_phases_kv_size_and_one_entry_per_graph(engines: Any) -> None:
    fake, worker = _save(engines)
    meta = read_metadata(engines.archive)
    assert [p.name for p in meta.phases] == SAVE_PHASES
    # each boundary closes the region's shared small-allocation granule, as LOAD's move to it does; the two
    # phases LOAD runs as SAVE did, before its restore, close none
    assert fake.memory.boundaries == len(SAVE_PHASES) - 2
    assert meta.kv_cache_bytes == 1 << 30 and meta.num_gpu_blocks == 100 and meta.runner == "v2"
    assert sorted(g.key_dict()["num_tokens"] for g in meta.graphs) == [1, 2, 4, 8]
    hidden = worker.model_runner.cudagraph_manager.hidden_states
    assert {g.output_address for g in meta.graphs} == {hidden.data_ptr()}
    assert meta.high_water == meta.phase("capture").cursor  # the fake never frees: the cursor is the high water
    assert (engines.archive / "graph_manifest.json").is_file()
    kv = meta.phase("kv_cache")
    assert [size for _, size in kv.allocations] == [8192, 100 << 16]


def test_save_logs_vllms_memory_profile_to_the_byte(engines: Any, caplog: pytest.LogCaptureFixture) -> None:
    """vLLM rounds its own to 0.01 GiB: SAVE's line is what a KV cache one granule off native's is traced from."""
    from foundry_bench.vllm.runs import log_numbers

    caplog.set_level(logging.INFO, logger="vllm.foundry")
    _save(engines)
    (line,) = [r.getMessage() for r in caplog.records if "memory profile, bytes" in r.getMessage()]
    assert log_numbers(line) == {"non_torch_increase_bytes": 2 << 20, "kv_cache_bytes": 1 << 30}


def test_load_with_warm_up_off_skips_profiling_warmup_and_capture_and_serves_the_loaded_graphs(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, saved_worker = _save(engines)
    monkeypatch.setenv("FOUNDRY_VLLM_WARM_UP", "0")
    fake, saved = _load(engines)
    worker = fake.start_engine(make_config())
    for skipped in ("profile_run", "kernel_warmup", "v2.capture_model", "torch.cuda.graph"):
        assert skipped not in fake.trace.events
    assert fake.trace.events[-2:] == ["sampler_warmup", "compile"]  # vLLM compiles at its first forward
    calls = fake.memory.calls
    assert calls[:3] == ["load_modules", "set_region", "start_builds deferred"]
    # Members' own execs are built only once every graph is in vLLM's hands; a thread waits for them (to say
    # so in vLLM's log).
    assert calls[3:6] == [
        f"set_cursor:{saved.phase('kv_cache_start').cursor:#x}",
        f"set_cursor:{saved.high_water:#x}",
        "build_dedicated",
    ]
    assert calls[6:] in ([], ["wait_builds"])
    runner = worker.model_runner
    assert runner.kv_cache.address == saved_worker.model_runner.kv_cache.address
    assert runner.input_ids.address == saved_worker.model_runner.input_ids.address
    manager = runner.cudagraph_manager
    assert manager._graphs_captured
    assert manager.hidden_states.data_ptr() == saved_worker.model_runner.cudagraph_manager.hidden_states.data_ptr()
    runner.execute_decode(3)  # dispatches to the graph for 4 tokens, as vLLM would
    replayed = [g for g in manager.graphs.values() if g.replays]
    assert len(replayed) == 1 and replayed[0].loaded_from.endswith("_t4.json")


@pytest.mark.parametrize("runner", ["v2", "v1"])
def test_load_runs_the_profile_forward_and_kernel_warm_up_past_saves_memory_by_default(
    engines: Any, monkeypatch: pytest.MonkeyPatch, runner: str
) -> None:
    _, saved_worker = _save(engines, runner, fake_workspace=1 << 20)
    monkeypatch.delenv("FOUNDRY_VLLM_WARM_UP", raising=False)
    fake, saved = _load(engines, runner)
    worker = fake.start_engine(make_config(runner, fake_workspace=1 << 20))
    events = fake.trace.events
    # native's warm-up, in native's order, after the KV cache (whose phase moves the cursor back to SAVE's
    # boundary, below anything the forward would leave cached) and before the graphs are handed over
    assert events.count("profile_run") == 1 and events.count("kernel_warmup") == 1
    assert events.index("initialize_kv_cache") < events.index("profile_run") < events.index("kernel_warmup")
    assert f"{runner}.capture_model" not in events
    # what it allocated lies past SAVE's memory: the KV cache and inputs are still at SAVE's addresses
    warm_allocs = [off for kind, off, _ in fake.memory.log if kind == "ALLOC" and off >= saved.high_water]
    assert warm_allocs
    assert worker.model_runner.kv_cache.address == saved_worker.model_runner.kv_cache.address


def test_load_with_warm_up_off_skips_it_and_a_bad_warm_up_value_is_refused_by_name(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _save(engines)
    monkeypatch.setenv("FOUNDRY_VLLM_WARM_UP", "0")
    fake, _ = _load(engines)
    fake.start_engine(make_config())
    assert "profile_run" not in fake.trace.events and "kernel_warmup" not in fake.trace.events
    monkeypatch.setenv("FOUNDRY_VLLM_WARM_UP", "maybe")
    with pytest.raises(PluginConfigError, match=r"FOUNDRY_VLLM_WARM_UP='maybe' is not 1 or 0"):
        _load(engines)


def test_load_refuses_an_archive_of_another_model_before_touching_the_gpu(engines: Any) -> None:
    _save(engines)
    fake, _ = _load(engines)
    with pytest.raises(ArchiveMismatchError, match=r"model: saved '/tmp/tiny-qwen3', here '/tmp/other'"):
        fake.start_engine(make_config(model="/tmp/other"))
    assert fake.memory.calls == []


def test_load_refuses_a_directory_without_a_finished_save(engines: Any) -> None:
    engines.archive.mkdir()
    fake = engines.prepare("load")
    with pytest.raises(ArchiveMetadataError, match="FOUNDRY_VLLM_MODE=save"):
        fake.start_engine(make_config())


def test_load_stops_at_the_phase_whose_allocations_differ(engines: Any) -> None:
    _save(engines)
    fake, _ = _load(engines, build_args={"kv_extra": 4096})
    with pytest.raises(PhaseLayoutError, match="'kv_cache': allocation #1"):
        fake.start_engine(make_config())


def test_load_refuses_another_kv_cache_block_count(engines: Any) -> None:
    _save(engines)
    fake, _ = _load(engines)
    with pytest.raises(ArchiveMismatchError, match="50 blocks here but 100 in SAVE"):
        fake.start_engine(make_config(), num_blocks=50)


def test_load_refuses_other_capture_sizes(engines: Any) -> None:
    _save(engines)
    fake, _ = _load(engines)
    with pytest.raises(ArchiveMismatchError, match="capture sizes or max_num_seqs differ"):
        fake.start_engine(make_config(capture_sizes=(1, 2, 4)))


@pytest.mark.parametrize("mode", ["save", "load"])
@pytest.mark.parametrize("flag", ["enable_sleep_mode", "enable_cumem_allocator"])
def test_cumem_allocator_and_sleep_mode_are_refused_before_the_region(engines: Any, mode: str, flag: str) -> None:
    engines.archive.mkdir()
    fake = engines.prepare(mode)
    with pytest.raises(UnsupportedConfigError, match="cumem allocator"):
        fake.start_engine(make_config(**{flag: True}))
    assert fake.memory.calls == [] and fake.memory.log == []


MEASURED = "Example2ForCausalLM"  # a class as a run would have measured it: LOAD one bf16 step off native


@pytest.fixture
def measured_inexact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(support.INEXACT, MEASURED, "top-20 log-probabilities one bf16 step off native's (a run)")


@pytest.mark.parametrize("mode", ["save", "load"])
def test_a_model_class_measured_inexact_is_refused_by_name_unless_accepted_knowingly(
    engines: Any, mode: str, measured_inexact: None
) -> None:
    """A class a run measured LOAD off native with: SAVE and LOAD refuse it before anything is allocated, naming
    the class, what was measured and the switch that accepts it."""
    engines.archive.mkdir()
    fake = engines.prepare(mode)
    with pytest.raises(UnsupportedConfigError, match=rf"{MEASURED}: top-20 log-probabilities one bf16 step off "
                       rf"native's \(a run\).*FOUNDRY_VLLM_ALLOW_INEXACT={MEASURED}"):  # fmt: skip
        fake.start_engine(make_config(architectures=[MEASURED]))
    assert fake.memory.calls == [] and fake.memory.log == []


def test_a_model_class_measured_inexact_saves_and_loads_when_accepted(
    engines: Any, monkeypatch: pytest.MonkeyPatch, measured_inexact: None
) -> None:
    monkeypatch.setenv("FOUNDRY_VLLM_ALLOW_INEXACT", f"OtherForCausalLM, {MEASURED}")
    fake = engines.prepare("save")
    fake.start_engine(make_config(architectures=[MEASURED]))
    assert read_metadata(engines.archive).graphs
    fake, _ = _load(engines)
    fake.start_engine(make_config(architectures=[MEASURED]))


def test_gemma2_saves_and_loads_without_being_accepted_as_inexact(engines: Any) -> None:
    """Gemma2 under vLLM: once LOAD replayed SAVE's Inductor kernel choices, SAVE, LOAD and LOAD again answered
    alike in every call on the GPU, so the class is no longer refused."""
    fake = engines.prepare("save")
    fake.start_engine(make_config(architectures=["Gemma2ForCausalLM"]))
    assert read_metadata(engines.archive).graphs
    fake, _ = _load(engines)
    fake.start_engine(make_config(architectures=["Gemma2ForCausalLM"]))


def test_cudagraph_mode_none_is_refused_naming_the_modes_that_work(engines: Any) -> None:
    fake = engines.prepare("save")
    with pytest.raises(UnsupportedConfigError, match=r"cudagraph_mode NONE.*FULL_AND_PIECEWISE is vLLM's default"):
        fake.start_engine(make_config(cudagraph_mode=CUDAGraphMode.NONE))


def test_save_refuses_an_archive_directory_that_is_not_empty(engines: Any) -> None:
    engines.archive.mkdir()
    (engines.archive / "old.json").write_text("{}")
    fake = engines.prepare("save")
    with pytest.raises(PluginConfigError, match="not empty"):
        fake.start_engine(make_config())


def test_v1_runner_saves_and_loads_cudagraphwrapper_entries(engines: Any) -> None:
    fake, saved_worker = _save(engines, runner="v1")
    assert "torch.cuda.graph" not in fake.trace.events and fake.memory.captures == 4
    assert read_metadata(engines.archive).runner == "v1"
    saved_entries = saved_worker.model_runner.model.concrete_cudagraph_entries
    saved_outputs = {d.num_tokens: e.output.data_ptr() for d, e in saved_entries.items()}

    fake, _ = _load(engines, runner="v1")
    worker = fake.start_engine(make_config("v1"))
    assert "v1.capture_model" not in fake.trace.events
    assert fake.module("vllm.v1.worker.workspace").current_workspace_manager().is_locked()  # as V1's capture leaves it
    assert "capturing_enabled:False" in fake.trace.events
    entries = worker.model_runner.model.concrete_cudagraph_entries
    assert {d.num_tokens: e.output.data_ptr() for d, e in entries.items()} == saved_outputs
    out = worker.model_runner.execute_decode(5)
    assert out.data_ptr() == saved_outputs[8]
    assert [e.cudagraph.replays for d, e in entries.items() if d.num_tokens == 8] == [1]


def test_off_installs_nothing_and_vllm_runs_as_usual(engines: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = engines.prepare("off")
    worker_cls = fake.module("vllm.v1.worker.gpu_worker").Worker
    assert not hooks.is_wrapped(worker_cls.load_model)
    fake.start_engine(make_config())
    assert fake.trace.events.count("torch.cuda.graph") == 4 and "profile_run" in fake.trace.events


def test_registering_twice_wraps_once(engines: Any) -> None:
    fake = engines.prepare("save")
    module = fake.module("vllm.v1.worker.gpu_worker")
    first = module.Worker.load_model
    register()
    assert module.Worker.load_model is first
    assert not hooks.is_wrapped(hooks.original_of(first))
    assert hooks.is_wrapped(module.init_worker_distributed_environment)
    assert hooks.is_wrapped(module.kernel_warmup)


def test_load_that_allocates_between_phases_past_saves_memory_still_builds_the_kv_cache_at_saves_offsets(
    engines: Any,
) -> None:
    _, saved_worker = _save(engines)
    fake, saved = _load(engines)
    worker = fake.module("vllm.v1.worker.gpu_worker").Worker(make_config(), 0)
    worker.init_device()
    worker.load_model()
    available = worker.determine_available_memory()
    # Past SAVE's memory, where Foundry's restore left the cursor: a tensor SAVE made in its profile phase, which
    # LOAD skips (seen with vLLM's tensor parallel workers). The KV cache phase resumes below it, at SAVE's offset.
    stray = fake.memory.allocate(3 << 20)
    assert stray.address - fake.memory.base >= saved.high_water
    worker.initialize_from_config(SimpleNamespace(num_blocks=100, available=available))
    worker.compile_or_warm_up_model()
    assert worker.model_runner.kv_cache.address == saved_worker.model_runner.kv_cache.address
