"""``python -m sglang.launch_server --model-path M --port P ...`` of the stand-in SGLang: /health, then
/generate with ``input_ids``."""

from __future__ import annotations

import sys
from typing import Any

from _fakeengine import serve_http

from sglang import answer, start_up


def flags(argv: list[str]) -> dict[str, Any]:
    """``--name value`` and bare ``--flag`` as a dict of Engine keyword names."""
    out: dict[str, Any] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else True
            out[arg[2:].replace("-", "_")] = value
    return out


def generate(request: dict[str, Any]) -> object:
    asks = {k: request[k] for k in ("return_logprob", "top_logprobs_num") if k in request}
    outs = answer(request["input_ids"], request["sampling_params"], **asks)
    return outs if isinstance(request["input_ids"][0], list) else outs[0]


def main() -> None:
    settings = flags(sys.argv[1:])
    assert "model_path" in settings and settings.get("skip_tokenizer_init") is True, settings
    start_up(settings)
    serve_http(int(settings["port"]), generate)


if __name__ == "__main__":
    main()
