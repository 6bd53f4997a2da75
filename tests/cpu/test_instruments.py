"""The instruments beside the library (the benchmark, foundry_bench, and the measuring scripts in scripts/):
the library never imports them and works without them; they look inside Foundry only through its public
API, the probe surface (foundry.probe), foundry.errors and the engine plugins' surfaces; and none of them
runs Python held in a string."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from foundry.cli.main import CHECKOUT_COMMANDS, COMMANDS_GROUP
from tests.support.subproc import child_env

ROOT = Path(__file__).resolve().parents[2]
FOUNDRY = ROOT / "foundry"
BENCH = ROOT / "foundry_bench"
FIXTURE = ROOT / "tests" / "fixtures" / "gpu_archive"

INSTRUMENTS = sorted([*BENCH.rglob("*.py"), *(ROOT / "scripts").rglob("*.py")])

SURFACES = (
    "foundry",
    "foundry.probe",
    "foundry.errors",
    "foundry.integration.shared",
    "foundry.integration.vllm",
    "foundry.integration.sglang",
)
"""What of Foundry an instrument may import: ``from foundry import NAME`` for a public name (or one of these
modules), ``foundry.probe``, ``foundry.errors`` and the engine plugins' packages, each through its
``__init__``."""

EXCEPTIONS = {
    "scripts/gen_abi.py": "a build tool, not a measurement: it writes foundry/native/_abi.py and "
    "foundry/records/_layout.py and _offsets.py from the C headers, and reads nothing of Foundry",
    "scripts/abi_cuda.py": "a build tool (gen_abi.py's reading of cuda.h)",
    "scripts/abi_headers.py": "a build tool (gen_abi.py's reading of the C headers)",
    "scripts/abi_layout.py": "a build tool (gen_abi.py's writer of foundry/records/_layout.py and _offsets.py)",
    "scripts/probe_save_speed.py": "times codec.set_work_enabled and exec_update on torch's own exec of a "
    "captured graph, which only foundry.capture.cudagraph's private _torch_exec reaches",
    "scripts/profile_save.py": "profiles SAVE's template grouping step by step (foundry.save.templates' "
    "plan_groups and write_member_deltas), which no surface exports, and rebuilds members with the tests' "
    "record encoder",
    "scripts/profile_save_fake.py": "profiles SAVE's private steps on the fake driver (foundry.save.rngprobe, "
    "foundry.records._layout's fatbin constants); its processes run code held in strings through the tests' "
    "fake-driver harness (tests.support.subproc.run_profiles)",
    "scripts/profile_many_graphs.py": "reads LOAD's private source state (foundry.load.source) to count the "
    "graphs start-up prepared; its processes run code held in strings through the tests' fake-driver "
    "harness (tests.support.subproc.run_profiles)",
    "scripts/bench_bundle_delta.py": "times the two halves of storing a rank's graph bundle against another's "
    "(foundry.archive.bundle_delta's pack_delta and rebuild) on synthetic bundles (foundry.archive.bundle's "
    "pack_bundle), which no surface exports: the public store_bundle_against needs two finished archives",
    "scripts/sglang/check_targets.py": "checks the SGLang plugin's own hook table "
    "(foundry.integration.sglang.patches: ENTRY, MODEL_HOOKS) against an SGLang source tree",
}
"""Instruments that may import more of Foundry than SURFACES, or run code held in strings, and why."""


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _foundry_imports(path: Path) -> list[tuple[str, list[str]]]:
    """Each import of Foundry in ``path``: the module imported from, and the names taken from it."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.split(".")[0] == "foundry"]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "foundry":
            out.append((node.module or "", [a.name for a in node.names]))
    return out


def _public_names() -> set[str]:
    import foundry

    return set(foundry.__all__)


def test_the_library_imports_no_instrument() -> None:
    wrong = []
    for path in FOUNDRY.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            wrong += [f"{_rel(path)} imports {n}" for n in names if n.split(".")[0] == "foundry_bench"]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", INSTRUMENTS, ids=_rel)
def test_an_instrument_looks_inside_foundry_only_through_its_surfaces(path: Path) -> None:
    if _rel(path) in EXCEPTIONS:
        pytest.skip(EXCEPTIONS[_rel(path)])
    public = _public_names()
    wrong = []
    for module, names in _foundry_imports(path):
        if module == "foundry":
            wrong += [n for n in names if n not in public and f"foundry.{n}" not in SURFACES]
        elif module not in SURFACES:
            wrong.append(module)
    assert not wrong, f"{_rel(path)} imports {wrong} of Foundry, beyond {SURFACES}"


def test_every_exception_is_an_instrument_that_needs_it() -> None:
    """An exception names a file that exists and that reaches past the surfaces or holds code in strings: one
    moved onto the surfaces leaves the list."""
    public = _public_names()
    for rel in EXCEPTIONS:
        path = ROOT / rel
        assert path.is_file(), rel
        if rel.startswith(("scripts/gen_abi", "scripts/abi_")):
            continue
        beyond = [
            m
            for m, names in _foundry_imports(path)
            if (m not in SURFACES) or (m == "foundry" and any(n not in public for n in names))
        ]
        assert beyond or _runs_strings(path), rel


