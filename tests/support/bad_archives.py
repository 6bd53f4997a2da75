"""Every way the suite damages or forges an archive, as one table (``CASES``), for the test that feeds each to LOAD
and to ``foundry verify`` and holds them to one rule set (tests/cpu/test_one_gate.py).

Each case changes a copy of one sound archive: the round-trip variants' SAVE on the fake driver (a template and
three members in the graph bundle, two images, a state memory snapshot), with a document listed as an engine
plugin lists its metadata (``DOCUMENT``). ``lazy`` says who refuses it: True, LOAD as it runs (and ``foundry
verify`` with the very message LOAD raises); False, only the rules beyond what LOAD reads in Python (the record's
counts, pointers, the manifest's region against its graphs'), which LOAD's eager run (``foundry.load.preflight``)
applies and verify reports with the same message; None, ``foundry verify`` alone (a file LOAD never reads).

Gathered from the tests that damage archives one way each (test_verify_files.py, test_archive_manifest.py,
test_signing.py, test_archive_documents.py, test_bundle_fake.py, test_bundle_startup_fake.py,
errors/test_load_errors.py, test_verify_as_strict_as_load.py), on this one archive. Not here: a
document the program asks for that the manifest does not list (the archive alone is sound: verify reports the
file as foreign, LOAD refuses the program's request), and damage the fake driver cannot tell (kernel images and
parameters of other tools: test_verify_kernel_params.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundry.archive import BUNDLE_NAME, MANIFEST_NAME, container_path, read_manifest, write_manifest
from foundry.schema import Identity
from foundry.storage import REGION_HINT, document_ref, write_document, write_region_hint
from foundry.trust import SigningKey, sign_manifest
from tests.support.archive_damage import (
    edit_doc,
    edit_stored,
    flip_byte,
    flip_stored,
    relist,
    store,
    stored,
    truncate,
    unbundle,
)

NAMES = ("v0", "v1", "v2", "v3")  # the graphs LOAD is asked for, in the manifest's order: v0 is the template
DOCUMENT = "tool_plugin.json"
KEY = SigningKey(b"k" * 32, "the test key")
OTHER_KEY = SigningKey(b"o" * 32, "another key")
OTHER_GPU = "Other GPU"  # what the fake driver reports with FAKECUDA_DEVICE_NAME set to it


@dataclass(frozen=True)
class Case:
    """One damage: ``damage`` changes the archive in place; LOAD runs under ``KEY`` where ``key``, on a machine
    whose GPU is ``OTHER_GPU`` where ``other_gpu``; ``lazy`` says who refuses it (the module's docstring)."""

    id: str
    damage: Callable[[Path], object]
    lazy: bool | None = True
    key: bool = False
    other_gpu: bool = False
    note: str = field(default="", compare=False)


def with_document(arch: Path) -> None:
    """The sound archive: SAVE's, plus a document the manifest lists (written and listed as SAVE does)."""
    write_document(arch, DOCUMENT, {"format": "tool", "steps": ["a", "b"]})
    edit_doc(arch / MANIFEST_NAME, lambda d: d.update(documents=[document_ref(arch, DOCUMENT).to_json()]))


def other_machine(identity: Identity) -> Identity:
    """The identity of the machine LOAD runs on in an ``other_gpu`` case."""
    return dataclasses.replace(identity, gpu_name=OTHER_GPU)


# ------------------------------------------------------------------------------------------- damages
def _sign(arch: Path, key: SigningKey = KEY) -> None:
    write_manifest(arch, sign_manifest(read_manifest(arch), key))


def _edit_manifest(edit: Callable[[dict[str, Any]], object]) -> Callable[[Path], None]:
    return lambda arch: edit_doc(arch / MANIFEST_NAME, edit)


def _forge(name: str, edit: Callable[[dict[str, Any]], object]) -> Callable[[Path], None]:
    """Graph ``name``'s JSON edited and sealed again, and its hash in the manifest restated, as a forger would."""

    def apply(arch: Path) -> None:
        edit_stored(arch / f"{name}.json", edit)
        relist(arch / f"{name}.json")

    return apply


def _hint(arch: Path) -> None:
    """The region hint each graph's SAVE writes, as an archive keeps it where its manifest was written by an older
    Foundry (this one removes it once the manifest states the region)."""
    region = read_manifest(arch).region
    write_region_hint(arch, region.base, region.size)


def _image(arch: Path) -> Path:
    return sorted((arch / "images").glob("*.bin"))[0]


def _memory(arch: Path) -> Path:
    (snapshot,) = (arch / "memory").glob("*.bin")
    return snapshot


def _restate_bundle(arch: Path) -> None:
    size = (arch / BUNDLE_NAME).stat().st_size
    edit_doc(arch / MANIFEST_NAME, lambda d: d["bundle"].update(bytes=size))


def _files(damage: Callable[[Path], object]) -> Callable[[Path], None]:
    """``damage`` to the archive turned into one that stores its graphs in their files (a form the format allows)."""

    def apply(arch: Path) -> None:
        unbundle(arch)
        damage(arch)

    return apply


def _link_out(arch: Path) -> None:
    outside = arch.parent / "elsewhere.json"
    shutil.copy(arch / "v2.json", outside)
    (arch / "v2.json").unlink()
    (arch / "v2.json").symlink_to(outside)


def _dangling_link(arch: Path) -> None:
    (arch / "v2.json").unlink()
    (arch / "v2.json").symlink_to("/nonexistent/v2.json")


def _fifo(path: Path) -> None:
    """A FIFO where the archive has a file: read without blocking, it is refused by its type."""
    path.unlink()
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _copy_outside(arch: Path, path: Path) -> None:
    """An identical copy outside the archive ``arch``, linked in the place of its file ``path``."""
    outside = arch.parent / f"outside-{path.name}"
    shutil.copy(path, outside)
    path.unlink()
    path.symlink_to(outside)


def _images_dir_outside(arch: Path) -> None:
    shutil.move(arch / "images", arch.parent / "images-outside")
    (arch / "images").symlink_to(arch.parent / "images-outside")


def _container_version(arch: Path) -> None:
    path = container_path(arch / "v0.json")
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 8, 7)
    path.write_bytes(bytes(data))


