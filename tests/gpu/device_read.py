"""Spans of device memory read with one native call on the GPU (foundry.native.copies.read_device; run by
tests/gpu/test_device_read_gpu.py, without the interposer). Prints one JSON line:

- ``same``: a thousand spans of a few bytes each, in two tensors, hold what one synchronous copy per span
  reads;
- ``ordered``: a read issued right after work queued on the legacy default stream (a long sleep, then a
  fill) sees what the fill wrote, as a synchronous copy would;
- ``path``, ``fallback``, ``calls``: the way the driver took, and ``driver`` its version;
- ``figures``: seconds for the thousand spans, one read against one synchronous copy each.
"""

import json
import random
import time
from array import array

import torch

from foundry.native.copies import read_device
from foundry.native.driver import driver_version, memcpy_dtoh

SPANS = 1000

torch.cuda.init()
x = torch.arange(1 << 16, dtype=torch.int32, device="cuda")
y = torch.randint(0, 256, (100_000,), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
rng = random.Random(0)
spans, at = array("Q"), 0
for _ in range(SPANS):
    t = rng.choice((x, y))
    size = rng.choice((1, 4, 8, 16, 64))
    src = t.data_ptr() + rng.randrange(0, t.numel() * t.element_size() - size)
    spans.extend((src, size, at))
    at += size + rng.randrange(0, 8)
buffer = bytearray(at)
read_device(spans, buffer)  # the first read also makes the stream, the event and the pinned memory
start = time.perf_counter()
got = read_device(spans, buffer)
one_read_s = time.perf_counter() - start
start = time.perf_counter()
expected = [memcpy_dtoh(spans[i], spans[i + 1]) for i in range(0, len(spans), 3)]
sync_copies_s = time.perf_counter() - start
same = got.refused is None and all(
    bytes(buffer[spans[3 * k + 2] : spans[3 * k + 2] + spans[3 * k + 1]]) == data for k, data in enumerate(expected)
)

z = torch.zeros(1024, dtype=torch.int32, device="cuda")
torch.cuda.synchronize()
torch.cuda._sleep(100_000_000)  # on the legacy default stream, as torch's default stream is
z.fill_(7)
late = bytearray(4096)
read_device(array("Q", [z.data_ptr(), 4096, 0]), late)
ordered = bytes(late) == (7).to_bytes(4, "little") * 1024

print(
    json.dumps(
        {
            "same": same,
            "ordered": ordered,
            "path": got.path.name,
            "fallback": got.fallback,
            "calls": got.calls,
            "driver": driver_version(),
            "figures": {"spans": SPANS, "one_read_s": one_read_s, "sync_copies_s": sync_copies_s},
        }
    )
)
