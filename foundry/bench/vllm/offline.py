"""The child process behind the benchmark's offline engine: ``LLM(...)`` built once, then generate calls
read from stdin, one JSON object a line, answered on stdout. Lines for the parent start with ``MARK``; the
rest of stdout is vLLM's log.

    python -m foundry.bench.vllm.offline '{"model": "...", ...LLM kwargs}'

First it prints ``MARK {"ready": {...}}`` with seconds since process start for the imports and ``LLM()``;
then for each request ``{"prompts": [[ids...], ...], "max_tokens": N}`` it prints ``MARK {"tokens": [...],
"seconds": s}``; an empty line or end of input ends it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["MARK", "answer_requests", "main", "say"]

MARK = "FDYBENCH "


def say(doc: dict[str, Any]) -> None:
    """One answer line for the parent."""
    sys.stdout.write(MARK + json.dumps(doc) + "\n")
    sys.stdout.flush()


def answer_requests(generate: Callable[[list[list[int]], int], list[list[int]]], sync: Callable[[], None]) -> None:
    """Answers the parent's requests read from stdin until an empty line or the end of input: for each
    ``{"prompts": ..., "max_tokens": N}``, ``generate(prompts, N)``'s tokens and the seconds it took (timed
    from ``sync()``, which waits for the device)."""
    for line in sys.stdin:
        if not line.strip():
            break
        request = json.loads(line)
        sync()
        t = time.perf_counter()
        tokens = generate(request["prompts"], request["max_tokens"])
        say({"tokens": tokens, "seconds": time.perf_counter() - t})


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
