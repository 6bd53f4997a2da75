"""The child process behind the SGLang benchmark's ``sglang.Engine``: the engine built once, then answering
the benchmark's requests (foundry_bench/serving/protocol.py) with greedy, ``ignore_eos`` generations of
``input_ids``.

    python -m foundry_bench.sglang.child '{"model_path": "...", ...Engine kwargs}'

SGLang spawns its scheduler, which imports this module again as ``__mp_main__``: everything runs under the
``__main__`` guard. No CUDA call is made in this process: the model runs in SGLang's scheduler process, and a
context here would take memory and time that native SGLang's Engine process does not.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from foundry_bench.serving.logprobs import canonical
from foundry_bench.serving.protocol import answer_requests, say

__all__ = ["main", "top_logprobs"]


def top_logprobs(outs: list[Any]) -> list[Any]:
    """SGLang's ``meta_info["output_top_logprobs"]`` (per position, ``(logprob, token_id, text)`` triples) of
    each answer, in the canonical form (foundry_bench/serving/logprobs.py)."""
    return [[canonical((t, lp) for lp, t, *_ in pos) for pos in o["meta_info"]["output_top_logprobs"]] for o in outs]


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    import torch

    t_torch = time.perf_counter()
    import sglang
    from sglang.srt.entrypoints.engine import Engine

    t_import = time.perf_counter()
    engine = Engine(**json.loads(argv[0]))
    t_engine = time.perf_counter()
    times = {"import_torch_s": t_torch - t0, "import_s": t_import - t0, "engine_init_s": t_engine - t_import}
    say({"ready": {**times, "ready_s": t_engine - t0, "sglang": sglang.__version__, "torch": torch.__version__}})

    def generate(prompts: list[list[int]], max_tokens: int, logprobs: int) -> tuple[list[list[int]], list[Any] | None]:
        params = {"temperature": 0.0, "max_new_tokens": max_tokens, "ignore_eos": True}
        asks: dict[str, Any] = {"return_logprob": True, "top_logprobs_num": logprobs} if logprobs else {}
        outs = engine.generate(input_ids=prompts, sampling_params=params, **asks)
        outs = outs if isinstance(outs, list) else [outs]
        return [list(o["output_ids"]) for o in outs], (top_logprobs(outs) if logprobs else None)

    answer_requests(generate, lambda: None)  # the engine answers when its scheduler is done
    engine.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
