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
setup_start=$(date +%s)
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
  [libgloo-dev]=/usr/include/gloo/rendezvous/store.h
  [libre2-dev]=/usr/include/re2/re2.h
  [python3-venv]=/usr/share/doc/python3-venv
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
  # --no-compile: no bytecode for torch's thousands of modules up front (Python compiles what it
  # imports); it saves most of a minute of every fresh set-up.
  "$venv/bin/pip" install -q --no-compile "${need_pkgs[@]}" \
    || die "pip could not install ${need_pkgs[*]}; run: $venv/bin/pip install ${need_pkgs[*]}"
fi

# The external optimizer library the Shampoo/SOAP parity test compares with, pinned (the
# test cites its source by line); --no-deps: it needs only torch and numpy, installed above.
ext_opt="pytorch-optimizer==4.1.0"
"$venv/bin/python" -c "import importlib.metadata as m; assert m.version('pytorch-optimizer') == '${ext_opt#*==}'" 2>/dev/null || {
  say "installing into $venv: $ext_opt"
  "$venv/bin/pip" install -q --no-deps "$ext_opt" || die "pip could not install $ext_opt; run: $venv/bin/pip install --no-deps $ext_opt"
}

# The public Muon implementations the kit's verdicts run (python/tests/public_verdicts.py,
# docs/conformance.md), pinned; pure Python, --no-deps (torch and numpy are above).
for spec in "heavyball==3.2.1" "opt-einsum==3.4.0"; do
  "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('${spec%%==*}') == '${spec#*==}'" 2>/dev/null || {
    say "installing into $venv: $spec"
    "$venv/bin/pip" install -q --no-deps "$spec" || die "pip could not install $spec; run: $venv/bin/pip install --no-deps $spec"
  }
done

# Optional extras (MFSDP_EXTRAS, space-separated), kept out of the main set-up so it stays fast.
# deepspeed: DeepSpeed 0.19.8 (an sdist, built here with its C++ ops off) and its pure-Python
# dependencies, pinned, for regression.deepspeed_verdicts; torchtitan: torchtitan 0.3.0's DistMuon,
# for regression.torchtitan_verdicts (both label optional_peers).
for extra in ${MFSDP_EXTRAS:-}; do
  case "$extra" in
    deepspeed)
      "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('deepspeed') == '0.19.8'" 2>/dev/null || {
        say "installing into $venv: deepspeed==0.19.8 and its dependencies"
        "$venv/bin/pip" install -q "wheel==0.48.0" "einops==0.8.2" "hjson==3.1.0" "msgpack==1.2.4" "ninja==1.13.2" \
          "psutil==7.2.2" "py-cpuinfo==9.0.0" "pydantic==2.14.4" "tqdm==4.70.1" "packaging==26.4" \
          || die "pip could not install DeepSpeed's dependencies"
        DS_BUILD_OPS=0 "$venv/bin/pip" install -q --no-build-isolation --no-deps "deepspeed==0.19.8" \
          || die "pip could not build deepspeed==0.19.8; run: DS_BUILD_OPS=0 $venv/bin/pip install --no-build-isolation --no-deps deepspeed==0.19.8"
      } ;;
    torchtitan)
      # Its wheel and spmd_types without their dependencies (datasets, wandb, tensorboard, ...: a
      # trainer's), and the one its import of flex_shard needs (tyro).
      "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('torchtitan') == '0.3.0'" 2>/dev/null || {
        say "installing into $venv: torchtitan==0.3.0, spmd_types==0.2.3 and tyro"
        "$venv/bin/pip" install -q --no-deps "torchtitan==0.3.0" "spmd_types==0.2.3" "tyro==1.0.17" \
          "docstring-parser==0.18.0" "typeguard==4.6.1" || die "pip could not install torchtitan==0.3.0"
      } ;;
    *) die "MFSDP_EXTRAS: unknown extra '$extra' (known: deepspeed, torchtitan)" ;;
  esac
done

