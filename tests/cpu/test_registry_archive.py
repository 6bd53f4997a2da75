"""A registry's kernels through an archive: the images one process recorded load in another one,
every kernel resolves there with its attributes restored, and racing loads of one image load it once."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fakecuda.images import image_size
from tests.support.scenarios import scenario

AppJson = Callable[..., Any]

FORMATS = {"fatbin": 1, "elf": 2, "ptx": 3}


SAVE_SIDE = """
from foundry.storage import write_image
cu = Cuda()
mod = cu.load_module(images.make_cubin(["fk_fill_f32", "fk_bigsmem_f32"]))
lib = cu.load_library(images.make_fatbin([("elf", images.make_cubin(["fk_fill_f32", "fk_scale_f32"]))]))
ptx = cu.load_module(images.make_ptx(["fk_add_f32"]))
big = cu.module_function(mod, "fk_bigsmem_f32")
registry.set_function_attrs(big, [96 * 1024, 25] + list(registry.function_attrs(big))[2:])
functions = [big, cu.module_function(mod, "fk_fill_f32"),
             cu.kernel_function(cu.library_kernel(lib, "fk_fill_f32")),
             cu.kernel_function(cu.library_kernel(lib, "fk_scale_f32")), cu.module_function(ptx, "fk_add_f32")]
refs, stored = [], {}
for f, info in zip(functions, registry.describe_functions(functions)):
    index, name = info.image, info.name
    rec = registry.recorded_images()[index]
    ref = write_image(ARCHIVE, registry.image_bytes(index), rec.format.name.lower())
    assert ref.sha256 == registry.image_hash(index)
    stored[ref.sha256] = [ref.bytes, ref.format.value]
    refs.append([ref.sha256, name, list(registry.function_attrs(f))])
out(refs=refs, stored=stored)
"""

LOAD_SIDE = """
from types import SimpleNamespace
from pathlib import Path
from foundry.load.build import load_images, resolve_functions
cu = Cuda()
REFS = json.loads(REFS_JSON)
load_images(Path(ARCHIVE), sorted({r[0] for r in REFS}))
meta = SimpleNamespace(functions=[SimpleNamespace(image=r[0], name=r[1], attrs=r[2]) for r in REFS])
functions = resolve_functions(meta)       # LOAD's own path: lookup + attribute restore
recs = registry.recorded_images()
res = {"restored": [[r.restored, r.kind, r.loaded] for r in recs],
       "hashes": [registry.image_hash(i) for i in range(len(recs))],
       "lookup_again": [registry.loaded_function(registry.KernelRef(r[0], r[1])) for r in REFS] == functions,
       "resolved": [[registry.image_hash(i.image), i.name] for i in registry.describe_functions(functions)],
       "attrs": [list(registry.function_attrs(f)) for f in functions]}
buf = cu.malloc(64)
cu.launch(functions[0], (1, 1, 1), (16, 1, 1), [("ptr", buf), (ctypes.c_int, 16)], shared=90 * 1024)
cu.launch(functions[2], (1, 1, 1), (4, 1, 1), [("ptr", buf), (ctypes.c_float, 4.5), (ctypes.c_int, 4)])
res["ran"] = cu.read_f32(buf, 6)
res["missing_image"] = error_of(registry.loaded_function, registry.KernelRef("0" * 64, "fk_fill_f32"))
res["missing_name"] = error_of(registry.loaded_function, registry.KernelRef(REFS[0][0], "no_such_kernel"))
load_images(Path(ARCHIVE), [REFS[0][0]])  # loading again loads nothing new
res["count_after_reload"] = len(registry.recorded_images())
# One image loaded by 8 threads at once (a foreground load racing the background loader) loads once.
import threading
key = REFS[0][0][::-1]  # another registry key for the same bytes, not loaded yet
data = (Path(ARCHIVE) / "images" / (REFS[0][0] + ".bin")).read_bytes()
gate, got = threading.Barrier(8), []
def racer():
    gate.wait()
    got.append(registry.load_image(key, bytearray(data)))
