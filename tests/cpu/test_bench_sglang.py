"""`foundry bench --engine sglang` end to end on the CPU, against a stand-in SGLang (tests/support/fakeengines_pkg):
each run is its own process tree (sglang.Engine children, launch_server servers over HTTP), SAVE and LOAD run
under `foundry run`, tokens are compared, native and LOAD are measured in turn, the targets are judged, and
the report is written; a time budget skips what does not fit and a stopped benchmark leaves its JSON."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from foundry.cli.main import main as cli_main
from foundry_bench.serving import runs as serving_runs
from foundry_bench.serving import stats
from foundry_bench.serving.process import ChildEngine
from foundry_bench.serving.stats import alternate, summary
from foundry_bench.sglang import SglangBenchConfig, run_sglang_bench
from foundry_bench.sglang.logsteps import STEPS
from foundry_bench.sglang.report import render
from foundry_bench.sglang.runs import NEEDS
from foundry_bench.sglang.targets import targets
from tests.support.ports import held

FAKE = Path(__file__).resolve().parents[1] / "support" / "fakeengines_pkg"
REPO = Path(__file__).resolve().parents[2]


def _cfg(tmp_path: Path, **changes: object) -> SglangBenchConfig:
    settings: dict[str, object] = dict(
        out=tmp_path / "out", batches=(1, 3), max_tokens=4, decode_batches=(2, 4), decode_steps=3, reps=4,
        prefill_tokens=50, archive=tmp_path / "arch", models=tmp_path / "models", timeout=60,
    )  # fmt: skip
    return SglangBenchConfig(**{**settings, **changes})  # type: ignore[arg-type]


def _files(cfg: SglangBenchConfig) -> tuple[dict, str, Path]:
    base = cfg.out / cfg.tag()
    doc = json.loads(Path(str(base) + ".json").read_text())
    return doc, Path(str(base) + ".txt").read_text(), Path(str(base) + ".png")


@pytest.mark.parametrize("api", ["engine", "serve"])
def test_every_run_answers_and_the_report_judges_the_targets(fake_sglang: None, tmp_path: Path, api: str) -> None:
    cfg = _cfg(tmp_path, api=api)
    with held(*range(30110, 30150, 10)):  # where its servers once started: see test_bench_vllm.py
        doc = run_sglang_bench(cfg)
    results = doc["results"]
    assert list(results) == ["native_cold", "save", "native", "load"]
    assert all("error" not in r for r in results.values()), {m: r.get("error") for m, r in results.items()}
    assert set(doc["compare"]) == {"native_cold", "save", "load"}
    assert all(c["identical"] for c in doc["compare"].values())
    assert results["load"]["plugin"]["mode"] == "load" and results["save"]["plugin"]["mode"] == "save"
    assert "plugin" not in results["native"] and [len(t) for t in results["load"]["tokens"]] == [1, 3]
    # SGLang's logged figures, per mode
    assert results["native"]["prefill_graphs_s"] == 7.5 and results["load"]["prefill_graphs_s"] == 0.05
    assert results["native"]["max_total_num_tokens"] == 200000
    assert results["load"]["scheduler_s"] == 0.5 and results["native"]["scheduler_s"] == 11.5
    # its start-up step by step, from the millisecond stamps SGLANG_LOG_MS=1 gives every run's log
    assert all({f"step_{k}_s" for k, *_ in STEPS} <= set(results[m]) for m in ("native", "save", "load"))
    # the settings every engine got: triton attention, dummy weights, SGLang's own graph sizes
    kwargs = doc["engine_kwargs"]
    assert kwargs["attention_backend"] == "triton" and kwargs["load_format"] == "dummy"
    assert kwargs["mem_fraction_static"] == 0.35 and not any("cuda_graph" in k for k in kwargs)
    decode = doc["measured"]["decode"]
    assert set(decode) == {"2", "4"} and decode["2"]["reps"] == 4 and len(decode["4"]["values"]["load"]) == 4
    assert set(decode["2"]["iqr"]) == {"native", "load"} and decode["2"]["paired_ratio_median"] > 0
    assert doc["measured"]["prefill"]["tokens"] == 50
    # and a prefill short enough for the engine's graphs (vLLM's default mode: its piecewise ones)
    assert doc["measured"]["short_prefill"]["tokens"] == 256 and doc["measured"]["short_prefill"]["reps"] >= 1
    t = doc["targets"]
    # capture 7.5 + 3.25 s natively (cold: the stand-in logs the same) against Foundry's 0.55 s
    assert t["restore"]["speedup"] == pytest.approx(10.75 / 0.55) and t["restore"]["met"] is False
    assert t["restore"]["against"] == "native_cold" and t["tokens"]["met"] is True
    assert t["startup"]["ratio"] is not None and t["decode"]["worst_batch"] in ("2", "4")
    written, text, png = _files(cfg)
    assert written["compare"] == doc["compare"]
    # The plot needs matplotlib (the bench extra); without it the table and the JSON still come.
    assert png.exists() == (importlib.util.find_spec("matplotlib") is not None)
    assert "Foundry LOAD" in text and "decode tokens/s, batch 4" in text and "Targets:" in text
    assert "restore >= 50x faster" in text and "19.5x against native_cold" in text
    assert ("to /health s" in text) == (api == "serve")
    assert "SGLang's start-up by its own log (millisecond timestamps), step by step:" in text
    assert "first request after LOAD <= 1.1x native warm's" in text
    if api == "engine":
        assert results["native"]["engine_init_s"] > 0 and results["native"]["import_s"] > 0
        assert "LOAD's start-up" in text and "graphs ready, handed to SGLang" in text
    else:
        assert results["native"]["health_s"] > 0


def test_a_refused_load_is_reported_and_the_command_fails(fake_sglang: None, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("FAKE_SGLANG_REFUSE", "load")
    monkeypatch.syspath_prepend(str(FAKE))  # the command looks for SGLang before it starts anything
    out = tmp_path / "out"
    rc = cli_main(["bench", "--engine", "sglang", "--out", str(out), "--runs", "save,native,load", "--batches", "2",
                   "--decode-batches", "2", "--decode-steps", "3", "--reps", "2"])  # fmt: skip
    assert rc == 1
    doc = json.loads((out / "sglang-qwen3-0.6b-engine.json").read_text())
    assert "ArchiveMismatchError: mem_fraction_static" in doc["results"]["load"]["error"]
    assert doc["compare"]["load"]["identical"] is False and doc["compare"]["save"]["identical"] is True
    assert doc["measured"] == {}  # no parity without a LOAD that serves
    assert "native_cold" not in doc["results"]
    assert "NO (failed)" in (out / "sglang-qwen3-0.6b-engine.txt").read_text()


def test_the_budget_skips_runs_that_do_not_fit_and_says_so(fake_sglang: None, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # 140 s less the 30 s kept to stop the engines: native_cold (~170 s) does not fit, SAVE (~75 s) does; native
    # is made to need more than is left, LOAD (~50 s) fits after it
    monkeypatch.setitem(NEEDS, "native", 200.0)
    # The budget's clock stands still: what fits is decided by the figures above, not by how fast this machine
    # happens to run the stand-ins.
    monkeypatch.setattr(serving_runs, "time", SimpleNamespace(perf_counter=lambda: 0.0))
    doc = run_sglang_bench(_cfg(tmp_path, seconds=140.0, decode_batches=(2,), reps=2))
    results = doc["results"]
    assert results["native_cold"] == {"mode": "native_cold", "skipped": results["native_cold"]["skipped"]}
    assert "needs ~170 s" in results["native_cold"]["skipped"] and "needs ~200 s" in results["native"]["skipped"]
    assert "error" not in results["save"] and "tokens" in results["load"]
    assert doc["compare"]["native_cold"] == {"identical": False, "why": results["native_cold"]["skipped"]}
    assert doc["measured"] == {} and doc["targets"]["startup"]["met"] is None
    text = render(doc)
    assert "skipped: " in text and "not measured" in text


def test_a_stopped_benchmark_leaves_what_it_had(fake_sglang: None, tmp_path: Path) -> None:
    """SIGTERM while LOAD's start-up hangs: every engine is stopped and the JSON holds the finished runs."""
    out = tmp_path / "out"
    env = {**os.environ, "FAKE_SGLANG_HANG": "load", "PYTHONPATH": os.pathsep.join([str(FAKE), str(REPO)])}
    cmd = [sys.executable, "-m", "foundry.cli", "bench", "--engine", "sglang", "--out", str(out), "--runs",
           "save,native,load", "--batches", "1", "--decode-batches", "1", "--decode-steps", "2"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "load: starting" in line:
            break
    # SIGTERM once the stand-in says its start-up hangs (its log), not after a guess at how long starting takes.
    _wait_for_line(out / "sglang-qwen3-0.6b-engine" / "load.log", "start-up hangs", proc)
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=60)[0]
    assert proc.returncode == 1, rest
    doc = json.loads((out / "sglang-qwen3-0.6b-engine.json").read_text())
    assert doc["compare"]["save"]["identical"] is True and "tokens" in doc["results"]["native"]
    assert "signal 15" in doc["measured"]["error"] and "signal 15" in doc["results"]["load"]["error"]
    assert doc["compare"]["load"]["identical"] is False
    assert "Foundry SAVE" in rest


