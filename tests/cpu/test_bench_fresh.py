"""The fresh-node rows of `foundry bench --engine vllm|sglang` on the CPU, against the stand-in engines
(tests/support/fakeengines_pkg), which note what each process sees of its cache folders as it starts: the
fresh runs see every one empty though the machine's are warm, and SAVE packs the engine's caches into an
archive signed with a key the fresh LOAD holds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from foundry_bench.serving.fresh import FRESH_VARIABLES, compiled_on_node, fresh_lines
from foundry_bench.sglang import SglangBenchConfig, run_sglang_bench
from foundry_bench.vllm import VllmBenchConfig, run_vllm_bench

FAKE = Path(__file__).resolve().parents[1] / "support" / "fakeengines_pkg"
ALL = ("native_cold", "save", "native_fresh", "load_fresh", "native", "load")
WARM = {"HOME": "home", "XDG_CACHE_HOME": "home/.cache", "VLLM_CACHE_ROOT": "home/.cache/vllm",
        "TRITON_CACHE_DIR": "home/.triton/cache", "TORCHINDUCTOR_CACHE_DIR": "torchinductor_root",
        "CUDA_CACHE_PATH": "home/.nv"}  # fmt: skip


@pytest.fixture
def warm_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The stand-in engines on the path, a machine whose every cache folder holds something, and the probe file
    the engine processes write to."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKE), os.environ.get("PYTHONPATH")])))
    for name, sub in WARM.items():
        folder = tmp_path / "warm" / sub
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "warm-entry").write_text("compiled before")
        monkeypatch.setenv(name, str(folder))
    monkeypatch.delenv("FOUNDRY_SIGNING_KEY", raising=False)
    probe = tmp_path / "probe.jsonl"
    monkeypatch.setenv("FAKE_ENGINE_CACHE_PROBE", str(probe))
    return probe


def _common(tmp_path: Path, modes: tuple[str, ...]) -> dict[str, Any]:
    return dict(out=tmp_path / "out", modes=modes, batches=(1, 3), max_tokens=4, logprobs=5,
                archive=tmp_path / "arch", models=tmp_path / "models", timeout=60, decode_batches=(), reps=1,
                prefill_tokens=0, short_prefill_tokens=0)  # fmt: skip


def _probes(probe: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in probe.read_text().splitlines()]


def _check_fresh_rows(doc: dict[str, Any], probe: Path, tmp_path: Path) -> list[dict[str, Any]]:
    results = doc["results"]
    assert set(results) == set(ALL)
    assert all("error" not in r for r in results.values()), {m: r.get("error") for m, r in results.items()}
    assert doc["compare"]["native_fresh"]["identical"] and doc["compare"]["load_fresh"]["identical"]
    assert results["load_fresh"]["plugin"]["mode"] == "load" and "plugin" not in results["native_fresh"]
    assert {"ready_wall_s", "first_request_s", "first_answer_wall_s"} <= set(results["load_fresh"])
    lines = _probes(probe)
    assert [p["mode"] for p in lines] == ["native", "save", "native", "load", "native", "load"]
    cold, save, native_fresh, load_fresh, native, load = lines
    # SAVE and LOAD accept the shape's model classes should the plugin call them inexact: the benchmark measures it
    assert {p["allow_inexact"] for p in (save, load_fresh, load)} == {"Qwen3ForCausalLM"}
    assert {p["allow_inexact"] for p in (cold, native_fresh, native)} == {None}
    warm = str(tmp_path / "warm")
    for fresh in (native_fresh, load_fresh):
        assert set(fresh["empty"]) == set(FRESH_VARIABLES) and all(fresh["empty"].values()), fresh
        assert not any(v.startswith(warm) for v in fresh["env"].values())
        assert not any(os.path.exists(v) for v in fresh["env"].values())  # removed after the run
    assert native_fresh["env"]["HOME"] != load_fresh["env"]["HOME"]  # each fresh run its own folder
    for warm_run in (cold, native, load):
        assert not any(warm_run["empty"].values()) and warm_run["env"]["HOME"].startswith(warm)
    # SAVE packs, signed; both LOADs hold the key; the native runs and SAVE hold none or need none
    assert save["pack"] == "1" and save["key"] and load_fresh["key"] == save["key"] == load["key"]
    assert load_fresh["pack"] is None and native_fresh["key"] is None
    return lines


def test_vllm_fresh_rows_start_with_empty_caches_and_load_ships_the_signed_archive(
    warm_machine: Path, tmp_path: Path
) -> None:
    doc = run_vllm_bench(VllmBenchConfig(**_common(tmp_path, ALL)))
    lines = _check_fresh_rows(doc, warm_machine, tmp_path)
    assert all(p["mega"] == "1" for p in lines)  # every run compiles as SAVE's packed cache needs
    # vLLM's compile key holds two paths it would derive from the home the fresh runs move: every run has SAVE's
    paths = {json.dumps(p["compile_paths"], sort_keys=True) for p in lines}
    assert len(paths) == 1 and all(lines[0]["compile_paths"].values()), paths
    text = (tmp_path / "out" / f"{VllmBenchConfig(out=tmp_path).tag()}.txt").read_text()
    assert "native, fresh node (empty caches)" in text and "Foundry LOAD, fresh node" in text
    # what each fresh run compiled into its empty caches, read before its folder went
    compiled = doc["results"]["native_fresh"]["compiled_on_node"]
    written = compiled["triton"].pop("written_at")
    assert compiled == {"triton": {"files": 1, "bytes": 4096, "named": ["entry/kernel.cubin"]}}
    native_fresh = doc["results"]["native_fresh"]
    assert native_fresh["started_at"] - 0.01 <= written[0] <= written[1] <= native_fresh["started_at"] + 600
    assert doc["results"]["load_fresh"]["compiled_on_node"] == {}
    assert "- native, fresh node (empty caches): triton 1 files, 0.0 MiB (entry/kernel.cubin), written " in text
    assert "- Foundry LOAD, fresh node (the archive's caches): nothing" in text


def test_what_each_warm_run_wrote_into_the_machines_caches_is_reported(
    warm_machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm runs' writes into the machine's caches, new or changed files by cache, with Inductor's timed
    kernel choices named: here LOAD alone chooses one (the stand-in's FAKE_ENGINE_TUNE), which native did not."""
    monkeypatch.setenv("FAKE_ENGINE_TUNE", "load")
    doc = run_vllm_bench(VllmBenchConfig(**_common(tmp_path, ("save", "native", "load"))))
    results = doc["results"]
    assert results["save"]["written_on_node"] == {} and results["native"]["written_on_node"] == {}
    (entry,) = results["load"]["written_on_node"].values()
    assert list(results["load"]["written_on_node"]) == ["inductor"]
    assert (
        entry["files"] == 1 and entry["best_configs"] == 1 and entry["best_config_names"] == ["ab/kernel.best_config"]
    )
    text = (tmp_path / "out" / f"{VllmBenchConfig(out=tmp_path).tag()}.txt").read_text()
    assert "- Foundry LOAD: inductor 1 files, 0.0 MiB, 1 timed kernel choices" in text
    assert results["native"]["written_until"] == "load"  # up beside LOAD: its window closed as LOAD started
    assert "- native, warm caches (until Foundry LOAD started): nothing" in text


