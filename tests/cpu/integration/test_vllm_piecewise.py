"""vLLM's default graph modes in a fake vLLM 0.26 start-up: the compiled model's piecewise graphs are saved
beside the FULL ones and LOAD gives each piece its graphs back, at SAVE's addresses, for both runners,
whether vLLM compiles the model before capture_model or only at its first forward afterwards."""

from __future__ import annotations

from typing import Any

import pytest

from foundry.integration.vllm import (
    ArchiveMetadataError,
    ArchiveMismatchError,
    UnsupportedConfigError,
    read_metadata,
)
from tests.support.fakefoundry import FakeFoundry, FakeFoundryGraph, forge_document
from tests.support.fakevllm_compile import CUDAGraphMode
from tests.support.fakevllm_config import make_config

DEFAULT = CUDAGraphMode.FULL_AND_PIECEWISE
SIZES = (1, 2, 4, 8)


def _start(engines: Any, mode: str, runner: str, saved_high: int = 0, build_args: Any = None, **config: Any) -> Any:
    fake = engines.prepare(mode, FakeFoundry(high_water_saved=saved_high), **(build_args or {}))
    return fake, fake.start_engine(make_config(runner, **config))


def _save(engines: Any, runner: str, **config: Any) -> Any:
    return _start(engines, "save", runner, **config)


def _load(engines: Any, runner: str, **config: Any) -> Any:
    return _start(engines, "load", runner, read_metadata(engines.archive).high_water, **config)


def _pieces(fake: Any) -> dict[int, Any]:
    wrappers = fake.module("vllm.compilation.cuda_graph").CUDAGraphWrapper._all_instances
    return {w.runnable.piecewise_compile_index: w for w in wrappers if w.runtime_mode == CUDAGraphMode.PIECEWISE}


def _addresses(outputs: Any) -> Any:
    if isinstance(outputs, tuple):
        return tuple(_addresses(o) for o in outputs)
    return outputs.data_ptr()


@pytest.mark.parametrize("runner", ["v2", "v1"])
def test_default_mode_saves_every_piece_for_every_size_beside_the_full_graphs(engines: Any, runner: str) -> None:
    fake, _ = _save(engines, runner, cudagraph_mode=DEFAULT)
    assert "torch.cuda.graph" not in fake.trace.events  # every capture went through Foundry
    meta = read_metadata(engines.archive)
    kinds = [g.key_dict()["graph"] for g in meta.graphs]
    assert kinds.count("full") == len(SIZES) and kinds.count("piece") == 3 * len(SIZES)
    pieces = [g for g in meta.graphs if g.key_dict()["graph"] == "piece"]
    assert {(g.key_dict()["piece"], g.key_dict()["num_tokens"]) for g in pieces} == {
        (p, n) for p in range(3) for n in SIZES
    }
    shapes = {g.key_dict()["piece"]: g.outputs for g in pieces}
    assert shapes == {0: {"tuple": ["tensor", "tensor"]}, 1: {"tuple": ["tensor", "tensor"]}, 2: "tensor"}
    assert all((engines.archive / g.json).is_file() for g in meta.graphs)


@pytest.mark.parametrize("runner", ["v2", "v1"])
@pytest.mark.parametrize("early", [False, True], ids=["compiled-after-capture", "compiled-before-capture"])
def test_load_gives_each_piece_its_graphs_at_saves_addresses(engines: Any, runner: str, early: bool) -> None:
    saved_fake, _ = _save(engines, runner, cudagraph_mode=DEFAULT)
    saved = {i: {d.num_tokens: _addresses(e.output) for d, e in w.concrete_cudagraph_entries.items()}
             for i, w in _pieces(saved_fake).items()}  # fmt: skip

    fake, worker = _load(engines, runner, cudagraph_mode=DEFAULT, compile_before_capture=early)
    assert fake.memory.captures == 0 and "torch.cuda.graph" not in fake.trace.events
    pieces = _pieces(fake)
    assert {i: {d.num_tokens: _addresses(e.output) for d, e in w.concrete_cudagraph_entries.items()}
            for i, w in pieces.items()} == saved  # fmt: skip
    out = worker.model_runner.execute(3, uniform=False)  # a mixed batch: padded to 4 tokens, piecewise
    assert out.data_ptr() == saved[2][4]
    for wrapper in pieces.values():
        replayed = [(d.num_tokens, e.cudagraph) for d, e in wrapper.concrete_cudagraph_entries.items()
                    if e.cudagraph.replays]  # fmt: skip
        assert len(replayed) == 1 and replayed[0][0] == 4
        assert isinstance(replayed[0][1], FakeFoundryGraph) and replayed[0][1].loaded_from is not None
    decode = worker.model_runner.execute(3, uniform=True)  # a decode batch: the FULL graph for 4
    assert decode.data_ptr() != 0 and fake.memory.captures == 0


