"""LOAD computes Triton's cache key of itself on a thread of its own as it starts (foundry/integration/shared/
tritonkey.py), where the engine imported Triton and Triton keeps the key; it imports nothing itself."""

from __future__ import annotations

import functools
import sys
import types

import pytest

from foundry.integration.shared import tritonkey


def _triton(monkeypatch: pytest.MonkeyPatch, home: str, cached: bool, fails: bool = False) -> list[int]:
    calls: list[int] = []

    def triton_key() -> str:
        calls.append(1)
        if fails:
            raise OSError("a source file is gone")
        return "key"

    module = types.ModuleType(home)
    module.triton_key = functools.lru_cache(triton_key) if cached else triton_key  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, home, module)
    return calls


def test_the_key_is_computed_once_on_a_thread_of_its_own_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    for home in tritonkey._HOMES:
        monkeypatch.delitem(sys.modules, home, raising=False)
    calls = _triton(monkeypatch, "triton.runtime.cache", cached=True)
    thread = tritonkey.prewarm()
    assert thread is not None and thread.name == "foundry-triton-key" and thread.daemon
    thread.join(10)
    assert calls == [1]
    assert sys.modules["triton.runtime.cache"].triton_key() == "key" and calls == [1]  # Triton's own call: kept
    assert tritonkey.prewarm() is None  # computed already


def test_nothing_is_done_without_triton_imported_or_a_key_triton_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    for home in tritonkey._HOMES:
        monkeypatch.delitem(sys.modules, home, raising=False)
    assert tritonkey.prewarm() is None
    assert "triton.runtime.cache" not in sys.modules  # nothing imported
    calls = _triton(monkeypatch, "triton.compiler.compiler", cached=False)  # recomputed by Triton each time
    assert tritonkey.prewarm() is None and calls == []


def test_a_key_that_fails_is_left_to_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    for home in tritonkey._HOMES:
        monkeypatch.delitem(sys.modules, home, raising=False)
    calls = _triton(monkeypatch, "triton.compiler.compiler", cached=True, fails=True)
    thread = tritonkey.prewarm()
    assert thread is not None
    thread.join(10)
    assert calls == [1] and not thread.is_alive()
    with pytest.raises(OSError, match="a source file is gone"):  # Triton's own call says what fails
        sys.modules["triton.compiler.compiler"].triton_key()
