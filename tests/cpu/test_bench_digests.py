"""`foundry bench --digests`: every engine process fingerprints each attention layer's query, key, value and
output where vLLM calls its backend (foundry_bench/serving/stacksite/foundry_attention_digests.py), and the report
names the first layer where a run's bits part from the reference run's (foundry_bench/serving/digests.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from foundry_bench.serving.digests import _short, alike_groups, compare, compare_calls, env, lines, read
from foundry_bench.serving.stacks import SITE

# vLLM's attention backend as far as the recorder sees it: a module of that name with the implementation class,
# whose forward writes its output and returns it.
BACKEND = """
class FlashAttentionImpl:
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None):
        if attn_metadata is None:  # vLLM's profile run
            return output
        for i, (q, k) in enumerate(zip(query, key)):
            output[i] = q * 10 + k
        return output
"""

# An engine's worker: the backend imported after start-up (as vLLM imports it), two layers' prefill of 3 tokens
# in a buffer of 4, a profile call with no metadata, and a layer whose output differs where DIFFER says.
PROGRAM = """
import os, sys
import foundry_attention_digests as digests

# The stand-in tensors are lists: the same fingerprint's arithmetic, in Python (the real one sums on the device).
digests.fingerprint = lambda t: None if t is None else [len(t), sum(t), sum((i + 1) * x for i, x in enumerate(t))]
from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl

class Layer:
    def __init__(self, name): self.layer_name = name
class Meta:
    num_actual_tokens = 3

impl = FlashAttentionImpl()
print("wrapped:", FlashAttentionImpl.forward.__name__, hasattr(FlashAttentionImpl.forward, "__wrapped__"))
# start-up: not recorded until the benchmark says the engine serves
impl.forward(Layer("model.layers.0.self_attn.attn"), [5, 5, 5, 5], [5, 5, 5, 5], [5] * 4, None, Meta(), [0] * 4)
os.makedirs(sys.argv[1], exist_ok=True)
open(os.path.join(sys.argv[1], "recording"), "w").close()
for i in range(2):
    q = [1, 2, 3, 99]
    k = [4, 5, 6, 99] if os.environ.get("DIFFER") != f"k{i}" else [4, 5, 7, 99]
    out = impl.forward(Layer(f"model.layers.{i}.self_attn.attn"), q, k, [7, 8, 9, 99], None, Meta(), [0] * 4)
    print("output", out)
impl.forward(Layer("model.layers.0.self_attn.attn"), [1], [1], [1], None, None, [0])
"""


def _engine(tmp_path: Path, folder: Path, differ: str = "") -> subprocess.CompletedProcess[str]:
    package = tmp_path / "engine" / "vllm" / "v1" / "attention" / "backends"
    package.mkdir(parents=True, exist_ok=True)
    for parent in [package, *package.parents][:4]:
        (parent / "__init__.py").touch()
    (package / "flash_attn.py").write_text(textwrap.dedent(BACKEND))
    (tmp_path / "program.py").write_text(textwrap.dedent(PROGRAM))
    variables = {**os.environ, **env(folder, str(tmp_path / "engine")), "DIFFER": differ}
    return subprocess.run([sys.executable, str(tmp_path / "program.py"), str(folder)], env=variables,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_each_attention_call_is_fingerprinted_once_its_backend_is_imported_and_its_answer_is_unchanged(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "digests"
    run = _engine(tmp_path, folder)
    assert run.returncode == 0, run.stderr
    assert "wrapped: forward True" in run.stdout
    assert run.stdout.count("output [14, 25, 36, 1089]") == 2  # the engine's own answer, as without the recorder
    assert "stopped" not in run.stderr
    (path,) = folder.glob("digests-*.jsonl")
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    # the profile call (no metadata) is not recorded; each tensor cut to the step's tokens, not the buffer's
    assert [e["layer"] for e in entries] == ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
    assert entries[0] == {"layer": "model.layers.0.self_attn.attn", "n": 3, "q": [3, 6, 14], "k": [3, 15, 32],
                          "v": [3, 24, 50], "out": [3, 75, 172]}  # fmt: skip


def test_without_the_variable_nothing_is_recorded(tmp_path: Path) -> None:
    folder = tmp_path / "digests"
    variables = {**os.environ, "PYTHONPATH": str(SITE)}
    variables.pop("FOUNDRY_BENCH_DIGESTS", None)
    code = "import foundry_attention_digests as d, sys; print(d._RECORDER is None, d.start() is False)"
    run = subprocess.run([sys.executable, "-c", code], env=variables, capture_output=True, text=True, timeout=60)
    assert run.stdout.split() == ["True", "True"] and not folder.exists()


def test_two_processes_are_compared_layer_by_layer_and_the_first_difference_named(tmp_path: Path) -> None:
    """Run b's second layer got another key (its query alike): the difference arose before that layer's attention,
    in what computed its key, and its output differs too."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert _engine(tmp_path, a).returncode == 0
    assert _engine(tmp_path, b, differ="k1").returncode == 0
    ra, rb = read(a), read(b)
    assert (
        ra["calls"] == 2
        and ra["processes"] == 1
        and [row[:2] for row in ra["sequence"]]
        == [
            [3, "model.layers.0.self_attn.attn"],
            [3, "model.layers.1.self_attn.attn"],
        ]
    )
    results = {"native": {"digests": ra}, "load": {"digests": rb}, "save": {"digests": ra}, "plain": {}}
    text = lines(results, "native", {"native": "native", "load": "LOAD", "save": "SAVE"})
    assert text[2:] == [
        "- LOAD: first differs at call 2 of 2, model.layers.1.self_attn.attn at 3 tokens, in k, out (its input "
        "already differs: the kernels since the call before computed it differently)",
        "  no call had the same input and another output",
        "- SAVE: alike in all 2 calls both ran",
        "- alike in every call: {native, SAVE} {LOAD}",
    ]
    # documents written before the calls' order was kept: compared token count by token count
    sized = {
        name: {"sizes": {"3": [[row[1], *row[2:]] for row in doc["sequence"]]}} for name, doc in (("a", ra), ("b", rb))
    }
    first = {"layer": "model.layers.1.self_attn.attn", "index": 1, "differ": ["k", "out"]}
    assert compare(sized["b"], sized["a"]) == [{"n": 3, "layers": 2, "same": 1, "first": first}]
    assert compare(sized["a"], sized["a"]) == [{"n": 3, "layers": 2, "same": 2, "first": None}]
    old = {"native": {"digests": sized["a"]}, "load": {"digests": sized["b"]}}
    text = lines(old, "native", {"native": "native", "load": "LOAD"})
    assert text[2] == "- LOAD: 0 of 1 token counts alike in every call:"
    assert (
        text[3] == "  3 tokens: first differs at model.layers.1.self_attn.attn (call 1 of the step), in k, out; 1 of 2 "
        "calls alike"
    )
    assert lines({"load": {"digests": rb}}, "native", {}) == []  # no reference fingerprints: no section


