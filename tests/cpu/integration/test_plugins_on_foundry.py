"""The engine plugins on Foundry itself, not on the stand-in (tests/support/fakefoundry.py): the fake vLLM and
SGLang start under their plugins, one process per run, on the real ``foundry`` package over the fake driver and
the stand-in torch (tests/support/engine_processes.py). SAVE runs in one process and LOAD in a fresh one: the
graphs LOAD hands the engine are Foundry's loaded graphs and write what SAVE's captured graphs wrote on the same
inputs; the engine's metadata reads back and lists the graphs the manifest holds; a damaged archive is refused
before the engine serves, naming the file. A change to Foundry's public API that breaks a plugin fails here."""

from __future__ import annotations

import inspect
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import BUNDLE_NAME, read_manifest
from foundry.archive.bundle_delta import is_delta
from foundry.integration.sglang import read_metadata as read_sglang_metadata
from foundry.integration.shared.backend import FoundryApi, PublicFoundryApi
from foundry.integration.vllm import read_metadata as read_vllm_metadata
from tests.support.archive_damage import flip_byte
from tests.support.fakefoundry import FakeFoundry
from tests.support.subproc import run_json

PREFIX = {"vllm": "FOUNDRY_VLLM_", "sglang": "FOUNDRY_SGLANG_"}
# Each run's engine and its arguments (engine_processes.py): V2 with vLLM's default graph mode, V1 with an MoE
# model's workspace (which LOAD hands back with foundry.restored_tensor), SGLang's decode and prefill graphs.
RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "vllm-v2": ("vllm", {"runner": "v2"}),
    "vllm-v1-moe": ("vllm", {"runner": "v1", "workspace": 1 << 20}),
    "sglang": ("sglang", {}),
}


@dataclass(frozen=True)
class Saved:
    engine: str
    args: dict[str, Any]
    archive: Path
    report: dict[str, Any]  # what the SAVE process's engine did and its graphs wrote


class Processes:
    """Engine processes under the interposer over the fake driver; each run's SAVE made once per module."""

    def __init__(self, root: Path, lib_dir: Path, preload: Path) -> None:
        self.root, self.lib_dir, self.preload = root, lib_dir, preload
        self.saved: dict[str, Saved] = {}

    def run(
        self, engine: str, mode: str, archive: Path, args: dict[str, Any], more_env: dict[str, str] | None = None
    ) -> dict[str, Any]:
        code = (
            "import json\n"
            f"from tests.support.engine_processes import {engine}_process\n"
            f"print(json.dumps({engine}_process(**{args!r})))\n"
        )
        env = {f"{PREFIX[engine]}MODE": mode, f"{PREFIX[engine]}ARCHIVE": str(archive), **(more_env or {})}
        result: dict[str, Any] = run_json(code, lib_dir=self.lib_dir, preload=self.preload, env=env)
        return result

    def save(self, run: str) -> Saved:
        if run not in self.saved:
            engine, args = RUNS[run]
            archive = self.root / run
            report = self.run(engine, "save", archive, args)
            assert "refused" not in report, report["refused"]
            self.saved[run] = Saved(engine, args, archive, report)
        return self.saved[run]

    def load(self, saved: Saved, archive: Path | None = None) -> dict[str, Any]:
        return self.run(saved.engine, "load", archive or saved.archive, saved.args)


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory, fakecuda_dir: Path, foundry_lib: Path) -> Processes:
    return Processes(tmp_path_factory.mktemp("plugins-on-foundry"), fakecuda_dir, foundry_lib)


def _skipped_at_load(saved: Saved) -> tuple[str, ...]:
    """What the engine does at SAVE and not at LOAD (its trace's names): the capture, and SGLang's profiling (vLLM's
    profile forward and kernel warm-up run at LOAD too, after the KV cache: test_vllm_fake_engine.py)."""
    if saved.engine == "vllm":
        return (f"{saved.args['runner']}.capture_model",)
    return ("profile",)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_load_in_a_fresh_process_replays_saves_graphs_with_saves_outputs(processes: Processes, run: str) -> None:
    saved = processes.save(run)
    load = processes.load(saved)
    assert "refused" not in load, load["refused"]
    # Every graph the engine dispatches to was captured by Foundry at SAVE and is Foundry's loaded graph at LOAD.
    assert {kind: ["captured"] for kind in saved.report["graphs"]} == saved.report["graphs"]
    assert {kind: ["loaded"] for kind in saved.report["graphs"]} == load["graphs"]
    assert load["outputs"] == saved.report["outputs"]
    outputs = load["outputs"]
    for key in outputs:
        if key.endswith("/0"):  # the graphs compute from what the program wrote into their inputs
            assert outputs[key] != outputs[key.replace("/0", "/1")], key
    for skipped in _skipped_at_load(saved):
        assert skipped in saved.report["trace"] and skipped not in load["trace"]
    if saved.engine == "vllm":  # native's warm-up, run where LOAD has SAVE's memory in place
        trace = load["trace"]
        assert trace.index("initialize_kv_cache") < trace.index("profile_run") < trace.index("kernel_warmup")
    if saved.args.get("workspace"):  # vLLM's workspace is SAVE's buffer, restored
        assert load["workspace"] == saved.report["workspace"] is not None


