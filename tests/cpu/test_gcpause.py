"""SAVE's pause of the cyclic collector: off inside, nested and from several threads, and as it
was afterwards, errors included."""

from __future__ import annotations

import gc
import threading

import pytest

from foundry.save import gc_paused


def test_off_inside_nested_and_restored_after_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
        raise ValueError("SAVE failed")
    assert gc.isenabled()


def test_a_collector_the_program_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_as_a_decorator_and_from_overlapping_threads() -> None:
    inside = threading.Barrier(3)
    seen: list[bool] = []

    @gc_paused()
    def save_one() -> None:
        inside.wait(60)  # all three are inside at once (the timeout only guards against a hang)
        seen.append(gc.isenabled())
        inside.wait(60)

    threads = [threading.Thread(target=save_one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [False, False, False]
    assert gc.isenabled()
