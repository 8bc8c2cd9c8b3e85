#!/usr/bin/env bash
# Every Debian package that a CMake file tells the user to install ('apt-get install -y PKG ...')
# must be in scripts/setup.sh's package list, or a fresh machine fails at configure where a
# developer's machine (with the package installed by hand) passes.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
hints=$(find . -path ./build -prune -o -path ./.venv -prune -o \( -name CMakeLists.txt -o -name '*.cmake' \) -print \
        | xargs grep -hoE "apt-get install -y [a-z0-9][a-z0-9.+ -]*" | sed 's/apt-get install -y //' | tr ' ' '\n' \
        | grep -E '^[a-z0-9][a-z0-9.+-]+$' | sort -u)
[ -n "$hints" ] || { echo "install-hints: no 'apt-get install -y' hint found in the CMake files (the scan is broken)"; exit 1; }
# setup.sh's list: the keys of its debs=( [pkg]=file ... ) table.
listed=$(sed -n '/^declare -A debs=(/,/^)/p' scripts/setup.sh | grep -oE '^\s*\[[a-z0-9.+-]+\]' | tr -d '[] ' | sort -u)
missing=$(comm -23 <(echo "$hints") <(echo "$listed"))
n=$(echo "$hints" | wc -l)
if [ -n "$missing" ]; then
  echo "install-hints: the CMake files ask for package(s) that scripts/setup.sh never installs: $(echo $missing)"
  exit 1
fi
echo "install-hints: all $n packages named by the CMake files are installed by scripts/setup.sh: $(echo $hints)"
