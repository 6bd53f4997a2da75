#!/usr/bin/env bash
# Two GPUs, vLLM's custom all-reduce under the region outside the engine (tests/gpu/custom_ar_probe.py): SAVE on
# both ranks (a custom all-reduce captured, its graph input registered with the peer), then LOAD in fresh
# processes. Needs vLLM's bundle staged by earlier calls while the machine is warm (scripts/vllm/stage.sh; the last
# part may be carried by this call and named here). Logs and the two JSON lines go to $OUT; a summary is last.
#
#   bash scripts/gpu_custom_ar.sh [.whl/vllm/3]
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
# NVLink multicast stays off in every process this starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# shellcheck source=scripts/gpu_setup.sh
. scripts/gpu_setup.sh
install_engine_bundle vllm "$@" || exit 3
build_native_if_stale "$OUT"

WORK=$(mktemp -d /tmp/foundry-custom-ar-XXXX)
for phase in save load; do
  timeout 240 python3 -m foundry.cli run -- python3 tests/gpu/custom_ar_probe.py "$WORK" "$phase" \
    > "$OUT/custom-ar-$phase.log" 2>&1
  tail -1 "$OUT/custom-ar-$phase.log" > "$OUT/custom-ar-$phase.json"
done
echo "=== summary (full logs: custom-ar-save.log, custom-ar-load.log) ==="
python3 scripts/multi_summary.py probe "$OUT/custom-ar-save.json" "$OUT/custom-ar-load.json"
