"""Files read because a user named them (a signing key by `--key` or $FOUNDRY_SIGNING_KEY, `verify --identity`)
and the region hint SAVE compares before it rewrites it are read as an archive's own files are
(foundry.storage.reads.read_regular): refused by their type before a byte is read (a FIFO would wait for ever for
a writer, a device never ends, a directory is no file) and bounded in size, in words that say what to give
instead. Each command runs in a child with a memory limit and a timeout, so that a reader without either bound
fails its test rather than hanging it or taking the machine's memory."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from foundry.errors import ArchiveSignatureError
from foundry.storage.files import MAX_HINT_BYTES
from foundry.storage.reads import MAX_JSON_BYTES
from foundry.trust.signing import KEY_ENV, MAX_KEY_BYTES, SigningKey
from tests.support.subproc import REPO_ROOT, child_env, run_python
from tests.support.verify_archives import build_archive

CHILD_MEMORY = 1 << 30
"""Address space of each child: the CLI needs a fraction of it; reading /dev/zero whole would need all."""
CHILD_SECONDS = 60
"""A child that waits on a FIFO is stopped here (the commands take about a second)."""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def cli(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = child_env(None, env)
    e.pop("LD_PRELOAD", None)
    return subprocess.run(
        [sys.executable, "-m", "foundry.cli", *args],
        env=e,
        capture_output=True,
        text=True,
        timeout=CHILD_SECONDS,
        cwd=str(REPO_ROOT),
        preexec_fn=_limit_memory,
    )


def not_regular(tmp_path: Path, too_large: int) -> dict[str, tuple[Path, str]]:
    """Paths that are no file to read whole, each with what the refusal says of it: a FIFO with no writer, a
    character device without end, a directory, and a (sparse) regular file of ``too_large`` bytes."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    directory = tmp_path / "dir"
    directory.mkdir()
    large = tmp_path / "large"
    with open(large, "wb") as f:
        f.truncate(too_large)
    return {
        "fifo": (fifo, "it is a FIFO, not a regular file"),
        "device": (Path("/dev/zero"), "it is a character device, not a regular file"),
        "directory": (directory, "it is a directory, not a regular file"),
        "too-large": (large, f"it is {too_large} bytes, more than the"),
    }


KINDS = ["fifo", "device", "directory", "too-large"]


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return build_archive(tmp_path / "arch")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("given_by", ["--key", KEY_ENV])
def test_a_signing_key_that_is_no_small_regular_file_is_refused_before_it_is_read(
    archive: Path, tmp_path: Path, kind: str, given_by: str
) -> None:
    path, why = not_regular(tmp_path, MAX_KEY_BYTES + 1)[kind]
    if given_by == "--key":
        p = cli("verify", "--no-identity", "--key", str(path), str(archive))
    else:
        p = cli("verify", "--no-identity", str(archive), env={KEY_ENV: str(path)})
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert f"{path} cannot be read ({why}" in p.stderr and "fix the path" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count(str(path)) == 1, p.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_an_identity_file_that_is_no_bounded_regular_file_is_refused_before_it_is_read(
    archive: Path, tmp_path: Path, kind: str
) -> None:
    path, why = not_regular(tmp_path, MAX_JSON_BYTES + 1)[kind]
    p = cli("verify", "--json", "--identity", str(path), str(archive))
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"the identity file {path} cannot be read ({why}" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "give a JSON file that holds an identity" in p.stderr and p.stderr.count(str(path)) == 1, p.stderr
    assert json.loads(p.stdout)["ok"] is False


def test_an_identity_file_that_holds_no_identity_is_named_once(archive: Path, tmp_path: Path) -> None:
    for text, said in (("{", "not valid JSON"), ('{"a": 1}', "compute_capability")):
        path = tmp_path / "identity.json"
        path.write_text(text)
        p = cli("verify", "--identity", str(path), str(archive))
        assert p.returncode == 2 and said in p.stderr and p.stderr.count(str(path)) == 1, p.stderr


def test_a_key_file_is_read_up_to_its_bound_and_no_further(tmp_path: Path) -> None:
    path = tmp_path / "foundry.key"
    path.write_bytes(b"k" * MAX_KEY_BYTES)
    assert SigningKey.from_file(path).secret == b"k" * MAX_KEY_BYTES
    path.write_bytes(b"k" * (MAX_KEY_BYTES + 1))
    with pytest.raises(ArchiveSignatureError, match=f"more than the {MAX_KEY_BYTES} a reader takes"):
        SigningKey.from_file(path)


# region.json where SAVE writes the hint, and a file hashed whole (sha256_file), as something else: SAVE puts
# the hint in its place without reading it, and the hash refuses it, each without waiting on the FIFO.
SAVE_OVER = """
import json, os
from foundry.errors import ArchiveCorruptError
from foundry.storage import REGION_HINT, sha256_file, write_region_hint
from foundry.storage import read_region_hint
out = {}
for name in ("fifo", "large"):
    d = os.path.join(ARCH, name)
    os.makedirs(d)
    hint = os.path.join(d, REGION_HINT)
    if name == "fifo":
        os.mkfifo(hint)
    else:
        with open(hint, "wb") as f:
            f.truncate(LARGE)
    write_region_hint(d, 0x7000_0000_0000, 1 << 30)
    out[name] = read_region_hint(d) == (0x7000_0000_0000, 1 << 30)
fifo = os.path.join(ARCH, "another-fifo")
os.mkfifo(fifo)
for path in (fifo, "/dev/zero"):
    try:
        sha256_file(path)
    except ArchiveCorruptError as exc:
        out[path] = str(exc)
print(json.dumps(out))
"""


def test_save_puts_its_region_hint_over_a_fifo_or_huge_file_and_hashing_refuses_devices(tmp_path: Path) -> None:
    code = f"ARCH = {str(tmp_path)!r}\nLARGE = {MAX_HINT_BYTES + 1}\n" + SAVE_OVER
    out = json.loads(run_python(code, timeout=CHILD_SECONDS).strip().splitlines()[-1])
    assert out["fifo"] is True and out["large"] is True
    assert "not a regular file (a FIFO)" in out[str(tmp_path / "another-fifo")]
    assert "not a regular file (a character device)" in out["/dev/zero"]
