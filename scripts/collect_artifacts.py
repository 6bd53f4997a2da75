"""Gathers the GPU tier's JSON artifacts into one file (the device tool brings back few files)."""

import contextlib
import json
import sys
from pathlib import Path

root, target = Path(sys.argv[1]), Path(sys.argv[2])
found = {}
for path in sorted(root.rglob("*.json")) if root.is_dir() else []:
    if path.stat().st_size < 4 << 20 and "archive" not in path.parts:
        with contextlib.suppress(ValueError):
            found[str(path.relative_to(root))] = json.loads(path.read_text())
target.write_text(json.dumps(found, indent=1))
print(f"collected {len(found)} artifacts into {target}")
