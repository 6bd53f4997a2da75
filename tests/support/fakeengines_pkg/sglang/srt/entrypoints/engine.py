"""``sglang.srt.entrypoints.engine.Engine`` of the stand-in SGLang."""

from __future__ import annotations

from typing import Any

from sglang import answer, start_up


class Engine:
    def __init__(self, **kwargs: Any) -> None:
        assert "model_path" in kwargs and kwargs.get("skip_tokenizer_init") is True, kwargs
        start_up(kwargs)

    def generate(
        self, input_ids: list[list[int]], sampling_params: dict[str, Any], **logprob_args: Any
    ) -> list[dict[str, Any]]:
        return answer(input_ids, sampling_params, **logprob_args)

    def shutdown(self) -> None:
        print("INFO the engine shut down", flush=True)
