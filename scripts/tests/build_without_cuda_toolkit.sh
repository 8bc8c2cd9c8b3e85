#!/usr/bin/env bash
# Configures the project in a scratch build directory with every CUDA toolkit hidden, builds a
# probe that includes the wheel's CUDA and NCCL headers and links libtorch (torch_cuda included),
# runs it, and checks that the configuration never referred to a system CUDA install.
# Hiding: in a private mount namespace (root + unshare), an empty tmpfs over /usr/local/cuda* and
# /dev/null over every nvcc on PATH; in any case CUDA_HOME & co. are unset and an `nvcc` that
# records being called comes first on PATH (it must never be called).
# Usage: build_without_cuda_toolkit.sh SOURCE_DIR PYTHON
set -euo pipefail
src=$1 python=$2
if [ -z "${MFSDP_NOCUDA_INNER:-}" ] && [ "$(id -u)" -eq 0 ] && unshare --mount true 2>/dev/null; then
  exec env MFSDP_NOCUDA_INNER=1 unshare --mount bash "$0" "$@"
fi
hidden="PATH only"
if [ -n "${MFSDP_NOCUDA_INNER:-}" ]; then
  for c in /usr/local/cuda /usr/local/cuda-*; do [ -d "$c" ] && mount -t tmpfs none "$c"; done
  for dir in $(printf '%s' "$PATH" | tr ':' ' '); do
    [ -e "$dir/nvcc" ] && mount --bind /dev/null "$dir/nvcc"
  done
  hidden="mount namespace: /usr/local/cuda* empty, every nvcc on PATH replaced"
fi
d=$(mktemp -d /tmp/mfsdp_nocuda_XXXXXX)
trap 'rm -rf "$d"' EXIT
mkdir "$d/shim"
printf '#!/bin/sh\ntouch "%s/nvcc-called"\nexit 1\n' "$d" >"$d/shim/nvcc"
chmod +x "$d/shim/nvcc"
clean_path="$d/shim:$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -i cuda | paste -sd: -)"
run() { env -u CUDA_HOME -u CUDA_PATH -u CUDAToolkit_ROOT -u CUDACXX PATH="$clean_path" "$@"; }
[ ! -e /usr/local/cuda/include/cuda_runtime_api.h ] || [ -z "${MFSDP_NOCUDA_INNER:-}" ] \
  || { echo "no-cuda: the system CUDA headers are still visible"; exit 1; }
# No precompiled header: the probe alone would pay for building it (about 30 s).
run cmake -S "$src" -B "$d/b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMFSDP_PRECOMPILED_HEADERS=OFF -DMFSDP_PYTHON="$python" >"$d/configure.log" 2>&1 \
  || { cat "$d/configure.log"; echo "no-cuda: configure failed"; exit 1; }
if grep -qiE 'nvcc|CUDAToolkit|/usr/local/cuda' "$d/b/CMakeCache.txt"; then
  grep -iE 'nvcc|CUDAToolkit|/usr/local/cuda' "$d/b/CMakeCache.txt" | head -5
  echo "no-cuda: the configuration refers to a CUDA toolkit"; exit 1
fi
run cmake --build "$d/b" --target torch_link_probe >"$d/build.log" 2>&1 || { tail -30 "$d/build.log"; echo "no-cuda: build failed"; exit 1; }
[ ! -e "$d/nvcc-called" ] || { echo "no-cuda: the build called nvcc"; exit 1; }
run "$d/b/scripts/tests/torch_link_probe"
echo "no-cuda: configured and built with no CUDA toolkit visible ($hidden)"