def _runs_strings(path: Path) -> bool:
    """Whether ``path`` hands Python source in a string to another process: ``[python, "-c", ...]`` or the
    tests' harness that runs strings (run_python, run_profiles)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.List) and any(isinstance(e, ast.Constant) and e.value == "-c" for e in node.elts):
            return True
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in ("run_python", "run_profiles"):
            return True
    return False


@pytest.mark.parametrize("path", INSTRUMENTS, ids=_rel)
def test_no_instrument_runs_python_held_in_a_string(path: Path) -> None:
    """What an instrument runs in another process is a module (``-m``) or a file a linter reads."""
    if _rel(path) in EXCEPTIONS:
        pytest.skip(EXCEPTIONS[_rel(path)])
    assert not _runs_strings(path), _rel(path)


SHELL = sorted((ROOT / "scripts").rglob("*.sh"))
SHELL_EXCEPTIONS = {
    "scripts/load_matrix.sh": "prints each setting's LOAD timings with a heredoc: not yet moved into a module",
    "scripts/bundle/install.sh": "decompresses the bundle with `python3 -c` where no zstd program is installed: "
    "not yet moved into a module",
}
"""Shell scripts for the GPU machine that still hold Python in a string (``python3 -c`` or a heredoc), and
why; none may be added."""
_INLINE_PYTHON = re.compile(r"python3?\s+(-c\b|-\s.*<<)")


@pytest.mark.parametrize("path", SHELL, ids=_rel)
def test_no_shell_script_runs_python_held_in_a_string(path: Path) -> None:
    held = bool(_INLINE_PYTHON.search(path.read_text()))
    assert held == (_rel(path) in SHELL_EXCEPTIONS), _rel(path)


def test_the_checkout_commands_are_the_ones_the_distribution_declares() -> None:
    """foundry/cli/main.py's commands for a checkout run are pyproject.toml's foundry.commands entry points,
    and the instruments package is in the wheel."""
    text = (ROOT / "pyproject.toml").read_text()
    table = text.split(f'[project.entry-points."{COMMANDS_GROUP}"]\n', 1)[1].split("\n\n", 1)[0]
    declared = dict(re.findall(r'^(\w+) = "([^"]+)"$', table, re.M))
    assert declared == CHECKOUT_COMMANDS
    assert re.search(r'^wheel\.packages = \["foundry", "foundry_bench"\]$', text, re.M)


WITHOUT_INSTRUMENTS = """
import sys

class _NoInstruments:
    def find_spec(self, name, path=None, target=None):
        if name == "foundry_bench" or name.startswith("foundry_bench."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoInstruments())
sys.argv = ["foundry", *sys.argv[1:]]
import foundry
from foundry.cli.main import main

sys.exit(main())
"""


def _foundry_without_instruments(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_INSTRUMENTS, *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
    )


def test_the_library_works_without_the_instruments() -> None:
    help_ = _foundry_without_instruments("--help")
    assert help_.returncode == 0, help_.stderr
    assert "inspect" in help_.stdout and "verify" in help_.stdout and "bench" in help_.stdout
    inspect = _foundry_without_instruments("inspect", str(FIXTURE))
    assert inspect.returncode == 0, inspect.stderr
    assert "region" in inspect.stdout
    verify = _foundry_without_instruments("verify", str(FIXTURE))
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout.startswith("OK:") or "\nOK:" in verify.stdout, verify.stdout
    probe = subprocess.run(
        [sys.executable, "-c", WITHOUT_INSTRUMENTS.replace("sys.exit(main())", "import foundry.probe"), "--version"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
    )
    assert probe.returncode == 0, probe.stderr
    assert "foundry_bench" not in probe.stderr


@pytest.mark.parametrize("args", [(), ("--out", "/tmp/x", "--shapes", "tiny")])
def test_bench_without_the_instruments_says_they_are_not_installed(args: tuple[str, ...]) -> None:
    bench = _foundry_without_instruments("bench", *args)
    assert bench.returncode != 0
    assert "foundry bench: the instruments package foundry_bench is not installed" in bench.stderr, bench.stderr
    assert "Traceback" not in bench.stderr


def test_bench_is_found_from_the_checkout() -> None:
    """Run from a checkout (the GPU machine's PYTHONPATH, no installed metadata), `foundry bench` is the
    benchmark: its arguments are checked before it looks for a GPU."""
    proc = subprocess.run(
        [sys.executable, "-m", "foundry.cli", "bench", "--shapes", "no-such-shape"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
    )
    assert proc.returncode == 2
    assert "unknown shape 'no-such-shape'" in proc.stderr, proc.stderr
