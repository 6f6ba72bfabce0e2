#!/usr/bin/env bash
# pack.sh — gather what a GPU host without Lua packages needs into one
# folder (default .gpu-bin, git-ignored): build/vsalab, the example
# plug-ins (build/libvsalab_example_*.so), plus busted and its
# Lua/C modules from this machine's Debian packages. Copy that folder with
# the tree to the GPU host and run tests/gpu/run.sh .gpu-bin/vsalab there.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-.gpu-bin}
rm -rf "$dest"
mkdir -p "$dest/lua/share" "$dest/lua/lib"
cp build/vsalab build/tests/tcgen05_ladder build/tests/tcgen05_ladder_emu "$dest/"
cp build/libvsalab_example_cpu.so build/libvsalab_example_cuda.so "$dest/"
cp -rL /usr/share/lua/5.1/. "$dest/lua/share/"
cp -rL /usr/lib/x86_64-linux-gnu/lua/5.1/. "$dest/lua/lib/"
du -sh "$dest"
