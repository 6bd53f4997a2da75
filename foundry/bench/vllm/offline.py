"""The child process behind the vLLM benchmark's ``LLM()`` engine: ``LLM(...)`` built once, then answering
the benchmark's requests (foundry/bench/serving/protocol.py).

    python -m foundry.bench.vllm.offline '{"model": "...", ...LLM kwargs}'
"""

from __future__ import annotations

import json
import sys
import time

from foundry.bench.serving.protocol import answer_requests, say

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

    def generate(prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    answer_requests(generate, torch.cuda.synchronize)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