def test_vllm_saves_the_drivers_page_room_and_load_opens_saves_granule(processes: Processes, tmp_path: Path) -> None:
    """With a driver whose first page has room for small allocations (the fake's FAKECUDA_SMALL_PAGE_ROOM), SAVE
    opens the region's small-allocation granule with it before vLLM's snapshot and keeps it in the archive; LOAD on a
    machine whose page has none opens SAVE's granule all the same, places every phase where SAVE did (checked) and
    its graphs write what SAVE's wrote."""
    archive, args = tmp_path / "room", RUNS["vllm-v2"][1]
    saved = processes.run("vllm", "save", archive, args, {"FAKECUDA_SMALL_PAGE_ROOM": str(300_000)})
    assert "refused" not in saved, saved["refused"]
    assert read_vllm_metadata(archive).small_room == 300_000 // 4096 * 4096  # measured 4 KiB at a time
    load = processes.run("vllm", "load", archive, args, {"FAKECUDA_SMALL_PAGE_ROOM": "0"})
    assert "refused" not in load, load["refused"]
    assert load["outputs"] == saved["outputs"] and load["graphs"] != saved["graphs"]  # loaded, not captured


def test_sglang_load_warm_up_replays_before_serving_and_changes_no_output(processes: Processes) -> None:
    """SGLang's LOAD on Foundry itself, by default: it replays the smallest prefill graph once at start-up (its
    eager attention steps run before the first request), and every graph then still writes what SAVE's wrote;
    FOUNDRY_SGLANG_WARM_UP=0 skips the replay."""
    saved = processes.save("sglang")
    warmed = processes.load(saved)
    plain = processes.run("sglang", "load", saved.archive, saved.args, {"FOUNDRY_SGLANG_WARM_UP": "0"})
    assert "refused" not in warmed, warmed["refused"]
    assert plain["warm_up_s"] is None and warmed["warm_up_s"] is not None
    assert warmed["outputs"] == saved.report["outputs"]
    assert warmed["graphs"] == plain["graphs"]


GPU = {"vllm": "Fake H200", "sglang": "Fake GPU"}  # vLLM asks its platform; SGLang asks torch (the fake driver)
READ_METADATA: dict[str, Callable[[Path], Any]] = {"vllm": read_vllm_metadata, "sglang": read_sglang_metadata}


@pytest.mark.parametrize("run", ["vllm-v2", "sglang"])
def test_engine_metadata_reads_back_and_names_the_graphs_the_manifest_holds(processes: Processes, run: str) -> None:
    saved = processes.save(run)
    meta = READ_METADATA[saved.engine](saved.archive)  # proven against the manifest, as LOAD reads it
    listed = {g.json for g in read_manifest(saved.archive).graphs}
    assert {g.json for g in meta.graphs} == listed
    assert len(listed) == len(meta.graphs) > 8
    assert all(g.output_address for g in meta.graphs)
    # the plugin's own fingerprint of the process, from the engine and the (stand-in) torch it ran with
    fingerprint = meta.fingerprint.as_dict()
    assert [fingerprint[k] for k in ("torch", "cuda", "gpu")] == ["0.0+fakecuda", "13.0", GPU[saved.engine]]


def _image(archive: Path) -> str:
    return str(next(archive.glob("images/*.bin")).relative_to(archive))


# the engine's last start-up step before it serves (what the fake engine traces)
LAST_STEP = {"vllm": "sampler_warmup", "sglang": "init_cuda_graphs"}
# (run, the file damaged, what LOAD's refusal says)
DAMAGE: list[tuple[str, Callable[[Path], str], str]] = [
    ("vllm-v2", lambda a: "vllm_plugin.json", r"ArchiveMetadataError: the vLLM metadata .*vllm_plugin\.json"),
    ("vllm-v2", lambda a: "graph_bundle.bin", r"ArchiveCorruptError: .*graph_bundle\.bin .*changed after the manifest"),
    (
        "vllm-v2",
        _image,
        r"ArchiveCorruptError: .*images/[0-9a-f]{64}\.bin: the kernel image \w+'s content SHA-256 .* it is damaged",
    ),
    ("sglang", lambda a: "sglang_plugin.json", r"ArchiveMetadataError: the SGLang metadata .*sglang_plugin\.json"),
]


