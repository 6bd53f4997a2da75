"""The region's small-allocation granule, opened after vLLM's distributed set-up and before its memory snapshot
with the room the driver's partly used page has (lifecycle.after_distributed): SAVE measures the room and keeps
it in the archive, LOAD opens the same granule from the archive without measuring, and the phases up to the
profile close no granule."""

from __future__ import annotations

from typing import Any

import pytest

from foundry.integration.vllm import ArchiveMetadataError, read_metadata
from foundry.integration.vllm.metadata import METADATA_NAME
from tests.support.fakefoundry import FakeFoundry, forge_document
from tests.support.fakevllm_config import make_config

ROOM = 1_966_080  # what a GPU's driver page had left after NCCL's set-up, say


def _save(engines: Any, room: int) -> Any:
    fake = engines.prepare("save", FakeFoundry(driver_room=room))
    worker = fake.start_engine(make_config("v2"))
    return fake, worker


def test_save_opens_the_granule_with_the_drivers_room_before_vllms_snapshot(engines: Any) -> None:
    fake, worker = _save(engines, ROOM)
    calls = fake.memory.calls
    opened = calls.index(f"open_small_granule:{ROOM}")
    assert calls[opened - 1] == "small_allocation_room"
    assert calls[: opened + 1] == worker.foundry_calls_at_snapshot[: opened + 1]  # before the snapshot
    assert fake.memory.log[0] == ("ALLOC", 0, 1 << 20)  # after NCCL's scratch, the distributed set-up's
    assert read_metadata(engines.archive).small_room == ROOM


def test_load_opens_saves_granule_without_measuring_and_loads(engines: Any) -> None:
    _save(engines, ROOM)
    saved = read_metadata(engines.archive)
    memory = FakeFoundry(high_water_saved=saved.high_water, driver_room=4096)  # this machine's page: other room
    fake = engines.prepare("load", memory)
    worker = fake.start_engine(make_config("v2"))
    assert "small_allocation_room" not in memory.calls
    assert f"open_small_granule:{ROOM}" in worker.foundry_calls_at_snapshot
    # every phase LOAD runs as SAVE did placed its memory where SAVE's did (LOAD checks them; it got here)
    assert worker.model_runner.cudagraph_manager.graphs


def test_no_room_opens_nothing(engines: Any) -> None:
    fake, _ = _save(engines, 0)
    assert "small_allocation_room" in fake.memory.calls
    assert not any(c.startswith("open_small_granule") for c in fake.memory.calls)
    assert read_metadata(engines.archive).small_room == 0


def test_an_archive_without_the_field_loads_as_one_that_opened_none(engines: Any) -> None:
    _save(engines, ROOM)
    # as an archive written before the granule was opened early reads: its SAVE opened none
    forge_document(engines.archive, METADATA_NAME, lambda doc: doc.pop("small_allocation_room"))
    assert read_metadata(engines.archive).small_room == 0


@pytest.mark.parametrize("bad", [-1, True, "4096", 1 << 40, 1.5])
def test_a_damaged_room_is_refused_before_anything_runs(engines: Any, bad: Any) -> None:
    _save(engines, ROOM)
    forge_document(engines.archive, METADATA_NAME, lambda doc: doc.update(small_allocation_room=bad))
    with pytest.raises(ArchiveMetadataError, match="small_allocation_room"):
        read_metadata(engines.archive)
