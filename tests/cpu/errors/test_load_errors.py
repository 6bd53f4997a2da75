"""How LOAD fails: the exception type and a message that names the problem and the next step, for a
missing or mismatched region, other allocations, another machine, a damaged archive and a template
member whose template is gone or was saved again.

Every SAVE and every LOAD runs in its own process on the fake CUDA driver; the application is
tests/support/errors_app.py. SAVE failures: test_save_errors.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.archive_damage import (
    copy_archive,
    edit_stored,
    flip_byte,
    flip_stored,
    relist,
    store,
    stored,
    truncate,
    unbundle,
)
from tests.support.errors_app import (
    ALLOCS,
    KERNELS,
    N,
    Runner,
    expect_error,
    load_code,
    native_output,
)
from tests.support.graphs import BASE, prelude


def test_good_archive_loads_and_matches_native(run_app: Runner, archive: Path, good_archive: Any) -> None:
    """The baseline every failure below departs from."""
    r = run_app(load_code(archive, load_images=True))
    assert r["result"] == {"ok": None}
    assert r["runs"] == good_archive[1] == [native_output(0), native_output(1)]


# ------------------------------------------------------------------------------------ LOAD failures
def test_load_without_region_names_saves_base(run_app: Runner, archive: Path) -> None:
    r = run_app(load_code(archive, region=""))
    expect_error(r["result"], "RegionStateError", f"set_allocation_region({BASE:#x}", "same order")


def test_load_with_other_region_base_names_both(run_app: Runner, archive: Path) -> None:
    r = run_app(load_code(archive, region='foundry.set_allocation_region(0x7e0000000000, "1GB")'))
    expect_error(r["result"], "LayoutMismatchError", "0x7e0000000000", f"{BASE:#x}", "same base address")


def test_load_with_region_smaller_than_saves_use_names_the_size_needed(run_app: Runner, archive: Path) -> None:
    allocs = ALLOCS.replace('; buf("out", (1 << 21) + 16 * n)', "")  # fits a 4 MiB region; SAVE used 6 MiB
    r = run_app(load_code(archive, region='foundry.set_allocation_region(BASE, "4MB")', allocs=allocs))
    expect_error(r["result"], "LayoutMismatchError", "4194304", "at least 6291456")


@pytest.mark.parametrize(
    ("allocs", "offset"),
    [
        pytest.param(
            ALLOCS.replace('buf("a", 4 * n); buf("b", 8 * n)', 'buf("b", 8 * n); buf("a", 4 * n)'), 0x0, id="order"
        ),
        pytest.param(ALLOCS.replace('buf("b", 8 * n)', 'buf("b", 12 * n)'), 0x400, id="size"),  # a's 1 KiB before
    ],
)
def test_load_with_other_allocations_names_the_offset(run_app: Runner, archive: Path, allocs: str, offset: int) -> None:
    assert allocs != ALLOCS
    r = run_app(load_code(archive, allocs=allocs))
    expect_error(r["result"], "LayoutMismatchError", f"region offset {offset:#x}", "same order and sizes")


@pytest.mark.parametrize(
    ("env", "field", "saved", "here"),
    [
        ({"FAKECUDA_DEVICE_NAME": "Other GPU"}, "gpu_name", "'Fake GPU'", "'Other GPU'"),
        ({"FAKECUDA_SM_COUNT": "100"}, "sm_count", "132", "100"),
        ({"FAKECUDA_DRIVER_VERSION": "12080"}, "driver_version", "13000", "12080"),
        ({"FAKECUDA_CC": "8.0"}, "compute_capability", "9.0", "8.0"),
    ],
    ids=["gpu_name", "sm_count", "driver_version", "compute_capability"],
)
def test_load_on_other_machine_names_both_values_and_allow_mismatch_accepts(
    run_app: Runner, archive: Path, good_archive: Any, env: dict[str, str], field: str, saved: str, here: str
) -> None:
    r = run_app(load_code(archive), env=env)
    msg = expect_error(r["result"], "IdentityMismatchError", saved, here, f"allow_mismatch={{{field!r}}}")
    assert "ArchiveError" in r["result"]["bases"] and "Re-run SAVE" in msg
    r = run_app(load_code(archive, kwargs=f"{{'allow_mismatch': {{{field!r}}}}}"), env=env)
    assert r["result"] == {"ok": None} and r["runs"] == good_archive[1]


def _image(archive: Path) -> Path:
    (image,) = (archive / "images").glob("*.bin")
    return image


def _memory(archive: Path) -> Path:
    (mem,) = (archive / "memory").glob("*.bin")
    return mem


def _json_missing_key(archive: Path) -> None:
    path = archive / "g0.json"
    edit_stored(path, lambda d: d.pop("functions"))
    relist(path)  # as a forger would: a JSON the manifest does not list is not decoded


def _json_other_record(archive: Path) -> None:
    edit_stored(archive / "g0.json", lambda d: d["record"].update(sha256="0" * 64))


def _truncated(archive: Path, part: str, keep: int) -> None:
    json_bytes, container = stored(archive / "g0.json")
    if part == "json":
        store(archive / "g0.json", json_bytes=json_bytes[:keep])
    else:
        store(archive / "g0.json", container=container[:keep])


def _files(damage: Callable[[Path], object]) -> Callable[[Path], None]:
    """``damage`` to an archive that stores its graphs in their files (docs/FORMAT.md allows both)."""

    def apply(archive: Path) -> None:
        unbundle(archive)
        damage(archive)

    return apply


Damage = Callable[[Path], None]
DAMAGES: list[Any] = [
    pytest.param(
        lambda a: _image(a).unlink(), ["kernel image", "is missing", "copy the archive completely"], id="image-missing"
    ),
    pytest.param(lambda a: flip_byte(_image(a), 100), ["damaged", "Copy the archive again"], id="image-bitflip"),
    pytest.param(lambda a: truncate(_image(a), 64), ["damaged"], id="image-truncated"),
    # The graph's bytes in the archive's graph bundle, their only copy: a failure names the graph.
    pytest.param(
        lambda a: flip_stored(a / "g0.json", -9, "container"), ["graph 'g0'", "damaged"], id="bundled-record-bitflip"
    ),
    pytest.param(lambda a: _truncated(a, "container", 100), ["graph 'g0'", "truncated"], id="bundled-record-truncated"),
    pytest.param(
        lambda a: (a / "graph_bundle.bin").unlink(), ["graph 'g0'", "graph bundle", "is missing"], id="bundle-missing"
    ),
    pytest.param(
        lambda a: _truncated(a, "json", 200), ["graph 'g0'", "changed after the manifest"], id="bundled-json-truncated"
    ),
    pytest.param(lambda a: flip_byte(a / "graph_bundle.bin", 12), ["graph bundle", "holds"], id="bundle-count-changed"),
    pytest.param(_json_missing_key, ["functions"], id="json-missing-key"),
    pytest.param(_json_other_record, ["changed after the manifest was written"], id="json-other-record"),
    # The same damage to graph files.
    pytest.param(_files(lambda a: flip_byte(a / "g0.cugraph", -9)), ["g0.cugraph"], id="cugraph-bitflip"),
    pytest.param(_files(lambda a: truncate(a / "g0.cugraph", 100)), ["g0.cugraph"], id="cugraph-truncated"),
    pytest.param(_files(lambda a: (a / "g0.cugraph").unlink()), ["graph record", "is missing"], id="cugraph-missing"),
    pytest.param(_files(lambda a: truncate(a / "g0.json", 200)), ["g0.json"], id="json-truncated"),
    pytest.param(_files(_json_missing_key), ["functions"], id="files-json-missing-key"),
    pytest.param(lambda a: _memory(a).unlink(), ["state memory", "missing", "copy the archive"], id="memory-missing"),
    pytest.param(lambda a: flip_byte(_memory(a), 0), ["state memory", "damaged"], id="memory-bitflip"),
]


@pytest.mark.parametrize(("damage", "fragments"), DAMAGES)
def test_load_of_damaged_archive_raises_archive_corrupt(
    run_app: Runner, archive: Path, damage: Damage, fragments: list[str]
) -> None:
    damage(archive)
    r = run_app(load_code(archive))
    expect_error(r["result"], "ArchiveCorruptError", *fragments)


@pytest.mark.parametrize(
    ("damage", "fragments"),
    [
        pytest.param(lambda a: _image(a).unlink(), ["is missing", "copy the archive completely"], id="image-missing"),
        pytest.param(lambda a: flip_byte(_image(a), -1), ["damaged"], id="image-bitflip"),
        pytest.param(
            lambda a: truncate(a / "graph_manifest.json", 100), ["graph_manifest.json"], id="manifest-truncated"
        ),
    ],
)
def test_load_modules_and_libraries_refuses_damaged_archive(
    run_app: Runner, archive: Path, damage: Damage, fragments: list[str]
) -> None:
    damage(archive)
    r = run_app(load_code(archive, load_images=True))
    expect_error(r["result"], "ArchiveCorruptError", *fragments)


def test_load_modules_and_libraries_refuses_non_archive(run_app: Runner, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    r = run_app(load_code(tmp_path / "empty", load_images=True))
    expect_error(r["result"], "ArchiveError", "not a Foundry archive")


# ---------------------------------------------------------------------------- template members
FAMILY_SAVE = """
from foundry.save import save_graph
from foundry.save import save_graph_manifest
def graph(factor):
    cu.begin_capture(s); add()
    cu.launch(K["fk_scale_f32"], *full, [("ptr", B["out"]), (c_float, factor), (c_int, n)], stream=s)
    return cu.end_capture(s)