@pytest.mark.parametrize(
    ("run", "target", "refusal"), DAMAGE, ids=["vllm-metadata", "vllm-bundle", "vllm-image", "sglang-metadata"]
)
def test_load_refuses_a_damaged_archive_before_serving_naming_the_file(
    processes: Processes, tmp_path: Path, run: str, target: Callable[[Path], str], refusal: str
) -> None:
    saved = processes.save(run)
    archive = shutil.copytree(saved.archive, tmp_path / "archive")
    damaged = archive / target(archive)
    flip_byte(damaged, damaged.stat().st_size // 2)
    load = processes.load(saved, archive)
    assert "refused" in load, json.dumps(load)[:300]
    assert re.search(refusal, load["refused"]), load["refused"]
    assert LAST_STEP[saved.engine] not in load["trace"]  # start-up stopped: the engine never served


def test_the_stand_in_foundry_takes_the_calls_the_real_one_does() -> None:
    """The plugins' other tests run on the stand-in (fakefoundry.py): it answers each FoundryApi call with the
    parameters PublicFoundryApi, which the tests above run on Foundry, takes."""
    calls = [n for n, v in vars(FoundryApi).items() if callable(v) and not n.startswith("_")]
    assert len(calls) > 15
    for name in calls:
        real = inspect.signature(getattr(PublicFoundryApi, name)).parameters
        assert inspect.signature(getattr(FakeFoundry, name)).parameters == real, name
        assert inspect.signature(getattr(FoundryApi, name)).parameters == real, name


def test_tensor_parallel_ranks_share_a_bundle_and_each_loads_as_saved(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    """Two ranks of a tensor-parallel vLLM, each SAVE in its own process on Foundry itself: once both have
    finished, rank 1's graph bundle is stored against rank 0's (the plugin's own step), and each rank's LOAD in a
    fresh process replays what its SAVE wrote, rank 1 through the rebuilt bundle."""
    processes = Processes(tmp_path, fakecuda_dir, foundry_lib)
    archive = tmp_path / "tp2"
    args = [{"runner": "v2", "tp": 2, "rank": rank} for rank in (0, 1)]
    env = {"VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}
    saved = [processes.run("vllm", "save", archive, a, env) for a in args]
    assert all("refused" not in r for r in saved), saved
    rank0, rank1 = archive / "rank_0" / BUNDLE_NAME, archive / "rank_1" / BUNDLE_NAME
    assert not is_delta(rank0.read_bytes()[:12]) and is_delta(rank1.read_bytes()[:12])
    assert rank1.stat().st_size * 4 < rank0.stat().st_size
    for a, report in zip(args, saved, strict=True):
        load = processes.run("vllm", "load", archive, a, env)
        assert "refused" not in load, load["refused"]
        assert {kind: ["loaded"] for kind in report["graphs"]} == load["graphs"]
        assert load["outputs"] == report["outputs"]


def test_sglang_expert_parallel_ranks_build_their_expert_maps_where_save_had_them(
    tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    """Two ranks of an SGLang with its experts over both (ep_size = tp_size), on Foundry itself, each process its
    own: every MoE layer's expert map is made before the graphs (phase ``expert_maps``, which LOAD's region
    checks against SAVE's), so each rank's LOAD has them at SAVE's addresses, and replays what SAVE wrote."""
    processes = Processes(tmp_path, fakecuda_dir, foundry_lib)
    archive = tmp_path / "ep2"
    args = [{"tp": 2, "rank": rank, "ep": 2} for rank in (0, 1)]
    saved = [processes.run("sglang", "save", archive, a) for a in args]
    assert all("refused" not in r for r in saved), saved
    for rank, (a, report) in enumerate(zip(args, saved, strict=True)):
        phases = [p.name for p in read_sglang_metadata(archive / f"rank_{rank}").phases]
        assert "expert_maps" in phases and None not in report["expert_maps"]
        load = processes.run("sglang", "load", archive, a)
        assert "refused" not in load, load["refused"]
        assert load["expert_maps"] == report["expert_maps"]
        assert {kind: ["loaded"] for kind in report["graphs"]} == load["graphs"]
        assert load["outputs"] == report["outputs"]


def test_foundry_graph_empties_the_allocator_cache_before_each_capture_as_the_program_has_it(
    fakecuda_dir: Path, foundry_lib: Path
) -> None:
    """foundry.graph prepares a capture through torch.cuda.graph itself (the stand-in's is torch's: empty_cache
    before each capture, looked up at the call), so that a SAVE process holds native's memory (an engine measures
    its capture's memory as the drop in free memory), and a program that switches it off (vLLM does, for every
    capture but its first) switches it off for Foundry too."""
    code = """
import json
from unittest import mock
from tests.support import faketorch
faketorch.install()
import torch
import foundry
from tests.support.faketorch import DeviceMemory

calls = []
torch.cuda.empty_cache = lambda: calls.append("empty_cache")
foundry.set_allocation_region(0x600000000000, "1GB")
device = DeviceMemory()
a, b, out = device.allocate(4096), device.allocate(4096), device.allocate(4096)

def capture():
    g = foundry.CUDAGraph()
    with foundry.graph(g):
        calls.append("capture")
        device.compute(out, a, b)
    return g

graphs = [capture()]
with mock.patch("torch.cuda.empty_cache", lambda: calls.append("patched")):
    graphs += [capture(), capture()]
graphs.append(capture())
print(json.dumps(calls))
"""
    calls = run_json(code, lib_dir=fakecuda_dir, preload=foundry_lib)
    assert calls == ["empty_cache", "capture", "patched", "capture", "patched", "capture", "empty_cache", "capture"]