def _call(n: int, layer: str, *prints: object) -> list[object]:
    return [n, layer, *prints]


def test_calls_are_compared_in_the_order_they_ran_and_a_call_that_computed_differently_itself_is_named() -> None:
    """The first call that differs is named with what differed; a call given the same inputs that answered another
    output is counted wherever it comes (here a product: cuBLAS's own choice); a run that ran more calls than the
    other (its timing steps) is compared as far as both ran; a run that ran another call is named there."""
    a, b, c = [1, 1, 1], [1, 2, 2], [1, 3, 3]
    ref = {"sequence": [_call(8, "l0", a, a, a, a, None), _call(8, "l0/mm0", None, None, None, a, a),
                        _call(740, "l1", a, a, a, a, None)]}  # fmt: skip
    here = {"sequence": [_call(8, "l0", a, a, a, a, None), _call(8, "l0/mm0", None, None, None, b, a),
                         _call(740, "l1", b, a, a, c, None), _call(256, "l0", a, a, a, a, None)]}  # fmt: skip
    got = compare_calls(here, ref)
    assert got == {"calls": 3, "first": {"index": 1, "n": 8, "layer": "l0/mm0", "differ": ["out"]}, "own": 1,
                   "first_own": {"index": 1, "n": 8, "layer": "l0/mm0"}}  # fmt: skip
    said = lines({"ref": {"digests": ref}, "here": {"digests": here}}, "ref", {})
    assert said[2:4] == [
        "- here: first differs at call 2 of 3, l0/mm0 at 8 tokens, in out (same input, another output: this call "
        "computed differently itself)",
        "  1 calls had the same input and another output, the first l0/mm0 at 8 tokens",
    ]
    # the same calls, the longer run's extra call left out: alike; another call where the reference ran l1: named
    assert compare_calls({"sequence": ref["sequence"] + [_call(256, "l0", a, a, a, a, None)]}, ref) == {
        "calls": 3, "first": None, "own": 0, "first_own": None}  # fmt: skip
    other = {"sequence": [*ref["sequence"][:2], _call(512, "l1", a, a, a, a, None)]}
    moved = compare_calls(other, ref)
    assert moved is not None and moved["calls"] == 2
    assert moved["first"] == {"index": 2, "n": 740, "layer": "l1", "differ": ["order"], "here": [512, "l1"]}
    said = lines({"ref": {"digests": ref}, "other": {"digests": other}}, "ref", {})
    assert said[2] == (
        "- other: alike in the 2 calls before; call 3 was l1 at 512 tokens here, l1 at 740 in the reference"
    )
    results = {"x": {"digests": ref}, "y": {"digests": here}, "z": {"digests": {"sequence": ref["sequence"][:2]}}}
    assert alike_groups(results) == [["x", "z"], ["y"]]
    assert compare_calls({"sizes": {}}, ref) is None  # no order kept: the token-count comparison stands
    # tensor parallel: each rank against the same rank's calls, however many more calls the other rank ran
    r0 = [_call(8, "rank0/l0", a, a, a, a, None), _call(8, "rank0/l1", a, a, a, a, None)]
    r1 = [_call(8, "rank1/l0", a, a, a, a, None)]
    ranks = compare_calls({"sequence": [*r0, _call(256, "rank0/l0", a, a, a, a, None), *r1]}, {"sequence": r0 + r1})
    assert ranks == {"calls": 3, "first": None, "own": 0, "first_own": None}
    other = compare_calls({"sequence": [*r0, _call(8, "rank1/l0", a, a, a, b, None)]}, {"sequence": r0 + r1})
    assert other is not None and other["first"] == {"index": 0, "n": 8, "layer": "rank1/l0", "differ": ["out"]}


