"""Everything Foundry keeps for the life of a process is registered in foundry._state: it can be listed,
reset as a whole, and a forked child starts fresh (except what is configuration)."""

from __future__ import annotations

import gc
import os
import threading

import pytest

from foundry import _state
from foundry.load.source import read_meta_cached
from foundry.save import gc_paused
from foundry.trust import configured_key, set_signing_key

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def _in_child(check: object) -> int:
    """Runs ``check()`` in a forked child; returns its exit status (0: every assertion held)."""
    pid = os.fork()
    if pid == 0:
        try:
            check()  # type: ignore[operator]
        except BaseException:
            os._exit(1)
        os._exit(0)
    return os.waitpid(pid, 0)[1]


def test_every_owner_registers_its_state_once() -> None:
    import foundry.kernels
    import foundry.load
    import foundry.region
    import foundry.save  # noqa: F401

    names = set(_state.states())
    assert {"trust.signing", "region", "region.restored", "kernels", "save", "save.gc_pause"} <= names
    assert {"load.sources", "load.applied", "load.builders"} <= names
    with pytest.raises(ValueError, match="declared twice"):
        _state.ProcessState("save", dict)


def test_reset_all_drops_every_piece(tmp_path: os.PathLike[str]) -> None:
    set_signing_key(b"k" * 32)
    assert configured_key() is not None
    _state.reset_all()
    assert configured_key() is None
    assert not any(s.created for s in _state.states().values() if s.name != "trust.signing")


def test_a_forked_child_starts_fresh_but_keeps_the_configured_key(tmp_path: os.PathLike[str]) -> None:
    from tests.support.samples import write_sample_archive

    write_sample_archive(tmp_path)
    key = set_signing_key(b"s" * 32)
    read_meta_cached(os.path.join(tmp_path, "graph_0.json"))
    assert _state.states()["load.sources"].created

    def child() -> None:
        assert configured_key() == key  # configuration survives the fork
        assert not _state.states()["load.sources"].created  # caches do not
        read_meta_cached(os.path.join(tmp_path, "graph_0.json"))  # and work afresh, with fresh locks

    try:
        assert _in_child(child) == 0
    finally:
        set_signing_key(None)


def _collector_is_on() -> None:
    assert gc.isenabled()


def test_a_fork_inside_another_threads_gc_pause_gives_the_child_its_collector_back() -> None:
    assert gc.isenabled()
    inside, leave = threading.Event(), threading.Event()

    def saver() -> None:
        with gc_paused():
            inside.set()
            leave.wait()  # no timeout: the pause must last until the test has forked, however long that takes

    t = threading.Thread(target=saver)
    t.start()
    assert inside.wait(60)
    try:
        assert not gc.isenabled()
        # The pausing thread does not exist in the child: its pause can never end there.
        assert _in_child(_collector_is_on) == 0
    finally:
        leave.set()
        t.join()
    assert gc.isenabled()


def test_a_fork_inside_the_forking_threads_own_pause_ends_with_it() -> None:
    def child() -> None:
        assert not gc.isenabled()  # still inside the pause the forking thread holds

    with gc_paused():
        assert _in_child(child) == 0
    assert gc.isenabled()
