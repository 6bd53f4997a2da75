"""The package tree is the pipeline, and its edges only go one way: no two packages import each other
(no cycle at all), a package is reached only through its surface (its ``__init__``), the archive format
imports neither native code nor torch, and every package states its surface in ``__all__``."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

FOUNDRY = Path(__file__).resolve().parents[2] / "foundry"
PACKAGES = sorted(p.name for p in FOUNDRY.iterdir() if (p / "__init__.py").is_file())
LEAVES = sorted(p.stem for p in FOUNDRY.glob("*.py") if p.stem != "__init__")


def _module_name(path: Path) -> str:
    parts = ["foundry", *path.relative_to(FOUNDRY).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[str]:
    """Absolute names of the foundry modules ``path`` imports at run time (``TYPE_CHECKING`` blocks are
    for the type checker only and do not count); ``from X import y`` counts as X.y when y is a module."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("foundry")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if not target.startswith("foundry"):
                continue
            for a in node.names:
                candidate = f"{target}.{a.name}"
                is_module = (FOUNDRY.parent / candidate.replace(".", "/")).with_suffix(".py").is_file() or (
                    FOUNDRY.parent / candidate.replace(".", "/") / "__init__.py"
                ).is_file()
                out.append(candidate if is_module else target)
    return out


def _surface(package: str) -> list[str]:
    """The names a package's ``__init__`` (or a module, ``package/module``) lists in ``__all__`` (read, not
    imported: some need torch)."""
    path = FOUNDRY / package / "__init__.py" if (FOUNDRY / package).is_dir() else FOUNDRY / f"{package}.py"
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"foundry.{package} states no __all__")


def _unit(module: str) -> str:
    """The package (or top-level module) a module belongs to: ``foundry.load.loader`` -> ``load``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = {}
    for path in FOUNDRY.rglob("*.py"):
        here = _module_name(path)
        for target in _imports(path):
            a, b = _unit(here), _unit(target)
            if a and b and a != b:
                edges.setdefault((a, b), []).append(f"{here} -> {target}")
    return edges


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for a, b in _edges():
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join([*path, node, nxt])}"
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in list(graph):
        if node not in state:
            visit(node, [])


def test_packages_are_reached_through_their_surface() -> None:
    wrong = []
    for path in FOUNDRY.rglob("*.py"):
        here = _module_name(path)
        for target in _imports(path):
            unit = _unit(target)
            if unit in PACKAGES and unit != _unit(here):
                surface = f"foundry.{unit}"
                # a module the surface names (``from foundry.native import codec``) is part of it
                named = _surface(unit)
                if target != surface and target.rsplit(".", 1)[-1] not in named:
                    wrong.append(f"{here} imports {target}, not {surface}")
    assert not wrong, "\n".join(wrong)


FORMAT = ("records", "images", "schema", "storage", "archive")
"""The archive format, in the order its packages may import each other: each only those before it."""


@pytest.mark.parametrize("package", FORMAT)
def test_the_format_imports_no_native_code_nor_other_packages(package: str) -> None:
    """Bytes only: no native code, no torch, no process state (foundry._state), no package but the format
    packages before it and foundry.errors."""
    allowed = {*FORMAT[: FORMAT.index(package) + 1], "errors"}
    found = {b for (a, b) in _edges() if a == package}
    assert found <= allowed, found - allowed
    for path in (FOUNDRY / package).rglob("*.py"):
        assert not _top_level_imports(path) & {"torch", "ctypes", "numpy"}, path


MAX_SURFACE = 40
"""The most names a package exports: past it, a newcomer cannot hold a package's surface in mind."""
FACED = ("native",)
"""Packages whose surface is its modules (foundry.native: ``region``, ``registry``, ``driver``, ...): each of
those is held to the limit too. (foundry.records names ``layout``, a table of byte layouts, not a face.)"""


def test_no_package_exports_more_than_forty_names() -> None:
    wrong = []
    for package in PACKAGES:
        faces = [
            f"{package}/{n}" for n in _surface(package) if package in FACED and (FOUNDRY / package / f"{n}.py").exists()
        ]
        for unit in (package, *faces):
            if len(_surface(unit)) > MAX_SURFACE:
                wrong.append(
                    f"foundry.{unit.replace('/', '.')} exports {len(_surface(unit))} names, more than {MAX_SURFACE}"
                )
    assert not wrong, "\n".join(wrong)


