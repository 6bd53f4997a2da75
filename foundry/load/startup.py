"""What LOAD does at process start: ``load_cuda_modules_and_libraries`` (the seed README calls it
before the model is built) takes off LOAD's path everything that can be done early, and does most of
it beside the program rather than in its way.

On the caller's thread, before it returns: the manifest's seal (and, with a key, its signature) is
checked, the region's range is reserved (which may create the CUDA context) before anything else maps
memory, reading and hashing the images starts on reader threads (they need no CUDA), and LOAD's
builder threads start paging in their heaps (threads.py). On a background thread, while the program
builds its model: once every image is read and its hash proven, the images are loaded into the driver (and
the module variables the manifest lists for them are written into them: load/variables.py), and the
kernels the manifest lists are looked up (the driver loads a kernel on its first lookup); and beside that,
on a thread of its own, the graphs are read and checked ahead of LOAD (metadata, manifest listing, records),
for it to take as they are. LOAD (``start_graph_builds``, ``CUDAGraph.load``) waits for that work first, and raises its
error if it failed: a damaged image is refused before the driver sees it either way. ``start_graph_builds``
does not wait for the graphs' reading to end: it stops it and reads the graphs not yet read itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from foundry import kernels
from foundry._state import ProcessState
from foundry.archive import MANIFEST_NAME, Manifest, archive_region, read_manifest
from foundry.errors import ArchiveError, DeviceMismatchError, DriverError, KernelNotFoundError, LoadError
from foundry.gate import authenticate_manifest, missing_kernel
from foundry.native.driver import current_context, set_current_context
from foundry.native.machine import current_device_place
from foundry.region import ensure_cuda_context, hold_allocation_region
from foundry.schema import IMAGES_DIR, GraphEntry, GraphRole, ImageEntry
from foundry.schema.jsonfields import is_sha256, relative_path_problem
from foundry.storage import open_image
from foundry.timing import Phases
from foundry.trust import KeySource, configured_key

from .readahead import prepare_bundle, prepare_sources
from .threads import LIMITS, warm_builders
from .variables import write_variables

__all__ = ["load_cuda_modules_and_libraries", "startup_phases", "wait_for_startup"]

READERS = 8  # images read and hashed at once: the reads overlap the caller's work and the driver's loads
RECORD_READERS = 4  # graph records read and hashed at once, while the startup thread checks graphs' metadata


_MAX_SPANS = 4096  # the first calls' timeline (a few spans per image); totals count every call


@dataclass
class _Startup:
    """The background jobs ``load_cuda_modules_and_libraries`` started (each ends with the first error
    it met, or None), and where their time went."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    jobs: dict[Path, Future[None]] = field(default_factory=dict)  # by resolved archive directory
    # Set by a LOAD that takes the graphs over: the background reading of graphs stops after the one in hand.
    graphs_cut: dict[Path, threading.Event] = field(default_factory=dict)
    # The context current when each archive's images were loaded (its variables written, its kernels looked up),
    # and its device's name for a refusal: LOAD must run in the same one (``wait_for_startup``).
    contexts: dict[Path, tuple[int, str]] = field(default_factory=dict)
    phases: Phases = field(default_factory=lambda: Phases(max_spans=_MAX_SPANS))


_STATE = ProcessState("load.startup", _Startup)


def startup_phases() -> Phases:
    """Seconds (and page faults) per phase of ``load_cuda_modules_and_libraries`` in this process:
    ``checks``, ``reserve`` and ``warm`` on the caller's thread, the rest in the background."""
    return _STATE.get().phases


