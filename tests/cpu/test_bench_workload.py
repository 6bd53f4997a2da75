"""What the serving benchmarks ask and of which models, engine-neutral (foundry_bench/serving): the prompts, each
prefill measurement's own, and the shapes the runs build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from foundry_bench.vllm import VllmBenchConfig


def test_prompts_stay_inside_a_small_vocabulary() -> None:
    from foundry_bench.serving.shapes import MATRIX, SHAPES, prompt_vocab
    from foundry_bench.serving.workload import decode_request, prefill_request, token_requests

    assert set(MATRIX) <= set(SHAPES)
    vocab = prompt_vocab("mistral-small")
    assert vocab == SHAPES["mistral-small"]["vocab_size"] == 32000
    requests = [*token_requests([1, 8, 64], 4, vocab=vocab), decode_request(4, 4, vocab), prefill_request(500, vocab)]
    assert max(t for r in requests for p in r.prompts for t in p) < vocab
    # the Qwen3 shapes' prompts are the ones every earlier result was measured with
    assert token_requests([8], 4, vocab=prompt_vocab("qwen3-0.6b")) == token_requests([8], 4)


def test_each_prefill_measurement_asks_a_new_prompt_the_same_of_both_engines(tmp_path: Path) -> None:
    """A prefill asked twice of one prompt is answered from a prefix cache where the engine keeps one (SGLang's
    radix cache, on by default): the second call prefills one token. Each call draws the next prompt; the k-th
    call of native and of LOAD the same one, so that their times stay paired."""
    from foundry_bench.serving.runs import BenchRuns
    from foundry_bench.serving.stats import alternate
    from foundry_bench.serving.steady import prefill_asker

    asked: dict[str, list[tuple[int, ...]]] = {"native": [], "load": []}

    class Stub:
        def __init__(self, side: str) -> None:
            self.side = side

        def generate(self, request: Any, timeout: float) -> tuple[list[Any], float]:
            (prompt,) = request.prompts
            assert len(prompt) == 300 and request.max_tokens == 1
            asked[self.side].append(prompt)
            return [], 0.01

    class Runs(BenchRuns):
        engine, group = "vllm", "vllm.general_plugins"

    runs = Runs(VllmBenchConfig(out=tmp_path / "out", models=tmp_path / "models", archive=tmp_path / "arch"))
    ask = {side: prefill_asker(Stub(side), 300, runs.vocab, runs.wait_s) for side in asked}  # type: ignore[arg-type]
    alternate(ask, reps=3)  # a warm-up call of each, then three rounds
    assert asked["native"] == asked["load"] and len(set(asked["native"])) == 4


def test_the_headline_models_rehearsal_differs_from_it_in_its_layer_count_alone() -> None:
    """The eight-GPU run's Qwen3-235B-A22B shape and its four- and two-GPU rehearsals: the same layers, fewer."""
    from foundry_bench.serving.shapes import SHAPES

    full = SHAPES["qwen3-235b-a22b"]
    for name, layers in (("qwen3-235b-a22b-24l", 24), ("qwen3-235b-a22b-12l", 12)):
        rehearsal = SHAPES[name]
        assert (full["num_hidden_layers"], rehearsal["num_hidden_layers"], rehearsal["max_window_layers"]) == (
            94, layers, layers,
        )  # fmt: skip
        differ = {k for k in full.keys() | rehearsal.keys() if full.get(k) != rehearsal.get(k)}
        assert differ == {"num_hidden_layers", "max_window_layers"}
    assert full["architectures"] == ["Qwen3MoeForCausalLM"]
    assert (full["num_experts"], full["num_experts_per_tok"], full["moe_intermediate_size"]) == (128, 8, 1536)
