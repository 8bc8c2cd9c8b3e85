#!/usr/bin/env bash
# Idempotent set-up: Debian build dependencies, the Python virtual environment holding the pinned
# torch wheel (libtorch), and a configured + built tree in build/.
#
# Sourced or run by scripts/run.sh and scripts/test.sh; safe to run again (it only does what is
# missing). Environment knobs:
#   MFSDP_VENV       virtual environment to use/create          (default: <repo>/.venv)
#   MFSDP_BUILD_DIR  CMake build directory                      (default: <repo>/build)
#   MFSDP_BUILD_TYPE CMake build type                           (default: Release)
#   MFSDP_JOBS       parallel build jobs                        (default: nproc)
set -euo pipefail

MFSDP_TORCH_VERSION=2.11.0
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${MFSDP_VENV:-$repo/.venv}
build=${MFSDP_BUILD_DIR:-$repo/build}
build_type=${MFSDP_BUILD_TYPE:-Release}
jobs=${MFSDP_JOBS:-$(nproc)}

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# ---- 1. Debian packages ---------------------------------------------------------------------
# package -> a file it installs (cheap presence check without dpkg locks)
declare -A debs=(
  [cmake]=/usr/bin/cmake
  [ninja-build]=/usr/bin/ninja
  [g++]=/usr/bin/g++
  [libgtest-dev]=/usr/include/gtest/gtest.h
  [libgmock-dev]=/usr/include/gmock/gmock.h
  [libbenchmark-dev]=/usr/include/benchmark/benchmark.h
  [librapidcheck-dev]=/usr/include/rapidcheck.h
  [nlohmann-json3-dev]=/usr/include/nlohmann/json.hpp
  [libcli11-dev]=/usr/include/CLI/CLI.hpp
)
missing=()
for pkg in "${!debs[@]}"; do
  [ -e "${debs[$pkg]}" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  cmd="apt-get update && apt-get install -y ${missing[*]}"
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    die "missing Debian package(s): ${missing[*]}; install them with: sudo sh -c '$cmd'"
  fi
  say "installing Debian package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }; then
    die "could not install Debian package(s): ${missing[*]}; run: $cmd"
  fi
fi

# ---- 2. Python virtual environment with the pinned torch wheel --------------------------------
python=${MFSDP_PYTHON:-$(command -v python3 || true)}
[ -n "$python" ] || die "python3 not found; install it with: apt-get install -y python3 python3-venv"
if [ ! -x "$venv/bin/python" ]; then
  say "creating virtual environment $venv"
  "$python" -m venv "$venv" || die "could not create a virtual environment; install python3-venv (apt-get install -y python3-venv)"
fi
have=$("$venv/bin/python" - <<'PY' 2>/dev/null || true
import importlib.metadata as m
try: print(m.version("torch"))
except Exception: print("")
PY
)
need_pkgs=()
[ "$have" = "$MFSDP_TORCH_VERSION" ] || need_pkgs+=("torch==$MFSDP_TORCH_VERSION")
for extra in numpy safetensors; do
  "$venv/bin/python" -c "import importlib.metadata as m; m.version('$extra')" 2>/dev/null || need_pkgs+=("$extra")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  say "installing into $venv: ${need_pkgs[*]} (torch is a large CUDA wheel; first time takes minutes)"
  "$venv/bin/pip" install -q "${need_pkgs[@]}" \
    || die "pip could not install ${need_pkgs[*]}; run: $venv/bin/pip install ${need_pkgs[*]}"
fi

# ---- 3. CUDA toolkit (the torch wheel's CMake config looks for it at configure time) ----------
cuda_root=${CUDAToolkit_ROOT:-}
if [ -z "$cuda_root" ]; then
  for c in /usr/local/cuda /usr/local/cuda-13.0; do
    [ -x "$c/bin/nvcc" ] && { cuda_root=$c; break; }
  done
fi
[ -n "$cuda_root" ] || die "CUDA toolkit not found (torch's CMake config needs nvcc); install the CUDA 13 toolkit (apt-get install -y cuda-toolkit-13-0 from NVIDIA's repository) or set CUDAToolkit_ROOT"

# ---- 4. Configure and build --------------------------------------------------------------------
torch_prefix=$("$venv/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
if [ ! -f "$build/build.ninja" ] || [ "$(cat "$build/.mfsdp-configured" 2>/dev/null)" != "$torch_prefix|$build_type" ]; then
  say "configuring $build ($build_type)"
  mkdir -p "$build"
  cmake -S "$repo" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE="$build_type" \
    -DCMAKE_PREFIX_PATH="$torch_prefix" \
    -DCUDAToolkit_ROOT="$cuda_root" \
    -DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc" \
    -DMFSDP_PYTHON="$venv/bin/python" >"$build/configure.log" 2>&1 \
    || { cat "$build/configure.log" >&2; die "cmake configure failed (log above)"; }
  echo "$torch_prefix|$build_type" >"$build/.mfsdp-configured"
fi
say "building ($jobs jobs)"
cmake --build "$build" -j "$jobs" || die "build failed"
