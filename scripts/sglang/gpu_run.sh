#!/usr/bin/env bash
# On the GPU machine, in ONE call: install the offline SGLang 0.5.17 bundle (its one part carried by the call),
# build libfoundry, check the adapter's hook targets in the installed SGLang, then run
# scripts/sglang/run_sglang.py (sglang.Engine native, SAVE, LOAD; then launch_server native and LOAD; tokens
# compared). Logs and one JSON go to $OUT; a short summary is printed last.
#
#   bash scripts/sglang/gpu_run.sh .whl/sglang/1 [-- run_sglang.py arguments]
#
# Carry [".whl/sglang/1", ".whl/deps/lz4-4.4.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl"]:
# the bundle part (52.5 MiB, built by shared/tools/sglang-bundle/make.sh) and the one wheel Foundry needs that
# neither the image nor the bundle has (lz4; zstandard comes with the bundle). With the project tree (~7 MiB)
# that stays under the 64 MiB a call may carry. A later call while the machine is warm needs no part.
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
# The call's limit is 600 s: what is left, less time to stop the last engine and bring the files back.
BUDGET=$(( ${CALL_SECONDS:-585} - ($(date +%s) - T0) - 25 ))
echo "setup took $(( $(date +%s) - T0 )) s; ${BUDGET} s left for the runs"
timeout --signal=TERM --kill-after=15 "$((BUDGET + 15))" python3 scripts/sglang/run_sglang.py --out "$OUT" --budget "$BUDGET" "$@"
rc=$?
tar czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null && rm -rf "$OUT/logs"
tail -40 "$OUT/summary.txt" 2>/dev/null
exit $rc
