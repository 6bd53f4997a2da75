"""The serving benchmarks' runs, engine-neutral: native and Foundry processes of one configuration, on one
GPU, in one call. Each engine's package (vllm/, sglang/) says how a process starts and what its log holds.

Order (each a fresh process tree, one after another):

  native_cold   the engine as its users start it, its caches as found (empty on a fresh machine); tokens
  save          under Foundry (``FOUNDRY_<ENGINE>_MODE=save``): the engine starts as usual, Foundry writes
                the archive
  native_fresh  the engine as on a new machine: every cache folder empty (fresh.py), nothing of the runs before
  load_fresh    LOAD as on a new machine: caches empty but for what the archive carries (SAVE packs the engine's
                caches, signed, when this run is asked for)
  load_replica  LOAD on the next GPUs the benchmark sees (``CUDA_VISIBLE_DEVICES``: GPU 1 at one GPU an engine, 2 and 3
                at two): a data-parallel replica started from the archive SAVE wrote on the first ones, copied, not
                saved again (above one GPU with ``FOUNDRY_RANK_GPUS=alike``, since a rank's archive names its GPU);
                only when asked for, and skipped where the machine has too few GPUs
  load_again    LOAD alone, before native warm and LOAD: with ``load`` it tells a LOAD that differs from native
                the same way every time from one whose answers vary from process to process; only when asked for
  native        the engine again, its caches now warm: the baseline LOAD is compared with
  load          under Foundry (``..._MODE=load``), beside the warm native process

Every process answers the same greedy token requests (``workload.token_requests``) with the top-``logprobs``
log-probabilities of every generated token; SAVE's, LOAD's and cold native's tokens and log-probabilities must
equal native's, bit for bit (logprobs.py). Then, with the warm native process and the LOAD process both up, decode
throughput and prefill time are measured alternately (steady.py).

With ``seconds`` set, the benchmark keeps to that many: a run is skipped (and said so) when less is left than
the engine says it needs, waits are cut to what is left, and the steady-state phase shares what remains. The
document is written after every run, so that a benchmark stopped from outside leaves what it had.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from foundry.integration.shared import NCCL_SETTINGS

from . import steady
from .compare import compare_runs
from .failures import clipped
from .fresh import FRESH_MODES, FreshRoots, signing_key
from .host import commit, machine, visible_gpus
from .logprobs import Top, Values, digests, repeated, values
from .marks import mark_archive
from .plugin import checkout_root, plugin_shim
from .process import Engine, EngineError
from .ranks import arrivals_by_rank, captures_by_rank, clear_rank_reports, rank_reports, rank_zero_lines
from .recorders import Recorders
from .shapes import SHAPES, make_model, prompt_vocab
from .stacks import site_path
from .starts import more_starts
from .workload import decode_request, token_requests
from .written import WarmWrites

__all__ = [
    "DEFAULT_MODES",
    "MODES",
    "PLUGIN_MODES",
    "BenchRuns",
    "ServingConfig",
]

MODES = ("native_cold", "save", "native_fresh", "load_fresh", "load_replica", "load_again", "native", "load")  # all
DEFAULT_MODES = ("native_cold", "save", "native", "load")  # the fresh-node and replica runs only when asked for
PLUGIN_MODES = {"save": "save", "load": "load", "load_fresh": "load", "load_replica": "load", "load_again": "load"}
REPLICA = "load_replica"
AGAIN = "load_again"
STOP_RESERVE_S = 30.0  # kept back from the budget: stopping the engines that are up and writing the report
CACHES_SETTLE_S = 2.5  # SAVE packs what its last requests compiled a second later (shared/caches.py Keeper): waited


@dataclass(frozen=True)
class ServingConfig:
    """What every serving benchmark takes; each engine's configuration adds its own settings."""

    out: Path
    shape: str = "qwen3-0.6b"
    api: str = ""
    modes: tuple[str, ...] = DEFAULT_MODES
    batches: tuple[int, ...] = (1, 8, 64, 256)
    max_tokens: int = 32
    logprobs: int = 20  # the top log-probabilities compared at every generated token (0: tokens only)
    # Every run asks its compared batches a second time and says whether its two answers are bit-identical: an
    # engine whose own process does not repeat itself cannot repeat another's (needs no prefix cache in between).
    repeat: bool = False
    # Every process of every run samples its threads' stacks (stacks.py): the report says what held them in the
    # run's start-up and first request. Costs a little Python time in each engine process; for finding seconds.
    stacks: bool = False
    # Every engine process fingerprints each attention layer's inputs and output (digests.py): the report names the
    # first layer where a run's bits part from the reference run's. A device synchronisation per layer: not for timing.
    digests: bool = False
    first_tokens: int = 16  # the first request after ready: one prompt, this many tokens
    decode_batches: tuple[int, ...] = (1, 32, 256)
    decode_steps: int = 256
    reps: int = 7
    prefill_tokens: int = 2000
    # A prefill short enough for the engine's graphs: vLLM's default mode replays its piecewise graphs for a
    # batch of up to 512 tokens that is not all decodes (0: not measured).
    short_prefill_tokens: int = 256
    # Warm native and LOAD each started this many times, alternately (starts.py): the start-up targets are judged on
    # the medians; the starts before the compared pair only answer their first request.
    starts: int = 1
    timeout: float = 420
    seconds: float | None = None  # the whole benchmark's bound; None: none
    archive: Path = Path("/tmp/foundry-bench-archive")
    models: Path = Path("/tmp/foundry-bench-models")
    extra_env: dict[str, str] = field(default_factory=dict)
    plugin_env: dict[str, str] = field(default_factory=dict)  # FOUNDRY_<ENGINE>_<NAME> of SAVE and LOAD, by NAME
    # Set in the native runs only, over everything else (e.g. NCCL_RUNTIME_CONNECT=1 at --tp 2: what a setting
    # Foundry needs costs natively). The reference then runs otherwise than SAVE and LOAD; the report says so.
    native_env: dict[str, str] = field(default_factory=dict)
    tp: int = 1  # GPUs per engine, tensor parallel (native runs with the NCCL settings SAVE and LOAD need)
    # Above one GPU, the engine's custom all-reduce on in every run, as the engine sets it by default (the plugin
    # writes its peer table again at LOAD); off, NCCL all-reduces inside the graphs. Files tagged "-car".
    custom_all_reduce: bool = False
    gpus: int | None = None  # the GPUs seen (None: CUDA_VISIBLE_DEVICES's, else nvidia-smi's); a replica needs 2 x tp

    def tag(self) -> str:
        raise NotImplementedError


