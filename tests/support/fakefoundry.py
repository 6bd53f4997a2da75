"""A stand-in Foundry for CPU tests of the engine plugins' own logic (tests/support/fakevllm.py and fakesglang.py
are the engines it runs in): FoundryApi over a fake region, a cursor and a log of allocations like Foundry's,
graphs as small JSON files. Documents are Foundry's own (foundry.write_archive_document, read_archive_document),
listed in a real, sealed manifest that lists no graphs (``write_fake_manifest``), so that the plugins' metadata
is written and read, proven and refused, exactly as with Foundry.

What the plugins ask of Foundry itself is tested on the real library over the fake driver
(tests/cpu/integration/test_plugins_on_foundry.py: SAVE, LOAD in a fresh process, graphs replayed, damage
refused). This stand-in stays for what the real library cannot do there:
- run inside the test process: the real library needs its interposer preloaded and a driver of its own, so one
  engine start-up costs a fresh process (about half a second) where this costs a millisecond, for the two
  hundred cases of phases, settings, refusals and forged metadata the plugins' tests walk through;
- show the plugins' calls, in order (``calls``, ``log``), and the region's cursor as the plugin moves it;
- fail or lag on demand: a background build that fails (``build_error``) or is not done when the plugin's
  watcher asks (``slow_builds``), which the real library on the fake driver does only by chance or by time.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import foundry
from foundry.archive import Manifest, now_iso, read_manifest, write_manifest
from foundry.ranks.registrations import MAX_RANKS
from foundry.schema import RegionSpec
from foundry.schema.jsondocs import load_sealed
from foundry.storage import document_ref
from foundry.trust import configured_key, sign_manifest
from tests.support.faketensor import FakeTensor
from tests.support.peermemory import PeerMemory
from tests.support.samples import sample_identity

GRANULARITY = 2 << 20


@dataclass
class BoundRegistrations(foundry.PeerRegistrations):
    """``foundry.PeerRegistrations`` over a memory and mappings of the test's (``driver``: foundry.ranks'
    ``Driver``) rather than this process's, its declarations recorded by ``remaps``."""

    driver: Any = None
    remaps: Any = None

    def around(self, register: Any, count: int, driver: Any = None, remaps: Any = None, first: Any = None) -> Any:
        return super().around(register, count, self.driver, self.remaps, first)


@dataclass
class FakeFoundryGraph:
    """What FakeFoundry.new_graph hands out; ``captured`` says a capture ran into it through FakeFoundry."""

    index: int
    captured: bool = False
    loaded_from: str | None = None
    replays: int = 0

    def replay(self) -> None:
        self.replays += 1

    # capture without foundry.graph(), as SGLang's breakable graphs capture each segment
    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        assert not self.captured and self.loaded_from is None, "captured into a graph twice"

    def capture_end(self) -> None:
        self.captured = True


