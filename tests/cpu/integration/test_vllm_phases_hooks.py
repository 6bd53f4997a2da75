"""Phase tracking and checking, patch mechanics, post-import hooks, the capture routing and the
fingerprint, each on its own."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from foundry.integration.shared.capture import foundry_capture
from foundry.integration.shared.hooks import is_wrapped, original_of, unwrap, when_imported, wrap
from foundry.integration.shared.metadata import PhaseMark
from foundry.integration.shared.phases import PhaseTracker, check_phase
from foundry.integration.vllm import PatchTargetError, PhaseLayoutError
from foundry.integration.vllm.config import VLLM
from foundry.integration.vllm.fingerprint import describe, runner_name
from tests.support.fakefoundry import FakeFoundry, FakeFoundryGraph
from tests.support.fakevllm_config import make_config


def test_tracker_attributes_allocations_to_the_phase_they_happened_in() -> None:
    memory = FakeFoundry()
    memory.set_region(0x600000000000, 1 << 30)
    memory.allocate(100)  # before tracking: no phase's
    tracker = PhaseTracker(memory)
    tracker.start()
    memory.allocate(4 << 20)
    first = tracker.mark("a")
    memory.set_cursor(64 << 20)
    tracker.skip()
    memory.allocate(1)
    second = tracker.mark("b")
    assert first == PhaseMark("a", 6 << 20, ((2 << 20, 4 << 20),))
    assert second == PhaseMark("b", 66 << 20, ((64 << 20, 1),))
    assert set(tracker.seconds) == {"a", "b"}


def test_check_phase_names_the_phase_and_the_first_difference() -> None:
    saved = PhaseMark("kv_cache", 0x800000, ((0x400000, 4096), (0x600000, 8192)))
    check_phase(saved, saved)
    with pytest.raises(PhaseLayoutError, match=r"'kv_cache': allocation #1 is 16 bytes at offset 0x600000 here"):
        check_phase(saved, PhaseMark("kv_cache", 0x800000, ((0x400000, 4096), (0x600000, 16))))
    with pytest.raises(PhaseLayoutError, match=r"allocation #2 is 1 bytes at offset 0x800000 here but was absent"):
        check_phase(saved, PhaseMark("kv_cache", 0xA00000, (*saved.allocations, (0x800000, 1))))
    with pytest.raises(PhaseLayoutError, match="ended at region offset 0x900000 here but at 0x800000"):
        check_phase(saved, PhaseMark("kv_cache", 0x900000, saved.allocations))


def test_wrap_calls_through_once_and_unwraps() -> None:
    calls: list[str] = []
    owner = SimpleNamespace(f=lambda x: calls.append(f"f{x}") or x)

    def make(original: Any) -> Any:
        def wrapper(x: Any) -> Any:
            calls.append("before")
            return original(x)

        return wrapper

    assert wrap(owner, "f", make, VLLM) and not wrap(owner, "f", make, VLLM)
    assert owner.f(1) == 1 and calls == ["before", "f1"]
    assert is_wrapped(owner.f) and not is_wrapped(original_of(owner.f))
    unwrap(owner, "f")
    assert not is_wrapped(owner.f)


def test_wrapping_a_missing_target_names_the_vllm_version() -> None:
    with pytest.raises(PatchTargetError, match=r"no Worker\.init_device.*vLLM 0\.26\.0"):
        wrap(type("Worker", (), {}), "init_device", lambda f: f, VLLM)


def test_when_imported_runs_after_the_module_code_on_a_real_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "fakepkg_foundry_hooks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "worker.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    when_imported("fakepkg_foundry_hooks.worker", lambda m: seen.append(m.VALUE))
    assert seen == []
    import fakepkg_foundry_hooks.worker  # type: ignore[import-not-found]

    assert seen == [1] and fakepkg_foundry_hooks.worker.VALUE == 1
    for name in ("fakepkg_foundry_hooks.worker", "fakepkg_foundry_hooks"):
        monkeypatch.delitem(sys.modules, name)


def test_when_imported_runs_at_once_for_an_imported_module(monkeypatch: pytest.MonkeyPatch) -> None:
    module = ModuleType("already_here_foundry")
    monkeypatch.setitem(sys.modules, "already_here_foundry", module)
    seen: list[ModuleType] = []
    when_imported("already_here_foundry", seen.append)
    assert seen == [module]


def test_capture_routing_swaps_only_the_two_graph_names_and_only_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    real_cuda = SimpleNamespace(CUDAGraph=object, graph=None, synchronize=lambda: "synced")
    module = ModuleType("capture_target_foundry")
    module.torch = SimpleNamespace(cuda=real_cuda, full=lambda n: [0] * n)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "capture_target_foundry", module)
    memory = FakeFoundry()
    real = module.torch  # type: ignore[attr-defined]
    with foundry_capture("capture_target_foundry", memory, VLLM):
        t = module.torch  # type: ignore[attr-defined]
        graph = t.cuda.CUDAGraph(keep_graph=False)
        assert isinstance(graph, FakeFoundryGraph)
        with t.cuda.graph(graph, "pool"):
            pass
        assert graph.captured and t.cuda.synchronize() == "synced" and t.full(2) == [0, 0]
    assert module.torch is real  # type: ignore[attr-defined]


def test_capture_routing_refuses_a_module_that_is_not_there() -> None:
    memory = FakeFoundry()
    with pytest.raises(PatchTargetError, match="not imported"), foundry_capture("no_such_module_foundry", memory, VLLM):
        pass


def test_fingerprint_reads_versions_settings_and_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch = SimpleNamespace(__version__="2.11.0+cu130", version=SimpleNamespace(cuda="13.0"))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(__version__="0.26.0"))
    config = make_config()
    config.model_config.hf_config = SimpleNamespace(to_dict=lambda: {"hidden_size": 1024})
    config.compute_hash = lambda: "abc123"
    fp = describe(config, device_name="NVIDIA H200").as_dict()
    assert fp["vllm"] == "0.26.0" and fp["torch"] == "2.11.0+cu130" and fp["cuda"] == "13.0"
    assert fp["gpu"] == "NVIDIA H200" and fp["model"] == "/tmp/tiny-qwen3" and fp["runner"] == "v2"
    assert fp["cudagraph_mode"] == "FULL_DECODE_ONLY" and fp["vllm_config_hash"] == "abc123"
    assert len(fp["hf_config_sha256"]) == 16 and fp["max_num_seqs"] == "?"
    assert runner_name(make_config("v1")) == "v1"