def test_only_the_native_package_reaches_native_code() -> None:
    """Every call into libfoundry or the driver goes through foundry.native's typed functions: no other
    package imports ctypes or calls the library object (``native()``) itself."""
    wrong = []
    for path in FOUNDRY.rglob("*.py"):
        if path.relative_to(FOUNDRY).parts[0] == "native":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ctypes" for a in node.names):
                wrong.append(f"{_module_name(path)} imports ctypes")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ctypes":
                wrong.append(f"{_module_name(path)} imports from ctypes")
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("native", "native.native"):
                wrong.append(f"{_module_name(path)} calls the library object: {ast.unparse(node)}")
    assert not wrong, "\n".join(wrong)


PIPELINE = (*FORMAT, "trust", "gate", "verify", "native", "kernels", "region", "save", "load", "capture")
"""The packages below the package face (foundry/__init__.py re-exports them): none may reach up to it.
Engine adapters, the benchmark and the command line use the public API, the face included."""


def test_the_pipeline_does_not_reach_up_to_the_package_face() -> None:
    wrong = []
    for path in FOUNDRY.rglob("*.py"):
        if path.relative_to(FOUNDRY).parts[0] not in PIPELINE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name == "foundry" for a in node.names):
                wrong.append(f"{_module_name(path)}: import foundry")
            elif isinstance(node, ast.ImportFrom) and node.module == "foundry" and node.level == 0:
                faced = [a.name for a in node.names if not (FOUNDRY / a.name).is_dir()]
                faced = [n for n in faced if not (FOUNDRY / f"{n}.py").is_file()]
                if faced:
                    wrong.append(f"{_module_name(path)}: from foundry import {', '.join(faced)}")
    assert not wrong, "\n".join(wrong)


def test_the_version_is_the_one_the_package_declares() -> None:
    from foundry.version import __version__

    pyproject = (FOUNDRY.parent / "pyproject.toml").read_text()
    assert f'\nversion = "{__version__}"\n' in pyproject


def test_leaf_modules_import_nothing_of_foundry_but_errors() -> None:
    for leaf in LEAVES:
        targets = {_unit(t) for t in _imports(FOUNDRY / f"{leaf}.py")} - {""}
        assert targets <= {"errors"}, (leaf, targets)


def test_every_package_states_its_surface() -> None:
    for package in PACKAGES:
        names = _surface(package)
        assert names, package
        if package in ("capture", "probe"):  # they need torch to import (foundry.probe for tensor_at)
            continue
        module = importlib.import_module(f"foundry.{package}")
        assert all(hasattr(module, n) for n in names), package


INTEGRATION = FOUNDRY / "integration"


def _top_level_imports(path: Path) -> set[str]:
    """Top-level package names ``path`` imports when it is imported (module level, relative ones aside)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_shared_integration_uses_only_foundrys_surface_and_the_standard_library() -> None:
    """What every engine plugin shares imports no engine, no torch and no Foundry internals."""
    for path in (INTEGRATION / "shared").rglob("*.py"):
        here = _module_name(path)
        wrong = [t for t in _imports(path) if t != "foundry" and not t.startswith("foundry.integration.shared")]
        assert not wrong, (here, wrong)
        third_party = _top_level_imports(path) - set(sys.stdlib_module_names) - {"__future__", "foundry"}
        assert not third_party, (here, third_party)


ENGINES = ("vllm", "sglang")


@pytest.mark.parametrize("engine", ENGINES)
def test_an_engine_plugin_imports_foundry_shared_and_itself_and_its_engine_only_when_called(engine: str) -> None:
    """``import foundry.integration.<engine>`` imports neither the engine nor torch; no other engine's plugin and
    no shared piece imports it."""
    plugin = f"foundry.integration.{engine}"
    for path in FOUNDRY.rglob("*.py"):
        here = _module_name(path)
        targets = _imports(path)
        if here.startswith(plugin):
            allowed = ("foundry.integration.shared", plugin)
            wrong = [t for t in targets if t != "foundry" and not t.startswith(allowed)]
            assert not wrong, (here, wrong)
            third_party = _top_level_imports(path) - set(sys.stdlib_module_names) - {"__future__", "foundry"}
            assert not third_party, (here, third_party)
        elif here != "foundry.integration":  # the integration package names its plugins
            assert not [t for t in targets if t.startswith(plugin)], here