def test_a_cut_line_is_left_out_and_tensor_parallel_ranks_are_named_in_process_order(tmp_path: Path) -> None:
    def entry(layer: str, n: int, q: int) -> str:
        return json.dumps({"layer": layer, "n": n, "q": [1, q, q], "k": None, "v": None, "out": [1, 0, 0]}) + "\n"

    (tmp_path / "digests-20.jsonl").write_text(entry("l0", 8, 1) + entry("l0", 740, 2) + entry("l0", 740, 3) + '{"la')
    (tmp_path / "digests-9.jsonl").write_text(entry("l0", 8, 5))
    (tmp_path / "digests-30.jsonl").write_text("")  # a process that ran no attention
    got = read(tmp_path)
    assert got["calls"] == 4 and got["processes"] == 2
    # in the order each process ran them, process 9 (rank 0) first; fingerprints shortened alike for equal ones
    out = _short([1, 0, 0])
    assert got["sequence"] == [
        [8, "rank0/l0", _short([1, 5, 5]), None, None, out, None],
        [8, "rank1/l0", _short([1, 1, 1]), None, None, out, None],
        [740, "rank1/l0", _short([1, 2, 2]), None, None, out, None],
        [740, "rank1/l0", _short([1, 3, 3]), None, None, out, None],
    ]
    assert len({row[2] for row in got["sequence"]}) == 4 and all(len(row[2]) == 12 for row in got["sequence"])
    # an old document's layer one run lacks differs in every tensor
    mine = {"sizes": {"740": [["rank1/l0", [1, 3, 3], None, None, [1, 0, 0]]]}}
    other = {"sizes": {"740": [["rank1/l0", [1, 3, 3], None, None, [1, 0, 0]], ["rank1/l1", None, None, None, None]]}}
    (row,) = compare(other, mine)
    assert row["same"] == 1 and row["first"] == {"layer": "rank1/l1", "index": 1, "differ": ["q", "k", "v", "out"]}


# Inductor as far as the recorder sees it: the namespace its compiled code calls matrix products through, filled
# by the module that registers them. The stand-in product is elementwise (enough to give each call an output).
INDUCTOR = {
    "torch/__init__.py": "class cuda:\n    is_available = staticmethod(lambda: False)\n",
    "torch/_inductor/__init__.py": "",
    "torch/_inductor/select_algorithm.py": "import types\nextern_kernels = types.SimpleNamespace()\n",
    "torch/_inductor/kernel/__init__.py": "",
    "torch/_inductor/kernel/mm.py": textwrap.dedent("""
        from torch._inductor.select_algorithm import extern_kernels
        def mm(a, b, out=None):
            out[:] = [x * y for x, y in zip(a, b)]
            return out
        def addmm(bias, a, b, out=None):
            out[:] = [c + x * y for c, x, y in zip(bias, a, b)]
            return out
        extern_kernels.mm, extern_kernels.addmm = mm, addmm
    """),
}

