"""The CUDA-graph half of the fake SGLang 0.5.17 (tests/support/fakesglang.py builds the rest): the runners,
their backends and the breakable-graph machinery, with SGLang's module, class and attribute names and only
the structure the Foundry adapter relies on.

- ``FullCudaGraphBackend`` captures one graph per shape with its module's ``torch.cuda.CUDAGraph()`` and its
  ``_device_module.graph(...)``, after two warm-ups, and keeps ``_graphs`` / ``_outputs`` by ``ShapeKey``.
- ``BreakableCudaGraphBackend`` captures a ``BreakableCUDAGraph`` per shape: ``BreakableCUDAGraphCapture``
  begins a segment (the breakable module's ``torch.cuda.CUDAGraph()``, ``capture_begin``); a call of an
  ``eager_on_graph`` function during capture ends it, runs the function once and keeps a ``replay_fn`` closure
  over ``captured_inner``, ``captured_args``, ``captured_kwargs`` and ``captured_output``; the output is copied
  into one buffer all shapes share (``_alloc_full_buffer``).
- ``GraphSharedOutput`` makes the logits buffer every runner shares when first asked for (the prefill
  runner's capture asks, as SGLang's ``capture_prepare`` does; so does the decode runner).
- ``DecodeCudaGraphRunner`` allocates the attention backend's graph state and its buffers, then captures one
  ``LogitsProcessorOutput`` graph per batch size; ``PrefillCudaGraphRunner`` captures the transformer body (a
  layer = q, k, v, output, then ``radix_attention.breakable_unified_attention_with_output``) per token count.

Every allocation goes through the ``EngineDevice`` into the region (the stand-in Foundry's or Foundry's), so the
same sequence of allocations gives the same addresses. The layers compute from the runner's input ids and a
weight (q, k, v in the segments, attention's output eagerly between them), so what a graph writes follows its
inputs.
"""

from __future__ import annotations

import bisect
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

from tests.support.fakesglang_allreduce import all_reduce, graph_capture
from tests.support.faketensor import EngineDevice, FakeTensor

M = "sglang.srt.model_executor."
BCG = M + "runner_backend_utils.breakable_cuda_graph.breakable_cuda_graph"
FULL = M + "runner_backend.full_cuda_graph_backend"
BREAKABLE = M + "runner_backend.breakable_cuda_graph_backend"
PREFILL = M + "runner.prefill_cuda_graph_runner"
DECODE = M + "runner.decode_cuda_graph_runner"
SHAPE = M + "runner.shape_key"
ATTENTION = "sglang.srt.layers.radix_attention"
LOGITS = "sglang.srt.layers.logits_processor"
LAYERS = 3  # the fake model's decoder layers: a prefill graph has LAYERS + 1 segments


class FakeTorchGraph:
    """torch.cuda.CUDAGraph of the fake torch: capturing into one means the capture was not routed to Foundry."""

    def __init__(self, trace: Any) -> None:
        self.trace = trace

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        self.trace("torch.capture")

    def capture_end(self) -> None:
        pass

    def replay(self) -> None:
        pass


def fake_torch(trace: Any) -> SimpleNamespace:
    @contextmanager
    def graph(cuda_graph: Any, pool: Any = None, stream: Any = None, capture_error_mode: str = "global") -> Any:
        trace("torch.capture")
        yield cuda_graph

    cuda = SimpleNamespace(
        CUDAGraph=lambda *a, **k: FakeTorchGraph(trace),
        graph=graph,
        synchronize=lambda: None,
        empty_cache=lambda: trace("empty_cache"),
    )
    return SimpleNamespace(cuda=cuda, is_tensor=lambda x: isinstance(x, FakeTensor))


def mod(name: str, **attrs: Any) -> ModuleType:
    m = ModuleType(name)
    m.__dict__.update(attrs)
    return m


