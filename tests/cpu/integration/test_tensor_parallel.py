"""Tensor parallel under the plugins: one archive folder per rank (shared/ranks.py), the rank declared to
Foundry before any communicator exists, NCCL's settings the same in every rank's SAVE and LOAD, an archive
of another world size refused alike on every rank before the GPU is touched, and the all-reduce paths the
adapter cannot restore refused by name at start-up (the fake vLLM 0.26 start-up, tests/support/fakevllm.py)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from foundry.integration.shared.engine import Engine
from foundry.integration.shared.errors import ArchiveMismatchError, PluginConfigError, UnsupportedConfigError
from foundry.integration.shared.ranks import (
    NCCL_SETTINGS,
    SINGLE,
    Place,
    bundles_to_store,
    check_load_dir,
    check_save_dir,
    first_rank_dir,
    nccl_settings,
    rank_dir,
    share_with_other_ranks,
)
from foundry.integration.vllm import read_metadata
from tests.support.fakefoundry import FakeFoundry
from tests.support.fakevllm_config import make_config

ENGINE = Engine(name="Fake", key="fake", version="1", logger="fake")
TP_READY = {"VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}


VLLM_ALL_REDUCE = ("VLLM_ALLREDUCE_USE_SYMM_MEM", "VLLM_ALLREDUCE_USE_FLASHINFER", "VLLM_USE_NCCL_SYMM_MEM")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, and whatever the plugin sets is undone after the test (setenv records the absence)."""
    for name in [*NCCL_SETTINGS, *VLLM_ALL_REDUCE]:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


# ------------------------------------------------------------------ the layout, engine-independent
def test_a_rank_has_its_own_folder_and_a_single_process_the_archive_itself(tmp_path: Path) -> None:
    assert rank_dir(tmp_path, SINGLE) == tmp_path
    assert rank_dir(tmp_path, Place(1, 4)) == tmp_path / "rank_1"
    with pytest.raises(ValueError, match="need 0 <= rank < world"):
        Place(2, 2)


def test_save_takes_its_rank_folder_and_refuses_what_another_save_left(tmp_path: Path) -> None:
    top = tmp_path / "archive"
    assert check_save_dir(top, Place(1, 2), ENGINE) == top / "rank_1"
    assert check_save_dir(top, Place(0, 2), ENGINE) == top / "rank_0"  # the other rank, alongside
    (top / "rank_0" / "g0000.json").write_text("{}")
    with pytest.raises(PluginConfigError, match=r"rank_0 already exists and is not empty"):
        check_save_dir(top, Place(0, 2), ENGINE)
    (top / "rank_2").mkdir()  # a four-rank SAVE's folder in a two-rank deployment
    with pytest.raises(PluginConfigError, match=r"fresh archive of 2 ranks .* also holds rank_2"):
        check_save_dir(top, Place(1, 2), ENGINE)


@pytest.mark.parametrize(
    ("saved", "world", "refusal"),
    [
        ([0, 1], 1, r"saved by 2 ranks \(rank_\* folders \[0, 1\]\), and this Fake runs 1 rank:"),
        ([0, 1], 4, r"saved by 2 ranks .* this Fake runs 4 ranks"),
        ([0, 1, 2, 3], 2, r"saved by 4 ranks"),
        ([0, 2], 2, r"rank_\* folders \[0, 2\]"),
        ([], 2, r"saved by one process, and this Fake runs 2 ranks"),
    ],
)
def test_load_refuses_an_archive_of_another_world_on_every_rank(
    tmp_path: Path, saved: list[int], world: int, refusal: str
) -> None:
    for r in saved:
        (tmp_path / f"rank_{r}").mkdir()
    for rank in range(world):  # each rank reads the same listing: every one refuses, none waits for a peer
        with pytest.raises(ArchiveMismatchError, match=refusal):
            check_load_dir(tmp_path, Place(rank, world), ENGINE)


def test_load_takes_its_rank_folder_when_the_worlds_agree(tmp_path: Path) -> None:
    for r in range(2):
        (tmp_path / f"rank_{r}").mkdir()
    assert check_load_dir(tmp_path, Place(1, 2), ENGINE) == tmp_path / "rank_1"
    assert check_load_dir(tmp_path / "rank_1", SINGLE, ENGINE) == tmp_path / "rank_1"


def test_what_every_rank_holds_alike_is_read_from_the_lowest_ranks_folder(tmp_path: Path) -> None:
    assert first_rank_dir(tmp_path) == tmp_path  # one process saved it
    for r in (1, 0, 2):
        (tmp_path / f"rank_{r}").mkdir()
    assert first_rank_dir(tmp_path) == tmp_path / "rank_0"


