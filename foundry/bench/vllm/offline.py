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
from typing import Any

__all__ = ["MARK", "main"]

MARK = "FDYBENCH "


def _say(doc: dict[str, Any]) -> None:
    sys.stdout.write(MARK + json.dumps(doc) + "\n")
    sys.stdout.flush()


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
    _say(
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
    for line in sys.stdin:
        if not line.strip():
            break
        request = json.loads(line)
        params = SamplingParams(temperature=0.0, max_tokens=request["max_tokens"], ignore_eos=True)
        prompts = [{"prompt_token_ids": p} for p in request["prompts"]]
        torch.cuda.synchronize()
        t = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - t
        _say({"tokens": [list(o.outputs[0].token_ids) for o in outs], "seconds": seconds})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
