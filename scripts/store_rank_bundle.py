"""Stores one rank folder's graph bundle against another's, as the engine plugins do after their ranks' SAVEs
(``foundry.store_bundle_against``; docs/FORMAT.md, "Graph bundle stored against another rank's"), and prints the
bytes saved. For a program that saves its ranks through the library directly (tests/gpu/multi_rank.py).

    python scripts/store_rank_bundle.py DEPLOYMENT/rank_1 DEPLOYMENT/rank_0
"""

from __future__ import annotations

import argparse

import foundry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rank_dir", help="the rank folder whose bundle to store (its SAVE finished)")
    parser.add_argument("base_dir", help="the rank folder to store it against (rank_0, laid out in full)")
    args = parser.parse_args()
    saved = foundry.store_bundle_against(args.rank_dir, args.base_dir)
    print(f"{args.rank_dir}: graph bundle stored against {args.base_dir}'s, {saved} bytes saved")


if __name__ == "__main__":
    main()
