"""`foundry bench --stacks`: every process an engine starts, spawned or forked, samples its threads' stacks
(foundry_bench/serving/stacksite), and the report names the stacks that held a thread in a run's window."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from foundry_bench.serving.stacks import SITE, Sampled, busiest, env, read, stack_lines, waiting
from foundry_bench.serving.stacksite.foundry_stack_sampler import Stretches
from foundry_bench.vllm import run_vllm_bench
from foundry_bench.vllm.report import render
from tests.support.benchvllm import tokens_only

# A program as an engine is one: a main process that waits while a spawned child and a forked child work, each in
# a function of its own name; and a sitecustomize of the machine's own, which must still run.
PROGRAM = """
import multiprocessing as mp, os, sys, time

def spawned_child_builds():
    time.sleep(0.8)

def forked_child_builds():
    time.sleep(0.8)

if __name__ == "__main__":
    print("machine sitecustomize ran:", getattr(sys, "machine_site_ran", False), flush=True)
    for method, target in (("spawn", spawned_child_builds), ("fork", forked_child_builds)):
        p = mp.get_context(method).Process(target=target)
        p.start()
        p.join()
"""


def test_every_process_spawned_or_forked_writes_its_stacks_and_the_machines_sitecustomize_still_runs(
    tmp_path: Path,
) -> None:
    machine_site = tmp_path / "machine-site"
    machine_site.mkdir()
    (machine_site / "sitecustomize.py").write_text("import sys\nsys.machine_site_ran = True\n")
    (tmp_path / "program.py").write_text(textwrap.dedent(PROGRAM))
    folder = tmp_path / "stacks"
    variables = {**os.environ, **env(folder, str(machine_site)), "FOUNDRY_BENCH_STACKS_INTERVAL": "0.02"}
    start = time.time()
    run = subprocess.run([sys.executable, str(tmp_path / "program.py")], env=variables, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "machine sitecustomize ran: True" in run.stdout
    assert "sampler" not in run.stderr  # it neither failed nor stopped
    procs = read(folder)
    # the program, its two children (and the resource tracker that spawning starts), each in a file of its own
    assert len(procs) >= 3 and len({p.pid for p in procs}) == len(procs)
    top = busiest(procs, start, time.time())
    named = {e["stack"][0].split(" ")[-1]: e for e in top}
    assert {"spawned_child_builds", "forked_child_builds"} <= set(named)
    assert named["spawned_child_builds"]["thread"] == "MainThread" and named["spawned_child_builds"]["seconds"] > 0.2
    # the parent waited in join() all along: a wait, left out
    assert not any("join" in e["stack"][0] or "wait" in e["stack"][0] for e in top)


def test_a_stretch_is_written_as_it_begins_and_ends_when_its_thread_changes_stack_or_is_gone() -> None:
    s = Stretches()
    assert s.add(1.0, {1: ("MainThread", ("a.py:1 f",)), 2: ("worker", ("b.py:2 g",))}) == [
        {"id": 1, "thread": "MainThread", "from": 1.0, "stack": ["a.py:1 f"]},
        {"id": 2, "thread": "worker", "from": 1.0, "stack": ["b.py:2 g"]},
    ]
    assert s.add(2.0, {1: ("MainThread", ("a.py:1 f",)), 2: ("worker", ("b.py:2 g",))}) == []
    assert s.add(3.0, {1: ("MainThread", ("a.py:9 h",))}) == [
        {"end": 2, "to": 2.0},  # the worker, last seen at 2.0
        {"end": 1, "to": 3.0},
        {"id": 3, "thread": "MainThread", "from": 3.0, "stack": ["a.py:9 h"]},
    ]
    assert s.close(5.0) == [{"end": 3, "to": 5.0}]


def test_a_stretch_a_killed_or_execed_process_never_ended_ends_where_it_was_last_seen(tmp_path: Path) -> None:
    lines = [
        # `foundry run` exec()s the engine: one pid, one file, two interpreters numbering their stretches alike
        {"pid": 12, "argv": ["foundry"]},
        {"id": 1, "thread": "MainThread", "from": 0.0, "stack": ["cli.py:3 run"]},
        {"alive": 0.5},
        {"pid": 12, "argv": ["x"]},
        {"id": 1, "thread": "MainThread", "from": 1.0, "stack": ["a.py:1 f"]},
        {"end": 1, "to": 2.0},
        {"id": 2, "thread": "MainThread", "from": 2.0, "stack": ["a.py:5 compile"]},
        {"alive": 6.5},
    ]
    # and a line cut short as the process was killed mid-write
    (tmp_path / "stacks-12.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"thread": "Ma')
    (proc,) = read(tmp_path)
    assert proc.pid == 12 and proc.name == "x"
    assert proc.stretches == [
        {"thread": "MainThread", "from": 0.0, "to": 0.5, "stack": ["cli.py:3 run"]},
        {"thread": "MainThread", "from": 1.0, "to": 2.0, "stack": ["a.py:1 f"]},
        {"thread": "MainThread", "from": 2.0, "to": 6.5, "stack": ["a.py:5 compile"]},
    ]


def test_only_the_windows_seconds_count_and_waits_and_short_stacks_are_left_out() -> None:
    build = ["selectors.py:415 select", "subprocess.py:2115 _communicate", "tvm_ffi/cpp/extension.py:592 build_ninja",
             "tvm_ffi/cpp/extension.py:1123 load_inline", "sglang/kernels/jit/utils/compile.py:300 load_jit",
             "sglang/srt/x.py:3 forward"]  # fmt: skip
    procs = [
        Sampled(7, "sglang::scheduler", [
            {"thread": "MainThread", "from": 0.0, "to": 10.0, "stack": build},  # 4 s of it in the window
            {"thread": "MainThread", "from": 10.0, "to": 10.1, "stack": ["a.py:1 short"]},
            {"thread": "watch", "from": 0.0, "to": 20.0, "stack": ["threading.py:359 wait", "w.py:1 run"]},
        ]),
        Sampled(8, "/usr/bin/python3 -m foundry_bench.sglang.child", [
            {"thread": "MainThread", "from": 6.0, "to": 20.0, "stack": ["zmq/sugar/socket.py:1 recv", "m.py:1 g"]},
        ]),
    ]  # fmt: skip
    top = busiest(procs, 6.0, 12.0)
    assert top == [{"pid": 7, "process": "sglang::scheduler", "thread": "MainThread", "seconds": 4.0, "stack": build}]
    # a child program's output read through select() is the build it runs, not a wait for work
    assert waiting(["selectors.py:468 select"]) and waiting([]) and not waiting(build)
    lines = stack_lines({"load_fresh": {"stacks": {"first_request": top, "start_up": []}}}, {"load_fresh": "LOAD"})
    assert lines[2] == "- LOAD, first request:"
    # the innermost frame, what outside Python's library called it (the build), the engine's own call
    assert lines[3] == ("  4.00 s sglang::scheduler 7 (MainThread): selectors.py:415 select < ... < "
                        "tvm_ffi/cpp/extension.py:592 build_ninja < ... < sglang/kernels/jit/utils/compile.py:300 "
                        "load_jit")  # fmt: skip
    assert lines[4] == "- LOAD, start up: nothing"


def test_the_sampler_folder_is_what_the_engines_path_gets_first(tmp_path: Path) -> None:
    variables = env(tmp_path, "/checkout:/shim")
    assert variables["PYTHONPATH"] == f"{SITE}:/checkout:/shim"
    assert (SITE / "sitecustomize.py").is_file()


@pytest.mark.slow
def test_bench_stacks_names_what_held_the_first_request(
    fake_vllm: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: LOAD's first request waits in the stand-in's ``compile_kernels_on_first_request``; the
    report names it in LOAD's first request and not in SAVE's."""
    monkeypatch.setenv("FAKE_ENGINE_SLOW_FIRST", "load")
    doc = run_vllm_bench(tokens_only(tmp_path, api="serve", modes=("save", "load"), stacks=True))
    results = doc["results"]
    assert all("error" not in r for r in results.values()), {m: r.get("error") for m, r in results.items()}
    first = results["load"]["stacks"]["first_request"]
    assert first and first[0]["stack"][0].endswith(" compile_kernels_on_first_request"), first
    assert not any("compile_kernels" in e["stack"][0] for e in results["save"]["stacks"]["first_request"])
    assert set(results["save"]["stacks"]) == {"start_up", "first_request"}
    assert "compile_kernels_on_first_request" in render(doc)
    assert "stacks" not in run_vllm_bench(tokens_only(tmp_path / "plain", modes=("save",)))["results"]["save"]


def test_a_file_is_labelled_by_its_path_below_the_import_folder_that_holds_it(tmp_path: Path) -> None:
    from foundry_bench.serving.stacksite import foundry_stack_sampler as sampler

    assert sampler.file_label(textwrap.__file__) == "textwrap.py"  # the standard library's folder is on the path
    assert sampler.file_label(json.__file__) == "json/__init__.py"
    assert sampler.file_label("<frozen runpy>") == "<frozen runpy>"
    assert sampler.file_label(str(tmp_path / "a" / "b" / "c.py")) == "a/b/c.py"  # on no import folder: last 3
