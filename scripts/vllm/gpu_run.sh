#!/usr/bin/env bash
# On the GPU machine: install the offline vLLM 0.26 bundle (its parts staged by earlier calls, the last one
# carried by this call), build libfoundry, check the adapter's hook targets in the installed vLLM, then run
# `foundry bench --engine vllm` (native cold, SAVE, native warm, LOAD; tokens compared; decode and prefill of
# native and LOAD measured in turn). The report (JSON, table, plot) goes to $OUT, the logs into $OUT/logs.tgz.
#
#   bash scripts/vllm/gpu_run.sh [.whl/vllm/2 ...] [-- foundry bench arguments, e.g. --api serve --shapes qwen3-8b]
#
# The bundle: .whl/vllm/N are built on a CPU machine by shared/tools/vllm-bundle/make.sh; a call carries at
# most one (64 MiB a call). Call 1: `bash scripts/vllm/stage.sh .whl/vllm/1` (carry .whl/vllm/1); call 2,
# while the machine is warm: this script with .whl/vllm/2 (carry .whl/vllm/2 and .whl/deps). Later calls: no parts.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
PARTS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do PARTS+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift

# shellcheck source=scripts/gpu_setup.sh
. scripts/gpu_setup.sh
install_engine_bundle vllm "${PARTS[@]}" || exit 3

build_native_if_stale "$OUT"
machine_info "$OUT"
python3 scripts/vllm/check_targets.py /tmp/vllm-site/vllm || exit 1
# LANE (scripts/gpu_lanes.sh): benchmarks side by side on one machine, each on its GPUs, each with its own folders.
SCRATCH=/tmp${LANE:+/lane-$LANE}
WORK=$SCRATCH/foundry-vllm-bench
ARCHIVE=$SCRATCH/foundry-vllm-archive
rm -rf "$WORK"; mkdir -p "$WORK"
set -- --scratch "$SCRATCH" "$@"
# The call's limit is 600 s: stop in time to bring the report and the logs back.
# The benchmark's own bound ends 20 s before the timeout: it then stops its engines and writes its report.
timeout --signal=TERM --kill-after=20 "${BENCH_SECONDS:-540}" python3 -m foundry.cli bench --engine vllm --out "$WORK" "$@" \
  --seconds "$(bench_seconds $(( ${BENCH_SECONDS:-540} - 20 )) "$@")"
rc=$?
# Tensor parallel: how the ranks' archives differ.
diff_rank_archives "$ARCHIVE" "$WORK" "$OUT"
cp "$WORK"/vllm-*.json "$WORK"/vllm-*.txt "$WORK"/vllm-*.png "$OUT"/ 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$WORK" . 2>/dev/null
exit $rc
