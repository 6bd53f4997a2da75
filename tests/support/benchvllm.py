"""What the CPU tests of `foundry bench --engine vllm` share: a configuration that only answers the token requests,
and the notes the stand-in engines write as they start (tests/support/fakeengines_pkg/_fakeengine.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from foundry_bench.vllm import VllmBenchConfig

__all__ = ["FAKE_ENGINES", "Probe", "tokens_only"]

FAKE_ENGINES = Path(__file__).resolve().parent / "fakeengines_pkg"

Probe = Callable[[], list[dict[str, Any]]]
"""The notes of every stand-in engine process started so far, in order (the ``engine_probe`` fixture)."""


def tokens_only(tmp_path: Path, **changes: Any) -> VllmBenchConfig:
    """A configuration that only answers the token requests (no steady-state measurements)."""
    settings: dict[str, Any] = dict(
        out=tmp_path / "out", modes=("save", "load"), batches=(1, 3), max_tokens=4, logprobs=5,
        archive=tmp_path / "arch", models=tmp_path / "models", timeout=60, decode_batches=(), reps=1,
        prefill_tokens=0, short_prefill_tokens=0,
    )  # fmt: skip
    return VllmBenchConfig(**{**settings, **changes})
