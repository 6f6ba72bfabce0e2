#!/usr/bin/env bash
# setup.sh — install the Debian packages vsalab builds against (only those
# missing) and configure + build into build/. The CUDA toolkit (nvcc, cudart,
# cuRAND) is expected at /usr/local/cuda or on PATH.
#   scripts/setup.sh [extra cmake args...]
set -euo pipefail
case "${1:-}" in
  -h|--help)
    echo "usage: scripts/setup.sh [extra cmake args...]"
    echo "install the missing Debian packages and the test-only NVIDIA wheels (.deps/py),"
    echo "then configure and build vsalab into build/ (docs/cli.md, \"Setting up: the scripts\")"
    exit 0 ;;
esac
cd "$(dirname "$0")/.."

need=()
# sqlite3: the CLI docs/db.md's queries use; tmux and chromium drive the REPL
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
  DEBIAN_FRONTEND=noninteractive $sudo apt-get "${lock[@]}" install -y \
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

# Test-only NVIDIA tools from the Python registry, into .deps/py: CUTLASS's
# headers (the sm100a descriptor tests compare against CuTe's encoders) and
# cuobjdump (the SASS census; the CUDA 13.0 toolkit does not ship it everywhere).
if [ ! -x .deps/py/nvidia/cu13/bin/cuobjdump ] || [ ! -d .deps/py/cutlass_library ]; then
  echo "setup: installing nvidia-cutlass, nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm into .deps/py (test tools)"
  # Only two tests need them: without the registry the build goes on, and
  # those tests fail naming what is missing.
  python3 -m pip install -q --disable-pip-version-check --no-deps --target .deps/py \
    nvidia-cutlass nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm ||
    echo "setup: could not install the test tools (no Python registry?); building anyway:" \
      "c_test_umma_cutlass and sass_census_sm100a will fail until they are installed" >&2
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
# The compiler's output (mostly ptxas resource notes, hundreds of lines)
# goes to VSALAB_BUILD_LOG (default build/build.log; VSALAB_BUILD_LOG=-
# prints it); one line says how the build went, and a failed build shows
# the log's last lines.
VSALAB_BUILD_LOG=${VSALAB_BUILD_LOG:-$PWD/build/build.log}
[ "$VSALAB_BUILD_LOG" = - ] && VSALAB_BUILD_LOG=
if [ -n "${VSALAB_BUILD_LOG:-}" ]; then
  mkdir -p "$(dirname "$VSALAB_BUILD_LOG")"
  echo "setup: building into build/ (compiler output in $VSALAB_BUILD_LOG)"
  if cmake --build build -j"$(nproc)" >"$VSALAB_BUILD_LOG" 2>&1; then
    echo "setup: build ok"
  else
    echo "setup: build FAILED; the last lines of $VSALAB_BUILD_LOG:" >&2
    tail -n 40 "$VSALAB_BUILD_LOG" >&2
    echo "setup: build FAILED (the whole log: $VSALAB_BUILD_LOG)" >&2
    exit 1
  fi
else
  cmake --build build -j"$(nproc)"
fi