def test_nccl_settings_are_set_where_unset_and_a_users_other_value_is_refused() -> None:
    env: dict[str, str] = {"NCCL_NVLS_ENABLE": "0"}
    added = nccl_settings(Place(0, 2), ENGINE, env)
    assert env == NCCL_SETTINGS and "NCCL_NVLS_ENABLE" not in added and added["NCCL_RUNTIME_CONNECT"] == "0"
    assert nccl_settings(SINGLE, ENGINE, {}) == {}  # one GPU: nothing to set
    wrong = {"NCCL_NVLS_ENABLE": "1", "NCCL_CUMEM_ENABLE": "0"}
    with pytest.raises(UnsupportedConfigError) as caught:
        nccl_settings(Place(1, 2), ENGINE, wrong)
    message = str(caught.value)
    assert "NCCL_NVLS_ENABLE=1 (needs 0)" in message and "NCCL_CUMEM_ENABLE=0 (needs 1)" in message
    assert "FOUNDRY_FAKE_MODE=off" in message
    assert wrong == {"NCCL_NVLS_ENABLE": "1", "NCCL_CUMEM_ENABLE": "0"}  # nothing set on a refusal


# ------------------------------------------------------------------ vLLM
@pytest.mark.parametrize(
    ("config", "env", "refusal"),
    [
        (
            {"tp": 2, "disable_custom_all_reduce": True},
            {"VLLM_ALLREDUCE_USE_FLASHINFER": "1"},
            r"VLLM_ALLREDUCE_USE_FLASHINFER=1 .*set VLLM_ALLREDUCE_USE_FLASHINFER=0",
        ),
        (
            {"tp": 2, "disable_custom_all_reduce": True},
            {**TP_READY, "VLLM_USE_NCCL_SYMM_MEM": "1"},
            r"VLLM_USE_NCCL_SYMM_MEM=1",
        ),
    ],
)
def test_vllm_tensor_parallel_with_an_all_reduce_that_is_not_restored_is_refused_by_name(
    engines: Any, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any], env: dict[str, str], refusal: str
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    fake = engines.prepare("save")
    with pytest.raises(UnsupportedConfigError, match=refusal):
        fake.start_engine(make_config(**config))
    assert not fake.memory.log  # refused before anything was allocated