# A compiled model's step of 3 tokens: the first layer's attention, two products after it (the second one's
# weight differs where DIFFER says), the second layer's attention.
PRODUCTS = """
import os, sys
import foundry_attention_digests as digests

digests.fingerprint = lambda t: None if t is None else [len(t), sum(t), sum((i + 1) * x for i, x in enumerate(t))]
from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl
import torch._inductor.kernel.mm
from torch._inductor.select_algorithm import extern_kernels

class T(list):
    shape = property(lambda self: (len(self), 1))
class Layer:
    def __init__(self, name): self.layer_name = name
class Meta:
    num_actual_tokens = 3

print("wrapped:", hasattr(extern_kernels.mm, "__wrapped__"), hasattr(extern_kernels.addmm, "__wrapped__"))
impl = FlashAttentionImpl()
os.makedirs(sys.argv[1], exist_ok=True)
open(os.path.join(sys.argv[1], "recording"), "w").close()
ones = T([1, 1, 1])
x = impl.forward(Layer("model.layers.0.self_attn.attn"), T([1, 2, 3]), ones, ones, None, Meta(), T([0] * 3))
h = extern_kernels.mm(T(x), T([2, 2, 2]), out=T([0] * 3))
w = [3, 3, 3] if os.environ.get("DIFFER") != "weight" else [3, 3, 4]
h = extern_kernels.addmm(T([1, 1, 1]), h, T(w), out=T([0] * 3))
print("product", h)
impl.forward(Layer("model.layers.1.self_attn.attn"), T(h), T([1, 1, 1]), T([1, 1, 1]), None, Meta(), T([0] * 3))
"""


def test_the_compiled_models_matrix_products_are_fingerprinted_and_name_where_two_runs_part(tmp_path: Path) -> None:
    """Inductor's products between two attentions: each recorded as the i-th after its layer's attention, with its
    input and output; a product that got the same input and gave another output is named, with "out" alone."""
    for name, text in INDUCTOR.items():
        (tmp_path / "engine" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "engine" / name).write_text(text)
    runs = {}
    for run, differ in (("a", ""), ("b", "weight")):
        _engine(tmp_path, tmp_path / "scratch")  # writes the backend's package (its own records apart)
        (tmp_path / "program.py").write_text(textwrap.dedent(PRODUCTS))
        variables = {**os.environ, **env(tmp_path / run, str(tmp_path / "engine")), "DIFFER": differ}
        done = subprocess.run([sys.executable, str(tmp_path / "program.py"), str(tmp_path / run)], env=variables,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0 and "stopped" not in done.stderr, done.stderr
        assert "wrapped: True True" in done.stdout
        runs[run] = (read(tmp_path / run), done.stdout)
    (a, out_a), (b, out_b) = runs["a"], runs["b"]
    assert "product [67, 127, 187]" in out_a and "product [67, 127, 249]" in out_b  # the engine's own answers
    layers = [row[1] for row in a["sequence"]]
    assert layers == ["model.layers.0.self_attn.attn", "model.layers.0.self_attn.attn/mm0",
                      "model.layers.0.self_attn.attn/addmm1", "model.layers.1.self_attn.attn"]  # fmt: skip
    mm0 = a["sequence"][1]
    assert mm0[2:7] == [None, None, None, _short([3, 126, 292]), _short([3, 63, 146])]  # out, then in: q*10 + k
    calls = compare_calls(b, a)
    assert calls is not None and calls["first"] == {
        "index": 2, "n": 3, "layer": "model.layers.0.self_attn.attn/addmm1", "differ": ["out"]}  # fmt: skip
    assert calls["own"] == 1  # the same input, another output: the product's own doing


def test_the_site_folder_goes_first_on_the_engines_path_once_with_the_stack_sampler_or_without() -> None:
    assert env(Path("/d"), "/checkout")["PYTHONPATH"] == f"{SITE}:/checkout"
    assert env(Path("/d"), f"{SITE}:/checkout")["PYTHONPATH"] == f"{SITE}:/checkout"
    assert env(Path("/d"), "")["FOUNDRY_BENCH_DIGESTS"] == "/d"


@pytest.mark.slow
def test_bench_digests_has_the_engines_record_once_they_serve(fake_vllm: None, tmp_path: Path) -> None:
    """The wiring end to end, over the stand-in vLLM (which runs no attention): each run's folder gets the start
    file once the engine serves, each run's document its fingerprints, and the report says none were recorded."""
    from foundry_bench.vllm import run_vllm_bench
    from foundry_bench.vllm.report import render
    from tests.support.benchvllm import tokens_only

    doc = run_vllm_bench(tokens_only(tmp_path, api="serve", modes=("save", "native", "load"), digests=True))
    results = doc["results"]
    assert all("error" not in r for r in results.values()), {m: r.get("error") for m, r in results.items()}
    assert all(r["digests"] == {"calls": 0, "processes": 0, "sequence": []} for r in results.values())
    assert sorted(p.parent.name for p in tmp_path.rglob("recording")) == [
        "digests-load",
        "digests-native",
        "digests-save",
    ]
    assert "Attention layer by layer (--digests): native, warm caches recorded no call" in render(doc)
