"""SAVE's and LOAD's module-variable lookups in one native call (``foundry.native.module_globals``,
``fdy_module_globals``) on the fake driver: each name's address and size as the driver's own lookup gives
them, None for a name the loaded code does not define, and a driver failure named by its variable."""

from __future__ import annotations

from pathlib import Path

from tests.support.fakecuda_helpers import run

BODY = """
from foundry.errors import DriverError
from foundry.native.driver import module_globals
cu = Cuda()
img = make_cubin(["fk_fill_f32"], variables=[Variable("ctab", 64, "constant"), Variable("dval", 12)])
lib, mod = cu.load_library(img), cu.load_module(img)
in_lib = module_globals(lib, True, ["ctab", "absent", "dval"], [False, True, False])
in_mod = module_globals(mod, False, ["dval", "absent"], [False, False])
driver = [cu.global_address(lib, "ctab", library=True), cu.global_address(lib, "dval", library=True),
          cu.global_address(mod, "dval")]
try:
    module_globals(lib + 0x100000, True, ["ctab", "dval"], [False, False])
    refused = None
except DriverError as exc:
    refused = str(exc)
try:
    module_globals(lib, True, ["ctab"], [])
    mismatch = None
except ValueError as exc:
    mismatch = str(exc)
empty = module_globals(lib, True, [], [])
out(in_lib=in_lib, in_mod=in_mod, driver=driver, refused=refused, mismatch=mismatch, empty=empty)
"""


def test_variables_are_looked_up_in_one_call_as_the_driver_finds_them(fakecuda_dir: Path) -> None:
    r = run(fakecuda_dir, BODY, funcs=False)
    ctab, dval, dval_mod = (list(x) for x in r["driver"])
    assert r["in_lib"] == [ctab, None, dval] and ctab[1] == 64 and dval[1] == 12
    assert r["in_mod"] == [dval_mod, None] and dval_mod[0] != dval[0]  # each load has its own copy
    assert r["refused"] is not None and "ctab" in r["refused"] and "cuLibraryGetGlobal" in r["refused"]
    assert r["mismatch"] is not None and "1 names but 0 managed flags" in r["mismatch"]
    assert r["empty"] == []
