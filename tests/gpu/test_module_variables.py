"""Module variables on the GPU (issue 12): a cupy RawModule's ``__constant__`` and ``__device__`` tables,
written from the host before capture and read by a captured kernel, replay bit-identically after LOAD
in a fresh process (foreground and background LOAD); a ``__device__`` pointer set from the host to
another module variable's address is refused at SAVE. The processes run tests/gpu/module_variables.py
under `foundry run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import run_mode

pytest.importorskip("cupy", reason="needs cupy (cupy-cuda13x) for RawModule")

SCRIPT = "tests/gpu/module_variables.py"


@pytest.fixture(scope="module")
def saved(artifacts: Path) -> tuple[Path, dict[str, Any]]:
    out = artifacts / "module_variables"
    return out, run_mode(SCRIPT, "save", out)


def test_host_written_tables_are_carried(saved: tuple[Path, dict[str, Any]]) -> None:
    _, result = saved
    assert result["saved"]
    assert result["formula"], "the native kernel did not read the host-written tables"
    assert result["carried"] == ["ctab", "dtab"]


def test_loaded_graph_reads_the_tables_bit_identically(saved: tuple[Path, dict[str, Any]]) -> None:
    out, _ = saved
    result = run_mode(SCRIPT, "load", out)
    assert result["same_output"]
    assert result["identical"] == [True, True], "outputs differ from the native replay (inputs of seed 0, 1)"


def test_background_load_reads_the_tables_bit_identically(saved: tuple[Path, dict[str, Any]]) -> None:
    out, _ = saved
    result = run_mode(SCRIPT, "loadbg", out)
    assert result["template"] == [True, True] and result["dedicated"] == [True, True]


def test_a_module_address_in_a_variable_is_refused_at_save(artifacts: Path, figures: dict[str, Any]) -> None:
    result = run_mode(SCRIPT, "refuse", artifacts / "module_variables")
    figures["module_address_refusal"] = {k: result.get(k) for k in ("error", "variable", "offset")}
    assert result["error"] == "ModuleAddressError", result
    assert "SaveError" in result["bases"] and "ModuleVariableError" in result["bases"]
    assert result["variable"] == "dptr" and result["offset"] == 0
    assert "inside module variable target" in result["message"]
    assert result["files"] == []