class BenchRuns:
    """One configuration's runs. An engine's subclass names itself and its plugin's entry point, and says how
    a mode's process starts (``start``) and which figures its log holds (``log_numbers``)."""

    engine: ClassVar[str]  # "vllm", "sglang": the plugin's package and its FOUNDRY_<ENGINE>_ variables
    group: ClassVar[str]  # the engine's plugin entry-point group
    env_defaults: ClassVar[dict[str, str]] = {}
    needs: ClassVar[dict[str, float]] = {}  # seconds a mode needs at least (skipped with less left)
    # Figures of the engine's memory profile read from its log (the KV cache it sized, what capture took): a run
    # that saves must leave them as native's, or it changed the engine (compare_runs says so).
    profile_keys: ClassVar[tuple[str, ...]] = ()
    steady_needs: ClassVar[float] = 0.0  # seconds the steady-state phase needs at least
    # The log lines of a rank's capture (one group: seconds), added up per rank on several GPUs (ranks.py).
    capture_patterns: ClassVar[tuple[str, ...]] = ()
    arrival_markers: ClassVar[dict[str, str]] = {}  # step -> its log line's pattern, every rank's (ranks.py)
    # Set in every run when SAVE packs the engine's caches: the engine's settings that make them movable, which
    # its compile cache depends on (so every run, native ones too, compiles alike).
    pack_env: ClassVar[dict[str, str]] = {}
    # Set in the native runs with the site folder first on their path (stacksite/): vLLM's capture timed to the
    # millisecond where its log rounds it to the second.
    native_site_env: ClassVar[dict[str, str]] = {}

    def __init__(self, cfg: ServingConfig) -> None:
        self.cfg = cfg
        self.t0 = time.perf_counter()
        self.out = (cfg.out / cfg.tag()).resolve()  # this configuration's logs and the plugin's reports
        self.out.mkdir(parents=True, exist_ok=True)
        self.model = make_model(cfg.models / cfg.shape, cfg.shape)
        self.cwd = checkout_root()
        shim = plugin_shim(Path(f"/tmp/foundry-{self.engine}-entrypoint"), self.engine, self.group)
        paths = [str(self.cwd), *([str(shim)] if shim else []), os.environ.get("PYTHONPATH", "")]
        self.env = {**os.environ, **self.env_defaults, **cfg.extra_env, "PYTHONPATH": ":".join(p for p in paths if p)}
        if cfg.tp > 1:
            self.env.update(NCCL_SETTINGS)
        self.prefix = f"FOUNDRY_{self.engine.upper()}_"
        for name in [n for n in self.env if n.startswith(self.prefix)]:
            del self.env[name]
        # A fresh-node LOAD needs the archive to carry the engine's caches, signed: SAVE packs them then.
        self.key = signing_key(self.out) if "load_fresh" in cfg.modes else None
        if self.key is not None:
            self.env.update(self.pack_env)
        self.fresh = FreshRoots()
        self.warm = WarmWrites()  # what the other runs wrote into the machine's caches
        self.recorders = Recorders(self.out, cfg.stacks, cfg.digests)  # --stacks, --digests, in the engines
        self.started: list[Engine] = []  # every engine started, stopped at the end whatever happened
        self.results: dict[str, dict[str, Any]] = {}
        # Each run's log-probabilities in full (as answered, and their values), kept here for the comparison: the
        # document holds the values' digests.
        self.tops: dict[str, list[list[Top]]] = {}
        self.values: dict[str, list[list[Values]]] = {}
        self.vocab = prompt_vocab(cfg.shape)
        self.measured: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}  # the document's other parts (starts.py's more starts)
        self.write: Callable[[dict[str, Any]], None] = lambda doc: None

    def say(self, text: str) -> None:
        print(f"[{self.engine} bench] {text}", flush=True)

    def left(self) -> float:
        """Seconds left of the budget (infinite without one)."""
        if self.cfg.seconds is None:
            return float("inf")
        return self.cfg.seconds - (time.perf_counter() - self.t0)

    def room(self) -> float:
        """Seconds of the budget a run may still take: what is left less what stopping and the report keep back."""
        return self.left() - STOP_RESERVE_S

    def deadline(self) -> float | None:
        return None if self.cfg.seconds is None else self.t0 + self.cfg.seconds - STOP_RESERVE_S

    def start(self, mode: str, env: dict[str, str], prefix: list[str], log: Path) -> Engine:
        raise NotImplementedError

    def log_numbers(self, text: str) -> dict[str, float]:
        raise NotImplementedError

    def logged(self, text: str) -> dict[str, float]:
        """The figures a run's log holds, rank 0's where several ranks log them (every run and every start)."""
        return self.log_numbers(rank_zero_lines(text))

    def start_run(self, mode: str, log_name: str = "", record: bool = True) -> Engine:
        """Starts ``mode``'s process (its log ``log_name``, default ``<mode>.log``); ``record``: with the sampled
        stacks and fingerprints asked for (--stacks, --digests)."""
        env = dict(self.env)
        prefix: list[str] = []
        if mode in FRESH_MODES:
            env.update(self.fresh.env(mode))
        if mode not in PLUGIN_MODES:
            env.update(self.cfg.native_env)
            if self.native_site_env:
                env.update({**self.native_site_env, "PYTHONPATH": site_path(env.get("PYTHONPATH", ""))})
        if mode == REPLICA:  # the next tp GPUs of those this benchmark sees, which the engine numbers from 0
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self._gpus()[self.cfg.tp : 2 * self.cfg.tp])
            if self.cfg.tp > 1:  # a rank's archive names its GPU; a replica of the group asks for one alike
                env["FOUNDRY_RANK_GPUS"] = "alike"
        if mode in PLUGIN_MODES:
            report = self.out / f"report-{mode}.json"
            clear_rank_reports(report, self.cfg.tp)
            p = self.prefix
            # The benchmark measures what the plugins refuse as inexact (vllm/support.py, INEXACT): its SAVE and
            # LOAD accept the shape's classes knowingly, and the comparison says how far LOAD is from native.
            env[p + "ALLOW_INEXACT"] = ",".join(SHAPES[self.cfg.shape].get("architectures", ()))
            env.update({p + name: value for name, value in self.cfg.plugin_env.items()})
            env.update(
                {p + "MODE": PLUGIN_MODES[mode], p + "ARCHIVE": str(self.cfg.archive), p + "REPORT": str(report)}
            )
            if self.key is not None:
                env["FOUNDRY_SIGNING_KEY"] = str(self.key)
                if mode == "save":
                    env[p + "PACK_CACHES"] = "1"
            prefix = [sys.executable, "-m", "foundry.cli", "run", "--"]
        if mode not in FRESH_MODES:
            self.warm.start(mode, env)
        if record:
            env.update(self.recorders.env(mode, env))
        engine = self.start(mode, env, prefix, self.out / (log_name or f"{mode}.log"))
        self.started.append(engine)
        return engine

    def bring_up(self, mode: str) -> tuple[Engine | None, dict[str, Any]]:
        """Starts ``mode`` (unless the budget is short), waits until it serves, times its first request, and
        asks it the token requests."""
        need = self.needs.get(mode, self.needs.get("load", 0.0) if mode in (REPLICA, AGAIN) else 0.0)
        if mode == REPLICA:
            gpus, tp = len(self._gpus()), self.cfg.tp
            if gpus < 2 * tp:
                why = f"a replica needs {2 * tp} GPUs ({tp} for SAVE's, {tp} more); {gpus} here"
                self.say(f"{mode}: skipped ({why})")
                return None, {"mode": mode, "skipped": why}
        if self.room() < need:
            why = f"{max(self.left(), 0):.0f} s of the budget left, needs ~{need:.0f} s"
            self.say(f"{mode}: skipped ({why})")
            return None, {"mode": mode, "skipped": why}
        self.say(f"{mode}: starting ({self.cfg.api}, {self.cfg.shape})")
        result: dict[str, Any] = {"mode": mode}
        self.results[mode] = result  # in the document from now on, whatever happens to the run: a stop as it starts
        engine = self.start_run(mode)
        result["started_at"] = engine.started_at
        cfg = self.cfg
        try:
            result.update(engine.ready(self.ready_s()))
            self.recorders.serving(mode)
            result["first_request_at"] = engine.started_at + engine.seconds()  # epoch, as the sampled stacks
            result["first_request_s"] = self.first_request(engine)
            result["first_answer_wall_s"] = engine.seconds()
            requests = token_requests(list(cfg.batches), cfg.max_tokens, logprobs=cfg.logprobs, vocab=self.vocab)
            answers = [engine.generate(r, self.wait_s()) for r in requests]
            # Each sequence's tokens by digest: the comparison needs only equality, and the document stays small.
            result["tokens"] = digests([a.tokens for a in answers])
            if cfg.logprobs:
                self.tops[mode] = [a.top or [] for a in answers]
                self.values[mode] = values(self.tops[mode], [a.tokens for a in answers])
                result["logprob_digests"] = digests(self.values[mode])
            if cfg.repeat:
                again = [engine.generate(r, self.wait_s()) for r in requests]
                result["repeat"] = repeated(answers, again, cfg.batches)
        except EngineError as exc:
            result["error"] = clipped(str(exc))
            self.say(f"{mode}: FAILED {result['error'][-2000:]}")
        self.say(f"{mode}: ready after {result.get('ready_wall_s', float('nan')):.1f} s")
        return engine, result

    def _gpus(self) -> list[str]:
        """The GPUs this benchmark may use: the configured count's, else those it sees (host.visible_gpus)."""
        return visible_gpus() if self.cfg.gpus is None else [str(i) for i in range(self.cfg.gpus)]

    def ready_s(self) -> float:
        """How long a run may take to start: the configured timeout, or what is left of the budget."""
        return min(self.cfg.timeout, max(self.room(), 1.0))

    def first_request(self, engine: Engine) -> float:
        """The seconds of the first request after ready: one prompt, ``first_tokens`` tokens."""
        return engine.generate(decode_request(1, self.cfg.first_tokens, self.vocab), self.wait_s()).seconds

    def wait_s(self) -> float:
        """How long one request may take: the configured timeout, or what is left of the budget."""
        return min(self.cfg.timeout, max(self.left() - STOP_RESERVE_S / 2, 1.0))

    def finish(self, engine: Engine, result: dict[str, Any]) -> dict[str, Any]:
        if result["mode"] == "save" and self.key is not None:
            time.sleep(CACHES_SETTLE_S)
        result["rc"] = engine.stop()
        result["process_wall_s"] = engine.seconds()
        compiled, wrote = self.fresh.finish(result["mode"]), self.warm.finish(result["mode"])
        if compiled is not None:
            result["compiled_on_node"] = compiled
        if wrote is not None:
            result["written_on_node"], result["written_until"] = wrote
        text = engine.log_path.read_text(errors="replace")
        result.update(self.logged(text))
        result.update(self.recorders.collect(result))
        report = self.out / f"report-{result['mode']}.json"
        if self.cfg.tp > 1:
            # keyed as the JSON keeps them, so that a document reads the same before and after it is written
            result["capture_by_rank"] = {str(r): s for r, s in captures_by_rank(text, self.capture_patterns).items()}
            result["plugin_ranks"] = {str(r): doc for r, doc in rank_reports(report, self.cfg.tp).items()}
            result["arrivals_by_rank"] = arrivals_by_rank(text, self.arrival_markers)
        if report.is_file():
            result["plugin"] = json.loads(report.read_text())
        elif result["mode"] in PLUGIN_MODES and "error" not in result:
            result["error"] = f"the Foundry plugin wrote no report: {self.engine} ran without it (no entry point?)"
        self.results[result["mode"]] = result
        self.write(self.document())
        return result

    def run(self) -> None:
        cfg = self.cfg
        if "save" in cfg.modes:
            shutil.rmtree(cfg.archive, ignore_errors=True)
            mark_archive(cfg)
        for mode in ("native_cold", "save", *FRESH_MODES, REPLICA, AGAIN):
            if mode in cfg.modes:
                engine, result = self.bring_up(mode)
                self.results[mode] = result if engine is None else self.finish(engine, result)
        more_starts(self)
        live: dict[str, tuple[Engine, dict[str, Any]]] = {}
        for mode in ("native", "load"):
            if mode in cfg.modes:
                engine, result = self.bring_up(mode)
                self.results[mode] = result
                if engine is not None:
                    live[mode] = (engine, result)
        if set(live) == {"native", "load"} and not any("error" in r for _, r in live.values()):
            if self.room() < self.steady_needs:
                self.measured = {"error": f"skipped: {max(self.left(), 0):.0f} s of the budget left"}
            else:
                try:
                    sides = {side: live[side][0] for side in ("native", "load")}
                    self.measured = steady.measure(sides, self.cfg, self.vocab, self.wait_s, self.deadline, self.say)
                except EngineError as exc:
                    self.measured = {"error": clipped(str(exc))}
        for engine, result in live.values():
            self.finish(engine, result)

    def config_doc(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.cfg).items()}

    def document(self) -> dict[str, Any]:
        """What ran so far (all of it, unless the benchmark was stopped) with the tokens compared."""
        results = self.results
        compare = compare_runs(results, self.values, self.tops, self.profile_keys)
        return {
            "machine": machine(),
            "commit": commit(self.cwd),
            "config": self.config_doc(),
            "model": SHAPES[self.cfg.shape],
            "results": results,
            "compare": compare,
            "measured": self.measured,
            **self.extra,
            "wall_s": time.perf_counter() - self.t0,
        }