def graph_modules(memory: EngineDevice, trace: Any, parallel_state: ModuleType | None = None) -> dict[str, ModuleType]:
    @dataclass(frozen=True)
    class ShapeKey:
        size: int
        stream_idx: int | None = None
        variant_label: str | None = None

    @dataclass
    class LogitsProcessorOutput:
        next_token_logits: Any
        hidden_states: Any = None
        full_logits: Any = None
        customized_info: Any = None

    # runner_backend_utils/breakable_cuda_graph --------------------------------------------------------------
    bcg = mod(BCG, torch=fake_torch(trace))
    current: dict[str, Any] = {"capture": None}

    class BreakableCUDAGraph:
        def __init__(self, deduped_cuda_graph: Any = None) -> None:
            self._segments: list[Any] = []
            self._break_fns: list[Any] = []
            self._deduped_cuda_graph = deduped_cuda_graph

        def replay(self) -> None:
            for i, segment in enumerate(self._segments):
                segment.replay()
                if i < len(self._break_fns):
                    self._break_fns[i]()

    class BreakableCUDAGraphCapture:
        def __init__(self, cuda_graph: Any, pool: Any = None, stream: Any = None) -> None:
            self.cuda_graph, self.pool, self.graph = cuda_graph, pool, None

        def __enter__(self) -> Any:
            current["capture"] = self
            self.begin()
            return self

        def __exit__(self, *exc: object) -> None:
            self.end()
            current["capture"] = None

        def begin(self) -> None:
            self.graph = bcg.torch.cuda.CUDAGraph()  # the module's torch, read at call time as SGLang's is
            self.graph.capture_begin(pool=self.pool, capture_error_mode="global")

        def end(self) -> None:
            self.graph.capture_end()
            self.cuda_graph._segments.append(self.graph)

    def eager_on_graph(enable: bool) -> Any:
        def decorator(inner: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                capture = current["capture"]
                if capture is None:
                    return inner(*args, **kwargs)
                capture.end()
                output = inner(*args, **kwargs)
                captured_inner, captured_args, captured_kwargs, captured_output = inner, args, kwargs, output

                def replay_fn() -> Any:
                    new = captured_inner(*captured_args, **captured_kwargs)
                    return captured_output if new is None else new

                capture.cuda_graph._break_fns.append(replay_fn)
                capture.begin()
                return output

            return wrapper

        return decorator

    bcg.__dict__.update(
        BreakableCUDAGraph=BreakableCUDAGraph, BreakableCUDAGraphCapture=BreakableCUDAGraphCapture,
        eager_on_graph=eager_on_graph,
    )  # fmt: skip

    # layers ----------------------------------------------------------------------------------------------------
    def unified_attention_with_output(
        query: Any, key: Any, value: Any, output: Any, save_kv_cache: bool, layer_id: int, *,
        use_mha_companion: bool = False, key_value_num_tokens: int | None = None,
    ) -> None:  # fmt: skip
        trace(f"attention:{layer_id}:{query.address:#x}->{output.address:#x}")
        memory.compute(output, query, key)

    attention = mod(
        ATTENTION,
        unified_attention_with_output=unified_attention_with_output,
        breakable_unified_attention_with_output=eager_on_graph(True)(unified_attention_with_output),
    )

    def body(num_tokens: int, input_ids: FakeTensor, weight: FakeTensor) -> FakeTensor:
        """The transformer body under the prefill runner: attention between the segments."""
        hidden = memory.allocate(num_tokens * 64)
        memory.compute(hidden, input_ids, weight)
        for layer in range(LAYERS):
            q, k, v, out = (memory.allocate(num_tokens * 32) for _ in range(4))
            memory.compute(q, hidden, weight)
            memory.compute(k, q, hidden)
            memory.compute(v, k, weight)
            attention.breakable_unified_attention_with_output(
                q, k, v, out, True, layer, use_mha_companion=False, key_value_num_tokens=None
            )
            hidden = memory.allocate(num_tokens * 64)
            memory.compute(hidden, out, v)
        return hidden

    # runner_backend --------------------------------------------------------------------------------------------
    full = mod(FULL, torch=fake_torch(trace))

    class FullCudaGraphBackend:
        def __init__(self, runner: Any) -> None:
            self._graphs: dict[Any, Any] = {}
            self._outputs: dict[Any, Any] = {}
            self._device_module = runner.device_module
            self.capturing = False

        def capture_one(self, shape_key: Any, forward_fn: Any) -> None:
            for _ in range(2):
                forward_fn()  # warm-up
            graph = full.torch.cuda.CUDAGraph()
            with self._device_module.graph(cuda_graph=graph, pool=None, stream=None):
                self.capturing = True  # torch.cuda.is_current_stream_capturing(), which the custom all-reduce asks
                out = forward_fn()
                self.capturing = False
            self._graphs[shape_key], self._outputs[shape_key] = graph, out

        def replay(self, shape_key: Any) -> Any:
            self._graphs[shape_key].replay()
            return self._outputs[shape_key]

    full.FullCudaGraphBackend = FullCudaGraphBackend  # type: ignore[attr-defined]

    class BreakableCudaGraphBackend:
        def __init__(self, runner: Any) -> None:
            self._graphs: dict[Any, Any] = {}
            self._outputs: dict[Any, Any] = {}
            self._capture_inputs: dict[Any, Any] = {}
            self._shared_output_buffer: Any = None

        def _alloc_full_buffer(self, output: Any, size: int) -> Any:
            return memory.allocate(size * 64)

        def capture_one(self, shape_key: Any, forward_fn: Any) -> None:
            for _ in range(2):
                warm = forward_fn()
            graph = BreakableCUDAGraph(None)
            if self._shared_output_buffer is None:
                self._shared_output_buffer = self._alloc_full_buffer(warm, shape_key.size)
            with BreakableCUDAGraphCapture(graph):
                out = forward_fn()
                memory.copy(self._shared_output_buffer, out)  # the last segment copies the output into it
            self._graphs[shape_key] = graph
            self._outputs[shape_key] = FakeTensor(self._shared_output_buffer.address, shape_key.size * 64)
            self._capture_inputs[shape_key] = None

        def replay(self, shape_key: Any) -> Any:
            self._graphs[shape_key].replay()
            return self._outputs[shape_key]

    backend = mod(BREAKABLE, BreakableCudaGraphBackend=BreakableCudaGraphBackend, BreakableCUDAGraph=BreakableCUDAGraph)

    # runners ---------------------------------------------------------------------------------------------------
    class GraphSharedOutput:
        def __init__(self) -> None:
            self.buffer: Any = None

        def get_logits_buffer(self, rows: int) -> Any:
            if self.buffer is None:
                self.buffer = memory.allocate(8 * 4096)
            return FakeTensor(self.buffer.address, rows * 4)

    @dataclass
    class PrefillCudaGraphRunner:
        model_runner: Any
        use_captured_attn_metadata: bool = False
        capture_num_tokens: list[int] = field(default_factory=list)

        def __post_init__(self) -> None:
            self.device_module = bcg.torch.cuda
            self.capture_num_tokens = sorted(self.model_runner.server_args.cuda_graph_config.prefill.bs)
            self.input_ids = memory.allocate(max(self.capture_num_tokens) * 8)
            self.backend = BreakableCudaGraphBackend(self)
            self.capture()

        def _next_token_logits_buffer(self, rows: int) -> Any:
            return self.model_runner.graph_shared_output.get_logits_buffer(rows)

        def capture(self) -> None:
            weight = self.model_runner.weights[0]
            for n in reversed(self.capture_num_tokens):
                self._next_token_logits_buffer(1)  # capture_prepare's dummy batch asks for it
                self.backend.capture_one(ShapeKey(n), lambda n=n: body(n, self.input_ids, weight))

        def capture_prepare(self, num_tokens: int) -> tuple[Any, Any]:
            """The dummy batch capture runs a shape on (SGLang's: a ForwardBatch over the static buffers)."""
            return ForwardBatch(input_ids=FakeTensor(self.input_ids.address, num_tokens * 8)), None

        def execute(self, forward_batch: Any) -> Any:
            """Replays the graph of the smallest captured size that holds the batch (an int: that many tokens)."""
            num_tokens = forward_batch if isinstance(forward_batch, int) else forward_batch.input_ids.nbytes // 8
            bucket = self.capture_num_tokens[bisect.bisect_left(self.capture_num_tokens, num_tokens)]
            return self.backend.replay(ShapeKey(bucket))

    @dataclass
    class ForwardBatch:
        input_ids: Any

    @dataclass
    class DecodeCudaGraphRunner:
        model_runner: Any

        def __post_init__(self) -> None:
            mr = self.model_runner
            self.device_module = full.torch.cuda
            self.capture_bs = sorted(mr.server_args.cuda_graph_config.decode.bs)
            mr.attn_backend.init_cuda_graph_state(max(self.capture_bs))
            self.input_ids = memory.allocate(max(self.capture_bs) * 8)
            self.logits = mr.graph_shared_output.get_logits_buffer(max(self.capture_bs))
            self.backend = FullCudaGraphBackend(self)
            self.capture()

        def capture(self) -> None:
            with ExitStack() as stack:  # SGLang's graph_capture(): the custom all-reduce's context, where one runs
                ca = stack.enter_context(graph_capture(parallel_state)) if parallel_state else None
                self._capture(ca)

        def _capture(self, ca: Any) -> None:
            for bs in reversed(self.capture_bs):

                def forward(bs: int = bs) -> Any:
                    self.model_runner.model.forward()  # the MoE layers' dispatch
                    activations = memory.allocate(bs * 4096)
                    memory.compute(activations, self.input_ids, self.model_runner.weights[0])
                    if self.backend.capturing:  # the warm-ups' all-reduce runs eagerly and registers nothing
                        all_reduce(ca, activations)  # tensor parallel: the layer's output summed over the ranks
                    logits = FakeTensor(self.logits.address, bs * 4)
                    memory.copy(logits, activations)
                    return LogitsProcessorOutput(next_token_logits=logits)

                self.backend.capture_one(ShapeKey(bs), forward)

        def execute(self, batch: int) -> Any:
            bucket = self.capture_bs[bisect.bisect_left(self.capture_bs, batch)]
            return self.backend.replay(ShapeKey(bucket))

    return {
        "sglang.srt.model_executor.graph_shared_output": mod(
            "sglang.srt.model_executor.graph_shared_output", GraphSharedOutput=GraphSharedOutput
        ),
        SHAPE: mod(SHAPE, ShapeKey=ShapeKey),
        LOGITS: mod(LOGITS, LogitsProcessorOutput=LogitsProcessorOutput),
        BCG: bcg,
        ATTENTION: attention,
        FULL: full,
        BREAKABLE: backend,
        PREFILL: mod(PREFILL, PrefillCudaGraphRunner=PrefillCudaGraphRunner),
        DECODE: mod(DECODE, DecodeCudaGraphRunner=DecodeCudaGraphRunner),
    }
