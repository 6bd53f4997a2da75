"""The `foundry` command line's `inspect` and `verify` (an archive made on the fake CUDA driver summarized and
checked), its help and its errors, each invoked as ``python -m foundry.cli`` in a subprocess. `run`:
test_cli_run.py."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from foundry.archive import read_meta
from foundry.sizes import format_size
from foundry.verify import verify_archive
from tests.support.archive_damage import flip_stored, stored_doc, unbundle
from tests.support.graphs import BASE, Scenario, save_script
from tests.support.subproc import REPO_ROOT, child_env, foundry_cli, run_json
from tests.support.verify_archives import build_archive

# --------------------------------------------------------------------------------------- inspect
SCENARIO = Scenario(
    alloc="""
    n = 64
    buf("x", 4 * n); buf("y", 4 * n); buf("a", 4 * n); buf("b", 4 * n)
    def set_inputs(k):
        cu.write_f32(B["x"], [float(i + k) for i in range(n)])
        cu.write_f32(B["y"], [1.0] * n)
    READS["double"] = [("a", n)]
    READS["triple"] = [("a", n)]
    READS["sum_then_fill"] = [("b", n)]
    """,
    capture="""
    K = module("fk_add_f32", "fk_scale_f32", "fk_fill_f32")
    s = cu.stream_create()
    full = ((1, 1, 1), (n, 1, 1))
    def scaled(f):
        cu.begin_capture(s)
        cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["a"]), (c_int, n)], stream=s)
        cu.launch(K["fk_scale_f32"], *full, [("ptr", B["a"]), (c_float, f), (c_int, n)], stream=s)
        return cu.end_capture(s)
    add_graph("double", scaled(2.0))
    add_graph("triple", scaled(3.0))
    cu.begin_capture(s)
    call("cuMemsetD32Async", B["b"], 0, n, s)
    cu.launch(K["fk_add_f32"], *full, [("ptr", B["x"]), ("ptr", B["y"]), ("ptr", B["b"]), (c_int, n)], stream=s)
    cu.launch(K["fk_fill_f32"], (1, 1, 1), (8, 1, 1), [("ptr", B["b"]), (c_float, 0.5), (c_int, n)], stream=s)
    add_graph("sum_then_fill", cu.end_capture(s))
    """,
)
NAMES = ["double", "triple", "sum_then_fill"]


@pytest.fixture(scope="module")
def archive(fakecuda_dir: Path, foundry_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    arch = tmp_path_factory.mktemp("cli") / "arch"
    save = run_json(save_script(SCENARIO, arch), lib_dir=fakecuda_dir, preload=foundry_lib)
    assert list(save["metas"]) == NAMES
    return arch


def metas(archive: Path) -> dict[str, dict[str, Any]]:
    return {n: stored_doc(archive / f"{n}.json") for n in NAMES}


def test_inspect_archive_prints_graphs_nodes_kernels_images_region_and_identity(archive: Path) -> None:
    p = foundry_cli("inspect", str(archive))
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    images = sorted((archive / "images").glob("*.bin"))
    assert "manifest: yes" in out
    assert "Fake GPU" in out and "132 SMs" in out and "sm_90" in out and "driver 13000" in out
    assert f"base {BASE:#x}" in out and "size 1.0 GiB" in out
    assert f"images    {len(images)}, {format_size(sum(i.stat().st_size for i in images))}" in out
    bundle = format_size((archive / "graph_bundle.bin").stat().st_size)
    assert f"bundle    {bundle}: the graphs saved in the archive directory, stored once" in out
    m = metas(archive)
    nodes = sum(meta["stats"]["nodes"] for meta in m.values())
    kernels = sum(meta["stats"]["kernel"] for meta in m.values())
    assert f"graphs    3, 2 topology groups: {nodes} nodes (" in out
    assert f"kernel {kernels}" in out and "memset 1" in out
    for name in [*NAMES, "fk_add_f32", "fk_scale_f32", "fk_fill_f32"]:
        assert name in out


def test_inspect_json_is_machine_readable_and_matches_the_archive(archive: Path) -> None:
    p = foundry_cli("inspect", "--json", str(archive))
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout)
    m = metas(archive)
    assert summary["manifest"] is True and summary["groups"] == 2
    assert summary["bundle_bytes"] == (archive / "graph_bundle.bin").stat().st_size
    assert [g["name"] for g in summary["graphs"]] == NAMES
    assert [g["nodes"] for g in summary["graphs"]] == [m[n]["stats"]["nodes"] for n in NAMES]
    for key in ("nodes", "kernel", "memset", "edges"):
        assert summary["nodes"][key] == sum(meta["stats"].get(key, 0) for meta in m.values())
    on_disk = {p.stem: p.read_bytes() for p in (archive / "images").glob("*.bin")}
    assert {i["sha256"]: i["bytes"] for i in summary["images"]} == {s: len(b) for s, b in on_disk.items()}
    assert all(hashlib.sha256(b).hexdigest() == s for s, b in on_disk.items())
    assert summary["image_bytes"] == sum(len(b) for b in on_disk.values())
    assert {k["name"] for k in summary["kernels"]} == {"fk_add_f32", "fk_scale_f32", "fk_fill_f32"}
    assert summary["identity"]["gpu_name"] == "Fake GPU" and summary["identity"]["sm_count"] == 132
    assert summary["region"]["base"] == hex(BASE)
    assert summary["region"]["high_water"] == m["double"]["region"]["high_water"]
    assert summary["region"]["live_bytes"] == sum(length for _, length in m["double"]["region"]["live"])


def test_inspect_one_graph_json(archive: Path) -> None:
    p = foundry_cli("inspect", "--json", str(archive / "sum_then_fill.json"))
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout)
    meta = metas(archive)["sum_then_fill"]
    assert summary["manifest"] is True and summary["groups"] is None  # the manifest of its archive
    assert [g["name"] for g in summary["graphs"]] == ["sum_then_fill"]
    assert summary["nodes"] == meta["stats"]
    assert {k["name"] for k in summary["kernels"]} == {"fk_add_f32", "fk_fill_f32"}
    text = foundry_cli("inspect", str(archive / "sum_then_fill.json"))
    assert text.returncode == 0 and "manifest: yes" in text.stdout and "sum_then_fill" in text.stdout


def test_inspect_one_graph_says_manifest_no_only_where_there_is_none(archive: Path, tmp_path: Path) -> None:
    import shutil

    bare = tmp_path / "arch"
    shutil.copytree(archive, bare)
    unbundle(bare)  # without its manifest, a bundled graph has no name: its files here
    (bare / "graph_manifest.json").unlink()
    text = foundry_cli("inspect", str(bare / "double.json"))
    assert text.returncode == 0 and "manifest: no" in text.stdout


def test_counts_in_sentences_agree_with_their_nouns(archive: Path, tmp_path: Path) -> None:
    """A graph of two kernels joined once has 1 edge; two graphs of one topology are 1 topology group."""
    from tests.support.samples import write_sample_archive

    double = foundry_cli("inspect", str(archive / "double.json")).stdout
    (line,) = [line for line in double.splitlines() if line.startswith("graphs")]
    assert line.endswith(", 1 edge"), line
    write_sample_archive(tmp_path / "sample")
    sample = foundry_cli("inspect", str(tmp_path / "sample")).stdout
    (line,) = [line for line in sample.splitlines() if line.startswith("graphs")]
    assert line.startswith("graphs    2, 1 topology group:"), line


@pytest.mark.parametrize("what", ["empty-dir", "missing", "text-file", "foreign-json", "image-file"])
def test_inspect_of_non_archive_fails_clearly(archive: Path, tmp_path: Path, what: str) -> None:
    path = tmp_path / what
    if what == "empty-dir":
        path.mkdir()
    elif what == "text-file":
        path.write_text("hello\n")
    elif what == "foreign-json":
        path.write_text(json.dumps({"format": "something-else", "format_version": 1}))
    elif what == "image-file":
        path = next((archive / "images").glob("*.bin"))
    p = foundry_cli("inspect", str(path))
    assert p.returncode != 0
    message = (p.stdout + p.stderr).strip()
    assert message.startswith("foundry inspect: ") and str(path) in message
    assert "Traceback" not in message
    if what == "empty-dir":
        assert "graph_manifest.json" in message


def test_inspect_of_damaged_archive_fails_clearly(archive: Path, tmp_path: Path) -> None:
    import shutil

    damaged = tmp_path / "arch"
    shutil.copytree(archive, damaged)
    flip_stored(damaged / "triple.json", 30)  # in the bundle: named by the graph
    p = foundry_cli("inspect", str(damaged))
    assert p.returncode == 1
    assert "graph 'triple'" in p.stdout + p.stderr and "Traceback" not in p.stdout + p.stderr
    unbundle(damaged)
    (damaged / "triple.json").unlink()
    p = foundry_cli("inspect", str(damaged))
    assert p.returncode == 1
    assert "triple.json" in p.stdout + p.stderr and "Traceback" not in p.stdout + p.stderr


def test_inspect_json_failure_keeps_stdout_clean(tmp_path: Path) -> None:
    p = foundry_cli("inspect", "--json", str(tmp_path / "missing.json"))
    assert p.returncode != 0
    assert p.stdout == "" and "foundry inspect: " in p.stderr


def test_inspect_of_a_manifest_listing_no_graphs_fails_clearly(tmp_path: Path) -> None:
    from foundry.archive import Manifest, read_manifest, write_manifest
    from tests.support.samples import write_sample_archive

    directory = tmp_path / "arch"
    write_sample_archive(directory)
    empty: Manifest = dataclasses.replace(read_manifest(directory), graphs=(), groups=(), images=())
    write_manifest(directory, empty)
    p = foundry_cli("inspect", str(directory))
    message = (p.stdout + p.stderr).strip()
    assert p.returncode != 0 and "Traceback" not in message
    assert "lists no graphs" in message and str(directory) in message


# ------------------------------------------------------------------------------------------- surface
def test_version_and_subcommand_help_with_descriptions_and_defaults() -> None:
    from foundry import __version__

    v = foundry_cli("--version")
    assert v.returncode == 0 and v.stdout.strip() == f"foundry {__version__}"
    for command, described, default in [
        ("inspect", "What an archive holds", "(default: 20)"),
        ("verify", "Exit status 0", None),
        ("bench", "cold-start benchmark", "(default: 8)"),
        ("run", "interposer preloaded", None),
    ]:
        h = foundry_cli(command, "--help")
        text = " ".join(h.stdout.split())
        assert h.returncode == 0 and described in text, (command, text)
        assert default is None or default in text, (command, text)
        assert "(default: None)" not in text and "(default: False)" not in text


def test_errors_the_readme_names_are_importable_from_foundry() -> None:
    import foundry
    from foundry import errors

    for name in errors.__all__:
        assert getattr(foundry, name) is getattr(errors, name)
    assert foundry.IdentityMismatchError.__mro__[1] is foundry.ArchiveError
    from foundry.integration import shared, vllm

    for name in ("ArchiveMismatchError", "PhaseLayoutError"):  # the engine integrations', named by the README
        assert getattr(foundry, name) is getattr(shared, name) is getattr(vllm, name) and name in foundry.__all__


def test_inspect_json_into_a_pipe_that_closes_early_is_no_traceback(archive: Path) -> None:
    e = child_env(None)
    e.pop("LD_PRELOAD", None)
    cmd = [sys.executable, "-m", "foundry.cli", "inspect", "--json", "--kernels", "100", str(archive)]
    with subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(REPO_ROOT)) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()  # as `| head -1` does, then the reader goes away
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(60)
    assert "Traceback" not in err and "BrokenPipeError" not in err
    assert code in (0, 141)  # 141: the reader left before all was written (128 + SIGPIPE)


def test_inspect_kernel_count_is_checked_and_counted_right(archive: Path) -> None:
    bad = foundry_cli("inspect", str(archive), "--kernels", "-1")
    assert bad.returncode == 2 and "is not a count" in bad.stderr
    listed = json.loads(foundry_cli("inspect", "--json", str(archive)).stdout)["kernels"]
    shown = foundry_cli("inspect", str(archive), "--kernels", str(len(listed) - 1))
    assert "... and 1 more kernel (" in shown.stdout
    assert "more kernel" not in foundry_cli("inspect", str(archive), "--kernels", str(len(listed))).stdout


def test_inspect_and_verify_agree_on_a_manifest_path_and_a_missing_path(archive: Path, tmp_path: Path) -> None:
    by_dir = foundry_cli("inspect", "--json", str(archive))
    by_manifest = foundry_cli("inspect", "--json", str(archive / "graph_manifest.json"))
    assert by_manifest.returncode == 0 and json.loads(by_manifest.stdout) == json.loads(by_dir.stdout)
    assert foundry_cli("verify", "--no-identity", str(archive / "graph_manifest.json")).returncode == 0
    for command in ("inspect", "verify"):
        missing = foundry_cli(command, str(tmp_path / "nothing"))
        assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


def test_verify_report_fits_a_terminal(archive: Path, tmp_path: Path) -> None:
    import shutil

    damaged = tmp_path / "arch"
    shutil.copytree(archive, damaged)
    (damaged / "stray.txt").write_text("x")
    p = foundry_cli("verify", str(damaged))
    assert p.returncode == 1
    lines = p.stdout.replace(str(damaged), "ARCH").splitlines()  # a long path is not broken, nor counted
    long = [line for line in lines if len(line) > 100]
    assert not long, long


def test_inspect_and_verify_refuse_a_directory_without_manifest_alike(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in ("inspect", "verify"):
        p = foundry_cli(command, str(empty))
        assert p.returncode == 2 and p.stdout == "", (command, p.stdout)
        assert p.stderr.count(str(empty)) == 1 and "has no graph_manifest.json" in p.stderr, p.stderr


@pytest.mark.parametrize("kind", ["FIFO", "character device"])
def test_inspect_and_verify_refuse_a_target_that_is_no_directory_nor_file_by_its_type(
    tmp_path: Path, kind: str
) -> None:
    """Told before anything is opened (a FIFO would wait for a writer), named once, and not taken for a damaged
    archive to copy again: it was never one."""
    target = Path("/dev/null")
    if kind == "FIFO":
        target = tmp_path / "fifo"
        os.mkfifo(target)
    for command in ("inspect", "verify"):
        p = foundry_cli(command, str(target))
        assert p.returncode == 2 and p.stdout == "", (command, p.stdout)
        assert f"{target} is a {kind}, not an archive directory or a graph's .json" in p.stderr, p.stderr
        assert p.stderr.count(str(target)) == 1 and "Copy the archive" not in p.stderr, p.stderr


def test_verify_json_prints_one_object_when_verification_cannot_start(archive: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = [
        ([str(tmp_path / "nothing")], "does not exist"),
        ([str(empty)], "has no graph_manifest.json"),
        ([str(fifo)], "is a FIFO"),
        (["--key", str(tmp_path / "no.key"), str(archive)], "no.key cannot be read"),
    ]
    for args, said in cases:
        p = foundry_cli("verify", "--json", *args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        doc = json.loads(p.stdout)
        assert doc == {"target": args[-1], "ok": False, "error": doc["error"]} and said in doc["error"], doc
        assert p.stderr == f"foundry verify: {doc['error']}\n"


def test_verify_counts_the_one_graph_it_is_given(tmp_path: Path) -> None:
    """graph_1 is a member: its template is read and checked with it, and is not a second graph given."""
    arch = build_archive(tmp_path / "arch")
    member = arch / "graph_1.json"
    assert read_meta(member).template is not None
    p = foundry_cli("verify", "--no-identity", str(member))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[0] == f"foundry verify: {member} (graph: 1 graph, 2 images)"
    assert json.loads(foundry_cli("verify", "--json", "--no-identity", str(member)).stdout)["graphs"] == 1
    assert verify_archive(arch).graphs == 2  # the archive directory: both graphs it lists


def test_verify_with_a_missing_key_file_advises_only_what_the_user_did(archive: Path, tmp_path: Path) -> None:
    p = foundry_cli("verify", "--key", str(tmp_path / "nonexistent"), str(archive))
    assert p.returncode == 2 and "cannot be read" in p.stderr and "fix the path" in p.stderr
    assert "FOUNDRY_SIGNING_KEY" not in p.stderr, p.stderr


def test_the_help_and_the_readme_say_the_same_of_load_time() -> None:
    text = " ".join(foundry_cli("--help").stdout.split())
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    assert "well under a second" in text and "well under a second" in readme
    assert "milliseconds" not in text


def test_torch_facing_names_say_that_they_need_torch_where_it_cannot_be_imported() -> None:
    """``sys.modules['torch'] = None`` makes ``import torch`` fail as on a machine without it. There a name that
    needs torch is absent as any other (``hasattr`` False, ``getattr`` with a default gives the default), and
    asking for it, as an attribute or by ``from foundry import``, says to install PyTorch."""
    code = textwrap.dedent(
        """
        import json, sys
        sys.modules["torch"] = None
        import foundry
        assert foundry.ArchiveError and foundry.ArchiveMismatchError  # what needs no torch still imports
        out = {"hasattr": [hasattr(foundry, "CUDAGraph"), hasattr(foundry, "graph")],
               "default": getattr(foundry, "CUDAGraph", "absent")}
        try:
            foundry.CUDAGraph
        except AttributeError as exc:
            out["attribute"] = [type(exc).__name__, isinstance(exc, foundry.FoundryError), exc.__cause__.name, str(exc)]
        try:
            from foundry import graph
        except ImportError as exc:
            out["from"] = [type(exc).__name__, exc.name, str(exc)]
        print(json.dumps(out))
        """
    )
    e = child_env(None)
    e.pop("LD_PRELOAD", None)
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["hasattr"] == [False, False] and out["default"] == "absent"
    kind, is_ours, cause, message = out["attribute"]
    assert (kind, is_ours, cause) == ("TorchMissingError", True, "torch")
    assert "foundry.CUDAGraph needs PyTorch" in message and "foundry verify" in message
    kind, name, message = out["from"]
    assert (kind, name) == ("ModuleNotFoundError", "torch") and "foundry.graph needs PyTorch" in message
