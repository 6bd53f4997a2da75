"""What the graph-bundle tests on the fake driver share (tests/cpu/test_bundle_fake.py,
test_bundle_startup_fake.py): LOAD after start-up as a script, and one SAVE per test module, each test damaging
a copy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from foundry import _state
from foundry.archive import read_manifest
from foundry.errors import ArchiveError
from foundry.load import preflight
from foundry.load.readahead import prepare_bundle
from foundry.load.source import read_sources
from foundry.verify import verify_archive, verify_graphs
from tests.cpu.test_background_load_fake import LOAD_AND_REPLAY, NAMES
from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.graphs import run_save
from tests.support.subproc import run_python

# Start-up done, LOAD then replays every graph; ``error``: the archive error LOAD raised, if any.
AFTER_STARTUP = (
    """
from foundry import errors
from foundry.load import Loader, startup_phases, wait_for_startup
from foundry.load import source as sources
wait_for_startup()
prepared = sorted(os.path.basename(k[0]) for k in sources._STATE.get().prepared)
paths = [os.path.join(ARCH, n + ".json") for n in NAMES]
try:
"""
    + "\n".join("    " + line for line in LOAD_AND_REPLAY.strip().splitlines())
    + """
    error = None
except errors.LoadError as exc:
    runs, error = None, type(exc.__cause__).__name__
except errors.ArchiveError as exc:
    runs, error = None, type(exc).__name__
emit(prepared=prepared, runs=runs, error=error, bundle_read="graphs_bundle" in startup_phases().seconds)
"""
)

# CUDAGraph.load's path (load_graph) for each graph after start-up prepared them; ``errors`` by name.
ONE_BY_ONE = """
from foundry.load import load_graph, wait_for_startup
wait_for_startup()
runs, errors = {}, {}
for name in NAMES:
    try:
        lg = load_graph(os.path.join(ARCH, name + ".json"))
    except Exception as exc:
        errors[name] = [type(exc).__name__, str(exc)]
        continue
    runs[name] = []
    for k in INPUT_SETS:
        set_inputs(k); lg.launch(0); cu.sync(); runs[name].append(read(name))
emit(runs=runs, errors=errors)
"""


def save_once(arch: Path, fakecuda_dir: Path, foundry_lib: Path) -> tuple[Path, dict[str, Any]]:
    """One SAVE of the round-trip variants into ``arch``: the archive and what SAVE emitted (native outputs)."""

    def app_json(code: str, env: dict[str, str] | None = None) -> Any:
        out = run_python(code, lib_dir=fakecuda_dir, env=env, preload=foundry_lib)
        return json.loads(out.strip().splitlines()[-1])

    return arch, run_save(app_json, VARIANTS, arch)


def copy_saved(saved: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved[0], tmp_path / "arch"))


def graph_paths(arch: Path) -> list[Path]:
    return [arch / f"{n}.json" for n in NAMES]


def refusals(arch: Path) -> dict[str, str | None]:
    """What each reader says of the archive, in this process: verify in archive and in graph mode (its first
    problem, or None), the preflight and LOAD's reading of every graph, records included, with and without
    start-up's reading ahead (the error, or None)."""
    out: dict[str, str | None] = {}
    _state.reset_all()
    report = verify_archive(arch)
    out["verify"] = None if report.ok else str(report.problems[0])
    _state.reset_all()
    report = verify_graphs(graph_paths(arch))
    out["verify_graphs"] = None if report.ok else str(report.problems[0])

    def after_startup() -> list[Any]:  # start-up's reading ahead (the whole bundle at once), then LOAD's
        prepare_bundle(arch, read_manifest(arch))
        return read_sources(graph_paths(arch), lazy=True)

    readers = (
        ("preflight", lambda: preflight(graph_paths(arch))),
        ("load", lambda: read_sources(graph_paths(arch))),
        ("load after start-up", after_startup),
    )
    for name, run in readers:
        _state.reset_all()
        try:
            sources = run()
            for src in sources:  # every record LOAD builds from, hashed as LOAD's readers hash it
                src.read_payload()
                if src.template is not None:
                    src.template.read_payload()
            out[name] = None
        except ArchiveError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    _state.reset_all()
    return out
