"""What the SGLang adapter refuses, by name, and when: unsupported settings before anything is allocated, an
archive of another setup before the GPU is touched, a damaged archive before serving, a LOAD whose memory
layout leaves SAVE's, a second capture after LOAD, and prefill graphs whose eager steps LOAD could not redo."""

from __future__ import annotations

from typing import Any

import pytest

from foundry.integration.sglang import (
    ArchiveMetadataError,
    ArchiveMismatchError,
    PhaseLayoutError,
    PluginConfigError,
    UnsupportedConfigError,
    read_metadata,
)
from foundry.integration.sglang.metadata import FILE
from tests.support.fakefoundry import FakeTensor, forge_document
from tests.support.fakesglang import server_args
from tests.support.fakesglang_graphs import ATTENTION, BCG, DECODE


class HostTensor(FakeTensor):
    is_cuda = False
    device = "cpu"


def _save(engines: Any, **args: Any) -> Any:
    return engines.prepare("save").start_scheduler(server_args(**args))


def _edit_metadata(engines: Any, edit: Any) -> None:
    """The metadata edited, sealed and listed again, as by a forger without a signing key."""
    forge_document(engines.archive, FILE.name, edit)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ({"enable_memory_saver": True}, {}, r"memory saver \(enable_memory_saver\) swaps PyTorch's allocator"),
        (
            {"tp_size": 2, "disable_custom_all_reduce": True, "enable_torch_symm_mem": True},
            {},
            r"tp_size=2 with enable_torch_symm_mem \(torch symmetric memory\)",
        ),
        ({"dp_size": 2, "enable_dp_attention": True}, {}, r"other than tensor parallel \(dp_size=2\)"),
        (
            {"tp_size": 4, "ep_size": 2, "disable_custom_all_reduce": True},
            {},
            r"ep_size=2 with tp_size=4: the adapter saves expert parallel over the tensor-parallel GPUs",
        ),
        (
            {"tp_size": 2, "ep_size": 2, "disable_custom_all_reduce": True, "moe_a2a_backend": "deepep"},
            {},
            r"moe_a2a_backend='deepep' with ep_size=2: its all-to-all kernels keep peer buffers",
        ),
        (
            {"tp_size": 2, "ep_size": 2, "disable_custom_all_reduce": True, "moe_runner_backend": "deep_gemm"},
            {},
            r"moe_runner_backend='deep_gemm' with ep_size=2: not measured",
        ),
        (
            {"tp_size": 2, "ep_size": 2, "disable_custom_all_reduce": True, "enable_eplb": True},
            {},
            r"enable_eplb \(the expert load balancer moves experts while serving",
        ),
        ({"enable_lora": True}, {}, "LoRA"),
        (
            {"prefill_backend": "tc_piecewise"},
            {},
            r"prefill CUDA graph backend 'tc_piecewise'.*with 'disabled' the decode",
        ),
        ({"decode_backend": "breakable"}, {}, r"decode CUDA graph backend 'breakable'"),
        ({"disable_cuda_graph": True}, {}, "no graphs to save or load"),
        ({}, {"SGLANG_ENABLE_CUDA_GRAPH_DEDUP": "1"}, "SGLANG_ENABLE_CUDA_GRAPH_DEDUP"),
        ({}, {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "true"}, "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"),
    ],
)
@pytest.mark.parametrize("mode", ["save", "load"])
def test_unsupported_settings_are_refused_by_name_before_anything_is_allocated(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch, mode: str, args: Any, env: Any, message: str
) -> None:
    sglang_engines.archive.mkdir()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    fake = sglang_engines.prepare(mode)
    with pytest.raises(UnsupportedConfigError, match=rf"(?s){message}.*FOUNDRY_SGLANG_MODE=off"):
        fake.start_scheduler(server_args(**args))
    assert fake.memory.calls == [] and fake.memory.log == []
    assert "init_torch_distributed" not in fake.trace.events


def test_all_problems_are_named_in_one_message(sglang_engines: Any) -> None:
    fake = sglang_engines.prepare("save")
    with pytest.raises(UnsupportedConfigError, match=r"(?s)tp_size=2 with enable_torch_symm_mem.*memory saver"):
        fake.start_scheduler(server_args(tp_size=2, enable_torch_symm_mem=True, enable_memory_saver=True))


