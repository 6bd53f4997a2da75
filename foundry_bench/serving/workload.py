"""What every engine process of the serving benchmarks (vLLM, SGLang) is asked, the same in each: token-ID
prompts (no tokenizer), greedy, ``ignore_eos``, so that tokens can be compared across processes and throughput
depends only on batch size and length."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Request", "decode_request", "prefill_request", "token_requests"]


@dataclass(frozen=True)
class Request:
    """One generate call: a batch of prompts, each continued greedily for ``max_tokens`` tokens; with
    ``logprobs``, the log-probabilities of that many most likely tokens at every generated position too."""

    prompts: tuple[tuple[int, ...], ...]
    max_tokens: int
    logprobs: int = 0
    # The prompts must start together, in one engine step, in every process: what is compared bit for bit is
    # then computed on the same batches (a server that takes them one by one may start on the first alone).
    together: bool = False

    @property
    def batch(self) -> int:
        return len(self.prompts)


VOCAB = 150000  # token IDs are drawn below this (and below the model's vocabulary: token_requests' ``vocab``)


def _prompt(rng: random.Random, length: int, vocab: int = VOCAB) -> tuple[int, ...]:
    return tuple(rng.randrange(100, vocab) for _ in range(length))


def token_requests(
    batches: list[int], max_tokens: int, seed: int = 0, logprobs: int = 0, vocab: int = VOCAB
) -> list[Request]:
    """Per batch size: prompts of 4..199 tokens (mixed lengths: a prefill that is not uniform, so that it runs the
    engine's prefill graphs), deterministic per (batch, seed, vocab). Their tokens, and with ``logprobs`` the
    top-``logprobs`` log-probabilities at each position, are what LOAD must reproduce exactly."""
    out = []
    for batch in batches:
        rng = random.Random(seed * 1000 + batch)
        prompts = tuple(_prompt(rng, 4 + (i * 37 + batch) % 196, vocab) for i in range(batch))
        out.append(Request(prompts, max_tokens, logprobs, together=True))
    return out


def decode_request(batch: int, steps: int, vocab: int = VOCAB) -> Request:
    """``batch`` prompts of 8 tokens continued for ``steps`` tokens: decode dominates the time."""
    rng = random.Random(7 + batch)
    return Request(tuple(_prompt(rng, 8, vocab) for _ in range(batch)), steps)


def prefill_request(length: int, vocab: int = VOCAB, index: int = 0) -> Request:
    """One prompt of ``length`` tokens and one new token: the time is the prefill's. Each ``index`` draws another
    prompt: asked twice for one prompt, an engine that caches prefixes (SGLang's radix cache, on by default)
    would answer the second from its cache and prefill one token."""
    return Request((_prompt(random.Random(11 + 7919 * index), length, vocab),), 1)
