"""The attention fingerprints of ``foundry bench --digests`` on the device (foundry_bench/serving/stacksite/
foundry_attention_digests.py): the same bits give the same fingerprint whatever the layout they are read from, and
one element one bf16 step off gives another; the compiled model's matrix products are recorded through Inductor's
namespace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from foundry_bench.serving.digests import _short, env, read
from foundry_bench.serving.stacksite.foundry_attention_digests import fingerprint


def test_a_fingerprint_is_of_the_bits_and_one_step_in_one_element_changes_it() -> None:
    import torch

    torch.manual_seed(0)
    x = torch.randn(740, 8, 256, device="cuda", dtype=torch.bfloat16)
    same = x.clone()
    step = x.clone()
    flat = step.view(-1).view(torch.int16)
    flat[12345] += 1  # the next bf16 value of one element: one last-bit difference
    assert fingerprint(x) == fingerprint(same)
    assert fingerprint(x) != fingerprint(step)
    assert fingerprint(x)[0] == 740 * 8 * 256
    # a transposed view holds the same values in another layout: fingerprinted as its values, in its own order
    t = x.transpose(0, 1)
    assert fingerprint(t) == fingerprint(t.contiguous())
    # two elements swapped: the plain sum cannot tell, the weighted one does
    swapped = x.clone().view(-1)
    swapped[[0, 1]] = swapped[[1, 0]]
    if not torch.equal(swapped[:2], x.view(-1)[:2]):
        assert fingerprint(swapped.view_as(x)) != fingerprint(x)
    assert fingerprint(None) is None
    assert fingerprint(torch.ones(4, device="cuda", dtype=torch.float32))[0] == 4


# A program compiled by torch.compile whose matrix product Inductor leaves to cuBLAS, run with the recorder on:
# the product is recorded through Inductor's own namespace, with the real torch and Inductor of the machine.
PRODUCT = """
import os, sys, json
import torch

os.makedirs(sys.argv[1], exist_ok=True)
open(os.path.join(sys.argv[1], "recording"), "w").close()
torch.manual_seed(0)
x = torch.randn(740, 256, device="cuda", dtype=torch.bfloat16)
w = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
f = torch.compile(lambda x, w: torch.relu(x @ w) + 1)
y = f(x, w)
from foundry_attention_digests import fingerprint
print(json.dumps({"product": fingerprint(x @ w), "input": fingerprint(x), "out": fingerprint(y)}))
"""


@pytest.mark.slow
def test_the_compiled_models_matrix_products_are_recorded_through_inductors_namespace(tmp_path: Path) -> None:
    folder = tmp_path / "digests"
    (tmp_path / "program.py").write_text(PRODUCT)
    variables = {**os.environ, **env(folder, os.environ.get("PYTHONPATH", "")),
                 "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # fmt: skip
    run = subprocess.run([sys.executable, str(tmp_path / "program.py"), str(folder)], env=variables,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0 and "stopped" not in run.stderr, run.stderr[-3000:]
    expected = json.loads(run.stdout.strip().splitlines()[-1])
    got = read(folder)
    rows = {row[1]: row for row in got["sequence"] if row[0] == 740}
    assert "start/mm0" in rows, got
    assert rows["start/mm0"][5:7] == [_short(expected["product"]), _short(expected["input"])]
    assert fingerprint is not None and expected["out"][0] == 740 * 512  # the compiled function answered in full
