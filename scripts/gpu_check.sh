#!/usr/bin/env bash
# The GPU checks of the runtime, in one script for a CUDA machine (run after scripts/setup.sh has
# built the tree there): the cuda-labelled tests (owner vs oracle bitwise on one GPU over NCCL at
# W = 1 and over Gloo on CUDA tensors at W = 2, 3, with and without prefetch; CUDA vs CPU
# trajectory) and two short `mfsdp train --device cuda` runs. Prints what ran; exits non-zero on
# the first failure. Usage: bash scripts/gpu_check.sh [BUILD_DIR]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-${MFSDP_BUILD_DIR:-$repo/build}}
[ -x "$build/mfsdp" ] || { echo "gpu_check: no $build/mfsdp; build first (bash scripts/setup.sh)" >&2; exit 1; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "== cuda tests"
log=$(mktemp)
(cd "$build" && ctest -L cuda --output-on-failure --timeout 600) | tee "$log"
if grep -q "(Skipped)" "$log"; then echo "gpu_check: cuda tests were skipped: no GPU visible" >&2; exit 1; fi
echo "== mfsdp train, 1 rank on NCCL"
"$build/mfsdp" train -w 1 --device cuda --backend nccl --steps 5 --prefetch
echo "== mfsdp train, 2 ranks over Gloo on CUDA tensors"
"$build/mfsdp" train -w 2 --device cuda --backend gloo --steps 5 --prefetch
echo "gpu_check: all GPU checks passed"
