#!/usr/bin/env bash
# Everything the GPU machine is for, in one call: build the native library, run the GPU test tier and
# (with --bench) the cold-start benchmark. Full logs go to $OUT; a short summary is printed last.
#
#   bash scripts/gpu_tier.sh [--bench] [pytest -k expression]
#   FOUNDRY_BENCH_ARGS="--shapes qwen3-0.6b --variants eager" bash scripts/gpu_tier.sh --bench
#   SKIP_TIER=1 bash scripts/gpu_tier.sh --bench        (benchmark only)
#   TIER_SECONDS=300 bash scripts/gpu_tier.sh           (no test starts after 300 s: the summary still comes back)
#   TIER_MARKS="not slow" bash scripts/gpu_tier.sh       (then TIER_MARKS=slow in the next call: the whole tier)
#   FIXTURE=1 bash scripts/gpu_tier.sh                   (also save tests/fixtures/gpu_archive as fixture.tar.gz)
#   ARCHIVE_META=1 ... --bench                           (also bring back the benchmark archives' metadata and
#                                                         records, without images and memory, to profile on a CPU)
#   BASELINE=DIR ROUNDS=3 ... --bench                    (and two more rounds of both, the order swapped each round;
#                                                         medians printed last, every report in rounds.tgz;
#                                                         ROUNDS_SECONDS=S: no round that would end past S s)
#   BASELINE=DIR ... --bench                             (also run the same benchmark with the checkout in DIR, e.g.
#                                                         `git archive REV | tar -x -C DIR`, in the same call, and
#                                                         print both side by side; DIR/ is built there too)
set -u -o pipefail
T0=$(date +%s)
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
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 scripts/tier_summary.py machine; } | tee "$OUT/machine.txt" /tmp/foundry-machine.txt

# SAVE reads module variables from compressed fatbin entries (the PyTorch wheels' are Zstandard): without
# these two packages it refuses every graph whose images it cannot read (VariablesUnknownError).
python3 scripts/tier_summary.py codecs | tee -a "$OUT/machine.txt"

if ! build_native . "$OUT/build.log"; then
  tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
export FOUNDRY_LIB=$PWD/build/gpu/libfoundry.so

TIER=0
# TIER_SECONDS=S: no test starts S seconds or more after this script began (tests/gpu/conftest.py), so that a call
# bounded by the device's limit still ends with the summary; give S the call's bound less the longest test (~2 min).
if [ -n "${TIER_SECONDS:-}" ]; then export FOUNDRY_GPU_TIER_DEADLINE=$(( T0 + TIER_SECONDS )); fi
if [ "${SKIP_TIER:-0}" != 1 ]; then
  # TIER_MARKS: a pytest marker expression; the tier no longer fits one call on one H200 (~640 s of tests), so
  # `TIER_MARKS="not slow"` (the round trips and refusals, ~250 s) and `TIER_MARKS=slow` (the minute-long end-to-end
  # checks, ~400 s) are its two calls.
  ARGS=(tests/gpu -q -rfE -p no:cacheprovider)
  if [ -n "$SELECT" ]; then ARGS+=(-k "$SELECT"); fi
  if [ -n "${TIER_MARKS:-}" ]; then ARGS+=(-m "$TIER_MARKS"); fi
  python3 -m pytest "${ARGS[@]}" 2>&1 | tee "$OUT/gpu-tier.log"
  TIER=$?
fi

# baseline_bench [DIR]: the benchmark of the checkout in $BASELINE, its report into DIR (default $OUT/baseline).
baseline_bench() {
  local dir=${1:-$OUT/baseline}
  mkdir -p "$dir"
  if build_native "$BASELINE" "$OUT/baseline-build.log"; then
    # shellcheck disable=SC2086
    (cd "$BASELINE" && FOUNDRY_LIB=$PWD/build/gpu/libfoundry.so PYTHONPATH=$PWD FOUNDRY_BENCH_WORK=/tmp/foundry-bench-baseline \
      python3 -m foundry.cli bench --out "$dir" ${FOUNDRY_BENCH_ARGS:-}) > "$OUT/baseline-bench.log" 2>&1 \
      || echo "BASELINE BENCH FAILED (see baseline-bench.log)"
  else
    echo "BASELINE BUILD FAILED"; tail -20 "$OUT/baseline-build.log"
  fi
}

