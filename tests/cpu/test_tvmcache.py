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
    assert tvmcache.activity(maps) == ()  # the default cache (this test's HOME) holds none of them


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


def test_a_module_loaded_with_dlopen_is_found_in_the_linkers_list_under_the_cache_as_given_or_resolved(
    tmp_path: Path,
) -> None:
    """SAVE finds loaded modules in the dynamic linker's list (not the process map, which an engine's process
    makes slow to read): whether tvm-ffi loaded one by the cache's resolved path (a build) or by the path as
    configured (a module found built), and only once it is loaded."""
    from tests.support import fakejit

    real = tmp_path / "real-cache"
    real.mkdir()
    configured = tmp_path / "configured"
    configured.symlink_to(real, target_is_directory=True)
    found, built = (configured / f"sgl_kernel_jit_{m}__arch_sm90__tvmffi_0.1.11" for m in ("found", "built"))
    for module in (found, built):
        module.mkdir()
        (module / f"{module.name.split('__')[0]}.so").write_bytes(Path(fakejit._ctypes.__file__).read_bytes())
    assert tvmcache.files(configured) == {} and tvmcache.activity() == ()
    want = {}
    try:
        # a module found built, loaded by the cache's path as configured (through the link); one built now, by
        # the resolved path tvm-ffi's build returns
        for module, path in ((found, found), (built, real / built.name)):
            so = path / f"{module.name.split('__')[0]}.so"
            fakejit._LOADED.append(fakejit.ctypes.CDLL(str(so)))
            want[f"{module.name}/{so.name}"] = real / module.name / so.name
            assert tvmcache.files(configured) == want
    finally:
        fakejit.unload()
    assert tvmcache.files(configured) == {}  # closed: no longer loaded
