#!/usr/bin/env bash
# scripts/peers.sh [BUILD_DIR]: the owner runtime against the stock PyTorch peers on this machine,
# side by side (peers/side_by_side.py: W = 2 and 4, the tiny model and hidden 512, 3 interleaved
# rounds of 10 steps each), then each peer's trajectory judged by `mfsdp conform` against the
# oracle's (peers/check_peers.py). Writes results/cpu/peers.json and results/cpu/peers_conform.txt
# and renders its dashboard page (results/cpu/peers.html). Outside CI: about 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
mfsdp=$build/mfsdp
py=.venv/bin/python
[ -x "$mfsdp" ] && [ -x "$py" ] || { echo "peers.sh: build first (bash scripts/setup.sh)" >&2; exit 2; }
start=$(date +%s)
work=$(mktemp -d /tmp/mfsdp_peers_XXXXXX); trap 'rm -rf "$work"' EXIT
"$py" peers/side_by_side.py --mfsdp "$mfsdp" --out results/cpu/peers.json --work "$work/timing"
"$py" peers/check_peers.py --mfsdp "$mfsdp" --work "$work/conform" | tee "$work/conform.txt"
cp "$work/conform.txt" results/cpu/peers_conform.txt
"$mfsdp" dashboard results/cpu/peers.json -o results/cpu/peers.html
echo "peers.sh: $(( $(date +%s) - start )) s"
