"""The part of Foundry's public API the engine plugins use, behind one interface.

Everything a plugin asks of Foundry goes through a ``FoundryApi``: the real one calls the top-level
``foundry`` package; CPU tests pass a fake that records the calls. Nothing here imports an engine or torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import foundry

__all__ = ["ALLOC_KINDS", "FoundryApi", "PublicFoundryApi"]

# Allocation-log entries that hand out memory (foundry.allocation_events kinds, by name).
ALLOC_KINDS = frozenset({"ALLOC", "ASYNC_ALLOC"})
# The spans of foundry.startup_phases() that load_cuda_modules_and_libraries times on the caller's thread (the
# others are its background work), in order: the manifest's checks, the CUDA context where the region's
# reservation needs one first (the engine's own cost, paid earlier), the reservation, the image readers
# started, the builder threads' warm-up, the start-up thread started.
CALLER_STEPS = ("checks", "context", "reserve", "readers", "warm", "launch")


class FoundryApi(Protocol):
    def set_rank(self, rank: int, world_size: int) -> None: ...
    def set_region(self, base: int, size: int) -> None: ...
    def cursor(self) -> int: ...
    def set_cursor(self, offset: int) -> None: ...
    def boundary(self) -> None:
        """The region's next small allocation opens a granule of its own at the cursor (a cursor move to the
        cursor itself, which LOAD's move to SAVE's phase boundary matches)."""
        ...

    def small_allocation_room(self) -> int:
        """Bytes of small allocations the driver's own packing would take now without more device memory."""
        ...

    def open_small_granule(self, room: int) -> None:
        """The region's next small allocations share a granule mapped now, ``room`` bytes of it theirs."""
        ...

    def high_water(self) -> int: ...
    def allocations_from(self, first: int) -> tuple[list[tuple[int, int]], int]:
        """(offset, size) of the allocations logged from entry ``first`` on, and the next entry's index."""
        ...

    def log_length(self) -> int:
        """The next allocation-log entry's index (what ``allocations_from`` returns second, without the entries)."""
        ...

    def load_modules(self, archive: Path) -> None: ...
    def load_modules_phases(self) -> dict[str, float]: ...
    def startup_seconds(self) -> dict[str, float]:
        """Every step of LOAD's start-up so far, the background's included (seconds summed over threads)."""
        ...

    def save_seconds(self) -> dict[str, float]:
        """Every SAVE phase of this process so far (seconds summed over its saves; ``*_beside``: on workers)."""
        ...

    def new_graph(self) -> Any: ...
    def graph(
        self, cuda_graph: Any, pool: Any = None, stream: Any = None, capture_error_mode: str = "global"
    ) -> AbstractContextManager[Any]: ...
    def save_graph(self, cuda_graph: Any, path: Path, outputs: Any, archive: Path) -> None: ...
    def write_document(self, archive: Path, name: str, doc: Mapping[str, Any]) -> None:
        """Writes the plugin's metadata as a sealed archive document, for ``save_manifest`` to list."""
        ...

    def save_manifest(self, archive: Path, documents: Sequence[str] = ()) -> None:
        """Writes the manifest, the archive's commit point, listing the documents named (each written before)."""
        ...

    def store_bundle_against(self, archive: Path, base: Path) -> int:
        """After the ranks' SAVEs: stores a finished rank folder's graph bundle against another's; the bytes saved."""
        ...

    def read_document(self, archive: Path, name: str) -> dict[str, Any]:
        """A document as the archive's manifest lists it, proven (hash, seal, signature with a key in force);
        raises Foundry's ArchiveError otherwise."""
        ...

    def archive_region(self, archive: Path) -> tuple[int, int, int]:
        """The archive's region as its manifest states it, proven as ``read_document`` proves it: base, size and
        high-water mark."""
        ...

    def signing_key_id(self) -> str | None:
        """The id of the signing key in force (SAVE signs with it, LOAD proves with it), None without one."""
        ...

    def pack_caches(
        self,
        archive: Path,
        identity: Mapping[str, str],
        trees: Mapping[str, Mapping[str, Path]],
        update_manifest: bool = False,
    ) -> str:
        """SAVE: copies each cache's files into the archive and writes their listing; the document's name, for
        ``save_manifest`` to list. ``update_manifest``: into the finished archive, whose manifest lists the new
        listing."""
        ...

    def open_caches(self, archive: Path, here: Mapping[str, str], dest: Path) -> dict[str, Path] | None:
        """LOAD: the archive's caches copied to ``dest``, each cache's directory there; None when it has none.
        Raises Foundry's CachesRefusedError when they may not be used here (unsigned, other versions, damaged)."""
        ...

    def start_builds(
        self, paths: Sequence[Path], threads: int, allow_mismatch: tuple[str, ...], defer_dedicated: bool = False
    ) -> Any: ...
    def build_dedicated(self, pending: Any) -> None: ...
    def wait_builds(self, pending: Any, timeout: float | None = None) -> bool:
        """Blocks until every graph has its own exec, or ``timeout`` seconds pass; whether they all have one.
        Raises LoadError if the background builds failed."""
        ...

    def finish_one(self, pending: Any, index: int) -> tuple[Any, Any]: ...
    def restored_tensor(self, address: int, nbytes: int) -> Any:
        """LOAD, after ``start_builds``: a byte tensor over a buffer the engine held at SAVE, at SAVE's address."""
        ...

    def peer_registrations(self, rank: int, world: int, rank_data: int, width: int | None = None) -> Any:
        """SAVE: a record of a custom all-reduce's registrations into its table at ``rank_data``, ``width``
        pointers a slot (None: vLLM's RankData) (``foundry.PeerRegistrations``: ``around(register, count)`` runs
        one and reads it back)."""
        ...

    def rewrite_peer_registrations(
        self,
        registrations: Sequence[Any],
        rank: int,
        world: int,
        rank_data: int,
        exchange: Callable[[Any], list[Any]],
        width: int | None = None,
    ) -> int:
        """LOAD: the registrations written into the table again, the peers' inputs opened here; the slots written."""
        ...


