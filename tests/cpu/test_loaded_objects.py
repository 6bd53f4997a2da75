"""``foundry.loaded_shared_objects``: the shared objects loaded into this process under given prefixes, read from
the dynamic linker's list by libfoundry (foundry/native/loaded.py), on copies of a real shared object loaded with
``dlopen`` here."""

from __future__ import annotations

import _ctypes
import ctypes
import shutil
from pathlib import Path

import pytest

import foundry
from foundry.native import loaded


def _load(paths: list[Path]) -> list[ctypes.CDLL]:
    handles = []
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_ctypes.__file__, path)
        handles.append(ctypes.CDLL(str(path)))
    return handles


def test_objects_under_each_prefix_are_named_in_load_order_and_others_left_out(tmp_path: Path) -> None:
    a, b, other = tmp_path / "a", tmp_path / "b", tmp_path / "other"
    paths = [b / "m1" / "one.so", a / "m2" / "two.so", other / "three.so", a / "m3" / "four.so"]
    handles = _load(paths)
    try:
        got = foundry.loaded_shared_objects((f"{a}/", f"{b}/"))
        assert got == [str(paths[0]), str(paths[1]), str(paths[3])]
        assert foundry.loaded_shared_objects((f"{tmp_path}/none/",)) == []
        assert foundry.loaded_shared_objects(("", f"{other}/")) == [str(paths[2])]  # an empty prefix names nothing
    finally:
        for handle in handles:
            _ctypes.dlclose(handle._handle)
    assert foundry.loaded_shared_objects((f"{tmp_path}/",)) == []  # closed: gone from the list


def test_a_list_longer_than_the_first_buffer_is_read_again_at_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loaded, "_FIRST_CAP", 16)
    paths = [tmp_path / f"module-with-a-long-name-{i:02d}" / "lib.so" for i in range(12)]
    handles = _load(paths)
    try:
        assert foundry.loaded_shared_objects((f"{tmp_path}/",)) == [str(p) for p in paths]
    finally:
        for handle in handles:
            _ctypes.dlclose(handle._handle)


def test_names_come_from_the_linkers_list_in_one_call_to_libfoundry(monkeypatch: pytest.MonkeyPatch) -> None:
    """One foreign call, made without the GIL (a ctypes callback per object would take it back per object)."""
    calls = []
    real = loaded.native()

    class Counting:
        def fdy_loaded_objects(self, *args: object) -> int:
            calls.append(args)
            return int(real.fdy_loaded_objects(*args))

    monkeypatch.setattr(loaded, "native", lambda: Counting())
    names = foundry.loaded_shared_objects(("/",))
    assert names and len(calls) == 1
    assert isinstance(real.fdy_loaded_objects, ctypes._CFuncPtr)
    assert real.fdy_loaded_objects._flags_ & ctypes._FUNCFLAG_PYTHONAPI == 0  # a CDLL function: the GIL let go