def wait_for_startup(take_graphs: bool = False) -> None:
    """Until every ``load_cuda_modules_and_libraries`` started so far has finished its background work;
    raises ``LoadError`` (its cause the original error) if one of them failed.

    ``take_graphs``: the caller reads the graphs the background has not read yet itself (start_graph_builds
    does, through ``read_sources``), so the background's reading of graphs stops after the graph in hand.
    Beside an engine's busy thread that reading gets the interpreter lock back only every few milliseconds
    after each file it reads, so its last graphs take far longer there than on the caller's thread."""
    state = _STATE.get()
    with state.lock:
        jobs = list(state.jobs.values())
        contexts = dict(state.contexts)
        if take_graphs:
            for cut in state.graphs_cut.values():
                cut.set()
    _same_context(contexts)
    for job in jobs:
        try:
            job.result()
        except ArchiveError:
            raise
        except Exception as exc:  # named by its type too: some say nothing (MemoryError)
            raise LoadError(
                f"load_cuda_modules_and_libraries failed in the background: {type(exc).__name__}: {exc}"
            ) from exc


def load_cuda_modules_and_libraries(
    archive_dir: str | os.PathLike[str], verify: bool = True, signing_key: KeySource | None = None, wait: bool = False
) -> int:
    """Loads the archive's kernel images into this process (in the background unless ``wait``); returns
    how many images it loads.

    The manifest (sealed: any change to it is refused) gives the region to reserve, the images with
    their sizes and the kernels; without one, ``region.json`` and the images directory do. A
    ``region.json`` beside a manifest must be sound and agree with it (foundry.archive.archive_region). Each image's
    SHA-256 is checked before the driver sees it. Where a CUDA context is current (or the region's
    reservation makes one), the kernels the manifest lists for each image are looked up too, so that
    LOAD later finds them ready; and the graphs are read and checked ahead of LOAD (load/source.py,
    ``prepare_sources``).

    With a signing key (``signing_key``, else the configured one: see foundry.trust.signing), the
    manifest's signature is proven first, before the GPU is touched: an archive without a manifest,
    unsigned, signed with another key or changed since raises ``ArchiveSignatureError``, and images are
    always hashed (``verify=False``, which skips hashing them, is ignored). These checks, and those of
    the manifest, raise here; a problem found in the background (a damaged image) is raised by the next
    LOAD, or by ``wait_for_startup()``.
    """
    state = _STATE.get()
    phases = state.phases
    archive = Path(archive_dir)
    with phases.span("checks"):
        key = configured_key(signing_key)
        manifest: Manifest | None = None
        if key is not None:
            manifest = authenticate_manifest(archive, key)
            verify = True
        elif (archive / MANIFEST_NAME).exists():
            manifest = read_manifest(archive)
        # The manifest's region where there is a manifest (sealed, and signed when a key is configured),
        # else the hint; a hint beside a manifest must agree with it (the rule verify applies too).
        hint = archive_region(archive, manifest)
        entries: tuple[ImageEntry, ...] = manifest.images if manifest is not None else ()
        graphs: tuple[GraphEntry, ...] = manifest.graphs if manifest is not None else ()
        if manifest is not None:
            sizes: Mapping[str, int | None] = {e.sha256: e.bytes for e in entries}
        else:
            image_dir = archive / IMAGES_DIR
            if not image_dir.is_dir():
                raise ArchiveError(
                    f"{archive} is not a Foundry archive: it has neither {MANIFEST_NAME} nor {IMAGES_DIR}/"
                )
            sizes = {p.stem: None for p in sorted(image_dir.glob("*.bin")) if is_sha256(p.stem)}
    # Largest first: the reads end about when the largest ends, and the driver loads nothing before all are in.
    todo = sorted((sha for sha in sizes if not kernels.is_loaded(sha)), key=lambda sha: -(sizes[sha] or 0))
    if hint is not None:
        with phases.span("context"):  # the engine's own cost, paid here first when no context exists yet
            ensure_cuda_context()
    with phases.span("reserve"):
        # First of all: a thread's stack and malloc arena, an image read into memory and the driver's own
        # reservations are all mapped in the one address space the region must fit in (the seed README's
        # base, 0x7f0000000000, lies where Linux places such mappings).
        if hint is not None:
            hold_allocation_region(*hint)
    # Reading and hashing need no CUDA: they overlap the context work and the builders' warm-up below.
    with phases.span("readers"):
        readers = ThreadPoolExecutor(READERS, thread_name_prefix="foundry-startup-read")
        reads = {sha: readers.submit(_read, phases, archive, sha, verify, sizes[sha]) for sha in todo}
        readers.shutdown(wait=False)
    try:
        context: int | None = current_context()
        device = _device_here()
    except DriverError:
        context = None  # CUDA not initialised: the images still load; LOAD looks the kernels up itself
    with phases.span("warm"):
        warm_builders(sum(g.nodes for g in graphs if g.role == GraphRole.TEMPLATE), LIMITS.builders)
    with phases.span("launch"):
        job: Future[None] = Future()
        cut = threading.Event()
        worker = threading.Thread(
            target=_finish,
            args=(job, phases, context, reads, entries, archive, manifest, cut),
            name="foundry-startup",
            daemon=True,
        )
        with state.lock:  # a later call for the same archive (repaired, say) stands for it from now on
            state.jobs[archive.resolve()] = job
            state.graphs_cut[archive.resolve()] = cut
            if context is not None:
                state.contexts[archive.resolve()] = (context, device)
            else:
                state.contexts.pop(archive.resolve(), None)
        worker.start()
    if wait:
        wait_for_startup()
    return len(sizes)


