#!/usr/bin/env bash
# Everything the GPU machine is for, in one call: build the native library, run the GPU test tier and
# (with --bench) the cold-start benchmark. Full logs go to $OUT; a short summary is printed last.
#
#   bash scripts/gpu_tier.sh [--bench] [pytest -k expression]
#   FOUNDRY_BENCH_ARGS="--shapes qwen3-0.6b --variants eager" bash scripts/gpu_tier.sh --bench
#   SKIP_TIER=1 bash scripts/gpu_tier.sh --bench        (benchmark only)
#   FIXTURE=1 bash scripts/gpu_tier.sh                   (also save tests/fixtures/gpu_archive as fixture.tar.gz)
#   ARCHIVE_META=1 ... --bench                           (also bring back the benchmark archives' metadata and
#                                                         records, without images and memory, to profile on a CPU)
#   BASELINE=DIR ... --bench                             (also run the same benchmark with the checkout in DIR, e.g.
#                                                         `git archive REV | tar -x -C DIR`, in the same call, and
#                                                         print both side by side; DIR/ is built there too)
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
export FOUNDRY_GPU_TIER_JSON=$OUT/gpu-tier.json FOUNDRY_GPU_ARTIFACTS=/tmp/foundry-artifacts
rm -rf "$FOUNDRY_GPU_ARTIFACTS"
BENCH=0
if [ "${1:-}" = "--bench" ]; then BENCH=1; shift; fi
SELECT=${1:-}

# shellcheck source=scripts/gpu_setup.sh
. scripts/gpu_setup.sh
install_carried_wheels
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c 'import torch,sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'; } | tee "$OUT/machine.txt" /tmp/foundry-machine.txt

# SAVE reads module variables from compressed fatbin entries (the PyTorch wheels' are Zstandard): without
# these two packages it refuses every graph whose images it cannot read (VariablesUnknownError).
python3 -c 'import lz4.block, zstandard' 2>/dev/null \
  || echo "WARNING: python3 lacks the lz4 and/or zstandard packages: install their wheels (pip install lz4 zstandard)" | tee -a "$OUT/machine.txt"

if ! build_native . "$OUT/build.log"; then
  tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
export FOUNDRY_LIB=$PWD/build/gpu/libfoundry.so

TIER=0
if [ "${SKIP_TIER:-0}" != 1 ]; then
  if [ -n "$SELECT" ]; then
    python3 -m pytest tests/gpu -q -rfE -p no:cacheprovider -k "$SELECT" 2>&1 | tee "$OUT/gpu-tier.log"
  else
    python3 -m pytest tests/gpu -q -rfE -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tier.log"
  fi
  TIER=$?
fi

baseline_bench() {
  mkdir -p "$OUT/baseline"
  if build_native "$BASELINE" "$OUT/baseline-build.log"; then
    # shellcheck disable=SC2086
    (cd "$BASELINE" && FOUNDRY_LIB=$PWD/build/gpu/libfoundry.so PYTHONPATH=$PWD FOUNDRY_BENCH_WORK=/tmp/foundry-bench-baseline \
      python3 -m foundry.cli bench --out "$OUT/baseline" ${FOUNDRY_BENCH_ARGS:-}) > "$OUT/baseline-bench.log" 2>&1 \
      || echo "BASELINE BENCH FAILED (see baseline-bench.log)"
  else
    echo "BASELINE BUILD FAILED"; tail -20 "$OUT/baseline-build.log"
  fi
}