@pytest.mark.parametrize("runner", ["v2", "v1"])
@pytest.mark.parametrize("mode", [CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL])
def test_piecewise_only_and_full_only_modes_round_trip(engines: Any, runner: str, mode: CUDAGraphMode) -> None:
    _save(engines, runner, cudagraph_mode=mode)
    kinds = {g.key_dict()["graph"] for g in read_metadata(engines.archive).graphs}
    assert kinds == ({"piece"} if mode is CUDAGraphMode.PIECEWISE else {"full"})
    fake, worker = _load(engines, runner, cudagraph_mode=mode)
    worker.model_runner.execute(2, uniform=False)
    assert fake.memory.captures == 0


def test_load_refuses_a_model_compiled_into_other_pieces(engines: Any) -> None:
    _save(engines, "v2", cudagraph_mode=DEFAULT)
    with pytest.raises(ArchiveMismatchError, match=r"compiled backbone piece 1/4, which the archive has no graphs"):
        _load(engines, "v2", cudagraph_mode=DEFAULT, pieces=4)


def test_load_refuses_an_archive_saved_in_another_mode(engines: Any) -> None:
    _save(engines, "v2", cudagraph_mode=CUDAGraphMode.FULL_DECODE_ONLY)
    with pytest.raises(ArchiveMismatchError, match="piecewise CUDA graphs and the archive holds none"):
        _load(engines, "v2", cudagraph_mode=DEFAULT)


def test_load_refuses_a_damaged_output_shape(engines: Any) -> None:
    _save(engines, "v2", cudagraph_mode=DEFAULT)

    def edit(doc: dict[str, Any]) -> None:
        piece = next(g for g in doc["graphs"] if g["key"]["graph"] == "piece" and g["key"]["piece"] == 0)
        piece["outputs"] = {"tuple": ["tensor", "tensor", "tensor"]}

    forge_document(engines.archive, "vllm_plugin.json", edit)
    with pytest.raises(ArchiveMetadataError, match=r"does not match the 2 tensors the graph holds"):
        _load(engines, "v2", cudagraph_mode=DEFAULT)


def test_a_batch_without_a_loaded_graph_fails_loudly_instead_of_capturing(engines: Any) -> None:
    _save(engines, "v2", cudagraph_mode=DEFAULT)
    fake, worker = _load(engines, "v2", cudagraph_mode=DEFAULT)
    assert "capturing_enabled:False" in fake.trace.events
    wrapper = _pieces(fake)[1]
    desc = next(iter(wrapper.concrete_cudagraph_entries))
    del wrapper.concrete_cudagraph_entries[desc]
    with pytest.raises(RuntimeError, match="capturing detected"):
        worker.model_runner.execute(desc.num_tokens, uniform=False)


def test_breakable_cuda_graphs_and_inductor_partitions_are_refused(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_USE_BREAKABLE_CUDAGRAPH", "1")
    fake = engines.prepare("save")
    with pytest.raises(UnsupportedConfigError, match="VLLM_USE_BREAKABLE_CUDAGRAPH"):
        fake.start_engine(make_config(cudagraph_mode=DEFAULT))
    monkeypatch.delenv("VLLM_USE_BREAKABLE_CUDAGRAPH")
    config = make_config(cudagraph_mode=DEFAULT)
    config.compilation_config.use_inductor_graph_partition = True
    fake = engines.prepare("save")
    with pytest.raises(UnsupportedConfigError, match="use_inductor_graph_partition"):
        fake.start_engine(config)
    assert fake.memory.calls == []