@dataclass
class FakeFoundry:
    """FoundryApi over a fake region: a cursor, a log of allocations, archives as small JSON files."""

    base: int | None = None
    size: int = 0
    cursor_at: int = 0
    high: int = 0
    log: list[tuple[str, int, int]] = field(default_factory=list)  # (kind, offset, size)
    calls: list[str] = field(default_factory=list)
    bundles_stored: list[tuple[Path, Path]] = field(default_factory=list)  # (rank folder, base), in order
    boundaries: int = 0  # phase marks: each closes the region's shared small-allocation granule
    graphs_made: int = 0
    captures: int = 0
    high_water_saved: int = 0  # what Foundry's restore moves the cursor past (SAVE's high-water mark)
    # a custom all-reduce's table and the peers' memory it opened, what SAVE declared the program's, and what
    # LOAD wrote again
    peers: PeerMemory = field(default_factory=lambda: PeerMemory(0))
    remapped: list[tuple[int, int]] = field(default_factory=list)
    rewritten: list[Any] = field(default_factory=list)
    rewritten_width: int = 0  # the pointers a slot LOAD rewrote with
    driver_room: int = 0  # what small_allocation_room answers (the driver's page room, measured on a GPU)

    # what the fake engine calls to allocate persistent device memory
    def allocate(self, nbytes: int) -> FakeTensor:
        if self.base is None:
            return FakeTensor(0x1000_0000 + len(self.log) * GRANULARITY, nbytes)  # outside any region
        span = -(-nbytes // GRANULARITY) * GRANULARITY
        offset = -(-self.cursor_at // GRANULARITY) * GRANULARITY
        for start, end in sorted((o, o + -(-n // GRANULARITY) * GRANULARITY) for k, o, n in self.log if k == "ALLOC"):
            if start < offset + span and offset < end:  # as the region steps over live memory (rg_skip_live)
                offset = end
        self.cursor_at = offset + span
        self.high = max(self.high, self.cursor_at)
        self.log.append(("ALLOC", offset, nbytes))
        return FakeTensor(self.base + offset, nbytes)

    # the fake engines' kernels (faketorch.DeviceMemory runs them): here there is no memory to compute in
    def compute(self, out: FakeTensor, a: FakeTensor, b: FakeTensor) -> None:
        pass

    def copy(self, dst: FakeTensor, src: FakeTensor) -> None:
        pass

    # FoundryApi
    def set_rank(self, rank: int, world_size: int) -> None:
        self.calls.append("set_rank")
        self.rank = (rank, world_size)

    def set_region(self, base: int, size: int) -> None:
        self.calls.append("set_region")
        self.base, self.size = base, size

    def cursor(self) -> int:
        return self.cursor_at

    def set_cursor(self, offset: int) -> None:
        self.calls.append(f"set_cursor:{offset:#x}")
        self.log.append(("CURSOR", offset, 0))
        self.cursor_at = offset

    def boundary(self) -> None:
        self.boundaries += 1  # counted apart from the calls: every phase mark makes one

    def small_allocation_room(self) -> int:
        self.calls.append("small_allocation_room")
        return self.driver_room

    def open_small_granule(self, room: int) -> None:
        self.calls.append(f"open_small_granule:{room}")
        if room:  # a granule mapped at the cursor, as the region does
            self.cursor_at = -(-self.cursor_at // GRANULARITY) * GRANULARITY + GRANULARITY
            self.high = max(self.high, self.cursor_at)

    def high_water(self) -> int:
        return self.high

    def allocations_from(self, first: int) -> tuple[list[tuple[int, int]], int]:
        return [(o, s) for k, o, s in self.log[first:] if k == "ALLOC"], len(self.log)

    def log_length(self) -> int:
        return len(self.log)

    def load_modules(self, archive: Path) -> None:
        self.calls.append("load_modules")
        self.loaded_from = archive

    def new_graph(self) -> FakeFoundryGraph:
        self.graphs_made += 1
        return FakeFoundryGraph(self.graphs_made)

    @contextmanager
    def graph(
        self, cuda_graph: Any, pool: Any = None, stream: Any = None, capture_error_mode: str = "global"
    ) -> Iterator[Any]:
        assert isinstance(cuda_graph, FakeFoundryGraph), "vLLM captured into a graph Foundry did not make"
        self.captures += 1
        yield cuda_graph
        cuda_graph.captured = True

    def save_graph(self, cuda_graph: Any, path: Path, outputs: Any, archive: Path) -> None:
        assert cuda_graph.captured
        path.write_text(json.dumps({"graph": cuda_graph.index, "outputs": [t.data_ptr() for t in _flat(outputs)]}))
        self.calls.append(f"save_graph:{path.name}")

    def write_document(self, archive: Path, name: str, doc: Mapping[str, Any]) -> None:
        foundry.write_archive_document(archive, name, doc)
        self.calls.append(f"write_document:{name}")

    def save_manifest(self, archive: Path, documents: Sequence[str] = ()) -> None:
        write_fake_manifest(archive, documents, self.base or 0, self.size, self.high)
        self.calls.append("save_manifest")

    def store_bundle_against(self, archive: Path, base: Path) -> int:
        self.calls.append("store_bundle_against")
        self.bundles_stored.append((archive, base))
        return 0  # the fake's archives hold no graph bundle

    def read_document(self, archive: Path, name: str) -> dict[str, Any]:
        doc: dict[str, Any] = foundry.read_archive_document(archive, name)
        return doc

    def archive_region(self, archive: Path) -> tuple[int, int, int]:
        region = foundry.read_archive_region(archive)
        return region.base, region.size, region.high_water

    # the engine caches: Foundry's own, pure Python (foundry/save/caches.py, foundry/gate/caches.py)
    def signing_key_id(self) -> str | None:
        return foundry.signing_key_id()

    def pack_caches(
        self,
        archive: Path,
        identity: Mapping[str, str],
        trees: Mapping[str, Mapping[str, Path]],
        update_manifest: bool = False,
    ) -> str:
        self.calls.append("pack_caches again" if update_manifest else "pack_caches")
        return foundry.pack_engine_caches(archive, identity, trees, update_manifest=update_manifest)

    def open_caches(self, archive: Path, here: Mapping[str, str], dest: Path) -> dict[str, Path] | None:
        opened = foundry.open_engine_caches(archive, here, dest)
        if opened is not None:  # an archive without caches: nothing to note (most tests compare the calls)
            self.calls.append("open_caches")
        return opened

    def load_modules_phases(self) -> dict[str, float]:
        return {"checks": 0.001, "reserve": 0.002, "warm": 0.003}

    def startup_seconds(self) -> dict[str, float]:
        return {"checks": 0.001, "graphs": 0.004}

    def save_seconds(self) -> dict[str, float]:
        return {"variables": 0.005, "extract_beside": 0.002}

    def start_builds(
        self, paths: Sequence[Path], threads: int, allow_mismatch: tuple[str, ...], defer_dedicated: bool = False
    ) -> Any:
        self.calls.append("start_builds" + (" deferred" if defer_dedicated else ""))
        # Foundry's restore maps SAVE's memory and moves the cursor past it
        self.log.append(("RESTORE", 0, 0))
        self.cursor_at = max(self.cursor_at, self.high_water_saved)
        return SimpleNamespace(paths=list(paths), timings={"all_replayable_s": 0.01})

    def build_dedicated(self, pending: Any) -> None:
        self.calls.append("build_dedicated")

    def wait_builds(self, pending: Any, timeout: float | None = None) -> bool:
        self.calls.append("wait_builds")
        if getattr(pending, "build_error", None) is not None:
            raise pending.build_error
        slow = getattr(pending, "slow_builds", 0)  # answers "not yet" that many times
        pending.slow_builds = max(0, slow - 1)
        return timeout is None or slow == 0

    def restored_tensor(self, address: int, nbytes: int) -> FakeTensor:
        """Like foundry.restored_tensor: only inside SAVE's memory, once restore mapped it."""
        assert "start_builds deferred" in self.calls or "start_builds" in self.calls, "restored before restore"
        assert self.base is not None and self.base <= address and address + nbytes <= self.base + self.high_water_saved
        self.calls.append(f"restored_tensor:{address:#x}+{nbytes}")
        return FakeTensor(address, nbytes)

    def peer_registrations(self, rank: int, world: int, rank_data: int, width: int | None = None) -> Any:
        self.peers.rank = rank
        return BoundRegistrations(
            rank, world, rank_data, width=width or MAX_RANKS, driver=self.peers,
            remaps=lambda a, n: self.remapped.append((a, n)),
        )  # fmt: skip

    def rewrite_peer_registrations(
        self,
        registrations: Sequence[Any],
        rank: int,
        world: int,
        rank_data: int,
        exchange: Callable[[Any], list[Any]],
        width: int | None = None,
    ) -> int:
        self.rewritten_width = width or MAX_RANKS
        self.calls.append(f"rewrite_peer_registrations:{sum(len(r.inputs) for r in registrations)}")
        self.rewritten = list(registrations)
        return sum(len(r.inputs) for r in registrations)

    def finish_one(self, pending: Any, index: int) -> tuple[Any, Any]:
        """Like foundry.CUDAGraph.finish_one_graph_load: one tensor bare, several as a tuple, none as None."""
        doc = json.loads(Path(pending.paths[index]).read_text())
        tensors = [FakeTensor(a) for a in doc["outputs"]]
        outputs = tensors[0] if len(tensors) == 1 else (tuple(tensors) or None)
        return FakeFoundryGraph(-1, loaded_from=pending.paths[index].name), outputs


def _flat(outputs: Any) -> list[FakeTensor]:
    """Foundry's order for output tensors: depth first through tuples and lists, Nones skipped."""
    if outputs is None:
        return []
    if isinstance(outputs, list | tuple):
        return [t for item in outputs for t in _flat(item)]
    return [outputs]


def write_fake_manifest(
    archive: Path, documents: Sequence[str], base: int = 0, size: int = 0, high_water: int = 0
) -> Manifest:
    """A sealed manifest of ``archive`` that lists the ``documents`` as they are now (and no graph or image:
    the fake's graph files are not Foundry's) and the region (the archive's one copy of it: the engine's metadata
    refers to it), signed with the configured key, if any, as SAVE signs."""
    region = RegionSpec(base, size, GRANULARITY, high_water, (), ())
    refs = tuple(document_ref(archive, name) for name in documents)
    manifest = Manifest("0.1.0", now_iso(), sample_identity(), region, (), (), (), documents=refs)
    key = configured_key()
    if key is not None:
        manifest = sign_manifest(manifest, key)
    write_manifest(archive, manifest)
    return manifest


def forge_document(archive: Path, name: str, edit: Callable[[dict[str, Any]], object]) -> None:
    """Rewrites document ``name`` with ``edit`` applied, as a forger who can write the archive but holds no
    signing key would: sealed again, and listed again (size and SHA-256) in an unsigned manifest. What is left
    to refuse it is the program that reads it."""
    doc = dict(load_sealed(Path(archive / name).read_bytes(), name))
    edit(doc)
    foundry.write_archive_document(archive, name, doc)
    manifest = read_manifest(archive)
    listed = tuple(document_ref(archive, d.file) for d in manifest.documents)
    write_manifest(archive, dataclasses.replace(manifest, documents=listed, signature=None))
