"""Imported at start-up by every Python process run_vllm.py starts with --stacks (this directory is put
on PYTHONPATH): every FOUNDRY_STACKS_EVERY seconds, each process writes the stacks of all its threads
to FOUNDRY_STACKS_DIR/<pid>.txt, forked children included, to see where a slow phase spends its time
on a machine without a sampling profiler.

A daemon thread does the dumping, not faulthandler.dump_traceback_later: its watchdog thread does not
survive fork, and re-arming it in the child waits for that thread forever."""

import faulthandler
import os
import threading

_DIR = os.environ.get("FOUNDRY_STACKS_DIR")
_EVERY = float(os.environ.get("FOUNDRY_STACKS_EVERY", "0") or 0)


def _dump_every(path: str) -> None:
    with open(path, "a", buffering=1) as out:
        while not threading.Event().wait(_EVERY):
            out.write("Dump\n")
            faulthandler.dump_traceback(file=out, all_threads=True)


def _arm() -> None:
    if not _DIR or _EVERY <= 0:
        return
    os.makedirs(_DIR, exist_ok=True)
    path = os.path.join(_DIR, f"{os.getpid()}.txt")
    threading.Thread(target=_dump_every, args=(path,), name="stack-dumps", daemon=True).start()


_arm()
os.register_at_fork(after_in_child=_arm)