# ROUNDS=N (with BASELINE): N - 1 more rounds after the first, each checkout's benchmark once a round, the order
# swapped every round; one process each is below the machine's process-to-process noise. Every round's two
# reports go to OUT/rounds (this-R.json, base-R.json), packed as rounds.tgz; the summary prints the medians.
# ROUNDS_SECONDS=S: no round starts that would end, at the last round's pace, more than S seconds after the
# benchmark began, so that a bounded call still ends with the summary and rounds.tgz (a call cut short by its
# own bound leaves them on the machine).
more_rounds() {
  local r dir t took=$(( $(date +%s) - BENCH_T0 ))
  mkdir -p "$OUT/rounds"
  cp "$OUT/cold-start.json" "$OUT/rounds/this-1.json" 2>/dev/null
  cp "$OUT/baseline/cold-start.json" "$OUT/rounds/base-1.json" 2>/dev/null
  for r in $(seq 2 "$ROUNDS"); do
    if [ -n "${ROUNDS_SECONDS:-}" ] && [ $(( $(date +%s) - BENCH_T0 + took )) -gt "$ROUNDS_SECONDS" ]; then
      echo "rounds: $((r - 1)) of $ROUNDS run; round $r (about $took s) would end past ROUNDS_SECONDS=$ROUNDS_SECONDS"
      break
    fi
    t=$(date +%s)
    dir=/tmp/foundry-round-$r
    rm -rf "$dir"; mkdir -p "$dir/this"
    if [ $(( (r + ${BASELINE_FIRST:-0}) % 2 )) = 0 ]; then baseline_bench "$dir/base"; fi
    # shellcheck disable=SC2086
    python3 -m foundry.cli bench --out "$dir/this" ${FOUNDRY_BENCH_ARGS:-} >> "$OUT/bench.log" 2>&1
    if [ $(( (r + ${BASELINE_FIRST:-0}) % 2 )) = 1 ]; then baseline_bench "$dir/base"; fi
    cp "$dir/this/cold-start.json" "$OUT/rounds/this-$r.json" 2>/dev/null
    cp "$dir/base/cold-start.json" "$OUT/rounds/base-$r.json" 2>/dev/null
    took=$(( $(date +%s) - t ))
  done
  tar -C "$OUT" -czf "$OUT/rounds.tgz" rounds
}

if [ "$BENCH" = 1 ]; then
  BENCH_T0=$(date +%s)
  # BASELINE_FIRST=1 runs the baseline before this checkout: the first of the two compiles the compiled
  # variant with a cold inductor cache (and runs slower for it), so each order favours the second run.
  if [ -n "${BASELINE:-}" ] && [ "${BASELINE_FIRST:-0}" = 1 ]; then baseline_bench; fi
  # shellcheck disable=SC2086 # the arguments are meant to split
  python3 -m foundry.cli bench --out "$OUT" ${FOUNDRY_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
  if [ -n "${BASELINE:-}" ] && [ "${BASELINE_FIRST:-0}" != 1 ]; then baseline_bench; fi
  if [ -n "${BASELINE:-}" ] && [ "${ROUNDS:-1}" -gt 1 ]; then more_rounds; fi
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
# run.log is not this script's: a lane of scripts/gpu_lanes.sh writes its own output there, into this $OUT.
tar -C "$OUT" -czf "$OUT/logs.tar.gz" --remove-files \
  $(cd "$OUT" && ls *.log machine.txt debug.json baseline/*.log baseline/cold-start.txt 2>/dev/null | grep -vx run.log) 2>/dev/null
echo "================ summary"
cat /tmp/foundry-machine.txt
python3 scripts/tier_summary.py tier "$OUT/gpu-tier.json" || echo "no gpu-tier.json written"
[ -f "$OUT/cold-start.txt" ] && cat "$OUT/cold-start.txt"
if [ -f "$OUT/baseline/cold-start.json" ] && [ -f "$OUT/cold-start.json" ]; then
  python3 scripts/tier_summary.py compare "$OUT/cold-start.json" "$OUT/baseline/cold-start.json"
fi
[ -f "$OUT/cold-start.json" ] && python3 scripts/tier_summary.py cold "$OUT/cold-start.json"
if [ -d "$OUT/rounds" ]; then python3 scripts/tier_summary.py rounds "$OUT/rounds" && rm -rf "$OUT/rounds"; fi
exit $TIER
