"""The GPU machine's scripts on the CPU, where a part of them decides something: the benchmark's own bound
(scripts/gpu_setup.sh ``bench_seconds``) never reaches past the call's timeout, whatever --seconds a caller gave,
so that the benchmark stops its engines and writes its report before the timeout kills it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench_seconds(*args: str) -> str:
    script = f'. "{ROOT / "scripts" / "gpu_setup.sh"}"; bench_seconds "$@"'
    done = subprocess.run(["bash", "-c", script, "bash", *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("args", "bound"),
    [
        (("450", "--shapes", "gemma2-small", "--seconds", "500", "--reps", "1"), "450"),  # past the timeout: capped
        (("450", "--seconds", "300"), "300"),  # the caller's, within it
        (("450", "--reps", "1"), "450"),  # none given
        (("450", "--seconds", "100", "--seconds", "470"), "450"),  # the last one given counts, as argparse reads it
    ],
)
def test_the_benchmarks_bound_never_passes_the_calls_timeout(args: tuple[str, ...], bound: str) -> None:
    assert _bench_seconds(*args) == bound
