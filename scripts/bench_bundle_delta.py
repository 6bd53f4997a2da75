"""Times storing a graph bundle against another rank's and rebuilding it (foundry/archive/bundle_delta.py), on a
synthetic bundle shaped like a vLLM TP=2 rank's: GRAPHS graphs of a 600-byte JSON and a 36 KB record each, WORDS
argument words differing at random places. CPU only; prints sizes and seconds.

    python scripts/bench_bundle_delta.py [--graphs 1530] [--words 5047] [--reps 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from foundry.archive.bundle import pack_bundle
from foundry.archive.bundle_delta import pack_delta, rebuild


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=1530)
    parser.add_argument("--words", type=int, default=5047)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(2)
    graphs = [(rng.randbytes(600), rng.randbytes(36_000)) for _ in range(args.graphs)]
    base = pack_bundle(graphs)
    mine = [(j, bytearray(c)) for j, c in graphs]
    for _ in range(args.words):
        record = mine[rng.randrange(len(mine))][1]
        at = rng.randrange(0, len(record) - 8) & ~7
        record[at : at + 8] = rng.randbytes(8)
    bundle = pack_bundle(mine)
    stores, rebuilds = [], []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        delta = pack_delta(bundle, base, 0)
        t1 = time.perf_counter()
        assert rebuild(delta, base, len(bundle), "bundle", "base") == bundle
        rebuilds.append(time.perf_counter() - t1)
        stores.append(t1 - t0)
    print(
        f"bundle {len(bundle):,} B, stored against the base {len(delta):,} B; median of {args.reps}: "
        f"store {statistics.median(stores):.3f} s, rebuild {statistics.median(rebuilds):.3f} s"
    )


if __name__ == "__main__":
    main()
