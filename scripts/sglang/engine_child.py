#!/usr/bin/env python3
"""The child process behind run_sglang.py's ``sglang.Engine``: the engine built once, then generate calls read
from stdin, one JSON object a line, answered on stdout with the protocol of foundry.bench.vllm.offline
(lines for the parent start with its ``MARK``; the rest of stdout is SGLang's log).

    python3 scripts/sglang/engine_child.py '{"model_path": "...", ...Engine kwargs}'

First ``MARK {"ready": {...}}`` with seconds for the imports and ``Engine()``; then for each request
``{"prompts": [[ids...], ...], "max_tokens": N}`` (greedy, ignore_eos) ``MARK {"tokens": [...], "seconds": s}``;
an empty line or the end of input shuts the engine down. SGLang spawns its scheduler, which imports this
file again as ``__mp_main__``: everything runs under the ``__main__`` guard.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from foundry.bench.vllm.offline import answer_requests, say

    t0 = time.perf_counter()
    import torch

    t_torch = time.perf_counter()
    import sglang
    from sglang.srt.entrypoints.engine import Engine

    t_import = time.perf_counter()
    engine = Engine(**json.loads(argv[0]))
    times = {"import_torch_s": t_torch - t0, "import_s": t_import - t0, "engine_init_s": time.perf_counter() - t_import}
    # No CUDA call in this process: the model runs in SGLang's scheduler process, and a context here would only
    # take memory and time that native SGLang's Engine process does not.
    say({"ready": {**times, "sglang": sglang.__version__, "torch": torch.__version__}})

    def generate(prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        params = {"temperature": 0.0, "max_new_tokens": max_tokens, "ignore_eos": True}
        outs = engine.generate(input_ids=prompts, sampling_params=params)
        return [list(o["output_ids"]) for o in (outs if isinstance(outs, list) else [outs])]

    answer_requests(generate, lambda: None)  # the engine answers when its scheduler is done
    engine.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
