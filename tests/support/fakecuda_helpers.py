"""Shared pieces of the fake-driver test modules (tests/cpu/test_fakecuda_*.py): CUresult codes and ``run``.

Every scenario runs in a fresh subprocess with LD_LIBRARY_PATH pointing at the fake libcuda.so.1.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from foundry.native._abi import CudaResult
from tests.support.subproc import run_json

INVALID_VALUE = 1
OUT_OF_MEMORY = 2
NOT_INITIALIZED = 3
INVALID_IMAGE = 200
INVALID_CONTEXT = 201
INVALID_HANDLE = 400
LOSSY_QUERY = 402
NOT_FOUND = CudaResult.ERROR_NOT_FOUND
ILLEGAL_ADDRESS = 700
NOT_SUPPORTED = 801
CAPTURE_UNSUPPORTED = 900
CAPTURE_INVALIDATED = 901
CAPTURE_UNJOINED = 904
EXEC_UPDATE_FAILURE = 910
INVALID_CLUSTER_SIZE = 912

PRE = """
import ctypes, json, struct, sys
from ctypes import byref, c_float, c_int, c_uint, c_uint64, c_double, c_size_t, c_void_p, c_char_p
from tests.support.fakecu import *
from tests.fakecuda.images import *
def out(**kw):
    print(json.dumps(kw))
"""

ALL = [
    "fk_fill_f32", "fk_add_f32", "fk_axpy_f32", "fk_scale_f32", "fk_sum_f32", "fk_philox_f32",
    "fk_copy_bytes", "fk_cluster_add_f32", "fk_bigsmem_f32", "fk_struct_arg",
]  # fmt: skip

# Loads one cubin with every builtin and binds F[name] -> CUfunction.
FUNCS = f"""
cu = Cuda()
MOD = cu.load_module(make_cubin({ALL!r} + ["fk_unknown_kernel"]))
F = {{n: cu.module_function(MOD, n) for n in {ALL!r} + ["fk_unknown_kernel"]}}
"""


def run(lib_dir: Path, body: str, env: dict[str, str] | None = None, funcs: bool = True, prefix: str = "") -> Any:
    code = PRE + (FUNCS if funcs else "") + prefix + textwrap.dedent(body)
    return run_json(code, lib_dir=lib_dir, env=env)