if [ "$BENCH" = 1 ]; then
  # BASELINE_FIRST=1 runs the baseline before this checkout: the first of the two compiles the compiled
  # variant with a cold inductor cache (and runs slower for it), so each order favours the second run.
  if [ -n "${BASELINE:-}" ] && [ "${BASELINE_FIRST:-0}" = 1 ]; then baseline_bench; fi
  # shellcheck disable=SC2086 # the arguments are meant to split
  python3 -m foundry.cli bench --out "$OUT" ${FOUNDRY_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
  if [ -n "${BASELINE:-}" ] && [ "${BASELINE_FIRST:-0}" != 1 ]; then baseline_bench; fi
fi

if [ "${FIXTURE:-0}" = 1 ]; then
  rm -rf /tmp/fixture && python3 -m foundry.cli run -- python3 scripts/make_fixture.py /tmp/fixture > "$OUT/fixture.log" 2>&1 \
    && tar -C /tmp/fixture -czf "$OUT/fixture.tar.gz" . && ls -la "$OUT/fixture.tar.gz"
fi
if [ "${ARCHIVE_META:-0}" = 1 ] && [ -d /tmp/foundry-bench ]; then
  tar -C /tmp/foundry-bench --exclude='*/images/*' --exclude='*/memory/*' --exclude='*.pt' -czf "$OUT/bench-archive-meta.tar.gz" . \
    && ls -la "$OUT/bench-archive-meta.tar.gz"
fi
python3 scripts/collect_artifacts.py "$FOUNDRY_GPU_ARTIFACTS" "$OUT/debug.json"
# The device tool brings back at most 8 files: the results stay apart, everything else goes into one archive.
rm -f "$OUT/baseline/cold-start.png"
tar -C "$OUT" -czf "$OUT/logs.tar.gz" --remove-files \
  $(cd "$OUT" && ls *.log machine.txt debug.json baseline/*.log baseline/cold-start.txt 2>/dev/null) 2>/dev/null
echo "================ summary"
cat /tmp/foundry-machine.txt
python3 - "$OUT/gpu-tier.json" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except OSError:
    sys.exit("no gpu-tier.json written")
print(f"GPU tier: {s['passed']} passed, {s['failed']} failed")
for t in s["tests"]:
    if t["outcome"] != "passed":
        print("  ", t["outcome"], t["test"])
for k, v in s["figures"].items():
    print(f"  {k}: {json.dumps(v)[:400]}")
PY
[ -f "$OUT/cold-start.txt" ] && cat "$OUT/cold-start.txt"
if [ -f "$OUT/baseline/cold-start.json" ] && [ -f "$OUT/cold-start.json" ]; then
  python3 - "$OUT/cold-start.json" "$OUT/baseline/cold-start.json" <<'PY'
import json, sys
new, base = (json.load(open(p))["results"] for p in sys.argv[1:3])
keys = ["native_warmup_capture_s", "save_s", "save_over_capture", "load_modules_s", "load_first_s", "load_all_s",
        "speedup", "restore_us_per_node", "first_step_native_s", "first_step_load_s", "replay_ratio_max",
        "replay_ratio_max_template", "bit_identical", "bit_identical_template"]
print("side by side, this checkout vs the baseline, in this call")
for a, b in zip(new, base):
    print(f"  {a['shape']} {a['variant']}")
    for k in keys:
        x, y = a.get(k), b.get(k)
        fx = f"{x:.4f}" if isinstance(x, float) else str(x)
        fy = f"{y:.4f}" if isinstance(y, float) else str(y)
        print(f"    {k:28s} {fx:>12s} {fy:>12s}")
PY
fi
[ -f "$OUT/cold-start.json" ] && python3 - "$OUT/cold-start.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(r["shape"], r["variant"], "load timings", {k: round(v, 3) for k, v in r["load_timings"].items()})
    print("  replay max/median: same process", round(r["replay_ratio_max"], 4), round(r["replay_ratio_median"], 4),
          "cross process", round(r["replay_ratio_max_cross_process"], 4), round(r["replay_ratio_median_cross_process"], 4),
          "shared/own max", round(r["shared_over_own_exec_max"], 4))
    c = r.get("cold_path") or {}
    print("  cold path", {k: (round(v, 4) if isinstance(v, float) else v) for k, v in c.items()
                          if k in ("startup_wait_s", "load_all_s", "modules_and_load_s", "load_us_per_node", "own_execs_s",
                                   "first_replay_over_native_max", "first_replay_over_native_max_switched",
                                   "first_replay_over_native_max_unswitched", "second_replay_over_native_max",
                                   "first_replay_own_over_native_max", "first_replay_own_over_native_median",
                                   "second_replay_own_over_native_max", "modules_background_s", "model_s")})
    print("  startup phases", {k: round(v, 4) for k, v in (c.get("startup_phases_s") or {}).items()})
    for key in ("save_phases_s", "save_phases_beside_capture_s", "save_gc", "save_phase_faults", "build_probe", "driver_probe", "process_probe_us", "tensor_at_us"):
        if r.get(key):
            print(f"  {key}: {json.dumps(r[key])[:600]}")
PY
exit $TIER
