"""The tvm-ffi JIT module cache as Foundry packs and points at it (foundry/integration/shared/tvmcache.py), on
files and a process map of the test's own making."""

from __future__ import annotations

from pathlib import Path

from foundry.integration.shared import tvmcache


def _maps(tmp_path: Path, *paths: Path | str) -> Path:
    lines = [f"7f00000{i:05x}000-7f00000{i:05x}fff r--p 00000000 08:01 {i} {p}" for i, p in enumerate(paths)]
    maps = tmp_path / "maps"
    maps.write_text("\n".join([*lines, "7ffd0000-7ffd1000 rw-p 00000000 00:00 0 [stack]", ""]))
    return maps


def test_only_loaded_shared_objects_one_folder_deep_in_the_cache_are_packed(tmp_path: Path) -> None:
    cache = tmp_path / "tvm-ffi"
    module = cache / "sgl_kernel_jit_norm__arch_sm90__tvmffi_0.1.11"
    module.mkdir(parents=True)
    (module / "sgl_kernel_jit_norm.so").write_bytes(b"\x7fELF")
    (module / "cuda_0.o").write_bytes(b"obj")  # an object file: not what SGLang loads
    deeper = module / "sub"
    deeper.mkdir()
    (deeper / "x.so").write_bytes(b"\x7fELF")
    unloaded = cache / "sgl_kernel_jit_other__arch_sm90__tvmffi_0.1.11"
    unloaded.mkdir()
    (unloaded / "sgl_kernel_jit_other.so").write_bytes(b"\x7fELF")
    link = cache / "linked"
    link.mkdir()
    (link / "l.so").symlink_to(module / "sgl_kernel_jit_norm.so")
    elsewhere = tmp_path / "lib.so"
    elsewhere.write_bytes(b"\x7fELF")
    maps = _maps(tmp_path, module / "sgl_kernel_jit_norm.so", module / "cuda_0.o", deeper / "x.so", link / "l.so",
                 elsewhere, f"{cache}/gone__arch/gone.so (deleted)")  # fmt: skip
    got = tvmcache.files(cache, maps)
    assert got == {f"{module.name}/sgl_kernel_jit_norm.so": module / "sgl_kernel_jit_norm.so"}
    assert tvmcache.activity(maps) == 0  # the default cache (this test's HOME) holds none of them


def test_without_proc_nothing_is_packed(tmp_path: Path) -> None:
    assert tvmcache.files(tmp_path, tmp_path / "no-maps") == {}


def test_the_cache_directory_follows_tvm_ffis_switch(tmp_path: Path) -> None:
    assert tvmcache.cache_dir({"TVM_FFI_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert tvmcache.cache_dir({"HOME": "/h"}).name == "tvm-ffi"


def test_load_links_the_machines_own_modules_into_the_copy_and_keeps_the_archives(tmp_path: Path) -> None:
    copy, own = tmp_path / "copy", tmp_path / "own"
    (copy / "both").mkdir(parents=True)
    (own / "both").mkdir(parents=True)
    (own / "mine").mkdir()
    (own / "stray-file").write_text("not a module folder")
    assert tvmcache.point(copy, own) == {"TVM_FFI_CACHE_DIR": str(copy)}
    assert (copy / "mine").is_symlink() and (copy / "mine").resolve() == (own / "mine").resolve()
    assert not (copy / "both").is_symlink()  # the archive's module is the one used
    assert not (copy / "stray-file").exists()
    assert tvmcache.point(copy, tmp_path / "no-cache-here") == {"TVM_FFI_CACHE_DIR": str(copy)}