def test_a_changed_file_counts_as_written_and_an_untouched_one_does_not(tmp_path: Path) -> None:
    from foundry_bench.serving.written import changes, snapshot

    folders = {"inductor": tmp_path / "ind", "triton": tmp_path / "missing"}
    (tmp_path / "ind" / "ab").mkdir(parents=True)
    (tmp_path / "ind" / "ab" / "k.py").write_text("kernel")
    (tmp_path / "ind" / "ab" / "k.best_config").write_text('{"XBLOCK": 64}')
    before = snapshot(folders)
    assert changes(before, snapshot(folders)) == {}
    (tmp_path / "ind" / "ab" / "k.best_config").write_text('{"XBLOCK": 128, "num_warps": 4}')
    assert changes(before, snapshot(folders)) == {
        "inductor": {"files": 1, "bytes": 31, "best_configs": 1, "best_config_names": ["ab/k.best_config"]}
    }
    (tmp_path / "ind" / "ab" / "k.best_config").write_text('{"XBLOCK": 128, "num_warps": 4, "time_taken_ms": 3}')
    wrote = changes(before, snapshot(folders), folders)["inductor"]
    assert wrote["best_config_choices"] == {"ab/k.best_config": {"XBLOCK": 128, "num_warps": 4}}
    (tmp_path / "ind" / "cd").mkdir()
    (tmp_path / "ind" / "cd" / "__grp__add_kernel.json").write_text("{}")
    assert changes(before, snapshot(folders))["inductor"]["kernels"] == ["add_kernel"]


