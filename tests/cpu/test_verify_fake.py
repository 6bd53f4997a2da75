"""`foundry verify` on an archive saved on the fake CUDA driver (template members stored as deltas,
state memory, a fatbin library), as a function and through the command line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import read_manifest, read_meta
from foundry.verify import Check, verify_archive
from tests.support.archive_damage import flip_byte, flip_stored, stored
from tests.support.graphs import Scenario, run_save
from tests.support.subproc import REPO_ROOT, child_env, run_json

FAMILY = Scenario(
    alloc="""
    n = 64
    buf("x", 4 * n); buf("a", 4 * n); buf("b", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i + k) for i in range(n)])
    READS["two"] = [("a", n)]
    READS["three"] = [("b", n)]
    """,
    capture="""
    K = module("fk_copy_bytes", "fk_scale_f32")
    L = library("fk_scale_f32")
    s = cu.stream_create()
    def scaled(dst, factor, scale):
        cu.begin_capture(s)
        cu.launch(K["fk_copy_bytes"], (1, 1, 1), (1, 1, 1), [("ptr", B[dst]), ("ptr", B["x"]), (c_uint64, 4 * n)],
                  stream=s)
        cu.launch(scale, (1, 1, 1), (n, 1, 1), [("ptr", B[dst]), (c_float, factor), (c_int, n)], stream=s)
        return cu.end_capture(s)
    add_graph("two", scaled("a", 2.0, K["fk_scale_f32"]))
    add_graph("three", scaled("b", 3.0, L["fk_scale_f32"]))   # same topology: a member of "two"
    """,
)


@pytest.fixture(scope="module")
def saved(fakecuda_dir: Path, foundry_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    arch = tmp_path_factory.mktemp("verify") / "arch"

    def runner(code: str, env: Mapping[str, str] | None = None) -> Any:
        return run_json(code, lib_dir=fakecuda_dir, env=env, preload=foundry_lib)

    run_save(runner, FAMILY, arch)
    return arch


@pytest.fixture
def archive(saved: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved, tmp_path / "arch"))


def verify_cli(
    *args: str, lib_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m foundry.cli verify ARGS``; the fake driver is visible only with ``lib_dir``."""
    e = child_env(lib_dir)
    e.pop("LD_PRELOAD", None)
    e.pop("FOUNDRY_SIGNING_KEY", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "foundry.cli", "verify", *args], env=e, capture_output=True, text=True,
                          timeout=120, cwd=str(REPO_ROOT))  # fmt: skip


def test_saved_archive_with_members_passes(saved: Path) -> None:
    manifest = read_manifest(saved)
    assert [g.role.value for g in manifest.graphs] == ["template", "member"]
    assert stored(saved / "three.json")[1][64:68] == b"FGD1"
    assert not (saved / "three.json").exists() and not (saved / "three.cugraph").exists()  # in the bundle only
    assert read_meta(saved / "two.json").memory is not None
    identity = read_meta(saved / "two.json").identity
    for target in (saved, saved / "three.json"):
        report = verify_archive(target, current_identity=identity)
        assert report.ok, [str(p) for p in report.problems]
        assert report.notes == ()  # the cubin and the fatbin were both read: every kernel name was checked
        assert {c.check: c.status for c in report.checks}[Check.POINTERS] == "passed"


def test_cli_reports_a_sound_archive_and_exits_zero(saved: Path) -> None:
    p = verify_cli(str(saved))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[0] == f"foundry verify: {saved} (archive: 2 graphs, 2 images)"
    assert lines[-1].startswith(f"OK: {saved} passed 6 checks; skipped: identity, signature")
    table = "\n".join(lines)
    assert "pointers   passed" in table and "no CUDA driver and GPU visible" in table and p.stderr == ""
    one = verify_cli(str(saved / "three.json"))
    assert one.returncode == 0 and "(graph: 1 graph, 2 images)" in one.stdout  # its template is read with it


