"""An archive never chooses what code runs: a prefill graph's eager step that names anything but the function
the SGLang plugin calls (allowed.py), or passes that function arguments SAVE never writes, is refused by name
when LOAD reads the metadata, before the GPU is touched, with nothing imported or called. The steps here are
forged as someone who can write the archive but holds no signing key would: the metadata sealed and listed in
the manifest again, so that only the plugin's own checks stand in the way. SAVE refuses the same steps."""

from __future__ import annotations

import builtins
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foundry.integration.sglang import ArchiveMetadataError, UnsupportedConfigError, read_metadata
from foundry.integration.sglang.allowed import ATTENTION as LISTED
from foundry.integration.sglang.breaks import rebuild
from foundry.integration.sglang.metadata import FILE
from tests.support.fakefoundry import FakeTensor, forge_document
from tests.support.fakesglang import server_args
from tests.support.fakesglang_graphs import ATTENTION, BCG, LAYERS

Step = dict[str, Any]
TENSORS = [{"t": 0}, {"t": 1}, {"t": 2}, {"t": 3}]  # what SAVE writes: query, key, value, output
SOUND: Step = {
    "fn": LISTED,
    "args": [*TENSORS, {"v": True}, {"v": 0}],
    "kwargs": {"use_mha_companion": {"v": False}, "key_value_num_tokens": {"v": None}},
}


def _with(**changes: Any) -> Callable[[Path], Step]:
    return lambda sentinel: {**SOUND, **changes}


FORGED: dict[str, Callable[[Path], Step]] = {
    "os:system": lambda sentinel: {"fn": "os:system", "args": [{"v": f"touch {sentinel}"}], "kwargs": {}},
    "builtins:exec": lambda sentinel: {
        "fn": "builtins:exec",
        "args": [{"v": f"open({str(sentinel)!r}, 'w').write('ran')"}],
        "kwargs": {},
    },
    "builtins:print": lambda sentinel: {"fn": "builtins:print", "args": [{"v": "forged"}], "kwargs": {}},
    "another SGLang function": _with(fn="sglang.srt.layers.radix_attention:breakable_unified_attention_with_output"),
    "the name with a space": _with(fn=LISTED + " "),
    "the name as a list": _with(fn=LISTED.split(":")),
    "an argument too many": _with(args=[*SOUND["args"], {"v": "rm -rf /"}]),
    "a string for a bool": _with(args=[*TENSORS, {"v": "yes"}, {"v": 0}]),
    "a bool for the layer": _with(args=[*TENSORS, {"v": True}, {"v": True}]),
    "a negative layer": _with(args=[*TENSORS, {"v": True}, {"v": -1}]),
    "a container": _with(args=[*TENSORS, {"list": [{"v": True}]}, {"v": 0}]),
    "a keyword it does not take": _with(kwargs={**SOUND["kwargs"], "callback": {"v": "os:system"}}),
    "a parameter twice": _with(kwargs={**SOUND["kwargs"], "query": {"t": 0}}),
    "a required one missing": _with(args=SOUND["args"][:5]),
    "a tensor out of range": _with(args=[{"t": 0}, {"t": 1}, {"t": 2}, {"t": 9}, {"v": True}, {"v": 0}]),
    "tensors reordered": _with(args=[{"t": 1}, {"t": 0}, {"t": 2}, {"t": 3}, {"v": True}, {"v": 0}]),
    "a None for the output": _with(args=[*TENSORS[:3], {"v": None}, {"v": True}, {"v": 0}]),
    "an index as a string": _with(args=[{"t": "0"}, *TENSORS[1:], {"v": True}, {"v": 0}]),
    "a key more": _with(call="os:system"),
}
MESSAGES = {
    "os:system": "names 'os:system', which is not an SGLang function the Foundry adapter calls",
    "builtins:exec": "names 'builtins:exec', which is not an SGLang function",
    "builtins:print": "names 'builtins:print', which is not an SGLang function",
    "another SGLang function": "names 'sglang.srt.layers.radix_attention:breakable_unified_attention_with_output'",
    "an argument too many": "passes 7 arguments by position; the function takes at most 6",
    "a string for a bool": "passes {'v': 'yes'} as save_kv_cache, which takes bool",
    "a keyword it does not take": "passes keyword 'callback', which the function does not take",
    "a parameter twice": "passes 'query' twice",
    "a required one missing": "does not pass ['layer_id']",
    "a tensor out of range": "passes tensors [0, 1, 2, 9] of the 4 the segment before it holds",
    "a key more": "is not described as SAVE describes one",
}


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, list[Any]]:
    """Records every print and every import_module: a refused step must cause neither."""
    calls: dict[str, list[Any]] = {"print": [], "import": []}
    real_import = importlib.import_module

    def recording_import(name: str, package: str | None = None) -> Any:
        calls["import"].append(name)
        return real_import(name, package)

    monkeypatch.setattr(builtins, "print", lambda *a, **k: calls["print"].append(a))
    monkeypatch.setattr(importlib, "import_module", recording_import)
    return calls


