"""LOAD's output tensors take their dtype from the archive by name (foundry/capture/tensors.py): a name is
looked up among torch's own attributes only, so that no name in an archive makes torch import a submodule
(torch's module ``__getattr__`` imports ``torch.onnx``, ``torch._dynamo`` ... on first access), and a name
that is no dtype is refused as archive damage. Without torch here: a stand-in torch module, in a fresh process,
records every name asked of its ``__getattr__``."""

from __future__ import annotations

import json

from tests.support.subproc import run_python

CHILD = """
import json, sys, types

asked = []

class dtype:
    itemsize = 4

torch = types.ModuleType("torch")
torch.__version__ = "0.0-stand-in"
torch.dtype = dtype
torch.float32 = dtype()
torch.device = type("device", (), {"__init__": lambda self, *a: None})
torch._C = types.SimpleNamespace()
torch.empty = lambda shape, dtype, device: ("empty", shape)

def lazy(name):  # torch's own __getattr__ imports submodules it is asked for by name
    asked.append(name)
    raise AttributeError(name)

torch.__getattr__ = lazy
sys.modules["torch"] = torch

from foundry.capture.tensors import tensor_at
from foundry.errors import ArchiveCorruptError
from foundry.schema import OutputSpec

results = {}
for name in NAMES:
    asked.clear()
    try:
        results[name] = ["ok", repr(tensor_at(OutputSpec(0x1000, (1,), (1,), name, 0), torch.device()))]
    except ArchiveCorruptError as exc:
        results[name] = ["refused", str(exc)]
    results[name].append(list(asked))
print(json.dumps(results))
"""


def test_a_dtype_name_is_looked_up_without_running_torchs_lazy_imports() -> None:
    names = ["float32", "onnx", "_dynamo", "__getattr__", "empty", "dtype", "nonsense"]
    out = json.loads(run_python(f"NAMES = {names!r}\n" + CHILD).strip().splitlines()[-1])
    assert out["float32"] == ["ok", "('empty', (1,))", []]
    for name in names[1:]:
        verdict, message, asked = out[name]
        assert verdict == "refused" and asked == [], (name, out[name])
        assert f"output dtype {name!r}, which is no dtype of torch 0.0-stand-in" in message
        assert "Save the graph again" in message