def _variables(doc: dict[str, Any]) -> None:
    next(iter(doc["images"].values()))["variables"] = [{"name": "ctab", "bytes": 4, "sha256": "ab" * 32}]


def _variable_the_image_lacks(arch: Path) -> None:
    """The manifest lists a module variable for an image, its value stored as SAVE stores one, which the image
    does not define."""
    value = b"\x01\x02\x03\x04"
    sha = hashlib.sha256(value).hexdigest()
    (arch / "memory" / f"{sha}.bin").write_bytes(value)
    edit_doc(arch / MANIFEST_NAME, lambda d: next(iter(d["images"].values())).update(
        variables=[{"name": "ctab", "bytes": len(value), "sha256": sha}]))  # fmt: skip


def _document_not_sealed(arch: Path) -> None:
    plain = json.dumps({"format": "tool", "steps": ["a", "b"]}).encode()
    (arch / DOCUMENT).write_bytes(plain)
    edit_doc(arch / MANIFEST_NAME, lambda d: d.update(documents=[document_ref_of(DOCUMENT, plain)]))


def document_ref_of(name: str, data: bytes) -> dict[str, Any]:
    """What the manifest lists of a document of bytes ``data``, whatever they are (as a forger lists it)."""
    return {"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _lower_region(doc: dict[str, Any]) -> None:
    doc["region"]["high_water"] = 0
    doc["region"]["events"] = []


def _misstate_topology(arch: Path) -> None:
    """The template's topology key restated everywhere it is written (its JSON, the manifest's entries and group),
    but not the record's: only recomputing it from the record tells."""
    other = "ab" * 32
    edit_stored(arch / "v0.json", lambda d: d.update(topology=other))

    def restate(doc: dict[str, Any]) -> None:
        for g in doc["graphs"]:
            g["topology"] = other
        for g in doc["groups"]:
            g["topology"] = other

    edit_doc(arch / MANIFEST_NAME, restate)
    for name in NAMES[1:]:  # the members name the template's topology as their own: SAVE groups them by it
        edit_stored(arch / f"{name}.json", lambda d: d.update(topology=other))
    for name in NAMES:
        relist(arch / f"{name}.json")


CASES: tuple[Case, ...] = (
    # the manifest
    Case("manifest-missing", lambda a: (a / MANIFEST_NAME).unlink()),
    Case("manifest-truncated", lambda a: truncate(a / MANIFEST_NAME, 100)),
    Case("manifest-byte-flipped", lambda a: flip_byte(a / MANIFEST_NAME, 40)),
    Case("manifest-unknown-version", _edit_manifest(lambda d: d.update(format_version=9))),
    Case("manifest-created-garbage", _edit_manifest(lambda d: d.update(created="garbage"))),
    Case("manifest-group-out-of-range", _edit_manifest(lambda d: d["graphs"][1].update(group=5))),
    Case(
        "manifest-kernel-list-names-a-missing-kernel",
        _edit_manifest(lambda d: next(iter(d["images"].values()))["kernels"].append("_Z7missingv")),
    ),
    # signatures, under a key
    Case("unsigned-under-a-key", lambda a: None, key=True),
    Case("no-manifest-under-a-key", lambda a: (a / MANIFEST_NAME).unlink(), key=True),
    Case("signed-with-another-key", lambda a: _sign(a, OTHER_KEY), key=True),
    Case(
        "changed-after-signing",
        lambda a: (_sign(a), edit_doc(a / MANIFEST_NAME, lambda d: d.update(foundry_version="9.9.9"))),
        key=True,
    ),
    Case("graph-changed-after-signing", lambda a: (_sign(a), flip_stored(a / "v1.json", 100)), key=True),
    Case("document-changed-after-signing", lambda a: (_sign(a), flip_byte(a / DOCUMENT, 20)), key=True),
    # the region
    Case("region-hint-damaged", lambda a: (_hint(a), flip_byte(a / REGION_HINT, 30))),
    Case(
        "region-hint-of-another-region",
        lambda a: (_hint(a), edit_doc(a / REGION_HINT, lambda d: d.update(size=d["size"] // 2))),
    ),
    Case("manifest-region-below-its-graphs", _edit_manifest(_lower_region), lazy=False),
    # images, state memory, documents
    Case("image-missing", lambda a: _image(a).unlink()),
    Case("image-byte-flipped", lambda a: flip_byte(_image(a), 100)),
    Case("image-truncated", lambda a: truncate(_image(a), 64)),
    Case("image-grown", lambda a: _image(a).open("ab").write(b"\0" * 4096)),
    Case("image-is-a-fifo", lambda a: _fifo(_image(a))),
    Case("image-links-to-dev-zero", lambda a: _dev_zero(_image(a))),
    Case("image-links-to-a-copy-outside", lambda a: _copy_outside(a, _image(a))),
    Case("images-directory-outside", _images_dir_outside),
    Case("memory-is-a-fifo", lambda a: _fifo(_memory(a))),
    Case("manifest-is-a-fifo", lambda a: _fifo(a / MANIFEST_NAME)),
    Case("manifest-links-to-dev-zero", lambda a: _dev_zero(a / MANIFEST_NAME)),
    Case("memory-missing", lambda a: _memory(a).unlink()),
    Case("memory-byte-flipped", lambda a: flip_byte(_memory(a), 0)),
    Case("document-missing", lambda a: (a / DOCUMENT).unlink()),
    Case("document-byte-flipped", lambda a: flip_byte(a / DOCUMENT, 20)),
    Case("document-truncated", lambda a: truncate(a / DOCUMENT, 10)),
    Case("document-not-sealed", _document_not_sealed),
    # the graph bundle
    Case("bundle-missing", lambda a: (a / BUNDLE_NAME).unlink()),
    Case("bundle-cut-short", lambda a: truncate(a / BUNDLE_NAME, (a / BUNDLE_NAME).stat().st_size - 1)),
    Case("bundle-count-changed", lambda a: flip_byte(a / BUNDLE_NAME, 12)),
    Case("bundle-bytes-appended", lambda a: ((a / BUNDLE_NAME).open("ab").write(b"\0" * 64), _restate_bundle(a))),
    Case("file-beside-the-bundle", lambda a: (a / "v1.cugraph").write_bytes(stored(a / "v1.json")[1])),
    # a graph's JSON
    Case("json-byte-flipped", lambda a: flip_stored(a / "v1.json", 100)),
    Case("json-truncated", lambda a: store(a / "v1.json", json_bytes=stored(a / "v1.json")[0][:200])),
    Case(
        "json-other-record-not-relisted",
        lambda a: edit_stored(a / "v0.json", lambda d: d["record"].update(sha256="0" * 64)),
    ),
    Case("json-missing-a-key", _forge("v1", lambda d: d.pop("functions"))),
    Case("json-unknown-version", _forge("v1", lambda d: d.update(format_version=99))),
    Case("json-images-elsewhere", _forge("v1", lambda d: d.update(archive_dir="images"))),
    Case("json-renamed", _forge("v1", lambda d: d.update(name="renamed"))),
    Case("json-other-record", _forge("v0", lambda d: d["record"].update(sha256="0" * 64))),
    Case("json-other-variables", _forge("v2", _variables)),
    Case("manifest-other-variables", _edit_manifest(_variables)),
    Case("manifest-variable-its-image-lacks", _variable_the_image_lacks),
    Case("json-other-identity", _forge("v3", lambda d: d["identity"].update(gpu_name="Forged GPU"))),
    Case("json-states-the-manifests-region-too", _forge("v1", lambda d: d["region"].update(base=0x1000))),
    Case("json-region-past-the-manifests", _forge("v1", lambda d: d["region"].update(high_water=1 << 62))),
    # records and containers
    Case("record-byte-flipped", lambda a: flip_stored(a / "v1.json", -9, "container")),
    Case("record-truncated", lambda a: store(a / "v1.json", container=stored(a / "v1.json")[1][:100])),
    Case("files-record-byte-flipped", _files(lambda a: flip_byte(a / "v0.cugraph", -9))),
    Case("files-record-missing", _files(lambda a: (a / "v0.cugraph").unlink())),
    Case("files-container-version", _files(_container_version)),
    Case("files-record-of-another-save", _files(lambda a: shutil.copyfile(a / "v1.cugraph", a / "v2.cugraph"))),
    Case("files-json-linked-out-of-the-archive", _files(_link_out)),
    Case("files-json-dangling-link", _files(_dangling_link)),
    Case("files-record-is-a-fifo", _files(lambda a: _fifo(a / "v0.cugraph"))),
    Case(
        "files-record-named-out-of-the-archive",
        _files(_forge("v1", lambda d: d["record"].update(file="../outside.txt"))),
    ),
    Case("json-images-above-the-archive", _forge("v1", lambda d: d.update(archive_dir="../.."))),
    Case("json-images-at-the-root", _forge("v1", lambda d: d.update(archive_dir="/"))),
    Case("template-named-out-of-the-archive", _forge("v2", lambda d: d["template"].update(json="../outside.txt"))),
    # templates
    Case("member-of-itself", _forge("v1", lambda d: d["template"].update(json="v1.json"))),
    Case("template-is-a-member", _forge("v2", lambda d: d["template"].update(json="v1.json"))),
    Case("template-saved-again", _forge("v3", lambda d: d["template"].update(record_sha256="ab" * 32))),
    # the machine
    Case("another-gpu", lambda a: None, other_gpu=True),
    # beyond what LOAD reads in Python
    Case("node-count-misstated", _edit_manifest(lambda d: d["graphs"][0].update(nodes=99)), lazy=False),
    Case("topology-misstated", _misstate_topology, lazy=False),
    Case("output-outside-live-memory", _forge("v0", lambda d: d["outputs"][0].update(nbytes=2**40)), lazy=False),
    # files LOAD never reads
    Case("foreign-file", lambda a: (a / "notes.txt").write_text("not the archive's"), lazy=None),
    Case("temporary-file", lambda a: (a / ".v1.json.0123456789ab.foundry-tmp").write_bytes(b"{"), lazy=None),
)


def key_file(directory: Path, key: SigningKey = KEY) -> Path:
    """``key``'s bytes in a file, as LOAD and verify are given a key."""
    path = directory / "foundry.key"
    path.write_bytes(key.secret)
    os.chmod(path, 0o600)
    return path
