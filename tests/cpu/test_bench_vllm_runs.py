"""How `foundry bench --engine vllm` starts each run, on the CPU against the stand-in vLLM
(tests/support/fakeengines_pkg), from what each engine process notes as it starts: the plugin's settings, the GPUs
and NCCL's settings of tensor and expert parallel, the Foundry on its path, a data-parallel replica's GPUs, the
native runs' own environment, and vLLM's compilation and kernel configs."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from foundry_bench.vllm import run_vllm_bench
from tests.support.benchvllm import Probe, tokens_only


def test_plugin_settings_reach_save_and_load_and_nothing_else(fake_vllm: None, tmp_path: Path) -> None:
    cfg = tokens_only(tmp_path, modes=("save", "native", "load"), plugin_env={"WARM_UP": "1"})
    doc = run_vllm_bench(cfg)
    results = doc["results"]
    assert all("error" not in r for r in results.values()), {m: r.get("error") for m, r in results.items()}
    for mode in ("save", "load"):
        settings = results[mode]["plugin"]["settings"]
        assert settings["WARM_UP"] == "1" and settings["MODE"] == mode, settings
    assert "plugin" not in results["native"]


def test_tensor_parallel_runs_every_mode_on_n_gpus_with_nccl_as_the_all_reduce(
    fake_vllm: None, tmp_path: Path, engine_probe: Probe
) -> None:
    """--tp 2: native, SAVE and LOAD alike get the GPUs, the custom all-reduce off, and NCCL's settings (the
    reference runs as SAVE and LOAD do); the report is its own configuration."""
    doc = run_vllm_bench(tokens_only(tmp_path, modes=("save", "native", "load"), tp=2))
    assert all("error" not in r for r in doc["results"].values())
    lines = engine_probe()
    assert sorted(line["mode"] for line in lines) == ["load", "native", "save"]
    for line in lines:
        assert line["args"]["tensor_parallel_size"] == 2 and line["args"]["disable_custom_all_reduce"] is True
        assert set(line["nccl"].values()) == {"0"}, line["nccl"]  # runtime connect, NVLS, symmetric memory: off
    assert (tmp_path / "out" / "vllm-qwen3-0.6b-llm-v2-default-tp2.json").is_file()


@pytest.mark.parametrize("api", ["llm", "serve"])
def test_expert_parallel_is_asked_of_every_run_and_named_in_the_report(
    fake_vllm: None, tmp_path: Path, engine_probe: Probe, api: str
) -> None:
    doc = run_vllm_bench(tokens_only(tmp_path, modes=("save", "native", "load"), tp=2, expert_parallel=True, api=api))
    assert all("error" not in r for r in doc["results"].values()), doc["results"]
    lines = engine_probe()
    assert sorted(line["mode"] for line in lines) == ["load", "native", "save"]
    assert all(line["args"]["enable_expert_parallel"] is True for line in lines), lines
    assert (tmp_path / "out" / f"vllm-qwen3-0.6b-{api}-v2-default-tp2-ep.json").is_file()


def test_the_engines_get_the_foundry_this_benchmark_imports_first_on_their_path(
    fake_vllm: None, tmp_path: Path, engine_probe: Probe
) -> None:
    """On the GPU machine the checkout runs uninstalled: each engine process must find the same foundry."""
    import foundry
    from foundry_bench.serving.plugin import checkout_root

    root = checkout_root()
    assert (root / "foundry" / "__init__.py").resolve() == Path(foundry.__file__).resolve()
    run_vllm_bench(tokens_only(tmp_path, modes=("save",)))
    (line,) = engine_probe()
    assert line["pythonpath"].split(os.pathsep)[0] == str(root)


@pytest.mark.parametrize("tp", [1, 2])
def test_a_replica_loads_the_same_archive_on_the_next_gpus_and_is_compared_with_native(
    fake_vllm: None, tmp_path: Path, engine_probe: Probe, tp: int
) -> None:
    """Data parallel from one archive: the replica run is LOAD of SAVE's archive, copied not saved again, in a
    process that sees only the next ``tp`` GPUs, compared bit for bit with native like LOAD."""
    cfg = tokens_only(tmp_path, modes=("save", "load_replica", "native", "load"), tp=tp, gpus=2 * tp)
    doc = run_vllm_bench(cfg)
    assert all("error" not in r for r in doc["results"].values()), doc["results"]
    seen = {line["mode"]: line["visible"] for line in engine_probe()}
    assert seen["load"] is None and seen["save"] is None  # the engine's own GPUs, numbered from 0
    lines = engine_probe()
    replica = [line for line in lines if line["mode"] == "load" and line["visible"] is not None]
    assert [line["visible"] for line in replica] == [",".join(str(i) for i in range(tp, 2 * tp))]
    assert [line["rank_gpus"] for line in replica] == ["alike" if tp > 1 else None]  # a rank's archive names its GPU
    compared = doc["compare"]["load_replica"]
    assert compared["identical"] is True and compared["against"] == "native"
    assert "a replica on the next GPUs" in (tmp_path / "out" / f"{cfg.tag()}.txt").read_text()


def test_a_replica_takes_the_next_gpus_of_those_the_benchmark_is_given(
    fake_vllm: None, tmp_path: Path, engine_probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A benchmark given GPUs 4 to 7 (a lane of scripts/gpu_lanes.sh) counts four and starts the TP=2 replica on 6
    and 7, not on the machine's 2 and 3, which another lane holds."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    doc = run_vllm_bench(tokens_only(tmp_path, modes=("save", "load_replica"), tp=2))
    assert all("error" not in r and "skipped" not in r for r in doc["results"].values()), doc["results"]
    lines = engine_probe()
    assert [line["visible"] for line in lines] == ["4,5,6,7", "6,7"]


def test_a_replica_on_a_machine_without_enough_gpus_is_skipped_and_said_so(fake_vllm: None, tmp_path: Path) -> None:
    doc = run_vllm_bench(tokens_only(tmp_path, modes=("save", "load_replica", "native"), gpus=1))
    assert doc["results"]["load_replica"]["skipped"] == "a replica needs 2 GPUs (1 for SAVE's, 1 more); 1 here"
    assert doc["compare"]["load_replica"]["identical"] is False


def test_native_env_reaches_the_native_runs_only_and_the_report_says_so(
    fake_vllm: None, tmp_path: Path, engine_probe: Probe
) -> None:
    """--native-env: a timing control at --tp 2 (what NCCL_RUNTIME_CONNECT=0, which SAVE and LOAD need, costs
    natively): the native runs get the setting over the benchmark's own, SAVE and LOAD keep Foundry's."""
    cfg = tokens_only(tmp_path, modes=("save", "native", "load"), tp=2, native_env={"NCCL_RUNTIME_CONNECT": "1"})
    doc = run_vllm_bench(cfg)
    assert all("error" not in r for r in doc["results"].values())
    connect = {line["mode"]: line["nccl"]["NCCL_RUNTIME_CONNECT"] for line in engine_probe()}
    assert connect == {"save": "0", "native": "1", "load": "0"}
    text = (tmp_path / "out" / f"{cfg.tag()}.txt").read_text()
    assert "The native runs ran with NCCL_RUNTIME_CONNECT=1, SAVE and LOAD without" in text


def test_env_reaches_every_run_and_the_report_names_it(fake_vllm: None, tmp_path: Path, engine_probe: Probe) -> None:
    """--env: Inductor's deterministic mode in native, SAVE and LOAD alike (natives then agree with each other);
    the report names it beside the run's other settings, so a reader knows which reference it was measured with."""
    cfg = tokens_only(tmp_path, modes=("save", "native", "load"), extra_env={"TORCHINDUCTOR_DETERMINISTIC": "1"})
    doc = run_vllm_bench(cfg)
    assert all("error" not in r for r in doc["results"].values())
    assert {line["mode"]: line["deterministic"] for line in engine_probe()} == {"save": "1", "native": "1", "load": "1"}
    assert doc["config"]["extra_env"] == {"TORCHINDUCTOR_DETERMINISTIC": "1"}
    text = (tmp_path / "out" / f"{cfg.tag()}.txt").read_text()
    assert "environment (every run): TORCHINDUCTOR_DETERMINISTIC=1" in text
    from foundry_bench.serving.matrix import matrix_rows

    (row,) = matrix_rows([doc])
    assert row[2] == "llm/v2/default TORCHINDUCTOR_DETERMINISTIC=1", row


