#!/usr/bin/env bash
# Run on a Debian machine with apt (like the development machine): downloads the development
# packages the build needs besides torch and unpacks them into one prefix that can be copied to a
# CUDA machine without apt, for scripts/gpu_run.sh (MFSDP_DEPS_PREFIX=that prefix).
# Usage: bash scripts/gpu_deps.sh [PREFIX]      (default: .gpu-deps in the repository)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=$(realpath -m "${1:-$repo/.gpu-deps}")
pkgs=(libgloo-dev libgtest-dev libbenchmark-dev libbenchmark1debian librapidcheck-dev nlohmann-json3-dev libcli11-dev)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${pkgs[@]}" >/dev/null) || { echo "gpu_deps: apt-get download failed (run apt-get update?)" >&2; exit 1; }
mkdir -p "$prefix"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$prefix"; done
echo "gpu_deps: ${#pkgs[@]} packages unpacked into $prefix ($(du -sh "$prefix" | cut -f1)); on the CUDA machine: MFSDP_DEPS_PREFIX=$prefix bash scripts/gpu_run.sh"