def _wait_for_line(path: Path, text: str, proc: subprocess.Popen[str]) -> None:
    """Returns once ``path`` holds ``text``; fails if ``proc`` ends first (or, as a guard against a hang, after
    a minute)."""
    for _ in range(1200):
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"the benchmark ended before {path} said {text!r}"
        time.sleep(0.05)
    raise AssertionError(f"{path} did not say {text!r} within a minute")


def test_an_engine_still_starting_is_ended_by_signal_without_being_asked_and_waited_for(tmp_path: Path) -> None:
    """A stopped benchmark does not wait for an engine that is not serving yet (it would not listen): its
    process group gets SIGTERM at once."""
    engine = ChildEngine([sys.executable, "-c", "import time; time.sleep(3600)"], dict(os.environ),
                         tmp_path / "engine.log", tmp_path)  # fmt: skip
    asked: list[bool] = []
    engine._ask_to_end = lambda: asked.append(True)  # type: ignore[method-assign]
    assert engine.stop() == -signal.SIGTERM and asked == []


def test_alternation_orders_sides_in_turn_and_stops_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # A clock of the test's own: each side takes 1/16 s by it, whatever the machine does meanwhile.
    now = [0.0]
    monkeypatch.setattr(stats, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    calls: list[str] = []

    def side(name: str, seconds: float) -> Callable[[], float]:
        def ask() -> float:
            calls.append(name)
            now[0] += seconds
            return 1.0

        return ask

    values = alternate({"native": side("n", 0), "load": side("l", 0)}, 3)
    assert calls == ["n", "l", "n", "l", "l", "n", "n", "l"] and values == {"native": [1.0] * 3, "load": [1.0] * 3}
    calls.clear()
    now[0] = 0.0
    # Warm-up and each round take 1/8 s: rounds start at 1/8, 2/8, 3/8 and end by 4/8; a fourth would end at 5/8.
    values = alternate({"native": side("n", 1 / 16), "load": side("l", 1 / 16)}, 50, 0.5)
    assert values == {"native": [1.0] * 3, "load": [1.0] * 3} and now[0] == 0.5


def test_summary_pairs_repetitions_and_reports_spread() -> None:
    s = summary({"native": [100.0, 101.0, 99.0, 100.0, 140.0], "load": [99.0, 100.0, 99.0, 101.0, 100.0]})
    assert s["median"] == {"native": 100.0, "load": 100.0} and s["reps"] == 5
    assert s["spread"]["native"] == pytest.approx(0.41) and s["iqr"]["native"] < 0.25
    assert s["paired_ratio_median"] == pytest.approx(100 / 101) and s["load_over_native"] == 1.0


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--mem-fraction-static", "0.6"], "at most 0.45: native and LOAD run side by side"),
        (["--api", "grpc"], "unknown --api 'grpc' (engine or serve)"),
        (["--runs", "save,reload"], "unknown mode 'reload'"),
        (["--engine-args", "[1]"], "--engine-args must be a JSON object"),
        (["--engine-args", "{oops"], "--engine-args is not JSON"),
        (["--engine-args", '{"attention_backend": "fa3"}'], "may not set 'attention_backend'"),
        (["--decode-steps", "4096"], "more than --context-length 2048"),
        (["--seconds", "0"], "--seconds must be positive"),
        (["--shapes", "qwen3-1t"], "unknown shape 'qwen3-1t'"),
        (["--expert-parallel"], "--expert-parallel needs --tp 2 or more"),
    ],
)
def test_sglang_arguments_are_refused_before_looking_for_sglang(
    args: list[str], complaint: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc = cli_main(["bench", "--engine", "sglang", "--out", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert rc == 2 and complaint in err, err
    assert list(tmp_path.iterdir()) == []


def test_without_sglang_the_command_says_how_to_install_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = cli_main(["bench", "--engine", "sglang", "--out", str(tmp_path)])
    assert rc == 2 and "SGLang is not installed (pip install sglang==0.5.17" in capsys.readouterr().err


@pytest.mark.parametrize("api", ["engine", "serve"])
def test_a_last_bit_logprob_difference_fails_the_tokens_target(
    fake_sglang: None, tmp_path: Path, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLang's top logprobs (return_logprob) are compared bit for bit: LOAD's first one moved by one unit in
    the last place, with every greedy token the same, is not identical."""
    monkeypatch.setenv("FAKE_ENGINE_NUDGE", "load")
    cfg = _cfg(tmp_path, api=api, modes=("native", "load"), logprobs=3, decode_batches=(), reps=1, prefill_tokens=0,
               short_prefill_tokens=0)  # fmt: skip
    doc = run_sglang_bench(cfg)
    c = doc["compare"]["load"]
    assert c["tokens_identical"] is True and c["identical"] is False
    assert [r["identical"] for r in c["logprobs"]["requests"]] == [0, 0]
    assert not targets(doc)["tokens"]["met"]
    assert "NO: tokens yes, logprobs differ" in render(doc)


def _configs_from_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *extra: list[str]) -> list[SglangBenchConfig]:
    """`foundry bench --engine sglang` once per argument list, SGLang stood in for: the configurations it built."""
    import importlib.util

    import foundry_bench

    seen: list[SglangBenchConfig] = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "sglang" else real(name, *a))
    monkeypatch.setattr(foundry_bench, "run_sglang_bench", lambda cfg: seen.append(cfg) or {"compare": {}})
    for args in extra:
        assert cli_main(["bench", "--engine", "sglang", "--out", str(tmp_path), *args]) == 0
    return seen


def test_expert_parallel_asks_sglang_for_ep_size_equal_to_tp_and_names_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (cfg,) = _configs_from_cli(monkeypatch, tmp_path, ["--tp", "4", "--expert-parallel"])
    assert cfg.engine_args == {"ep_size": 4} and cfg.tp == 4
    assert cfg.tag() == "sglang-qwen3-0.6b-engine-tp4-ep"


def test_the_repeat_flag_reaches_the_benchmark_and_is_off_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _configs_from_cli(monkeypatch, tmp_path, ["--repeat"], [])
    assert [cfg.repeat for cfg in seen] == [True, False]


def test_more_starts_of_sglang_judge_its_targets_on_the_medians(fake_sglang: None, tmp_path: Path) -> None:
    """--starts 2: one more warm native and LOAD each (LOAD first), each timed to ready and its first token; the
    targets and their lines say they take the medians of both starts."""
    cfg = _cfg(tmp_path, modes=("save", "native", "load"), decode_batches=(), prefill_tokens=0, starts=2)
    doc = run_sglang_bench(cfg)
    assert all("error" not in r for r in doc["results"].values()), doc["results"]
    more = doc["more_starts"]
    assert [s["start"] for s in more["native"]] == [2] and [s["start"] for s in more["load"]] == [2]
    assert more["load"][0]["engine_init_s"] > 0 and more["load"][0]["first_request_s"] > 0
    assert more["native"][0]["prefill_graphs_s"] == 7.5  # SGLang's logged figures, read from that start's own log
    t = targets(doc)
    assert t["starts"] == 2
    _, text, _ = _files(cfg)
    assert "Every start of the warm runs" in text and "(medians of 2 starts each)" in text, text


def test_the_starts_flag_reaches_the_benchmark_and_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = _configs_from_cli(monkeypatch, tmp_path, ["--starts", "3"], [])
    assert [cfg.starts for cfg in seen] == [3, 1]
    assert cli_main(["bench", "--engine", "sglang", "--out", str(tmp_path), "--starts", "0"]) != 0
    assert "--starts must be at least 1" in capsys.readouterr().err
