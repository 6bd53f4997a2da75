"""Building blocks for CPU-tier scenarios that run "an application" under Foundry's interposer.

A scenario is Python source run in a fresh subprocess (see the ``app`` / ``app_json`` fixtures in
tests/conftest.py). ``scenario(body)`` puts ``PRELUDE`` in front of ``body``: the ctypes harness,
the image builders, Foundry's region and registry APIs, and a few small helpers that report raw
CUresults instead of raising, so that a test can assert on exactly what the application saw.

Also here: compiling small helper shared objects (``build_shared_object``) and the sanitized build
of libfoundry (``build_sanitized_foundry``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

MIB = 1 << 20
GRAN = 2 * MIB  # the fake driver's mapping granularity
BASE = 0x700000000000  # far from where Linux maps libraries, and outside AddressSanitizer's shadow

# CUresult values the scenarios check against.
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_SUPPORTED = 801

# FDY_EV_* (csrc/include/foundry.h), spelled out independently of foundry.region.api.AllocKind so
# that a renumbering on either side is caught.
EV_ALLOC = 1
EV_FREE = 2
EV_ASYNC_ALLOC = 3
EV_ASYNC_FREE = 4
EV_VMM_RESERVE = 5
EV_VMM_FREE = 6
EV_VMM_MAP = 7
EV_VMM_UNMAP = 8
EV_PREALLOC = 9
EV_PREALLOC_FREE = 10
EV_RESTORE = 11
EV_CURSOR = 12
EV_REFUSED = 13

PRELUDE = f'''
import ctypes, dataclasses, json, os, struct, sys, threading
from tests.support.fakecu import (
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, DP, Cuda, call, fn, proc, proc_address, proc_symbol,
    symbol_address,
)
from tests.fakecuda import images
import foundry
from foundry import errors
from foundry.native.lib import native
from foundry.region import api as region
from foundry.kernels import registry

MIB = {MIB}
GRAN = {GRAN}
BASE = {BASE:#x}
PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM


def out(**kw):
    print(json.dumps(kw))


def events(first=0):
    """The allocation log as [kind, offset, size, span]."""
    return [[int(e.kind), e.offset, e.size, e.span] for e in region.allocation_events(first)]


def state():
    return dataclasses.asdict(region.region_state())


def in_region(p, base=BASE, size=1 << 30):
    return base <= p < base + size


def alloc_raw(n, name="cuMemAlloc_v2"):
    """(CUresult, pointer) of one allocation; the pointer variable starts at 0."""
    p = DP(0)
    r = fn(name)(ctypes.byref(p), n)
    return int(r), p.value


def free_raw(p):
    return int(fn("cuMemFree_v2")(p))


def address_range(p):
    b, s = DP(0), ctypes.c_size_t(0)
    r = fn("cuMemGetAddressRange_v2")(ctypes.byref(b), ctypes.byref(s), p)
    return [int(r), b.value, s.value]


def log_seq():
    return native().recent_error()[0]


def log_since(seq):
    """The newest message of the process-wide error log after sequence number seq ("" if none)."""
    return native().recent_error(seq)[1]


def error_of(func, *args, **kwargs):
    """[exception class name, message] of what func raised, or None."""
    try:
        func(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the test inspects whatever was raised
        return [type(exc).__name__, str(exc)]
    return None


def resolve(function):
    """(image index, name) of one CUfunction, through SAVE's batched lookup."""
    info = registry.describe_functions([function])[0]
    return (info.image, info.name)
'''


def scenario(body: str) -> str:
    """PRELUDE followed by ``body`` (dedented)."""
    return PRELUDE + "\n" + textwrap.dedent(body)


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def build_shared_object(source: str, out_dir: Path, name: str, flags: tuple[str, ...] = ()) -> Path:
    """Compiles C ``source`` into ``out_dir/name`` (skipped when an identical build exists)."""
    cc = compiler()
    if cc is None:
        raise FileNotFoundError("no C compiler (set CC or install gcc)")
    out_dir.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256((source + "\0" + " ".join(flags)).encode()).hexdigest()[:16]
    out = out_dir / name
    stamp = out_dir / f".{name}.key"
    if out.exists() and stamp.exists() and stamp.read_text() == key:
        return out
    src = out_dir / f"{name}.c"
    src.write_text(source)
    cmd = [cc, "-shared", "-fPIC", "-O1", "-D_GNU_SOURCE", *flags, "-o", str(out), str(src), "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {name} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    stamp.write_text(key)
    return out


def libasan_path() -> str | None:
    """The compiler's AddressSanitizer runtime, or None when it has none."""
    cc = compiler()
    if cc is None:
        return None
    try:
        proc = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = proc.stdout.strip()
    return os.path.realpath(path) if proc.returncode == 0 and os.path.isabs(path) and os.path.exists(path) else None


def build_sanitized_foundry(build_dir: Path) -> Path:
    """libfoundry.so built with AddressSanitizer + UBSan (CMake option FOUNDRY_SANITIZE)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise FileNotFoundError("cmake is not installed")
    configure = [cmake, "-S", str(REPO_ROOT), "-B", str(build_dir), "-DFOUNDRY_SANITIZE=ON",
                 "-DCMAKE_BUILD_TYPE=Debug"]  # fmt: skip
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    for cmd in (configure, [cmake, "--build", str(build_dir), "-j", str(os.cpu_count() or 2)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    lib = build_dir / "libfoundry.so"
    if not lib.is_file():
        raise FileNotFoundError(f"the sanitized build produced no {lib}")
    return lib