threads = [threading.Thread(target=racer) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
res["race"] = [len(set(got)), len(got), len(registry.recorded_images()) - res["count_after_reload"]]
# Several images in one native call: the one the driver refuses stops the rest, those before stay loaded.
keys = ["1" * 64, "2" * 64, "3" * 64]
res["batch_error"] = error_of(registry.load_images, [(keys[0], bytearray(data)), (keys[1], bytearray(64)),
                                                     (keys[2], bytearray(data))])
res["batch_loaded"] = [registry.is_loaded(k) for k in keys]
res["batch_again"] = error_of(registry.load_images, [(keys[0], bytearray(data)), (keys[2], bytearray(data))])
res["batch_loaded_again"] = [registry.is_loaded(k) for k in keys]
name = REFS[0][1]
refs = [registry.KernelRef(keys[0], name), registry.KernelRef(keys[0], "no_such_kernel"),
        registry.KernelRef(keys[2], name)]
res["lookups_error"] = error_of(registry.loaded_functions, refs)
res["looked_up"] = [registry.is_looked_up(r) for r in refs]
res["lookups_unloaded"] = error_of(registry.loaded_functions, [registry.KernelRef(keys[1], name)])
res["lookups_again"] = error_of(registry.loaded_functions, [refs[0], refs[2]])
res["looked_up_again"] = [registry.is_looked_up(r) for r in refs]
out(**res)
"""


def test_archived_images_resolve_every_kernel_and_restore_attributes_in_a_second_process(
    app_json: AppJson, tmp_path: Path
) -> None:
    archive = tmp_path / "hook_archive"
    saved = app_json(scenario(f"ARCHIVE = {str(archive)!r}\n" + SAVE_SIDE))
    files = sorted(p.name for p in (archive / "images").iterdir())
    assert files == sorted(f"{sha}.bin" for sha in saved["stored"])
    for sha, (size, fmt) in saved["stored"].items():
        data = (archive / "images" / f"{sha}.bin").read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha and len(data) == size == image_size(data)
        assert fmt in FORMATS
    assert len(saved["stored"]) == 3  # the module, the library and the PTX module

    refs = saved["refs"]
    assert refs[0][2][:2] == [96 * 1024, 25]
    loaded = app_json(scenario(f"ARCHIVE = {str(archive)!r}\nREFS_JSON = {json.dumps(refs)!r}\n" + LOAD_SIDE))
    n_images = len(saved["stored"])
    assert loaded["restored"] == [[True, "library", True]] * n_images  # LOAD loads every image as a library
    assert sorted(loaded["hashes"]) == sorted(saved["stored"])
    assert loaded["lookup_again"]
    assert loaded["resolved"] == [[sha, name] for sha, name, _ in refs]
    assert loaded["attrs"] == [attrs for _, _, attrs in refs]
    assert loaded["ran"][:4] == [4.5, 4.5, 4.5, 4.5] and loaded["ran"][4:] == [4.0, 5.0]
    assert loaded["missing_image"][0] == "KernelNotFoundError"
    assert "load_cuda_modules_and_libraries" in loaded["missing_image"][1]
    assert loaded["missing_name"][0] == "KernelNotFoundError" and "no_such_kernel" in loaded["missing_name"][1]
    assert loaded["count_after_reload"] == n_images
    assert loaded["race"] == [1, 8, 1], "one image loaded by racing threads must load once"
    # Batched loads and lookups: stopped by the first failure, which names its image or kernel; the work
    # before it is kept and registered, and a later call does only what is left.
    assert loaded["batch_error"][0] == "RegistryError" and "2" * 64 in loaded["batch_error"][1]
    assert loaded["batch_loaded"] == [True, False, False]
    assert loaded["batch_again"] is None and loaded["batch_loaded_again"] == [True, False, True]
    assert loaded["lookups_error"][0] == "KernelNotFoundError" and "no_such_kernel" in loaded["lookups_error"][1]
    assert loaded["looked_up"] == [True, False, False]
    assert loaded["lookups_unloaded"][0] == "KernelNotFoundError"
    assert "load_cuda_modules_and_libraries" in loaded["lookups_unloaded"][1]
    assert loaded["lookups_again"] is None and loaded["looked_up_again"] == [True, False, True]
