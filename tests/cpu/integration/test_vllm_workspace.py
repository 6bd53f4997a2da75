"""vLLM's workspace across SAVE and LOAD (foundry/integration/vllm/workspace.py), in the fake vLLM 0.26: the
scratch buffer an MoE model's profile run grows, that captured graphs hold and that eager forwards use after
capture. LOAD skips the runs that grow it, so it must give vLLM SAVE's buffer back, and lock it only where
native vLLM does."""

from __future__ import annotations

from typing import Any

import pytest

from foundry.integration.vllm import ArchiveMetadataError, read_metadata
from foundry.integration.vllm.workspace import Workspace
from tests.support.fakefoundry import FakeFoundry
from tests.support.fakevllm_config import make_config

WORKSPACE = 7 << 20  # no other fake allocation has this size


def _addresses(events: list[str]) -> list[int]:
    return [int(e.split(":", 1)[1], 16) for e in events if e.startswith("workspace:")]


@pytest.mark.parametrize("runner", ["v1", "v2"])
@pytest.mark.parametrize("compile_first", [False, True], ids=["capture-first", "compile-warmup-first"])
def test_load_hands_every_eager_forward_saves_workspace_locked_as_saves(
    engines: Any, runner: str, compile_first: bool
) -> None:
    config = {"workspace": WORKSPACE, "compile_before_capture": compile_first}
    fake = engines.prepare("save")
    saved_worker = fake.start_engine(make_config(runner, **config))
    (saved_at,) = set(_addresses(fake.trace.events))  # one buffer, from the profile run on
    saved_manager = fake.module("vllm.v1.worker.workspace").current_workspace_manager()
    meta = read_metadata(engines.archive)
    assert meta.workspace == Workspace(((saved_at, WORKSPACE),), locked=runner == "v1")
    assert saved_manager.is_locked() == (runner == "v1")

    fake = engines.prepare("load", FakeFoundry(high_water_saved=meta.high_water))
    worker = fake.start_engine(make_config(runner, **config))  # the sampler warm-up's MoE layer runs eagerly
    events = fake.trace.events
    assert events.index("initialize_kv_cache") < events.index("profile_run")  # LOAD's warm-up, past SAVE's memory
    assert set(_addresses(events)) == {saved_at}  # every eager forward, the warm-up's included, used SAVE's buffer
    manager = fake.module("vllm.v1.worker.workspace").current_workspace_manager()
    assert manager.is_locked() == (runner == "v1")
    assert manager._current_workspaces[0].nbytes == WORKSPACE
    # SAVE's buffer came back before the first eager forward, and no allocation of LOAD's was made for it
    calls = fake.memory.calls
    assert calls.index(f"restored_tensor:{saved_at:#x}+{WORKSPACE}") < calls.index("build_dedicated")
    assert all(size != WORKSPACE for kind, _, size in fake.memory.log if kind == "ALLOC")
    assert worker.model_runner.kv_cache.address == saved_worker.model_runner.kv_cache.address


def test_a_dense_model_without_a_workspace_loads_with_none(engines: Any) -> None:
    fake = engines.prepare("save")
    fake.start_engine(make_config("v1"))
    meta = read_metadata(engines.archive)
    assert meta.workspace == Workspace(((0, 0),), locked=True)
    fake = engines.prepare("load", FakeFoundry(high_water_saved=meta.high_water))
    fake.start_engine(make_config("v1"))
    manager = fake.module("vllm.v1.worker.workspace").current_workspace_manager()
    assert manager._current_workspaces == [None] and manager.is_locked()
    assert not [c for c in fake.memory.calls if c.startswith("restored_tensor")]


@pytest.mark.parametrize(
    "doc",
    [
        {"slots": [[1, 2, 3]], "locked": False},
        {"slots": [[-1, 2]], "locked": False},
        {"slots": [[1.0, 2]], "locked": False},
        {"slots": [[True, 2]], "locked": False},
        {"slots": [[1, 2]], "locked": 1},
        {"slots": "x", "locked": False},
        {"locked": False},
        [],
    ],
)
def test_a_damaged_saved_workspace_is_refused_by_name(doc: Any) -> None:
    with pytest.raises(ArchiveMetadataError, match="saved vLLM workspace"):
        Workspace.from_json(doc)


def test_load_refuses_a_workspace_with_other_micro_batch_slots(engines: Any) -> None:
    from foundry.integration.vllm import workspace

    fake = engines.prepare("save")
    fake.start_engine(make_config("v2", workspace=WORKSPACE))
    manager = fake.module("vllm.v1.worker.workspace").current_workspace_manager()
    saved = Workspace(((1, 2), (3, 4)), locked=False)
    with pytest.raises(ArchiveMetadataError, match="2 in SAVE: the micro-batching settings differ"):
        workspace.install(saved, lambda a, n: None)
    assert manager._current_workspaces[0] is not None  # untouched
