"""Build the fake CUDA driver (``libcuda.so.1``) used by GPU-less tests.

Usage as a script::

    python tests/fakecuda/build.py OUT_DIR [--sanitize]

From Python::

    from tests.fakecuda.build import build_fake_cuda
    lib = build_fake_cuda(tmp_path)          # -> tmp_path / "libcuda.so.1"

Run programs with ``LD_LIBRARY_PATH=OUT_DIR`` so that ``dlopen("libcuda.so.1")`` finds the fake.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SRC_DIR = Path(__file__).resolve().parent
FORMAT_H_DIR = SRC_DIR.parents[1] / "csrc" / "include"  # format.h: the fatbin layout, defined once
LIB_NAME = "libcuda.so.1"


def _candidates() -> list[Path]:
    out: list[Path] = []
    env = os.environ.get("FOUNDRY_CUDA_INCLUDE_DIR")
    if env:
        out.append(Path(env))
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            out.append(Path(loc) / "cu13" / "include")
            out.append(Path(loc) / "cuda_runtime" / "include")
    cuda_home = os.environ.get("CUDA_HOME")
    if cuda_home:
        out.append(Path(cuda_home) / "include")
    out.append(Path("/usr/local/cuda/include"))
    out.append(Path("/usr/local/cuda-13.0/include"))
    return out


def find_cuda_include() -> Path:
    """Directory holding the real ``cuda.h`` (CUDA 13.0 headers)."""
    for cand in _candidates():
        if (cand / "cuda.h").is_file():
            return cand
    raise FileNotFoundError(
        "cuda.h not found. Install it with 'pip install nvidia-cuda-runtime==13.0.*' or set "
        "FOUNDRY_CUDA_INCLUDE_DIR to the directory that holds cuda.h "
        f"(searched: {', '.join(str(c) for c in _candidates())})"
    )


def sources() -> list[Path]:
    return sorted(SRC_DIR.glob("*.c"))


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise FileNotFoundError("no C compiler found (set CC or install gcc)")
    return cc


def build_fake_cuda(out_dir: Path, sanitize: bool = False, defines: Sequence[str] = ()) -> Path:
    """Compile ``tests/fakecuda/*.c`` into ``out_dir/libcuda.so.1``; returns its path.

    Rebuilds only when a source or header is newer than the output, or the flags differ. With
    ``sanitize`` the library is built with AddressSanitizer and UBSan (the loading process then needs
    ``LD_PRELOAD`` of libasan, or to be built with ASan itself). ``defines`` are preprocessor macros
    that build a driver lacking something (``FAKECUDA_NO_BATCH_COPY``: no ``cuMemcpyBatchAsync_v2``,
    as a driver older than CUDA 13.0).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / LIB_NAME
    srcs = sources()
    deps = [*srcs, *SRC_DIR.glob("*.h"), FORMAT_H_DIR / "format.h", Path(__file__)]
    stamp = out_dir / ".fakecuda-build-flags"
    flags_tag = " ".join(["sanitize" if sanitize else "plain", *defines])
    if (
        out.exists()
        and stamp.exists()
        and stamp.read_text() == flags_tag
        and all(d.stat().st_mtime <= out.stat().st_mtime for d in deps)
    ):
        return out
    include = find_cuda_include()
    cmd = [
        _compiler(), "-shared", "-fPIC", "-O1", "-g", "-Wall", "-std=gnu11",
        "-fvisibility=hidden", "-D_GNU_SOURCE", "-D__CUDA_API_VERSION_INTERNAL",
        f"-Wl,-soname,{LIB_NAME}", "-Wl,-Bsymbolic", "-Wl,--no-undefined",
        f"-I{include}", f"-I{FORMAT_H_DIR}",
    ]  # fmt: skip
    if sanitize:
        cmd += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    cmd += [f"-D{name}" for name in defines]
    tmp = out_dir / f".{LIB_NAME}.tmp{os.getpid()}"
    cmd += ["-o", str(tmp), *map(str, srcs), "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"building the fake CUDA driver failed:\n{' '.join(cmd)}\n{proc.stderr}")
    os.replace(tmp, out)
    stamp.write_text(flags_tag)
    return out


def runtime_env(lib_dir: Path) -> dict[str, str]:
    """Extra environment a process needs to load the library in ``lib_dir``: for a sanitized build,
    LD_PRELOAD of the compiler's libasan (the Python interpreter is not built with ASan) and
    sanitizer options that make any report fatal. Empty for a plain build."""
    stamp = Path(lib_dir) / ".fakecuda-build-flags"
    if not stamp.exists() or stamp.read_text().split()[:1] != ["sanitize"]:
        return {}
    proc = subprocess.run([_compiler(), "-print-file-name=libasan.so"], capture_output=True, text=True)
    libasan = proc.stdout.strip()
    return {
        "LD_PRELOAD": os.path.realpath(libasan),
        # Python itself "leaks" at exit; leak checking would only report the interpreter.
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--sanitize", action="store_true", help="build with ASan + UBSan")
    args = ap.parse_args(argv)
    print(build_fake_cuda(args.out_dir, sanitize=args.sanitize))
    return 0


if __name__ == "__main__":
    sys.exit(main())
