#!/usr/bin/env bash
# The whole test suite: set up (idempotent), build, and run every test through ctest.
# Extra arguments go to ctest, e.g. `scripts/test.sh -L unit` for one label
# (unit, differential, property, regression, checkpoint, golden) or `-R Gloo` for a name pattern.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$repo/scripts/setup.sh"
exec ctest --test-dir "${MFSDP_BUILD_DIR:-$repo/build}" -j "${MFSDP_JOBS:-$(nproc)}" \
  --output-on-failure --timeout 600 "$@"
