"""shared/session.py and shared/steps.py driven by a second engine (FOUNDRY_SGLANG_*): SAVE then LOAD over
the fake Foundry API, and each refusal, with messages naming that engine."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import read_manifest
from foundry.errors import LoadError
from foundry.integration.shared import (
    ArchiveMismatchError,
    PhaseLayoutError,
    PluginConfigError,
    SessionStore,
    steps,
)
from foundry.integration.shared.metadata import Fingerprint
from foundry.integration.shared.ranks import Place, report_path
from tests.support.fakeengine import FILE, SglangConfig, env, session
from tests.support.fakefoundry import FakeFoundry, FakeFoundryGraph, forge_document

FP = Fingerprint.of({"sglang": "0.5.17", "model": "/m"})


def _save(archive: Path, report: Path | None = None) -> tuple[Any, list[str]]:
    """A fake engine's SAVE: region, two phases, two graphs captured (one with two outputs), metadata."""
    extra = {"REPORT": str(report)} if report else {}
    s = session(SglangConfig.from_env(env("save", archive, **extra)), FakeFoundry())
    steps.begin(s, FP)
    s.api.allocate(1 << 20)  # weights
    steps.end_phase(s, "load_model")
    hidden = s.api.allocate(4096)
    steps.end_phase(s, "kv_cache")
    captured = [
        ({"bs": 8}, FakeFoundryGraph(1, captured=True), hidden),
        ({"bs": 1}, FakeFoundryGraph(2, captured=True), (s.api.allocate(64), None, s.api.allocate(64))),
    ]
    s.timings["capture_s"] = 0.5
    s.state.max_total_tokens = 4096
    meta = steps.save_graphs(
        s, captured, {"max_total_tokens": steps.required(s, s.state.max_total_tokens, "pool size")},
        file_name=lambda i, key: f"decode_{key['bs']}.json",
    )  # fmt: skip
    steps.write_report(s, graphs=len(meta.graphs))
    return s, [g.json for g in meta.graphs]


def _load(archive: Path, fingerprint: Fingerprint = FP, **more: str) -> Any:
    return session(SglangConfig.from_env(env("load", archive, **more)), FakeFoundry()), fingerprint


def test_save_then_load_through_the_shared_steps(tmp_path: Path) -> None:
    archive = tmp_path / "a"
    saved, files = _save(archive, report=tmp_path / "save.json")
    assert files == ["decode_8.json", "decode_1.json"]
    # the metadata is a document of the archive: written before the manifest, which lists it
    assert saved.api.calls[0] == "set_region"
    assert saved.api.calls[-2:] == [f"write_document:{FILE.name}", "save_manifest"]
    assert [d.file for d in read_manifest(archive).documents] == [FILE.name]
    meta = FILE.read(archive)
    assert [p.name for p in meta.phases] == ["load_model", "kv_cache", "capture"]
    assert meta.max_total_tokens == 4096 and meta.fingerprint == FP
    assert meta.graphs[1].outputs == {"tuple": ["tensor", None, "tensor"]}
    assert {"capture_s", "save_graphs_s", "load_model"} <= dict(meta.timings).keys()
    report = json.loads((tmp_path / "save.json").read_text())
    assert report["timings"]["save_s"] >= report["timings"]["save_graphs_s"]  # the manifest's seconds too
    assert report["mode"] == "save" and report["graphs"] == 2 and [p["name"] for p in report["phases"]][-1] == "capture"
    assert report["save_phases_s"] == {"variables": 0.005, "extract_beside": 0.002}  # where SAVE's seconds went
    assert "startup_s" not in report

    s, fp = _load(archive, THREADS="3", REPORT=str(tmp_path / "load.json"))
    steps.begin(s, fp)
    assert s.api.calls == ["load_modules", "set_region"] and s.saved == meta
    s.api.allocate(1 << 20)
    steps.end_phase(s, "load_model")
    steps.start_builds(s)
    assert [p.name for p in s.pending.paths] == files
    s.api.allocate(4096)
    steps.end_phase(s, "kv_cache")
    installed: list[Any] = []
    steps.load_graphs(s, installed.extend)
    keys = [key for key, _, _ in installed]
    assert keys == [{"bs": 8}, {"bs": 1}] and all(isinstance(g, FakeFoundryGraph) for _, g, _ in installed)
    outputs = installed[1][2]
    assert isinstance(outputs, tuple) and outputs[1] is None and outputs[0].data_ptr() == meta.graphs[1].output_address
    assert s.tracker.marks[-1].name == "capture" and "graphs_ready_s" in s.timings
    _join_watchers()
    steps.write_report(s, graphs=len(installed))
    report = json.loads((tmp_path / "load.json").read_text())
    assert report["mode"] == "load" and report["startup_s"] == s.api.startup_seconds()
    assert "save_phases_s" not in report
    assert report["timings"]["load_modules_checks_s"] == 0.001  # the caller's steps, beside the background's


def test_load_refuses_another_setup_before_touching_the_gpu(tmp_path: Path) -> None:
    _save(tmp_path)
    s, _ = _load(tmp_path)
    with pytest.raises(ArchiveMismatchError, match=r"(?s)model: saved '/m', here '/other'.*Start SGLang"):
        steps.begin(s, Fingerprint.of({"sglang": "0.5.17", "model": "/other"}))
    assert s.api.calls == []


def test_load_stops_at_a_phase_that_allocates_differently(tmp_path: Path) -> None:
    _save(tmp_path)
    s, fp = _load(tmp_path)
    steps.begin(s, fp)
    s.api.allocate(2 << 20)
    with pytest.raises(PhaseLayoutError, match=r"'load_model': allocation #0.*SAVE's engine settings"):
        steps.end_phase(s, "load_model")