def test_load_refuses_an_archive_of_another_model_before_touching_the_gpu(sglang_engines: Any) -> None:
    _save(sglang_engines)
    fake = sglang_engines.prepare_load()
    with pytest.raises(
        ArchiveMismatchError, match=r"(?s)model: saved '/tmp/tiny-qwen3', here '/tmp/other'.*Start SGLang"
    ):
        fake.start_scheduler(server_args(model_path="/tmp/other"))
    assert fake.memory.calls == [] and list(sglang_engines.archive.glob("*.tmp")) == []


def test_load_refuses_other_capture_sizes_by_name(sglang_engines: Any) -> None:
    _save(sglang_engines)
    fake = sglang_engines.prepare_load()
    with pytest.raises(ArchiveMismatchError, match=r"decode: saved .*here .*bs=\[1, 2, 4\]"):
        fake.start_scheduler(server_args(decode_bs=[1, 2, 4]))


def test_a_runner_that_captures_other_sizes_than_the_archive_holds_is_refused(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _save(sglang_engines)
    fake = sglang_engines.prepare_load()
    runner_type = fake.module(DECODE).DecodeCudaGraphRunner
    real = runner_type.__post_init__

    def fewer(self: Any) -> None:  # the same settings, but this SGLang resolves fewer batch sizes (the same max)
        self.model_runner.server_args.cuda_graph_config.decode.bs = [1, 2, 8]
        real(self)

    monkeypatch.setattr(runner_type, "__post_init__", fewer)
    with pytest.raises(
        ArchiveMismatchError,
        match=r"decode runner captures 3 sizes, the archive holds decode graphs for 4 \(missing: \[\], extra: \[4\]",
    ):
        fake.start_scheduler(server_args())


def test_load_refuses_a_directory_without_a_finished_save(sglang_engines: Any) -> None:
    sglang_engines.archive.mkdir()
    fake = sglang_engines.prepare("load")
    with pytest.raises(ArchiveMetadataError, match="FOUNDRY_SGLANG_MODE=save"):
        fake.start_scheduler(server_args())


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (lambda d: d.pop("memory_pool"), ArchiveMetadataError, "is not a SGLang adapter metadata file"),
        (lambda d: d.update(breaks=[]), ArchiveMetadataError, "breaks is not a JSON object"),
        (lambda d: d["breaks"].clear(), ArchiveMetadataError, "no eager step is described"),
        (
            lambda d: [b.update(fn="sglang.srt.layers.radix_attention:gone") for b in d["breaks"].values()],
            ArchiveMetadataError,
            "names 'sglang.srt.layers.radix_attention:gone', which is not an SGLang function the Foundry adapter",
        ),
        (
            lambda d: [b["args"].__setitem__(0, {"t": 9}) for b in d["breaks"].values()],
            ArchiveMetadataError,
            r"passes tensors \[9, 1, 2, 3\] of the 4 the segment before it holds",
        ),
    ],
)
def test_damaged_metadata_is_refused_before_serving(sglang_engines: Any, edit: Any, error: Any, message: str) -> None:
    _save(sglang_engines)
    _edit_metadata(sglang_engines, edit)
    fake = sglang_engines.prepare("load")
    with pytest.raises(error, match=message):
        fake.start_scheduler(server_args())


def test_an_eager_step_this_sglang_lacks_is_refused_before_serving(sglang_engines: Any) -> None:
    _save(sglang_engines)
    fake = sglang_engines.prepare("load")
    del fake.module(ATTENTION).unified_attention_with_output  # another SGLang: the listed function is not there
    with pytest.raises(ArchiveMismatchError, match="unified_attention_with_output SAVE recorded is not in this SGLang"):
        fake.start_scheduler(server_args())


def test_load_stops_at_the_phase_whose_allocations_differ(sglang_engines: Any) -> None:
    _save(sglang_engines)
    fake = sglang_engines.prepare_load(kv_extra=4096)
    with pytest.raises(PhaseLayoutError, match="'memory_pool': allocation #1"):
        fake.start_scheduler(server_args())


def test_load_refuses_another_kv_pool_from_the_same_budget(sglang_engines: Any) -> None:
    _save(sglang_engines)
    fake = sglang_engines.prepare_load(cell=1 << 13)
    with pytest.raises(ArchiveMismatchError, match=r"KV pool holds 32 tokens for 16 requests here but 64 for 32"):
        fake.start_scheduler(server_args())


