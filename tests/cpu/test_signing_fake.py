"""Signed archives end to end on the fake CUDA driver: SAVE signs the manifest when a key is configured;
LOAD with a key configured accepts a correctly signed archive and refuses any other before it loads a
single kernel image or reserves the region."""

from __future__ import annotations

import hashlib
import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import MANIFEST_NAME, read_manifest
from foundry.trust.signing import KEY_ENV, key_id_of
from tests.cpu.test_verify_fake import FAMILY, verify_cli
from tests.support.archive_damage import edit_stored, load_doc, write_doc
from tests.support.graphs import prelude, run_save
from tests.support.subproc import run_json

SECRET = b"foundry test signing key, 32 b!"
OTHER = b"some other signing key, 32 bytes"

LOAD = """
from foundry.load import load_graph
from foundry.kernels import registry
SHAS = sorted(json.load(open(os.path.join(ARCH, "graph_manifest.json")))["images"])
def loaded():
    return [s for s in SHAS if registry.is_loaded(s)]
state = {}
if MODULES:
    state["modules"] = attempt(lambda: foundry.load_cuda_modules_and_libraries(ARCH))
state["after_modules"] = {"images": loaded(), "recorded": len(registry.recorded_images()),
                          "reserved": foundry.region_state().reserved}
foundry.set_allocation_region(BASE, "1GB")
SAVE = False
%s
graph = attempt(lambda: load_graph(os.path.join(ARCH, "three.json")))
state["after_graph"] = {"images": loaded(), "recorded": len(registry.recorded_images())}
runs = []
if "ok" in graph:
    lg = graph["ok"]
    graph["ok"] = None
    for k in INPUT_SETS:
        set_inputs(k); lg.launch(0); cu.sync(); runs.append(read("three"))
emit(graph=graph, runs=runs, **state)
"""


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    (d / "foundry.key").write_bytes(SECRET)
    (d / "other.key").write_bytes(OTHER)
    return {"right": d / "foundry.key", "other": d / "other.key"}


@pytest.fixture(scope="module")
def runner(fakecuda_dir: Path, foundry_lib: Path) -> Any:
    def run(code: str, env: dict[str, str] | None = None) -> Any:
        return run_json(code, lib_dir=fakecuda_dir, env=env, preload=foundry_lib)

    return run


@pytest.fixture(scope="module")
def signed(runner: Any, keys: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """An archive saved with FOUNDRY_SIGNING_KEY set, and the native outputs."""
    arch = tmp_path_factory.mktemp("signed") / "arch"
    save = run_save(runner, FAMILY, arch, env={KEY_ENV: str(keys["right"])})
    return arch, save["native"]["three"]


@pytest.fixture
def archive(signed: tuple[Path, Any], tmp_path: Path) -> Path:
    return Path(shutil.copytree(signed[0], tmp_path / "arch"))


def load(runner: Any, arch: Path, key: Path | None, modules: bool = True) -> dict[str, Any]:
    code = prelude(arch) + f"\nMODULES = {modules!r}\n" + LOAD % textwrap.dedent(FAMILY.alloc)
    result: dict[str, Any] = runner(code, env={KEY_ENV: str(key) if key else ""})
    return result


def test_save_signs_and_verify_checks_the_signature(signed: tuple[Path, Any], keys: dict[str, Path]) -> None:
    arch = signed[0]
    signature = read_manifest(arch).signature
    assert signature["algorithm"] == "hmac-sha256" and signature["key_id"] == key_id_of(SECRET)
    ok = verify_cli(str(arch), "--key", str(keys["right"]), "--no-identity")
    assert ok.returncode == 0, ok.stdout
    assert "signature  passed" in ok.stdout
    bad = verify_cli(str(arch), "--key", str(keys["other"]), "--no-identity", "--json")
    assert bad.returncode == 1
    (problem,) = json.loads(bad.stdout)["problems"]
    assert problem["check"] == "signature" and key_id_of(OTHER) in problem["message"]
    via_env = verify_cli(str(arch / "three.json"), "--no-identity", env={KEY_ENV: str(keys["right"])})
    assert via_env.returncode == 0 and "signature  passed" in via_env.stdout


def test_load_with_the_key_accepts_the_signed_archive(
    runner: Any, signed: tuple[Path, Any], keys: dict[str, Path]
) -> None:
    arch, native = signed
    r = load(runner, arch, keys["right"])
    assert r["modules"] == {"ok": 2} and r["graph"] == {"ok": None}
    assert r["runs"] == native


def unsign(arch: Path) -> None:
    path = arch / MANIFEST_NAME
    doc = load_doc(path)
    del doc["signature"]
    write_doc(path, doc)


def tamper_manifest(arch: Path) -> None:
    """Edit a graph JSON and update its checksum in the manifest: everything but the signature is consistent."""
    path = arch / "three.json"
    data = edit_stored(path, lambda d: d.update(name="three!"))
    doc = load_doc(arch / MANIFEST_NAME)
    doc["graphs"][1].update(name="three!", json_sha256=hashlib.sha256(data).hexdigest())
    write_doc(arch / MANIFEST_NAME, doc)


@pytest.mark.parametrize(
    ("damage", "key", "fragment"),
    [
        (unsign, "right", "is not signed"),
        (lambda a: None, "other", "not with the configured key"),
        (tamper_manifest, "right", "changed after it was signed"),
    ],
    ids=["unsigned", "other-key", "tampered-after-signing"],
)
@pytest.mark.parametrize("modules", [True, False], ids=["modules-first", "graph-only"])
def test_load_with_a_key_refuses_before_any_image_is_loaded(
    runner: Any, archive: Path, keys: dict[str, Path], damage: Any, key: str, fragment: str, modules: bool
) -> None:
    damage(archive)
    r = load(runner, archive, keys[key], modules=modules)
    errors = [r["graph"]] + ([r["modules"]] if modules else [])
    for error in errors:
        assert error["error"] == "ArchiveSignatureError" and "ArchiveError" in error["bases"], error
        assert fragment in error["message"]
    assert r["after_modules"] == {"images": [], "recorded": 0, "reserved": False}
    assert r["after_graph"] == {"images": [], "recorded": 0}
    assert r["runs"] == []


def test_load_with_a_key_refuses_a_graph_changed_after_signing(
    runner: Any, archive: Path, keys: dict[str, Path]
) -> None:
    path = archive / "two.json"  # the template of the graph loaded
    edit_stored(path, lambda d: d.update(foundry_version="0.1.9"))  # sealed again: only the signature tells
    r = load(runner, archive, keys["right"], modules=False)
    assert r["graph"]["error"] == "ArchiveSignatureError"
    assert "graph 'two'" in r["graph"]["message"] and "changed after the manifest was written" in r["graph"]["message"]
    assert r["after_graph"] == {"images": [], "recorded": 0}


def test_load_without_a_key_is_unchanged(runner: Any, archive: Path, signed: tuple[Path, Any]) -> None:
    unsign(archive)
    r = load(runner, archive, None)
    assert r["modules"] == {"ok": 2} and r["graph"] == {"ok": None} and r["runs"] == signed[1]