def _device_here() -> str:
    """The current context's device: its name and PCI bus id (which GPU of the machine it is)."""
    name, bus, _ = current_device_place()
    return f"{name} at PCI {bus}"


def _same_context(contexts: dict[Path, tuple[int, str]]) -> None:
    """Refuses a LOAD in another context than the one ``load_cuda_modules_and_libraries`` used
    (``DeviceMismatchError``). That call makes a context on device 0 when none is current, so a rank of a
    multi-GPU job that calls it before selecting its device would otherwise build its graphs from device 0's
    kernels and write its module variables into device 0's copies. One driver call when they agree (LOAD's
    path); the devices are named only for the refusal."""
    if not contexts:
        return
    try:
        here = current_context()
    except DriverError:
        return  # no context on this thread: the builders set one up and meet the driver's own error first
    for archive, (context, device) in contexts.items():
        if context != here:
            where = _device_here()
            raise DeviceMismatchError(
                f"load_cuda_modules_and_libraries({str(archive)!r}) loaded the kernel images with the CUDA context of "
                f"the {device} current, and this LOAD runs on the {where}: kernels and module variables belong to a "
                "context, so the graphs would run on the other device's copies. Select the device first "
                "(torch.cuda.set_device(rank), or cudaSetDevice), then call load_cuda_modules_and_libraries."
            )


def _read(phases: Phases, archive: Path, sha: str, verify: bool, size: int | None) -> bytearray:
    with phases.span("image_read"):
        return open_image(archive, sha, verify, size)


def _finish(
    job: Future[None],
    phases: Phases,
    context: int | None,
    reads: dict[str, Future[bytearray]],
    entries: tuple[ImageEntry, ...],
    archive: Path,
    manifest: Manifest | None,
    cut: threading.Event,
) -> None:
    """The background part: the images, once all are read and proven, into the driver, then their kernels,
    each in one native call; the graphs beside them, on a thread of their own, started once the images are
    read. The graphs' part is Python, which holds the interpreter lock: the readers started beside it got
    the lock back only every few milliseconds after each read and each hash (the switch interval), and a
    driver call per image waited as long on its return. Read first, and loaded with the lock let go once,
    the images' part costs the driver's time, and the graphs' part runs beside it."""
    graphs_thread: ThreadPoolExecutor | None = None
    try:
        with phases.span("background"):
            failed: BaseException | None = None
            with phases.span("image_wait"):
                for read in as_completed(reads.values()):
                    failed = read.exception()
                    if failed is not None:
                        break
            graphs_thread = ThreadPoolExecutor(1, thread_name_prefix="foundry-startup-graphs")
            graphs_read = graphs_thread.submit(_prepare_graphs, phases, archive, manifest, cut)
            graphs_thread.shutdown(wait=False)
            if failed is not None:
                raise failed
            if context is not None:
                set_current_context(context)
            with phases.span("image_driver_load"):
                load_images_split(context, [(sha, read.result()) for sha, read in reads.items()], LIMITS.image_loaders)
            if context is not None:  # needs one; without, LOAD writes them before it builds a graph
                listed = {e.sha256: e.variables for e in entries}
                for sha in reads:
                    write_variables(sha, listed.get(sha), archive, str(archive / MANIFEST_NAME))
                with phases.span("kernel_lookup"):
                    _load_kernels(entries, archive / MANIFEST_NAME)
            graphs_read.result()
        job.set_result(None)
    except BaseException as exc:  # handed to LOAD, which raises it
        for read in reads.values():
            read.cancel()
        job.set_exception(exc)


