#!/usr/bin/env bash
# LOAD alone, repeated under several settings, over one archive the native benchmark worker saves:
# for deciding loader settings on the GPU machine. Prints one line per setting.
#   bash scripts/load_matrix.sh "FOUNDRY_BENCH_THREADS=2" "FOUNDRY_BENCH_THREADS=8" "CUDA_MODULE_LOADING=EAGER" ...
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
SHAPE=${SHAPE:-qwen3-0.6b} VARIANT=${VARIANT:-eager}
W=/tmp/foundry-load-matrix/$SHAPE-$VARIANT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
if [ -z "${FOUNDRY_LIB:-}" ]; then
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > "$OUT/build.log" 2>&1 && cmake --build build/gpu >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  export FOUNDRY_LIB=$PWD/build/gpu/libfoundry.so
fi
[ -f "$W/native.json" ] || python3 -m foundry.cli run -- python3 -m foundry_bench.worker native "$SHAPE" "$VARIANT" "$W" > "$OUT/native.log" 2>&1 || { tail -30 "$OUT/native.log"; exit 1; }
for setting in "$@"; do
  # shellcheck disable=SC2086 # a setting is VAR=value words
  env $setting FOUNDRY_BENCH_LOAD_ONLY=1 python3 -m foundry.cli run -- python3 -m foundry_bench.worker load "$SHAPE" "$VARIANT" "$W" > "$OUT/load.log" 2>&1 || { tail -30 "$OUT/load.log"; continue; }
  cp "$W/load.json" "$OUT/load-$(echo "$setting" | tr -c 'A-Za-z0-9_\n' '-').json"
  python3 - "$W/load.json" "$setting" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); t = d["timings"]
span = {}
for name, _thread, a, b in d["trace"]:
    lo, hi, total = span.get(name, (a, b, 0.0))
    span[name] = (min(lo, a), max(hi, b), total + b - a)
phases = " ".join(f"{k}[{lo:.3f}-{hi:.3f} sum {s:.3f}]" for k, (lo, hi, s) in span.items() if k in ("image_driver_load", "resolve_functions", "build", "instantiate"))
first = {k: round(1000 * (b - a), 1) for k, _t, a, b in sorted(d["trace"], key=lambda s: s[2])[::-1] if k in ("build", "instantiate")}
print(f"{sys.argv[2]:40s} modules {d['modules_s']:.3f} first {d['load_first_s']:.3f} all {d['load_all_s']:.3f} read {t['read_s']:.3f} "
      f"images {t['images_s']:.3f} replayable {t['all_replayable_s']:.3f} faults {d.get('load_minor_faults')} first-ms {first} | {phases}")
cold = d.get("cold") or {}
print("   start-up:", {k: round(v, 3) for k, v in (cold.get("startup_phases_s") or {}).items()},
      "model_s", round(cold.get("model_s", 0), 3), "wait", round(t.get("startup_wait_s", 0), 3))
print("   faults by phase:", {k[7:]: v for k, v in t.items() if k.startswith("faults_")},
      "thread s:", {k[7:-2]: round(v, 3) for k, v in t.items() if k.startswith("thread_")})
PY
done