@pytest.mark.parametrize("forgery", list(FORGED))
def test_a_forged_eager_step_is_refused_at_load_before_the_gpu_with_nothing_run(
    sglang_engines: Any, nothing_runs: dict[str, list[Any]], tmp_path: Path, forgery: str
) -> None:
    sentinel = tmp_path / "ran"
    sglang_engines.prepare("save").start_scheduler(server_args())

    def forge(doc: dict[str, Any]) -> None:
        first = next(iter(doc["breaks"]))
        doc["breaks"][first] = FORGED[forgery](sentinel)

    forge_document(sglang_engines.archive, FILE.name, forge)
    fake = sglang_engines.prepare("load")
    with pytest.raises(ArchiveMetadataError) as refused:
        fake.start_scheduler(server_args())
    message = str(refused.value)
    assert "sglang_plugin.json: the eager step after 'g0000_prefill_t16_s000.json'" in message
    assert MESSAGES.get(forgery, "") in message and "Run SAVE again" in message
    assert fake.memory.calls == []  # refused while the metadata was read: no image loaded, no region set
    assert not sentinel.exists() and nothing_runs["print"] == []
    assert not [n for n in nothing_runs["import"] if n in ("os", "builtins") or "radix_attention" in n]
    assert not [e for e in fake.trace.events if e.startswith("attention:")]


@pytest.mark.parametrize("forgery", list(FORGED))
def test_rebuild_itself_refuses_a_forged_step_before_importing_anything(
    nothing_runs: dict[str, list[Any]], tmp_path: Path, forgery: str
) -> None:
    """The check at start-up aside, the step's own rebuilding refuses it too."""
    sentinel = tmp_path / "ran"
    with pytest.raises(ArchiveMetadataError, match="the archive's metadata was edited or damaged"):
        rebuild(FORGED[forgery](sentinel), tuple(FakeTensor(0x1000 * i) for i in range(4)), "g.json")
    assert nothing_runs["import"] == [] and nothing_runs["print"] == [] and not sentinel.exists()


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("unlisted", r"the eager step sglang\.srt\.layers\.radix_attention:other_step is not one the Foundry adapter"),
        ("keyword", r"passes keyword 'note', which the function does not take.*does not carry to LOAD"),
    ],
)
def test_save_refuses_a_step_load_would_refuse(sglang_engines: Any, step: str, message: str) -> None:
    fake = sglang_engines.prepare("save")
    attention = fake.module(ATTENTION)

    def other_step(*args: Any, **kwargs: Any) -> None:
        return None

    if step == "unlisted":  # a function of an SGLang module, but not the one the plugin calls
        attention.other_step = other_step
        breakable = fake.module(BCG).eager_on_graph(True)(other_step)
    else:  # the listed function (one that takes anything), called with a keyword the real one does not take
        attention.unified_attention_with_output = other_step
        eager = fake.module(BCG).eager_on_graph(True)(other_step)

        def breakable(*args: Any, **kwargs: Any) -> Any:
            return eager(*args, note="x", **kwargs)

    attention.breakable_unified_attention_with_output = breakable
    with pytest.raises(UnsupportedConfigError, match=rf"(?s){message}.*--cuda-graph-backend-prefill disabled"):
        fake.start_scheduler(server_args())
    assert list(sglang_engines.archive.iterdir()) == []


def test_a_step_as_save_wrote_it_loads_and_calls_the_listed_function(sglang_engines: Any) -> None:
    """The forger's path itself refuses nothing: the metadata sealed and listed again as it was loads, and its
    steps call SGLang's attention."""
    sglang_engines.prepare("save").start_scheduler(server_args())
    steps = read_metadata(sglang_engines.archive).breaks
    assert next(iter(steps.values())) == SOUND
    forge_document(sglang_engines.archive, FILE.name, lambda doc: None)
    fake = sglang_engines.prepare_load()
    runner = fake.start_scheduler(server_args())
    before = len(fake.trace.events)  # LOAD's warm-up has replayed a prefill graph already: count this one's steps
    runner.prefill_cuda_graph_runner.execute(16)
    assert len([e for e in fake.trace.events[before:] if e.startswith("attention:")]) == LAYERS