# JSON Schema validation of every JSON output (docs/schemas/, test cli.output_schemas), pinned
# with its dependencies; --no-deps so nothing else moves.
for spec in "jsonschema==4.23.0" "attrs==26.1.0" "jsonschema-specifications==2025.9.1" "referencing==0.37.0" \
            "rpds-py==2026.9.1"; do
  "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('${spec%%==*}') == '${spec#*==}'" 2>/dev/null || {
    say "installing into $venv: $spec"
    "$venv/bin/pip" install -q --no-deps "$spec" || die "pip could not install $spec; run: $venv/bin/pip install --no-deps $spec"
  }
done

# The covering-array generator the designed grid is made with (regression/grid/design.py; the
# test grid.array_is_what_design_generates regenerates the committed array), pinned: pure Python.
grid_gen="allpairspy==2.5.1"
"$venv/bin/python" -c "import importlib.metadata as m; assert m.version('allpairspy') == '${grid_gen#*==}'" 2>/dev/null || {
  say "installing into $venv: $grid_gen"
  "$venv/bin/pip" install -q --no-deps "$grid_gen" || die "pip could not install $grid_gen; run: $venv/bin/pip install --no-deps $grid_gen"
}

# The conformance kit (python/, docs/conformance.md), installed editable: the peers, the ground truth
# and a user's own training script import mfsdp_kit from this checkout.
kit_here=$("$venv/bin/python" -c 'import mfsdp_kit, os; print(os.path.dirname(os.path.dirname(os.path.realpath(mfsdp_kit.__file__))))' 2>/dev/null || true)
if [ "$kit_here" != "$(realpath "$repo/python")" ]; then
  say "installing into $venv: mfsdp_kit (editable, from $repo/python)"
  "$venv/bin/pip" install -q --no-deps -e "$repo/python" >/dev/null \
    || die "pip could not install the kit; run: $venv/bin/pip install --no-deps -e $repo/python"
fi

# The CUDA headers the NCCL backend's translation unit includes, without a CUDA toolkit: the torch
# wheel's nvidia-* dependencies bring the runtime headers but not crt/ (nvidia-cuda-crt) nor
# libcu++'s nv/target (nvidia-cuda-cccl); both are headers-only wheels of torch's CUDA version.
cuda=$("$venv/bin/python" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null || true)
if [ -n "$cuda" ]; then
  case "$cuda" in
    12.*) cuda_pkgs=("nvidia-cuda-nvcc-cu12==$cuda.*" "nvidia-cuda-cccl-cu12==$cuda.*") ;;
    *) cuda_pkgs=("nvidia-cuda-crt==$cuda.*" "nvidia-cuda-cccl==$cuda.*") ;;
  esac
  missing_cuda=()
  for spec in "${cuda_pkgs[@]}"; do
    "$venv/bin/python" -c "import importlib.metadata as m; v = m.version('${spec%%==*}'); assert v.startswith('$cuda.')" \
      2>/dev/null || missing_cuda+=("$spec")
  done
  if [ ${#missing_cuda[@]} -gt 0 ]; then
    say "installing into $venv: ${missing_cuda[*]} (CUDA $cuda headers, no toolkit)"
    "$venv/bin/pip" install -q "${missing_cuda[@]}" \
      || die "pip could not install ${missing_cuda[*]}; run: $venv/bin/pip install ${missing_cuda[*]}"
  fi
fi

# ---- 3. Configure and build (no CUDA toolkit needed: cmake/MfsdpTorch.cmake) ------------------
torch_prefix=$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
if [ ! -f "$build/build.ninja" ] || [ "$(cat "$build/.mfsdp-configured" 2>/dev/null)" != "$torch_prefix|$build_type" ]; then
  say "configuring $build ($build_type)"
  mkdir -p "$build"
  cmake -S "$repo" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE="$build_type" \
    -DMFSDP_PYTHON="$venv/bin/python" >"$build/configure.log" 2>&1 \
    || { cat "$build/configure.log" >&2; die "cmake configure failed (log above)"; }
  echo "$torch_prefix|$build_type" >"$build/.mfsdp-configured"
fi
say "packages, venv and configuration ready in $(( $(date +%s) - setup_start )) s"
build_start=$(date +%s)
say "building ($jobs jobs)"
cmake --build "$build" -j "$jobs" || die "build failed"
say "built in $(( $(date +%s) - build_start )) s"