class PublicFoundryApi:
    """FoundryApi over ``import foundry`` (the interposer must be preloaded: ``foundry run -- ...``)."""

    def set_rank(self, rank: int, world_size: int) -> None:
        foundry.set_rank(rank, world_size)

    def set_region(self, base: int, size: int) -> None:
        foundry.set_allocation_region(base, size)

    def cursor(self) -> int:
        return int(foundry.get_current_alloc_offset())

    def set_cursor(self, offset: int) -> None:
        foundry.set_current_alloc_offset(offset)

    def boundary(self) -> None:
        foundry.set_current_alloc_offset(foundry.get_current_alloc_offset())

    def small_allocation_room(self) -> int:
        return int(foundry.small_allocation_room())

    def open_small_granule(self, room: int) -> None:
        foundry.open_small_allocation_granule(room)

    def high_water(self) -> int:
        return int(foundry.region_state().high_water)

    def allocations_from(self, first: int) -> tuple[list[tuple[int, int]], int]:
        events = foundry.allocation_events(first)
        allocating = {k for k in {e.kind for e in events} if getattr(k, "name", str(k)) in ALLOC_KINDS}
        return [(e.offset, e.size) for e in events if e.kind in allocating], first + len(events)

    def log_length(self) -> int:
        return int(foundry.allocation_event_count())

    def load_modules(self, archive: Path) -> None:
        foundry.load_cuda_modules_and_libraries(archive)

    def load_modules_phases(self) -> dict[str, float]:
        """Seconds of ``load_modules``' steps on the caller's thread."""
        seconds = foundry.startup_phases().seconds
        return {k: seconds[k] for k in CALLER_STEPS if k in seconds}

    def startup_seconds(self) -> dict[str, float]:
        return dict(foundry.startup_phases().seconds)

    def save_seconds(self) -> dict[str, float]:
        return dict(foundry.save_phases().seconds)

    def new_graph(self) -> Any:
        return foundry.CUDAGraph()

    def graph(
        self, cuda_graph: Any, pool: Any = None, stream: Any = None, capture_error_mode: str = "global"
    ) -> AbstractContextManager[Any]:
        return foundry.graph(cuda_graph, pool=pool, stream=stream, capture_error_mode=capture_error_mode)

    def save_graph(self, cuda_graph: Any, path: Path, outputs: Any, archive: Path) -> None:
        cuda_graph.save(path, output_tensors=outputs, archive_dir=archive)

    def write_document(self, archive: Path, name: str, doc: Mapping[str, Any]) -> None:
        foundry.write_archive_document(archive, name, doc)

    def save_manifest(self, archive: Path, documents: Sequence[str] = ()) -> None:
        foundry.save_graph_manifest(archive, documents=list(documents))

    def store_bundle_against(self, archive: Path, base: Path) -> int:
        return int(foundry.store_bundle_against(archive, base))

    def read_document(self, archive: Path, name: str) -> dict[str, Any]:
        return foundry.read_archive_document(archive, name)

    def archive_region(self, archive: Path) -> tuple[int, int, int]:
        region = foundry.read_archive_region(archive)
        return region.base, region.size, region.high_water

    def signing_key_id(self) -> str | None:
        return foundry.signing_key_id()

    def pack_caches(
        self,
        archive: Path,
        identity: Mapping[str, str],
        trees: Mapping[str, Mapping[str, Path]],
        update_manifest: bool = False,
    ) -> str:
        return foundry.pack_engine_caches(archive, identity, trees, update_manifest=update_manifest)

    def open_caches(self, archive: Path, here: Mapping[str, str], dest: Path) -> dict[str, Path] | None:
        return foundry.open_engine_caches(archive, here, dest)

    def start_builds(
        self, paths: Sequence[Path], threads: int, allow_mismatch: tuple[str, ...], defer_dedicated: bool = False
    ) -> Any:
        return foundry.CUDAGraph.start_graph_builds(
            list(paths), num_threads=threads, allow_mismatch=allow_mismatch, defer_dedicated=defer_dedicated
        )

    def build_dedicated(self, pending: Any) -> None:
        pending.build_dedicated()

    def wait_builds(self, pending: Any, timeout: float | None = None) -> bool:
        return bool(pending.wait_all(timeout))

    def finish_one(self, pending: Any, index: int) -> tuple[Any, Any]:
        graph, outputs = foundry.CUDAGraph.finish_one_graph_load(pending, index)
        return graph, outputs

    def restored_tensor(self, address: int, nbytes: int) -> Any:
        return foundry.restored_tensor(address, nbytes)

    def peer_registrations(self, rank: int, world: int, rank_data: int, width: int | None = None) -> Any:
        if width is None:
            return foundry.PeerRegistrations(rank, world, rank_data)
        return foundry.PeerRegistrations(rank, world, rank_data, width=width)

    def rewrite_peer_registrations(
        self,
        registrations: Sequence[Any],
        rank: int,
        world: int,
        rank_data: int,
        exchange: Callable[[Any], list[Any]],
        width: int | None = None,
    ) -> int:
        if width is None:
            return foundry.rewrite_peer_registrations(registrations, rank, world, rank_data, exchange)
        return foundry.rewrite_peer_registrations(registrations, rank, world, rank_data, exchange, width=width)
