"""Inductor's kernel choices by timing on the GPU (foundry/integration/shared/autotune.py), with the machine's torch:
a process that records (SAVE's part) and one that replays (LOAD's part), each compiling the same RMS norm (a
reduction, the kind whose configurations sum in different orders) in a compile cache of its own, so that both time
their configurations. The recording process is made to keep the slowest configuration (Inductor's own test switch
that inverts its timings), so that LOAD's own timing would likely choose another: LOAD must take SAVE's untimed
and compute SAVE's bits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foundry.integration.shared.autotune import KernelChoices

# One process: ``save`` records the choices into OUT/choices.json, ``load`` replays them, ``plain`` does neither.
PROGRAM = """
import hashlib, json, sys
import torch
from foundry.integration.shared import autotune
from foundry.integration.shared.engine import Engine

mode, out = sys.argv[1], sys.argv[2]
engine = Engine(name="test", key="test", version="0")
if mode == "save":
    autotune.record(engine)
if mode == "load":
    with open(out + "/choices.json") as f:
        replay = autotune.replay(autotune.KernelChoices.from_json(json.load(f)), engine)

def rms_norm(x, w):
    v = x.float()
    return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w.float())).to(x.dtype)

torch.manual_seed(0)
x = torch.randn(6424, 2048, device="cuda", dtype=torch.bfloat16)
w = torch.randn(2048, device="cuda", dtype=torch.bfloat16) * 0.1
y = torch.compile(rms_norm, dynamic=True)(x, w)
torch.cuda.synchronize()
doc = {"bits": hashlib.sha256(y.view(torch.int16).cpu().numpy().tobytes()).hexdigest(), "missing": autotune.missing(),
       "declined": autotune.cache_reads_declined()}
if mode == "save":
    doc["choices"] = autotune.recorded().to_json()
    with open(out + "/choices.json", "w") as f:
        json.dump(doc["choices"], f)
if mode == "load":
    doc["replay"] = replay.summary()
print(json.dumps(doc))
"""


def _run(tmp_path: Path, mode: str, cache: str | None = None, **env: str) -> dict[str, Any]:
    """One process of ``mode`` with compile caches of its own, or those named ``cache`` (shared with others)."""
    (tmp_path / "program.py").write_text(PROGRAM)
    caches = cache or mode
    variables = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{caches}"),
                 "TRITON_CACHE_DIR": str(tmp_path / f"triton-{caches}"), **env}  # fmt: skip
    run = subprocess.run([sys.executable, str(tmp_path / "program.py"), mode, str(tmp_path)], env=variables,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    doc: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return doc


@pytest.mark.slow
def test_load_takes_the_configuration_save_timed_and_computes_saves_bits(
    tmp_path: Path, figures: dict[str, Any]
) -> None:
    saved = _run(tmp_path, "save", TORCHINDUCTOR_DISTORT_BENCHMARKING_RESULT="inverse")
    assert saved["missing"] == []  # this torch's autotuner and autotune cache have the methods Foundry wraps
    choices = KernelChoices.from_json(saved["choices"])
    assert choices.kernels, "the compiled RMS norm timed no configuration: nothing to record"
    assert not any(key.startswith("src-") for key in choices.kernels)  # keyed by Inductor's file names
    loaded = _run(tmp_path, "load")
    plain = _run(tmp_path, "plain")
    replay = loaded["replay"]
    assert replay["replayed"] == len(choices.kernels) and replay["timed_count"] == 0, replay
    assert replay["unmatched_count"] == 0, replay
    assert loaded["bits"] == saved["bits"]
    figures["inductor_choices"] = {
        "kernels": len(choices.kernels),
        "choices": saved["choices"],
        "plain_process_same_bits": plain["bits"] == saved["bits"],
    }


@pytest.mark.slow
def test_save_and_load_take_no_choice_from_inductors_cache(tmp_path: Path, figures: dict[str, Any]) -> None:
    """One compile cache for every process, as vLLM's processes of one model share theirs: a plain process times
    the norm first, and Inductor may write its choice there (``.best_config`` beside the kernel; vLLM's processes
    did, H200, 8043097). SAVE, made to keep the slowest configuration, still times and records its own rather than
    taking that one; LOAD, with the plain process's files put back over whatever SAVE's process wrote, takes
    SAVE's untimed and computes SAVE's bits. Where this torch writes no such file for the norm, the same holds
    with nothing to decline, and the figures say so."""
    first = _run(tmp_path, "plain", cache="shared")
    cached = {f: f.read_bytes() for f in tmp_path.rglob("*.best_config")}
    saved = _run(tmp_path, "save", cache="shared", TORCHINDUCTOR_DISTORT_BENCHMARKING_RESULT="inverse")
    assert saved["missing"] == [], saved
    choices = KernelChoices.from_json(saved["choices"])
    assert choices.kernels, "SAVE took a cached choice instead of timing: nothing recorded"
    after_save = _run(tmp_path, "plain", cache="shared")
    for path, content in cached.items():
        path.write_bytes(content)
    loaded = _run(tmp_path, "load", cache="shared")
    replay = loaded["replay"]
    assert replay["replayed"] == len(choices.kernels), replay
    assert replay["timed_count"] == 0 and replay["unmatched_count"] == 0, replay
    assert loaded["bits"] == saved["bits"]
    if cached:  # Inductor asked its cache for the norm's choice: SAVE and LOAD each declined it
        assert saved["declined"] >= 1 and loaded["declined"] >= 1, (saved, loaded)
    figures["inductor_cache_declined"] = {
        "best_config_files_written_by_the_first_plain_process": sorted(str(f.relative_to(tmp_path)) for f in cached),
        "save_declined": saved["declined"],
        "load_declined": loaded["declined"],
        "plain_first_same_bits_as_save": first["bits"] == saved["bits"],
        "plain_after_save_same_bits_as_save": after_save["bits"] == saved["bits"],
    }
