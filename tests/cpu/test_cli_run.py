"""`foundry run`: a program started under Foundry's interposer (``LD_PRELOAD``), its arguments and exit status
passed through, preloads the user had kept, and a clear error where there is nothing to start. Each invoked as
``python -m foundry.cli`` in a subprocess on the fake CUDA driver."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.graphs import BASE
from tests.support.subproc import foundry_cli

CHILD = textwrap.dedent(
    """
    import json, os, sys
    from tests.support.fakecu import Cuda
    import foundry
    from foundry.native.lib import native
    cu = Cuda()
    foundry.set_allocation_region(0x700000000000, "1GB")   # only possible with the interposer loaded
    first = cu.malloc(1000)
    print(json.dumps({"argv": sys.argv[1:], "active": native().fdy_interposer_active(),
                      "preloaded": native().preloaded, "first": first,
                      "ld_preload": os.environ.get("LD_PRELOAD", "")}))
    sys.exit(int(sys.argv[1]))
    """
)


def test_run_starts_child_under_interposer_with_arguments_and_exit_code(fakecuda_dir: Path, foundry_lib: Path) -> None:
    p = foundry_cli("run", "--", sys.executable, "-c", CHILD, "7", "two words", "--flag", lib_dir=fakecuda_dir)
    assert p.returncode == 7, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["argv"] == ["7", "two words", "--flag"]
    assert out["active"] == 1 and out["preloaded"] is True
    assert out["first"] == BASE  # the region placed the allocation: the interposer is working
    assert out["ld_preload"].split(":")[0] == str(foundry_lib)


def test_run_passes_a_zero_exit_code_and_keeps_existing_preloads(fakecuda_dir: Path, foundry_lib: Path) -> None:
    code = "import os; print(os.environ['LD_PRELOAD'])"
    p = foundry_cli("run", sys.executable, "-c", code, lib_dir=fakecuda_dir)  # no "--" needed
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(foundry_lib)
    # A preload the user already had stays, behind libfoundry; libfoundry is not added twice.
    for before in ("libm.so.6", f"{foundry_lib}:libm.so.6", f"libm.so.6:{foundry_lib}"):
        p = foundry_cli("run", "--", sys.executable, "-c", code, lib_dir=fakecuda_dir, preload=before)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == f"{foundry_lib}:libm.so.6"


@pytest.mark.parametrize("args", [["run"], ["run", "--"]], ids=["nothing", "dashes-only"])
def test_run_without_command_fails_clearly(args: list[str]) -> None:
    p = foundry_cli(*args)
    assert p.returncode == 2
    assert "give the program to start" in p.stderr and "foundry run -- python app.py" in p.stderr


def test_run_of_missing_program_fails_clearly() -> None:
    p = foundry_cli("run", "--", "/nonexistent/program", "x")
    assert p.returncode == 127
    assert "cannot start '/nonexistent/program'" in p.stderr
