#!/usr/bin/env bash
# setup.sh — install the Debian packages vsalab builds against (only those
# missing) and configure + build into build/. The CUDA toolkit (nvcc, cudart,
# cuRAND) is expected at /usr/local/cuda or on PATH.
#   scripts/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
# sqlite3: the CLI README.md's queries use; tmux and chromium drive the REPL
# and report tests.
for pkg in cmake pkg-config gcc libluajit-5.1-dev libsqlite3-dev sqlite3 lua-busted libedit-dev tmux chromium; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  # Wait up to 10 minutes for another apt/dpkg (unattended upgrades) instead
  # of failing on its lock; show apt's progress, not silence.
  lock=(-o DPkg::Lock::Timeout=600)
  $sudo apt-get "${lock[@]}" update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get "${lock[@]}" install -y --no-install-recommends \
    -o Dpkg::Progress-Fancy=0 "${need[@]}"
fi

if ! command -v nvcc >/dev/null; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  else
    echo "setup: nvcc not found (install the CUDA Toolkit 13 at /usr/local/cuda)" >&2
    exit 1
  fi
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build build -j"$(nproc)"