def test_what_a_fresh_run_compiled_is_counted_by_cache(tmp_path: Path) -> None:
    files = {"triton/abc/k.cubin": 10, "triton/def/k.json": 5, "cache/flashinfer/90a/x.so": 100,
             "home/.cache/torch/kernels/y": 7, "home/.nv/ComputeCache/z": 1, "inductor/fx/w": 3,
             "cache/vllm/modelinfos/m.json": 2}  # fmt: skip
    for rel, size in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x" * size)
    left = compiled_on_node(tmp_path)
    assert all(len(entry.pop("written_at")) == 2 for entry in left.values())
    assert left == {
        "cache/flashinfer": {"files": 1, "bytes": 100, "named": ["90a/x.so"]},
        "triton": {"files": 2, "bytes": 15, "named": ["abc/k.cubin", "def/k.json"]},
        "home/.cache/torch": {"files": 1, "bytes": 7, "named": ["kernels/y"]},
        "inductor": {"files": 1, "bytes": 3, "named": ["fx/w"]},
        "cache/vllm/modelinfos": {"files": 1, "bytes": 2, "named": ["m.json"]},
        "home/.nv": {"files": 1, "bytes": 1, "named": ["ComputeCache/z"]},
    }  # fmt: skip


def test_a_fresh_run_names_the_triton_kernels_it_compiled_and_the_caches_of_a_few_files(tmp_path: Path) -> None:
    """Triton's group file names its kernel: the kernels a fresh node compiled are named, not only counted (they
    tell what the archive lacks); a cache of many files is counted, not listed."""
    for entry, kernel in (("AB", "_topk_log_softmax_kernel"), ("CD", "write_req_to_token_pool")):
        for name in (f"{kernel}.cubin", f"{kernel}.json", f"{kernel}.ptx", f"__grp__{kernel}.json"):
            (tmp_path / "triton" / entry).mkdir(parents=True, exist_ok=True)
            (tmp_path / "triton" / entry / name).write_bytes(b"x")
    triton = compiled_on_node(tmp_path)["triton"]
    assert triton["kernels"] == ["_topk_log_softmax_kernel", "write_req_to_token_pool"] and "named" not in triton
    # when: the files' times against the run's ready, for a cache filled at the first request
    when = triton.pop("written_at")
    ready = {"started_at": when[0] - 40.0, "ready_wall_s": 30.0}
    timed = fresh_lines({"load_fresh": {**ready, "compiled_on_node": {"triton": {**triton, "written_at": when}}}}, {})
    assert timed[-1].endswith(f"written +10.0 to {when[1] - when[0] + 10.0:+.1f} s from ready")
    line = fresh_lines({"load_fresh": {"compiled_on_node": {"triton": triton}}}, {"load_fresh": "LOAD fresh"})[-1]
    assert line == "- LOAD fresh: triton 8 files, 0.0 MiB (_topk_log_softmax_kernel, write_req_to_token_pool)"
    # SAVE's report names the kernels the archive held: one of them compiled again had another key
    save = {"plugin": {"timings": {"caches": {"triton_kernels": ["_fwd_kernel", "write_req_to_token_pool"]}}}}
    results = {"save": save, "load_fresh": {"compiled_on_node": {"triton": triton}}}
    assert fresh_lines(results, {})[-1] == (
        "  its Triton kernels the archive held too: write_req_to_token_pool; that it did not hold: "
        "_topk_log_softmax_kernel"
    )


def test_sglang_fresh_rows_start_with_empty_caches(warm_machine: Path, tmp_path: Path) -> None:
    doc = run_sglang_bench(SglangBenchConfig(**_common(tmp_path, ALL)))
    lines = _check_fresh_rows(doc, warm_machine, tmp_path)
    assert all(p["mega"] is None for p in lines)
    assert all(not any(p["compile_paths"].values()) for p in lines)  # vLLM's alone


def test_without_a_fresh_load_save_packs_nothing_and_nothing_is_signed(warm_machine: Path, tmp_path: Path) -> None:
    doc = run_vllm_bench(VllmBenchConfig(**_common(tmp_path, ("save", "load"))))
    assert all("error" not in r for r in doc["results"].values())
    save, load = _probes(warm_machine)
    assert save["pack"] is None and save["key"] is None and load["key"] is None and save["mega"] is None
