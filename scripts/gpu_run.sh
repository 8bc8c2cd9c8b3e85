#!/usr/bin/env bash
# The CUDA runner, one command on a CUDA machine with PyTorch installed (H200 class):
#   1. configures and builds this tree against that machine's torch (MFSDP_PYTHON's) into
#      build-cuda/ (no nvcc needed: cmake/MfsdpTorch.cmake);
#   2. runs the golden trajectories on the GPU (NCCL at W = 1, Gloo on CUDA tensors at W = 2, 4),
#      writing golden/cuda/*.json on the first run and comparing with them (within 1e-3 relative)
#      afterwards;
#   3. runs the step benchmark on the GPU and writes results/gpu/bench_step.json, then a dashboard
#      results/gpu/dashboard.html (with the CPU results of results/cpu/ beside it if present);
#   4. runs scripts/gpu_check.sh (the cuda-labelled bitwise tests and two training runs).
# Prerequisites besides torch, CMake and Ninja: the Debian development headers the build
# uses (libgloo-dev, libgtest-dev, libbenchmark-dev, librapidcheck-dev, nlohmann-json3-dev,
# libcli11-dev). A machine without apt gets them from scripts/gpu_deps.sh run on a Debian machine
# (a prefix to copy over; pass it as MFSDP_DEPS_PREFIX).
#
# Usage: bash scripts/gpu_run.sh [OUT_DIR]     (environment: MFSDP_PYTHON, MFSDP_DEPS_PREFIX)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$repo/results/gpu}
build=${MFSDP_BUILD_DIR:-$repo/build-cuda}
python=${MFSDP_PYTHON:-$(command -v python3)}
say() { echo "gpu_run: $*"; }
die() { echo "gpu_run: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this is not a CUDA machine"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
say "GPU: $gpu"
torch_prefix=$("$python" -c 'import os, torch; assert torch.cuda.is_available(), "torch sees no GPU"; print(os.path.dirname(torch.__file__))') \
  || die "$python has no CUDA-capable torch"
prefix_path=""
extra=()
if [ -n "${MFSDP_DEPS_PREFIX:-}" ]; then
  prefix_path="$MFSDP_DEPS_PREFIX/usr;$MFSDP_DEPS_PREFIX/usr/lib/x86_64-linux-gnu/cmake"
  extra+=(-DCMAKE_CXX_FLAGS="-isystem $MFSDP_DEPS_PREFIX/usr/include" -DMFSDP_GLOO_INCLUDE="$MFSDP_DEPS_PREFIX/usr/include")
  export LD_LIBRARY_PATH="$MFSDP_DEPS_PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
say "configuring $build against $torch_prefix"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
  -DMFSDP_PYTHON="$python" "${extra[@]}" \
  >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; die "configure failed"; }
say "building"
cmake --build "$build" -j "$(nproc)" --target mfsdp golden_tests bench_step cuda_tests >/dev/null || die "build failed"
mkdir -p "$out"

if ! ls "$repo"/golden/cuda/tiny_w*_*.json >/dev/null 2>&1; then
  say "no GPU goldens yet: writing golden/cuda/ (commit them)"
  MFSDP_GOLDEN_DEVICE=cuda MFSDP_GPU_NAME="$gpu" MFSDP_REGENERATE_GOLDENS=1 "$build/regression/golden_tests"
fi
say "golden trajectories on the GPU"
MFSDP_GOLDEN_DEVICE=cuda MFSDP_GPU_NAME="$gpu" "$build/regression/golden_tests" | tee "$out/golden.log"

say "step benchmark on the GPU"
"$build/bench/bench_step" --device cuda --json "$out/bench_step.json" | tee "$out/bench_step.log"
results=("$out/bench_step.json")
[ -f "$repo/results/cpu/bench_step.json" ] && results+=("$repo/results/cpu/bench_step.json")
"$build/mfsdp" dashboard "${results[@]}" -o "$out/dashboard.html"

say "bitwise GPU checks"
bash "$repo/scripts/gpu_check.sh" "$build" | tee "$out/gpu_check.log"
say "done: $out (bench_step.json, dashboard.html, golden.log, gpu_check.log); commit golden/cuda and $out"