def test_cli_compares_identity_with_the_driver_it_finds(saved: Path, fakecuda_dir: Path) -> None:
    same = verify_cli(str(saved), "--json", lib_dir=fakecuda_dir)
    assert same.returncode == 0, same.stdout + same.stderr
    checks = {c["check"]: c["status"] for c in json.loads(same.stdout)["checks"]}
    assert checks["identity"] == "passed"
    other = verify_cli(str(saved), lib_dir=fakecuda_dir, env={"FAKECUDA_DEVICE_NAME": "Other GPU"})
    assert other.returncode == 1
    said = " ".join(other.stdout.split())  # the report wraps its lines
    assert "GPU model differs: the archive was saved with 'Fake GPU', this machine has 'Other GPU'" in said
    assert other.stdout.strip().splitlines()[-1].startswith("FAILED: 1 problem in")


def test_cli_json_on_a_damaged_archive(archive: Path) -> None:
    flip_stored(archive / "three.json", 100, "container")  # the member's delta, in the bundle
    (archive / "stray.txt").write_text("not ours")
    p = verify_cli(str(archive), "--json", "--no-identity")
    assert p.returncode == 1 and p.stderr == ""
    report = json.loads(p.stdout)
    assert report["ok"] is False and report["verdict"].startswith("FAILED: 2 problems")
    problems = {(x["check"], x["kind"], Path(x["path"]).name) for x in report["problems"]}
    assert problems == {("files", "corrupt", "three.json"), ("foreign", "foreign", "stray.txt")}
    assert all(x["message"] for x in report["problems"])
    status = {c["check"]: (c["status"], c["reason"]) for c in report["checks"]}
    assert status["files"] == ("failed", "") and status["identity"] == ("skipped", "--no-identity was given")


def test_cli_state_memory_damage(archive: Path) -> None:
    (snapshot,) = (archive / "memory").glob("*.bin")
    flip_byte(snapshot, 3)
    p = verify_cli(str(archive), "--no-identity")
    assert p.returncode == 1
    said = " ".join(p.stdout.split())  # the report wraps its lines
    assert f"checksum: {snapshot}: the state memory snapshot's content SHA-256" in said


def test_cli_usage_errors_exit_two(saved: Path, tmp_path: Path) -> None:
    p = verify_cli(str(tmp_path / "nothing"))
    assert p.returncode == 2 and p.stdout == "" and "does not exist" in p.stderr
    p = verify_cli(str(saved), "--key", str(tmp_path / "no.key"))
    assert p.returncode == 2 and p.stdout == "" and "no.key cannot be read" in p.stderr


RESAVED_TEMPLATE = """
SAVE = True
foundry.set_allocation_region(BASE, "1GB")
n = 64
buf("a", 4 * n)
from foundry.save import save_graph
from foundry.save import save_graph_manifest
K = module("fk_scale_f32", "fk_fill_f32")
s = cu.stream_create()
def graph(*launches):
    cu.begin_capture(s)
    for name, value in launches:
        cu.launch(K[name], (1, 1, 1), (n, 1, 1), [("ptr", B["a"]), (c_float, value), (c_int, n)], stream=s)
    return cu.end_capture(s)
def save(name, g):
    save_graph(g, os.path.join(ARCH, name + ".json"), archive_dir=ARCH)
def roles():
    return [(g.name, g.role.value) for g in save_graph_manifest(ARCH).graphs]
save("g0", graph(("fk_scale_f32", 2.0)))
save("g1", graph(("fk_scale_f32", 3.0)))
first = roles()
save("g0", graph(("fk_scale_f32", 4.0)))                           # same path, same topology
second = roles()
save("g0", graph(("fk_fill_f32", 1.0), ("fk_scale_f32", 2.0)))   # same path, another topology
emit(first=first, second=second, third=roles())
"""


def test_resaving_a_template_in_one_process_keeps_the_archive_sound(
    fakecuda_dir: Path, foundry_lib: Path, tmp_path: Path
) -> None:
    from foundry.load.source import read_source
    from tests.support.graphs import prelude

    arch = tmp_path / "arch"
    r = run_json(prelude(arch) + RESAVED_TEMPLATE, lib_dir=fakecuda_dir, preload=foundry_lib)
    assert r["first"] == r["second"] == [["g0", "template"], ["g1", "member"]]
    # g1 was stored as changes to g0; g0 is now another shape, so g1 stands alone again.
    assert r["third"] == [["g0", "template"], ["g1", "template"]]
    assert stored(arch / "g1.json")[1][64:68] == b"FGR1"
    report = verify_archive(arch)
    assert report.ok, [str(p) for p in report.problems]
    assert read_source(arch / "g1.json").template is None
