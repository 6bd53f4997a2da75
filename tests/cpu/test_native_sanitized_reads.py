"""fdy_device_read (csrc/copies.c) under AddressSanitizer + UBSan: device reads from many threads, with
copies the driver refuses, while the staging memory grows."""

from __future__ import annotations

from tests.support.sanitized import SKIPS, Sanitized

pytestmark = SKIPS


DEVICE_READS = """
import random
from array import array
from foundry.native.copies import read_device
cu = Cuda()
THREADS, ROUNDS = 6, 25
problems = []
memory = []
for t in range(THREADS):
    n = ((t + 1) << 18) - 100  # the rest of the last page is no allocation's: a span into it is refused
    data = (bytes(range(t, 251)) + bytes(range(t))) * (n // 251 + 1)
    p = cu.malloc(n)
    cu.memcpy_htod(p, data[:n])
    memory.append((p, n, data[:n]))
start = threading.Barrier(THREADS)

def reader(t):
    cu.make_current()
    rng = random.Random(t)
    p, n, data = memory[t]
    start.wait()
    for i in range(ROUNDS):  # sizes vary, so the staging memory grows while other threads read
        spans, at, want = array("Q"), 0, []
        for _ in range(rng.randrange(1, 60)):
            size = rng.choice([1, 8, 100, 4096, 70000])
            src = rng.randrange(0, n - size)
            spans.extend((p + src, size, at))
            want.append((at, data[src : src + size]))
            at += size + rng.randrange(0, 9)
        refuse = i % 5 == 4
        if refuse:
            spans.extend((p + n - 8, 64, at))
            at += 64
        buffer = bytearray(at)
        got = read_device(spans, buffer)
        if refuse and (got.refused != len(spans) // 3 - 1 or got.error is None):
            problems.append(["refused", t, i, got.refused])
        if not refuse and (got.refused is not None or any(buffer[a : a + len(w)] != w for a, w in want)):
            problems.append(["bytes", t, i, got.path.name])

threads = [threading.Thread(target=reader, args=(t,)) for t in range(THREADS)]
for th in threads:
    th.start()
for th in threads:
    th.join()
out(problems=problems)
"""


def test_concurrent_device_reads_with_refused_copies_are_clean(sanitized: Sanitized) -> None:
    assert sanitized.run(DEVICE_READS)["problems"] == []