@pytest.mark.parametrize("api", ["llm", "serve"])
def test_a_compilation_and_kernel_config_reach_every_run_and_name_their_own_files(
    fake_vllm: None, tmp_path: Path, engine_probe: Probe, api: str
) -> None:
    extra = {"inductor_compile_config": {"benchmark_combo_kernel": False}}
    cfg = tokens_only(tmp_path, modes=("save", "native", "load"), api=api, cudagraph_mode="PIECEWISE",
                       compilation=json.dumps(extra, sort_keys=True),
                       kernel='{"enable_flashinfer_autotune": false}')  # fmt: skip
    doc = run_vllm_bench(cfg)
    assert all("error" not in r for r in doc["results"].values()), doc["results"]
    lines = engine_probe()
    assert sorted(line["mode"] for line in lines) == ["load", "native", "save"]
    for line in lines:  # the reference runs as SAVE and LOAD do
        assert line["args"]["compilation_config"] == {**extra, "cudagraph_mode": "PIECEWISE"}, line["args"]
        assert line["args"]["kernel_config"] == {"enable_flashinfer_autotune": False}, line["args"]
    assert (
        cfg.tag().startswith(f"vllm-qwen3-0.6b-{api}-v2-piecewise-cc")
        and len({cfg.tag(), replace(cfg, compilation="").tag(), replace(cfg, kernel="").tag()}) == 3
    )
    text = (tmp_path / "out" / f"{cfg.tag()}.txt").read_text()
    assert "compilation config (every run): " + cfg.compilation in text
    assert "kernel config (every run): " + cfg.kernel in text