def test_load_refuses_a_graph_whose_output_moved(tmp_path: Path) -> None:
    _save(tmp_path)

    def move(doc: dict[str, Any]) -> None:
        doc["graphs"][0]["output_address"] += 0x1000

    forge_document(tmp_path, FILE.name, move)
    s, fp = _load(tmp_path)
    steps.begin(s, fp)
    steps.start_builds(s)
    with pytest.raises(PhaseLayoutError, match=r"graph decode_8\.json writes its output at"):
        steps.load_graphs(s, lambda loaded: None)


def test_save_refuses_an_archive_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "old.json").write_text("{}")
    s = session(SglangConfig.from_env(env("save", tmp_path)), FakeFoundry())
    with pytest.raises(PluginConfigError, match="not empty: remove it or point FOUNDRY_SGLANG_ARCHIVE"):
        steps.begin(s, FP)
    assert s.api.calls == []


def test_a_value_a_hook_never_recorded_names_the_engine_version(tmp_path: Path) -> None:
    s = session(SglangConfig.from_env(env("save", tmp_path)), FakeFoundry())
    with pytest.raises(PhaseLayoutError, match=r"without the fingerprint.*SGLang 0\.5\.17's"):
        steps.save_graphs(s, [], {"max_total_tokens": 1})
    assert not (tmp_path / FILE.name).exists()
    with pytest.raises(Exception, match="SGLang start-up order"):
        s.require_saved()


def test_no_report_unless_asked(tmp_path: Path) -> None:
    s = session(SglangConfig.from_env(env("save", tmp_path / "a")), FakeFoundry())
    steps.write_report(s, graphs=0)
    assert list(tmp_path.iterdir()) == []


def test_the_store_makes_one_session_per_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    made: list[Any] = []

    def make() -> Any:
        made.append(session(SglangConfig.from_env(env("save", tmp_path)), FakeFoundry()))
        return made[-1]

    store = SessionStore(make)
    assert made == []  # nothing until a hook asks
    first = store.current()
    assert store.current() is first and len(made) == 1
    pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: pid + 1)  # a forked child
    assert store.current() is not first and len(made) == 2
    monkeypatch.undo()
    store.install(first)
    assert store.current() is first
    store.reset()
    assert store.current() is made[-1] and len(made) == 3


@pytest.mark.parametrize("fails", [False, True])
@pytest.mark.parametrize("slow", [0, 1])
def test_the_engines_log_says_when_every_graph_has_its_own_exec_or_why_not(
    tmp_path: Path, fails: bool, slow: int, caplog: pytest.LogCaptureFixture
) -> None:
    archive = tmp_path / "a"
    _save(archive)
    s, fp = _load(archive, REPORT=str(tmp_path / "load.json"))
    steps.begin(s, fp)
    s.api.allocate(1 << 20)
    steps.end_phase(s, "load_model")
    steps.start_builds(s)
    s.api.allocate(4096)
    steps.end_phase(s, "kv_cache")
    s.pending.timings.update(all_dedicated_s=0.5, switches=3)
    if fails:
        s.pending.build_error = LoadError("background loading failed: refused")
    s.pending.slow_builds = slow
    with caplog.at_level(logging.INFO):
        steps.write_report(s, graphs=2)  # what the engine put in its report before: kept when written again
        steps.load_graphs(s, lambda loaded: None)
        _join_watchers()
    assert s.api.calls.count("wait_builds") == (1 if fails else 1 + slow)
    assert ("still being built 30 s after" in caplog.text) == (slow == 1 and not fails)
    report = json.loads((tmp_path / "load.json").read_text())
    assert report["graphs"] == 2 and report["loader"]["switches"] == 3
    if fails:
        assert "were not all built (background loading failed: refused)" in caplog.text
        assert report["timings"]["own_execs_error"] == "background loading failed: refused"
    else:
        assert "every graph has its own exec, 0.50 s after start_graph_builds (3 switches" in caplog.text
        assert report["timings"]["own_execs_error"] == ""


def _join_watchers() -> None:
    """Waits for the threads steps.load_graphs starts to watch the own execs' builds."""
    for t in threading.enumerate():
        if t.name == "foundry-builds-watch":
            t.join(10)


def test_each_rank_writes_its_own_report_and_a_failed_write_leaves_the_engine_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Every rank of one engine starts from the same FOUNDRY_<E>_REPORT: rank 0 writes that file, the others
    # theirs beside it, so no rank's report replaces another's or breaks it half-written.
    report = tmp_path / "reports" / "report-load.json"
    written = {}
    for rank in (1, 0):
        s = session(SglangConfig.from_env(env("save", tmp_path / "a", REPORT=str(report))), FakeFoundry())
        steps.begin(s, FP, Place(rank, 2))
        steps.write_report(s, graphs=rank + 5)
        written[rank] = report_path(report, s.place)
    assert written == {0: report, 1: tmp_path / "reports" / "report-load.rank1.json"}
    assert {json.loads(p.read_text())["graphs"] for p in written.values()} == {5, 6}
    assert sorted(p.name for p in report.parent.iterdir()) == ["report-load.json", "report-load.rank1.json"]

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    s = session(SglangConfig.from_env(env("save", tmp_path / "b", REPORT=str(blocked / "r.json"))), FakeFoundry())
    with caplog.at_level(logging.WARNING):
        steps.write_report(s, graphs=1)  # no exception: the engine it reports on goes on
    assert "could not write the start-up report" in caplog.text and str(blocked / "r.json") in caplog.text
    assert blocked.read_text() == "not a folder"