def test_vllm_tensor_parallel_with_its_custom_all_reduce_on_is_saved(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's default all-reduce is accepted: its peer table is written again at LOAD (allreduce.py).
    The fake vLLM builds no communicator, so the archive records the custom all-reduce as off."""
    for k, v in TP_READY.items():
        monkeypatch.setenv(k, v)
    fake = engines.prepare("save")
    fake.start_engine(make_config(tp=2), rank=0)
    assert (engines.archive / "rank_0" / "graph_manifest.json").is_file()
    assert read_metadata(engines.archive / "rank_0").custom_all_reduce is None


def test_vllm_pipeline_parallel_and_the_expert_load_balancer_are_refused_by_name(engines: Any) -> None:
    config = make_config(tp=2, disable_custom_all_reduce=True)
    config.parallel_config.pipeline_parallel_size = 2
    config.parallel_config.enable_expert_parallel = True
    config.parallel_config.enable_eplb = True
    fake = engines.prepare("save")
    with pytest.raises(
        UnsupportedConfigError, match=r"pipeline parallelism.*\n.*expert load balancing \(enable_eplb\)"
    ):
        fake.start_engine(config)
    assert not fake.memory.log


def test_vllm_expert_parallel_over_the_tensor_parallel_group_saves_and_loads_per_rank(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expert parallel with data parallel 1: the experts' outputs are summed by the tensor-parallel all-reduce,
    so it is saved and loaded like tensor parallel, one folder per rank."""
    for k, v in TP_READY.items():
        monkeypatch.setenv(k, v)
    for mode in ("save", "load"):
        for rank in range(2):
            config = make_config(tp=2, disable_custom_all_reduce=True)
            config.parallel_config.enable_expert_parallel = True
            config.parallel_config.enable_eplb = False
            fake = engines.prepare(mode, FakeFoundry(high_water_saved=_high_water(engines)) if mode == "load" else None)
            fake.start_engine(config, rank=rank)
            assert fake.memory.rank == (rank, 2)
            if mode == "load":
                assert fake.memory.loaded_from == engines.archive / f"rank_{rank}"
                assert "v2.capture_model" not in fake.trace.events


def _high_water(engines: Any) -> int:
    return int(read_metadata(engines.archive / "rank_0").high_water)


def _ranks(engines: Any, mode: str, world: int, **memory: Any) -> list[Any]:
    """Each rank's start-up in turn (vLLM starts one worker process per rank; each has its own session)."""
    fakes = []
    for rank in range(world):
        fake = engines.prepare(mode, FakeFoundry(**memory) if memory else None)
        fake.start_engine(make_config(tp=world, disable_custom_all_reduce=True), rank=rank)
        fakes.append(fake)
    return fakes


def test_vllm_tensor_parallel_saves_and_loads_one_folder_per_rank(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in TP_READY.items():
        monkeypatch.setenv(k, v)
    saved = _ranks(engines, "save", 2)
    for rank, fake in enumerate(saved):
        assert fake.memory.rank == (rank, 2)
        calls = fake.memory.calls
        assert calls.index("set_rank") < calls.index("set_region")  # declared before any graph is captured
        assert (engines.archive / f"rank_{rank}" / "graph_manifest.json").is_file()
    assert sorted(p.name for p in engines.archive.iterdir()) == ["rank_0", "rank_1"]
    assert {k: os.environ[k] for k in NCCL_SETTINGS} == NCCL_SETTINGS  # what each rank's NCCL was made with
    # rank 0 finished first, so rank 1 stores its graph bundle against rank 0's once it has finished
    assert [f.memory.bundles_stored for f in saved] == [[], [(engines.archive / "rank_1", engines.archive / "rank_0")]]
    high_water = read_metadata(engines.archive / "rank_0").high_water
    loaded = _ranks(engines, "load", 2, high_water_saved=high_water)
    for rank, fake in enumerate(loaded):
        assert fake.memory.rank == (rank, 2)
        assert "v2.capture_model" not in fake.trace.events  # served from the rank's folder, not captured
        assert fake.memory.loaded_from == engines.archive / f"rank_{rank}"


def test_vllm_one_gpu_from_a_two_rank_archive_is_refused_before_the_gpu_is_touched(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in TP_READY.items():
        monkeypatch.setenv(k, v)
    _ranks(engines, "save", 2)
    fake = engines.prepare("load")
    with pytest.raises(ArchiveMismatchError, match=r"saved by 2 ranks .* runs 1 rank"):
        fake.start_engine(make_config())
    assert not fake.memory.log and "load_modules" not in fake.memory.calls


# ------------------------------------------------------------------ SGLang
def test_sglang_tensor_parallel_saves_and_loads_one_folder_per_rank(sglang_engines: Any) -> None:
    from foundry.integration.sglang.metadata import read_metadata as read_sglang
    from tests.support.fakesglang import server_args

    args = {"tp_size": 2, "disable_custom_all_reduce": True}
    for rank in range(2):
        fake = sglang_engines.prepare("save")
        fake.start_scheduler(server_args(**args), tp_rank=rank)
        assert fake.memory.rank == (rank, 2)
        assert fake.memory.calls.index("set_rank") < fake.memory.calls.index("set_region")
    archive = sglang_engines.archive
    assert sorted(p.name for p in archive.iterdir()) == ["rank_0", "rank_1"]
    for rank in range(2):
        saved = read_sglang(archive / f"rank_{rank}")
        fake = sglang_engines.prepare("load", FakeFoundry(high_water_saved=saved.high_water))
        fake.start_scheduler(server_args(**args), tp_rank=rank)
        assert fake.memory.rank == (rank, 2) and fake.memory.loaded_from == archive / f"rank_{rank}"
    fake = sglang_engines.prepare("load")  # one GPU from the two-rank archive
    with pytest.raises(ArchiveMismatchError, match=r"saved by 2 ranks .* runs 1 rank"):
        fake.start_scheduler(server_args())
    assert fake.memory.log == [] and "load_modules" not in fake.memory.calls


def test_vllm_rank_folders_swapped_are_refused_on_both_ranks_before_the_gpu_is_touched(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in TP_READY.items():
        monkeypatch.setenv(k, v)
    _ranks(engines, "save", 2)
    top = engines.archive
    (top / "rank_0").rename(top / "swap")
    (top / "rank_1").rename(top / "rank_0")
    (top / "swap").rename(top / "rank_1")
    for rank in range(2):
        fake = engines.prepare("load")
        with pytest.raises(ArchiveMismatchError, match=rf"rank: saved '{1 - rank} of 2', here '{rank} of 2'"):
            fake.start_engine(make_config(tp=2, disable_custom_all_reduce=True), rank=rank)
        assert not fake.memory.log and "load_modules" not in fake.memory.calls


def _addressed(folder: Path, data: bytes) -> Path:
    path = folder / "images" / f"{hashlib.sha256(data).hexdigest()}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_rank_keeps_one_copy_of_the_files_another_rank_holds_alike(tmp_path: Path) -> None:
    rank0, rank1 = tmp_path / "rank_0", tmp_path / "rank_1"
    kernels, own = b"the same kernels" * 1000, b"rank 1 only" * 100
    first, mine = _addressed(rank0, kernels), _addressed(rank1, kernels)
    only = _addressed(rank1, own)
    (rank1 / "g.json").write_text("{}")  # not content-addressed: never shared
    (rank0 / "g.json").write_text("{}")
    assert share_with_other_ranks(rank1, Place(0, 1)) == 0  # a world of one has no one to share with
    assert share_with_other_ranks(rank1, Place(1, 2)) == len(kernels)
    assert mine.stat().st_ino == first.stat().st_ino and mine.read_bytes() == kernels
    assert only.stat().st_nlink == 1 and (rank1 / "g.json").stat().st_ino != (rank0 / "g.json").stat().st_ino
    assert share_with_other_ranks(rank1, Place(1, 2)) == len(kernels)  # again: already one copy, nothing changes
    assert sorted(p.name for p in (rank1 / "images").iterdir()) == sorted([mine.name, only.name])  # no temp left


def test_a_damaged_copy_of_another_rank_is_never_spread(tmp_path: Path) -> None:
    data = b"kernels" * 500
    theirs, mine = _addressed(tmp_path / "rank_0", data), _addressed(tmp_path / "rank_1", data)
    theirs.write_bytes(b"K" + data[1:])  # same size, bytes that no longer hash to the name
    assert share_with_other_ranks(tmp_path / "rank_1", Place(1, 2)) == 0
    assert mine.read_bytes() == data and mine.stat().st_ino != theirs.stat().st_ino


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 1, 0, 2), (1, 2, 3, 0)])
def test_every_bundle_but_rank_0s_is_stored_against_it_whatever_order_the_ranks_finish_in(
    tmp_path: Path, order: tuple[int, ...]
) -> None:
    stored: list[tuple[Path, Path]] = []
    for rank in order:  # each rank's SAVE ends with its manifest, then asks which bundles to store
        folder = tmp_path / f"rank_{rank}"
        folder.mkdir()
        (folder / "graph_manifest.json").write_text("{}")
        stored += bundles_to_store(folder, Place(rank, 4))
    assert sorted(stored) == [(tmp_path / f"rank_{r}", tmp_path / "rank_0") for r in (1, 2, 3)]
    assert bundles_to_store(tmp_path, SINGLE) == []


def _torch_for_empty_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the adapter asks of torch to dispatch an empty batch (the fake SGLang's dispatcher reads none of it)."""
    import sys
    from types import SimpleNamespace

    monkeypatch.setitem(
        sys.modules, "torch", SimpleNamespace(empty=lambda *a, **k: ("empty", a), int32="int32", float32="float32")
    )


def test_sglang_expert_parallel_builds_the_expert_maps_where_save_had_them_on_every_rank(
    sglang_engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ep_size = tp_size: natively each MoE layer's dispatcher makes its expert map on its first dispatch, the
    first warm-up forward of capture, which LOAD never runs. Under the adapter SAVE and LOAD both have it made
    before the graphs (a phase of its own, checked), so LOAD's map lies where SAVE's graphs read it."""
    from foundry.integration.sglang.metadata import read_metadata as read_sglang
    from tests.support.fakesglang import server_args

    _torch_for_empty_batches(monkeypatch)
    args = {"tp_size": 2, "ep_size": 2, "disable_custom_all_reduce": True}
    native = sglang_engines.prepare("off")
    native.start_scheduler(server_args(**args))
    events = native.trace.events
    assert events.count("expert_map") == 2 and events.index("expert_map") > events.index("init_cuda_graphs")
    saved: dict[int, list[int]] = {}
    for rank in range(2):
        fake = sglang_engines.prepare("save")
        runner = fake.start_scheduler(server_args(**args), tp_rank=rank)
        events = fake.trace.events
        assert events.count("expert_map") == 2 and events.index("expert_map") < events.index("init_cuda_graphs")
        saved[rank] = [layer.dispatcher.local_expert_mapping.address for layer in runner.model.layers]
        phases = [p.name for p in read_sglang(sglang_engines.archive / f"rank_{rank}").phases]
        assert phases[phases.index("attention_backends") + 1] == "expert_maps", phases
    for rank in range(2):
        meta = read_sglang(sglang_engines.archive / f"rank_{rank}")
        fake = sglang_engines.prepare("load", FakeFoundry(high_water_saved=meta.high_water))
        runner = fake.start_scheduler(server_args(**args), tp_rank=rank)
        assert [layer.dispatcher.local_expert_mapping.address for layer in runner.model.layers] == saved[rank]
        assert fake.trace.events.count("expert_map") == 2 and "torch.capture" not in fake.trace.events
