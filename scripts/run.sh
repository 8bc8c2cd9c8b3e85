#!/usr/bin/env bash
# The main job: set up (idempotent), build, and run `mfsdp` with the given arguments; without
# arguments, the embedded default (see README).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$repo/scripts/setup.sh"
exec "${MFSDP_BUILD_DIR:-$repo/build}/mfsdp" "$@"
