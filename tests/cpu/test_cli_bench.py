"""`foundry bench`'s arguments: checked, torch-free, before it looks for PyTorch, vLLM or a GPU; errors on
stderr, exit 2."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from foundry.cli.main import main as cli_main
from tests.support.subproc import foundry_cli


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--shapes", "bogus"], "unknown shape 'bogus'"),
        (["--shapes", "tiny,"], "unknown shape ''"),
        (["--variants", "fast"], "unknown variant 'fast'"),
        (["--graphs", "-3"], "'-3' is not a whole number of 0 or more"),
        (["--threads", "0"], "'0' is not a whole number of 1 or more"),
    ],
)
def test_bench_checks_its_arguments_before_it_looks_for_a_gpu(args: list[str], complaint: str) -> None:
    p = foundry_cli("bench", *args)
    assert p.returncode == 2 and p.stdout == "", p.stdout
    said = p.stderr.strip().splitlines()[-1]  # after argparse's usage lines, where there are any
    assert said.startswith("foundry bench: ") and complaint in said, p.stderr
    assert "GPU" not in said and "PyTorch" not in said, said


@pytest.mark.skipif(Path("/dev/nvidia0").exists(), reason="a GPU is visible here")
def test_bench_without_pytorch_or_gpu_says_so_on_stderr() -> None:
    p = foundry_cli("bench", "--shapes", "tiny", "--graphs", "1")
    assert p.returncode == 2 and p.stdout == "", p.stdout
    assert p.stderr.startswith("foundry bench: ") and (
        "PyTorch is not installed" in p.stderr or "no CUDA GPU" in p.stderr
    )


def test_cli_refuses_bad_arguments_before_looking_for_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main(["bench", "--engine", "vllm", "--shapes", "qwen3-1t", "--runner", "v3", "--batches", "0",
                   "--plugin-env", "WARM_UP=1,FOUNDRY_VLLM_THREADS=2,threads,MODE=off"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert "unknown shape 'qwen3-1t'" in err and "unknown --runner 'v3'" in err and "at least 1" in err
    assert "--plugin-env 'threads': give NAME=VALUE" in err and "WARM_UP" not in err
    assert "--plugin-env 'FOUNDRY_VLLM_THREADS=2': give NAME=VALUE, NAME without the FOUNDRY_<ENGINE>_ prefix" in err
    assert "--plugin-env 'MODE=off': the benchmark sets MODE" in err


def test_cli_refuses_a_native_env_that_is_not_name_value(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main(["bench", "--engine", "vllm", "--native-env", "NCCL_RUNTIME_CONNECT=1,nothing,FOUNDRY_VLLM_MODE=off"])
    err = capsys.readouterr().err
    assert rc == 2 and "NCCL_RUNTIME_CONNECT" not in err
    assert "--native-env 'nothing': give NAME=VALUE" in err and "--native-env 'FOUNDRY_VLLM_MODE=off'" in err


def test_cli_env_is_checked_and_numerics_switches_inherited_are_recorded(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from foundry_bench import cli

    rc = cli_main(["bench", "--engine", "vllm", "--env", "A=1,nothing,FOUNDRY_VLLM_MODE=off"])
    err = capsys.readouterr().err
    assert rc == 2 and "--env 'nothing': give NAME=VALUE" in err and "--env 'FOUNDRY_VLLM_MODE=off'" in err
    assert "--env 'A=1'" not in err
    monkeypatch.setenv("TORCHINDUCTOR_DETERMINISTIC", "1")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    from foundry.cli.main import _parser

    args = _parser().parse_args(["bench", "--engine", "sglang", "--env", "B=2"])
    settings, problems = cli._serving_problems(args, ["qwen3-0.6b"], ["native"])
    assert problems == [] and settings["extra_env"] == {"TORCHINDUCTOR_DETERMINISTIC": "1", "B": "2"}


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("{broken", "--compilation-config is not JSON"),
        ("[1, 2]", "--compilation-config must be a JSON object"),
        ('{"cudagraph_mode": "PIECEWISE"}', "give the graph mode with --cudagraph-mode"),
    ],
)
def test_cli_refuses_a_compilation_config_it_cannot_pass_on(
    capsys: pytest.CaptureFixture[str], value: str, complaint: str
) -> None:
    rc = cli_main(["bench", "--engine", "vllm", "--compilation-config", value, "--kernel-config", "[]"])
    err = capsys.readouterr().err
    assert rc == 2 and complaint in err and "--kernel-config must be a JSON object" in err, err


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_scratch_gives_each_benchmark_its_own_archive_and_models(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two benchmarks side by side on one machine (one GPU each) must not write one archive: --scratch separates
    # them, and without it the engine's own default folders stay as they were.
    import importlib.util

    import foundry_bench

    seen: list[object] = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == engine else real(name, *a))
    runner = f"run_{engine}_bench"
    monkeypatch.setattr(foundry_bench, runner, lambda cfg: seen.append(cfg) or {"compare": {}})
    assert cli_main(["bench", "--engine", engine, "--shapes", "qwen3-0.6b", "--out", str(tmp_path / "out"),
                     "--scratch", str(tmp_path / "lane1")]) == 0  # fmt: skip
    assert cli_main(["bench", "--engine", engine, "--shapes", "qwen3-0.6b", "--out", str(tmp_path / "out")]) == 0
    lane, default = seen
    assert lane.archive == tmp_path / "lane1" / f"foundry-{engine}-archive"  # type: ignore[attr-defined]
    assert lane.models == tmp_path / "lane1" / f"foundry-{engine}-models"  # type: ignore[attr-defined]
    assert default.archive == Path(f"/tmp/foundry-{engine}-archive")  # type: ignore[attr-defined]
    assert default.models == Path(f"/tmp/foundry-{engine}-models")  # type: ignore[attr-defined]


def test_plugin_shim_declares_the_entry_point_and_leaves_a_right_one_alone(tmp_path: Path) -> None:
    from importlib.metadata import distributions

    from foundry_bench.serving.plugin import plugin_shim

    root = plugin_shim(tmp_path / "shim", "vllm", "foundry.no_such_group")  # a group no installed package declares
    assert root == tmp_path / "shim"
    (dist,) = [d for d in distributions(path=[str(root)])]
    (ep,) = dist.entry_points
    assert (ep.group, ep.name, ep.value) == ("foundry.no_such_group", "foundry", "foundry.integration.vllm:register")
    info = root / "foundry_vllm_plugin-0.0.dist-info" / "entry_points.txt"
    before = info.stat().st_ino
    plugin_shim(tmp_path / "shim", "vllm", "foundry.no_such_group")
    assert info.stat().st_ino == before  # not rewritten: a benchmark beside this one may be reading it
    assert not list(info.parent.glob("*.part"))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_cli_refuses_to_load_another_configurations_archive_before_looking_for_the_engine(
    engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # what the benchmark's last SAVE in this scratch folder saved the archive for
    (tmp_path / f"foundry-{engine}-archive.config").write_text(f"{engine}-qwen3-moe-small-serve-tp2-ep\n")
    args = ["bench", "--engine", engine, "--scratch", str(tmp_path), "--shapes", "qwen3-8b", "--tp", "2"]
    rc = cli_main([*args, "--modes", "native,load"])
    err = capsys.readouterr().err
    assert rc == 2 and f"which the benchmark last saved for {engine}-qwen3-moe-small-serve-tp2-ep, not for" in err
    assert "not installed" not in err  # said before the engine is looked for
    if importlib.util.find_spec(engine) is None:  # where the engine is installed this would start it
        rc = cli_main([*args, "--modes", "save,native,load"])  # saving it again: no objection, then no engine here
        err = capsys.readouterr().err
        assert "last saved for" not in err and "not installed" in err


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_custom_all_reduce_keeps_each_engines_own_on_and_needs_two_gpus(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--custom-all-reduce``: the engine's all-reduce left on in every run (SGLang's plugin takes it knowingly),
    its files tagged ``-car``; refused at one GPU, which all-reduces nothing."""
    import foundry_bench

    seen: list[Any] = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == engine else real(name, *a))
    monkeypatch.setattr(foundry_bench, f"run_{engine}_bench", lambda cfg: seen.append(cfg) or {"compare": {}})
    args = ["bench", "--engine", engine, "--scratch", str(tmp_path), "--shapes", "qwen3-0.6b", "--custom-all-reduce"]
    assert cli_main([*args, "--tp", "1"]) == 2 and "needs --tp 2 or more" in capsys.readouterr().err
    assert cli_main([*args, "--tp", "2", "--out", str(tmp_path / "out")]) == 0
    (cfg,) = seen
    assert cfg.custom_all_reduce and cfg.tag().endswith("-tp2-car")
    if engine == "sglang":
        assert cfg.plugin_env == {}  # the plugin takes SGLang's custom all-reduce as it is
        assert cfg.kwargs(Path("/m"))["disable_custom_all_reduce"] is False
