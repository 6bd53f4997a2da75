"""scripts/vllm/report.py: the table of a run_vllm.py result, and a differing run marked as such."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[3]


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_report", REPO / "scripts" / "vllm" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _doc(load_identical: bool) -> dict:
    base = {"vllm": "0.26.0", "gpu": "GPU", "torch": "2.11", "import_s": 20.0, "model_load_s": 2.0}
    return {
        "runner": "v2",
        "batches": [1, 8],
        "max_tokens": 4,
        "results": {
            "native": {**base, "llm_init_s": 80.0, "compile_s": 30.0, "capture_s": 3.0, "init_engine_s": 50.0},
            "load": {
                **base,
                "llm_init_s": 12.0,
                "compile_s": 5.0,
                "init_engine_s": 7.0,
                "plugin": {"timings": {"load_modules_s": 0.3, "start_graph_builds_s": 0.06, "graphs_ready_s": 0.01}},
            },
        },
        "compare": {"load": {"identical": load_identical}},
    }


def test_table_has_a_row_per_run_with_loads_graph_time_and_token_identity() -> None:
    report = _report()
    rows = report.rows(_doc(True))
    assert [r[0] for r in rows] == ["native", "load"]
    assert rows[0][5] == "3.00" and rows[1][5] == "0.37"  # capture; LOAD's modules + builds + wait
    assert rows[0][-1] == "reference" and rows[1][-1] == "yes"
    assert report.rows(_doc(False))[1][-1] == "NO"
    text = report.render(_doc(True))
    assert text.splitlines()[0].startswith("vLLM 0.26.0 on GPU") and "LLM() s" in text