def test_under_vllm_serve_each_compared_batch_is_held_until_all_its_prompts_are_queued(
    fake_vllm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm serve hands a request's prompts to its engine one by one: the benchmark pauses the scheduler (queue
    kept), posts the batch and resumes it, in every run alike, so each batch starts in one step everywhere; a
    batch of one and the timed steady-state requests go straight through."""
    held = tmp_path / "held.jsonl"
    monkeypatch.setenv("FAKE_ENGINE_HELD", str(held))
    cfg = tokens_only(tmp_path, modes=("save", "native", "load"), api="serve", decode_batches=(2,), decode_steps=4)
    doc = run_vllm_bench(cfg)
    assert all("error" not in r for r in doc["results"].values()), doc["results"]
    lines = [json.loads(line) for line in held.read_text().splitlines()]
    compared = [line for line in lines if line["batch"] == 3]  # the token requests' batch of three
    assert len(compared) == 3 and all(line["held"] for line in compared), lines  # one per run
    assert not any(line["held"] for line in lines if line["batch"] != 3), lines  # batch 1, the decode requests
    assert doc["config"]["batches_held"] is True
    text = (tmp_path / "out" / f"{cfg.tag()}.txt").read_text()
    assert "each compared batch held until all its prompts were queued" in text


def test_a_server_without_the_pause_route_is_named(
    fake_vllm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foundry_bench.vllm import runs

    monkeypatch.setattr(runs, "SERVER_ENV", {"VLLM_SERVER_DEV_MODE": "0"})
    doc = run_vllm_bench(tokens_only(tmp_path, modes=("native",), api="serve"))
    error = doc["results"]["native"]["error"]
    assert "/pause?mode=keep&clear_cache=false answered 404" in error and "VLLM_SERVER_DEV_MODE=1" in error, error