def load_images_split(context: int | None, images: list[tuple[str, bytearray]], threads: int) -> None:
    """The images into the driver, split over ``threads`` threads (round robin in the order given, largest
    first, so the shares weigh about the same), each share in one native call; raises the first share's
    error once all have ended (the images loaded stay loaded, as ``kernels.load_images`` leaves them)."""
    shares = [images[i::threads] for i in range(min(threads, len(images)))]
    if len(shares) <= 1:
        kernels.load_images(images)
        return

    def load(share: list[tuple[str, bytearray]]) -> None:
        if context is not None:
            set_current_context(context)
        kernels.load_images(share)

    with ThreadPoolExecutor(len(shares), thread_name_prefix="foundry-startup-load") as pool:
        done = [pool.submit(load, share) for share in shares]
    for future in done:
        future.result()


def _prepare_graphs(phases: Phases, archive: Path, manifest: Manifest | None, cut: threading.Event) -> None:
    """Reads and checks the manifest's graphs ahead of LOAD (load/source.py: their metadata, their listing
    in the manifest, their templates and records), so that start_graph_builds takes them ready instead of
    reading thousands of graphs on the program's thread: those the manifest stores in its graph bundle with
    one read of it (``prepare_bundle``), the others, and any the bundle did not give, one at a time from
    where they are stored (``prepare_sources``, which passes over the graphs prepared already).

    Graphs saved beside the archive (``../bs8.json``: the seed README's and the benchmark's layout) are
    read too, with the same checks as LOAD's (regular files of bounded size, listed in the manifest),
    and dropped on any problem, never reported here, so a hostile manifest learns nothing from pointing
    elsewhere: LOAD reads such a graph again and reports the problem where the graph is asked for."""
    if manifest is None:
        return
    graphs = manifest.graphs
    with phases.span("graphs"):
        with phases.span("graphs_bundle"):
            prepare_bundle(archive, manifest, cut)
        prepare_sources(
            (os.path.normpath(archive / g.json) for g in graphs if not relative_path_problem(g.json, parents=True)),
            readers=RECORD_READERS,
            stop=cut,
        )


def _load_kernels(entries: tuple[ImageEntry, ...], manifest_path: Path) -> None:
    """Looks up the kernels the manifest says the graphs launch. The driver loads a library's
    kernels lazily, on their first lookup in a context (tens of ms for a decoder's ~90 kernels, as the
    benchmark's driver probe measures); done here, at process start, that is off LOAD's path. A kernel the
    driver cannot find in its image is the gate's refusal (``missing_kernel``), named after a lookup of each."""
    refs = [kernels.KernelRef(e.sha256, name) for e in entries for name in e.kernels]
    try:
        kernels.loaded_functions(refs)
    except KernelNotFoundError as exc:
        for ref in refs:  # the failure's path alone: one lookup each, to name the kernel
            try:
                kernels.loaded_function(ref)
            except KernelNotFoundError:
                raise missing_kernel(manifest_path, ref.name, ref.image) from exc
        raise
