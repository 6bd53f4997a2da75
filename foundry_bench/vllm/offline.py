"""The child process behind the vLLM benchmark's ``LLM()`` engine: ``LLM(...)`` built once, then answering
the benchmark's requests (foundry_bench/serving/protocol.py).

    python -m foundry_bench.vllm.offline '{"model": "...", ...LLM kwargs}'
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from foundry_bench.serving.logprobs import canonical
from foundry_bench.serving.protocol import answer_requests, say

__all__ = ["main"]


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    import torch

    t_torch = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams

    t_vllm = time.perf_counter()
    kwargs = json.loads(argv[0])
    llm = LLM(**kwargs)
    t_llm = time.perf_counter()
    say(
        {
            "ready": {
                "import_torch_s": t_torch - t0,
                "import_s": t_vllm - t0,
                "llm_init_s": t_llm - t_vllm,
                "ready_s": t_llm - t0,
                "vllm": vllm.__version__,
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(),
            }
        }
    )

    def generate(prompts: list[list[int]], max_tokens: int, logprobs: int) -> tuple[list[list[int]], list[Any] | None]:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=logprobs or None)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        tokens = [list(o.outputs[0].token_ids) for o in outs]
        if not logprobs:
            return tokens, None
        # vLLM's per position {token_id: Logprob}: the top-k and the sampled token
        top = [[canonical((t, lp.logprob) for t, lp in pos.items()) for pos in o.outputs[0].logprobs] for o in outs]
        return tokens, top

    answer_requests(generate, torch.cuda.synchronize)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
