#!/usr/bin/env bash
# On the GPU machine, in the last call of the chain: install the vLLM bundle (scripts/bundle/install.sh says how).
#
#   env_line=$(bash scripts/vllm/install.sh .whl/vllm/2) || exit 1; eval "$env_line"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../bundle/install.sh" vllm "$@"