for name, factor in GRAPHS:
    save_graph(graph(factor), os.path.join(ARCH, name + ".json"), archive_dir=ARCH)
save_graph_manifest(ARCH)
emit(roles=[g.role.value for g in foundry.archive.read_manifest(ARCH).graphs])
"""


def family_code(arch: Path, graphs: list[tuple[str, float]]) -> str:
    head = 'foundry.set_allocation_region(BASE, "1GB")\n'
    return "\n".join([prelude(arch), "SAVE = True", head, ALLOCS, KERNELS, f"GRAPHS = {graphs!r}", FAMILY_SAVE])


def test_member_whose_template_is_missing_or_resaved_is_refused(run_app: Runner, tmp_path: Path) -> None:
    arch = tmp_path / "arch"
    r = run_app(family_code(arch, [("g1", 3.0), ("g0", 5.0)]))  # g0: a member of template g1
    assert r["roles"] == ["template", "member"]
    ok = run_app(load_code(arch))
    assert ok["result"] == {"ok": None}
    assert ok["runs"] == [[(float(i) + 10.0 * k + (2.0 - k)) * 5.0 for i in range(N)] for k in (0, 1)]
    # A later SAVE process re-saves only the template: the bundle that held the member is replaced, and the new
    # manifest lists the template only.
    resaved = copy_archive(arch, tmp_path / "resaved")
    run_app(family_code(resaved, [("g1", 7.0)]))
    r = run_app(load_code(resaved))
    expect_error(r["result"], "ArchiveCorruptError", "g0.json", "is missing")
    # Re-saved without a manifest: the new template's files lie beside the bundle that holds the committed one.
    stray = copy_archive(arch, tmp_path / "stray")
    run_app(family_code(stray, [("g1", 7.0)]).replace("save_graph_manifest(ARCH)", "pass"))
    r = run_app(load_code(stray))
    expect_error(r["result"], "ArchiveCorruptError", "g1.json", "beside the graph bundle", "saved after the manifest")
    # Graphs stored in their files: the new template is not the one the manifest lists, nor the member's.
    files = copy_archive(arch, tmp_path / "files")
    unbundle(files)
    run_app(family_code(files, [("g1", 7.0)]).replace("save_graph_manifest(ARCH)", "pass"))
    r = run_app(load_code(files))
    expect_error(r["result"], "ArchiveCorruptError", "g1.json", "changed after the manifest was written")
    (files / "graph_manifest.json").unlink()  # without a manifest, the template itself tells
    r = run_app(load_code(files))
    expect_error(r["result"], "ArchiveCorruptError", "g1.json", "different saves")
    # The template's record is gone.
    unbundle(arch)
    (arch / "g1.cugraph").unlink()
    r = run_app(load_code(arch))
    expect_error(r["result"], "ArchiveCorruptError", "g1.cugraph")
