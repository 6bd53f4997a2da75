"""`foundry bench`'s arguments: checked, torch-free, before it looks for PyTorch, vLLM or a GPU; errors on
stderr, exit 2."""

from __future__ import annotations

from pathlib import Path

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