def test_saved_graphs_this_sglang_has_no_runner_for_are_refused(sglang_engines: Any) -> None:
    _save(sglang_engines)
    _edit_metadata(sglang_engines, lambda d: d.update(prefill_gate=None))  # as if SGLang's gate was never asked
    fake = sglang_engines.prepare_load(free_gb=1.0)  # little free memory: the gate skips the prefill graphs
    with pytest.raises(ArchiveMismatchError, match="holds prefill graphs that this SGLang built no runner for"):
        fake.start_scheduler(server_args())


def test_load_answers_the_prefill_memory_gate_as_save_did(sglang_engines: Any) -> None:
    _save(sglang_engines)
    fake = sglang_engines.prepare_load(free_gb=1.0)  # under LOAD, SAVE's memory is mapped and less is free
    runner = fake.start_scheduler(server_args())
    assert type(runner.prefill_cuda_graph_runner).__name__ == "PrefillCudaGraphRunner"
    assert read_metadata(sglang_engines.archive).prefill_gate_skip is False


def test_a_capture_after_load_is_refused(sglang_engines: Any) -> None:
    _save(sglang_engines)
    fake = sglang_engines.prepare_load()
    runner = fake.start_scheduler(server_args())
    with pytest.raises(UnsupportedConfigError, match="capturing its decode CUDA graphs again after LOAD"):
        fake.module(DECODE).DecodeCudaGraphRunner(runner)


def test_a_malformed_mode_stops_the_scheduler_with_the_message(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = sglang_engines.prepare("off")
    monkeypatch.setenv("FOUNDRY_SGLANG_MODE", "restore")
    with pytest.raises(PluginConfigError, match=r"FOUNDRY_SGLANG_MODE='restore' is not one of off, save, load"):
        fake.start_scheduler(server_args())  # SGLang logs register()'s exception and goes on; the hook does not
    assert fake.memory.log == []


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("returns", r"eager step .* returns a FakeTensor, kept in memory allocated between two captured segments"),
        ("local", "is no attribute of an SGLang module"),
        ("host", r"passes a tensor on cpu, which the Foundry adapter cannot carry to LOAD"),
    ],
)
def test_prefill_graphs_whose_eager_steps_load_cannot_redo_are_refused_before_writing(
    sglang_engines: Any, step: str, message: str
) -> None:
    fake = sglang_engines.prepare("save")
    attention = fake.module(ATTENTION)

    def returns_a_tensor(*args: Any, **kwargs: Any) -> Any:
        return fake.memory.allocate(64)

    def local(*args: Any, **kwargs: Any) -> None:
        return None

    inner = returns_a_tensor if step == "returns" else local
    breakable = fake.module(BCG).eager_on_graph(True)(inner)
    if step == "host":  # a module attribute, handed a tensor in host memory
        attention.unified_attention_with_output = local
        breakable = fake.module(BCG).eager_on_graph(True)(local)
        with_host = breakable

        def breakable(*args: Any, **kwargs: Any) -> Any:
            return with_host(*args, host=HostTensor(0x1000), **kwargs)

    attention.breakable_unified_attention_with_output = breakable
    with pytest.raises(UnsupportedConfigError, match=rf"(?s){message}.*--cuda-graph-backend-prefill disabled"):
        fake.start_scheduler(server_args())
    assert list(sglang_engines.archive.iterdir()) == []


def test_a_dispatcher_that_makes_no_expert_map_is_refused_by_name(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expert parallel needs each MoE layer's expert map before the graphs; an SGLang whose dispatcher makes none
    where 0.5.17's does is another SGLang: refused, naming it, before anything is captured."""
    import sys
    from types import SimpleNamespace

    from foundry.integration.sglang import PatchTargetError
    from foundry.integration.sglang.moe import DISPATCHER

    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(empty=lambda *a, **k: None, int32=0, float32=1))
    fake = sglang_engines.prepare("save")
    monkeypatch.setattr(fake.module(DISPATCHER).StandardDispatcher, "dispatch", lambda self, h, t: h)
    with pytest.raises(PatchTargetError, match=r"StandardDispatcher made no expert map .* SGLang 0.5.17"):
        fake.start_scheduler(server_args(tp_size=2, ep_size=2, disable_custom_all_reduce=True))
    assert "torch.capture" not in fake.trace.events and not fake.memory.captures
