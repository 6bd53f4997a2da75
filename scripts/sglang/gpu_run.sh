#!/usr/bin/env bash
# On the GPU machine, in ONE call: install the offline SGLang 0.5.17 bundle (its one part carried by the call),
# build libfoundry, check the adapter's hook targets in the installed SGLang, then run
# `foundry bench --engine sglang` (native cold, SAVE, native warm, LOAD; tokens compared; decode and prefill of
# native and LOAD measured in turn), kept to what is left of the call. The report (JSON, table, plot) goes to
# $OUT with the logs in $OUT/logs.tgz: at most 7 files. A benchmark stopped by the time limit still writes its
# JSON with the runs it finished.
#
#   bash scripts/sglang/gpu_run.sh .whl/sglang/1 [-- foundry bench arguments, e.g. --runs native,load]
#
# Carry [".whl/sglang/1", ".whl/deps/lz4-4.4.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl"]:
# the bundle part (52.5 MiB, built by shared/tools/sglang-bundle/make.sh) and the one wheel Foundry needs that
# neither the image nor the bundle has (lz4). A later call while the machine is warm needs no part.
# Where the working tree and the part together pass 64 MiB, stage the part in two halves instead (split -b
# 27600000 into .whl/sglang/h1/half.aa and .whl/sglang/h2/half.ab, MANIFEST beside the second): call 1 carries h1
# and copies half.aa into /root/stage-sglang; call 2, while warm, carries h2 and the lz4 wheel, joins the
# halves there as sglang-site.tar.zst.00, copies the MANIFEST beside it and runs this script with no part.
# CALL_SECONDS (default 520): the whole call's bound, setup included; BENCH_SECONDS overrides the benchmark's.
set -u -o pipefail
T0=$(date +%s)
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
PARTS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do PARTS+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift

# shellcheck source=scripts/gpu_setup.sh
. scripts/gpu_setup.sh
install_engine_bundle sglang "${PARTS[@]}" || exit 3
build_native_if_stale "$OUT"
machine_info "$OUT"
python3 scripts/sglang/check_targets.py /tmp/sglang-site/sglang || exit 1
# LANE (scripts/gpu_lanes.sh): benchmarks side by side on one machine, each on its GPUs, each with its own folders.
SCRATCH=/tmp${LANE:+/lane-$LANE}
WORK=$SCRATCH/foundry-sglang-bench
ARCHIVE=$SCRATCH/foundry-sglang-archive
rm -rf "$WORK"; mkdir -p "$WORK"
set -- --scratch "$SCRATCH" "$@"
# What is left of the call, less the time to pack the files.
BENCH_SECONDS=${BENCH_SECONDS:-$(( ${CALL_SECONDS:-520} - ($(date +%s) - T0) - 10 ))}
echo "setup took $(( $(date +%s) - T0 )) s; the benchmark keeps to ${BENCH_SECONDS} s"
timeout --signal=TERM --kill-after=20 "$(( BENCH_SECONDS + 20 ))" \
  python3 -m foundry.cli bench --engine sglang --out "$WORK" "$@" --seconds "$(bench_seconds "$BENCH_SECONDS" "$@")"
rc=$?
# Tensor parallel: how the ranks' archives differ.
diff_rank_archives "$ARCHIVE" "$WORK" "$OUT"
cp "$WORK"/sglang-*.json "$WORK"/sglang-*.txt "$WORK"/sglang-*.png "$OUT"/ 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$WORK" --exclude='sglang-*.png' . 2>/dev/null
exit $rc
