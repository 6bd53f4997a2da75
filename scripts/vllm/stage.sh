#!/usr/bin/env bash
# On the GPU machine: stage vLLM bundle parts for a later call (scripts/bundle/stage.sh says how).
#
#   bash scripts/vllm/stage.sh .whl/vllm/1 [PART_OR_DIR...]
exec bash "$(dirname "${BASH_SOURCE[0]}")/../bundle/stage.sh" vllm "$@"
