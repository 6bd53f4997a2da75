"""The paths start-up works out for thousands of graphs, as strings: real paths and inside-the-archive proofs
memoized for a batch (foundry.storage.files), a graph's directory taken from its Path's text, and a path
named as Path names it; each the same answer as the Path or os.path spelling, links out still refused."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from foundry.archive import Manifest
from foundry.archive.graphfile import _directory
from foundry.errors import ArchiveCorruptError
from foundry.load.source import _as_named
from foundry.storage import inside, inside_name, real_name, real_paths_memoized
from tests.support.archive_damage import load_doc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_archive"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``arch/`` with a file, a link to it, a link out, a subdirectory and a link into it; ``outside`` beside."""
    arch = tmp_path / "arch"
    (arch / "sub").mkdir(parents=True)
    (arch / "g.json").write_text("{}")
    (arch / "sub" / "r.bin").write_text("")
    (tmp_path / "outside").write_text("secret")
    (arch / "sibling").symlink_to("g.json")
    (arch / "out").symlink_to(tmp_path / "outside")
    (arch / "sub" / "out").symlink_to("../../outside")
    (arch / "lsub").symlink_to("sub")
    return arch


@pytest.mark.parametrize("batch", [False, True])
def test_inside_answers_as_realpath_and_refuses_links_out(tree: Path, batch: bool) -> None:
    real = Path(os.path.realpath(tree))
    with real_paths_memoized() if batch else contextlib.nullcontext():
        for _ in range(2):  # the second time from the batch's memo
            assert real_name(tree / "out") == os.path.realpath(tree / "out")  # the same path resolved first
            assert inside(tree, "g.json", "graph") == real / "g.json"
            assert inside_name(tree, "sibling", "graph") == str(real / "g.json")
            assert inside(tree, "lsub/r.bin", "record") == real / "sub" / "r.bin"
            assert inside_name(str(tree) + "/", "missing", "graph") == str(real / "missing")
            assert inside_name(tree, ".", "archive directory") == str(real)
            for name in ("out", "sub/out", "lsub/out"):
                with pytest.raises(ArchiveCorruptError, match=r"resolves to .*outside.*, outside "):
                    inside_name(tree, name, "graph")
            with pytest.raises(ArchiveCorruptError, match=r"the graph '\.\./g\.json' leaves the directory"):
                inside(tree / "sub", "../g.json", "graph")


SPELLINGS = ["/a/b/g.json", "/g.json", "//g.json", "//a/g.json", "g.json", "a/g.json", "./g.json", "a/./g.json",
             "a//g.json", "a/g.json/", "/a/b/../g.json", "..", "/", ".", "a/.."]  # fmt: skip


def test_a_graphs_directory_is_its_paths_parent() -> None:
    for spelling in SPELLINGS:
        assert _directory(Path(spelling)) == str(Path(spelling).parent), spelling
        assert _directory(spelling) == str(Path(spelling).parent), spelling


def test_a_path_is_named_as_path_names_it() -> None:
    """Two spellings share a prepared graph exactly where Path spells them alike (a '..' is never folded)."""
    for spelling in [*SPELLINGS, "/a/b/.", "/a/b/", "///a", "/a/./b"]:
        assert _as_named(spelling) == str(Path(os.getcwd(), spelling)), spelling
        assert _as_named(Path(spelling)) == str(Path(os.getcwd(), spelling)), spelling


def test_a_member_its_group_does_not_list_is_refused() -> None:
    doc = load_doc(FIXTURES / "graph_manifest.json")
    doc.pop("digest", None)
    Manifest.from_json(doc, "m.json")
    doc["groups"][0]["members"] = [0]
    with pytest.raises(ArchiveCorruptError, match="group 0 lists a graph twice"):
        Manifest.from_json(doc, "m.json")
    doc["groups"][0]["members"] = []
    with pytest.raises(ArchiveCorruptError, match="graph 1 has role 'member' but group 0 does not list it so"):
        Manifest.from_json(doc, "m.json")
