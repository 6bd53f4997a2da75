"""One gate: LOAD and ``foundry verify`` apply one set of rules (foundry.gate), so they cannot disagree. Every
damaged or forged archive of the suite (tests/support/bad_archives.py) is fed to both: LOAD, run as an engine runs
it on the fake driver (its document, start-up, the graphs built and replayed), refuses each it reads with the
very message verify reports for it; what LOAD does not read in Python, its eager run (``foundry.load.preflight``)
refuses with verify's message; and what LOAD never reads, verify alone reports."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from foundry import _state
from foundry.archive import read_manifest
from foundry.errors import ArchiveError
from foundry.load import preflight
from foundry.schema import Identity
from foundry.trust import set_signing_key
from foundry.verify import verify_archive
from tests.cpu.test_roundtrip_fake_manifest import VARIANTS
from tests.support.bad_archives import CASES, DOCUMENT, NAMES, OTHER_GPU, Case, key_file, other_machine, with_document
from tests.support.bundles import save_once
from tests.support.graphs import prelude
from tests.support.subproc import run_json

# LOAD as an engine plugin runs it: its metadata (a document) first, start-up, then every graph built in the
# background and replayed. ``result``: {"ok": None}, or the archive's refusal (behind a background failure's
# report of it, its cause).
LOAD = """
from foundry import errors
from foundry.load import Loader
import foundry.trust
RESULT = None
def refused(exc):
    global RESULT
    while isinstance(exc, errors.LoadError) and exc.__cause__ is not None:
        exc = exc.__cause__
    RESULT = {"error": type(exc).__name__, "message": str(exc)}
if KEY:
    foundry.trust.set_signing_key(KEY)
try:
    foundry.read_archive_document(ARCH, DOCUMENT)
    foundry.load_cuda_modules_and_libraries(ARCH, wait=True)
    foundry.set_allocation_region(BASE, "1GB")
    exec(ALLOC, globals())
    p = Loader.start([os.path.join(ARCH, n + ".json") for n in NAMES], num_threads=2)
    p.wait_all()
    for i in range(len(NAMES)):
        p.wait_group(i).launch(0)
    cu.sync()
except Exception as exc:
    refused(exc)
emit(result=RESULT or {"ok": None})
"""


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory, fakecuda_dir: Path, foundry_lib: Path) -> tuple[Path, Identity]:
    """The archive every case damages a copy of, and the identity of the (fake) machine it was saved on."""
    arch, _ = save_once(tmp_path_factory.mktemp("gate") / "arch", fakecuda_dir, foundry_lib)
    with_document(arch)
    return arch, read_manifest(arch).identity


def _load(arch: Path, case: Case, key: Path | None, fakecuda_dir: Path, foundry_lib: Path) -> dict[str, Any]:
    code = "\n".join([
        prelude(arch),
        "SAVE = False",
        f"KEY = {str(key) if key else None!r}",
        f"DOCUMENT, NAMES = {DOCUMENT!r}, {list(NAMES)!r}",
        f"ALLOC = {textwrap.dedent(VARIANTS.alloc)!r}",
        LOAD,
    ])  # fmt: skip
    env = {"FAKECUDA_DEVICE_NAME": OTHER_GPU} if case.other_gpu else None
    result: dict[str, Any] = run_json(code, lib_dir=fakecuda_dir, env=env, preload=foundry_lib)["result"]
    return result


def _preflight(arch: Path, key: Path | None) -> str | None:
    """LOAD's eager run: every rule, the first refusal raised (None: none)."""
    _state.reset_all()
    set_signing_key(key)
    try:
        preflight([arch / f"{n}.json" for n in NAMES])
        return None
    except ArchiveError as exc:
        return str(exc)
    finally:
        set_signing_key(None)
        _state.reset_all()


def test_the_sound_archive_passes_both(
    sound: tuple[Path, Identity], tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    arch = Path(shutil.copytree(sound[0], tmp_path / "arch"))
    assert _load(arch, Case("sound", lambda a: None), None, fakecuda_dir, foundry_lib) == {"ok": None}
    report = verify_archive(arch, current_identity=sound[1])
    assert report.ok, [str(p) for p in report.problems]
    assert _preflight(arch, None) is None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_load_and_verify_refuse_every_bad_archive_with_one_message(
    case: Case, sound: tuple[Path, Identity], tmp_path: Path, fakecuda_dir: Path, foundry_lib: Path
) -> None:
    arch = Path(shutil.copytree(sound[0], tmp_path / "arch"))
    case.damage(arch)
    key = key_file(tmp_path) if case.key else None
    loaded = _load(arch, case, key, fakecuda_dir, foundry_lib)
    _state.reset_all()
    here = other_machine(sound[1]) if case.other_gpu else sound[1]
    report = verify_archive(arch, key=key, current_identity=here)
    said = [p.message for p in report.problems]
    assert not report.ok, f"verify passes {case.id}"
    if case.lazy:
        assert "error" in loaded, f"LOAD passes {case.id}: {loaded}"
        assert loaded["message"] in said, f"LOAD: {loaded['message']}\nverify: {said}"
    elif case.lazy is False:
        eager = _preflight(arch, key)
        assert eager is not None, f"LOAD's eager run passes {case.id}"
        assert any(eager.startswith(m) for m in said), f"LOAD's eager run: {eager}\nverify: {said}"
    else:
        assert loaded == {"ok": None} and _preflight(arch, key) is None, loaded
