#!/usr/bin/env bash
# On the GPU machine: install the offline vLLM 0.26 bundle (its parts staged by earlier calls, the last one
# carried by this call), build libfoundry, check the adapter's hook targets in the installed vLLM, then run
# scripts/vllm/run_vllm.py (native, SAVE, LOAD; token IDs compared). Logs and JSON go to $OUT.
#
#   bash scripts/vllm/gpu_run.sh [.whl/vllm/2 ...] [-- run_vllm.py arguments]
#
# The bundle: .whl/vllm/N are built on a CPU machine by shared/tools/vllm-bundle/make.sh; a call carries at
# most one (64 MiB a call). Call 1: `bash scripts/vllm/stage.sh .whl/vllm/1` (carry .whl/vllm/1); call 2,
# while the machine is warm: this script with .whl/vllm/2 (carry .whl/vllm/2). Later calls: no parts.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
PARTS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do PARTS+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift

# shellcheck source=scripts/gpu_setup.sh
. scripts/gpu_setup.sh
install_carried_wheels
env_line=$(bash scripts/vllm/install.sh "${PARTS[@]}") || { echo "vLLM bundle not installed (see above)"; exit 3; }
eval "$env_line"

if ! build_native . "$OUT/build.log"; then
  tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
export FOUNDRY_LIB=$PWD/build/gpu/libfoundry.so PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
} | tee "$OUT/machine.txt"
python3 scripts/vllm/check_targets.py /tmp/vllm-site/vllm || exit 1
python3 scripts/vllm/run_vllm.py --out "$OUT" "$@"
