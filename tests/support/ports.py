"""Ports someone else holds, for the benchmark's CPU tests: its servers must not count on any port number."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager


@contextmanager
def held(*ports: int) -> Iterator[None]:
    """Sockets listening on 127.0.0.1 at ``ports`` for the block, accepting no one (a client that connects
    waits, as at a stranger's busy server). Where something listens at a port already, it holds it instead."""
    with ExitStack() as stack:
        for port in ports:
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                s.bind(("127.0.0.1", port))
                s.listen()
            except OSError:
                pass  # taken already: by something just as foreign to the benchmark
        yield
