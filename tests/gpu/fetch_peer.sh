#!/usr/bin/env bash
# fetch_peer.sh — extract FastVideo's public Triton VSA kernels (the measuring
# stick of docs/ANCHORS.md) from a git mirror into .peer/fastvideo_triton/:
#   tests/gpu/fetch_peer.sh [MIRROR_GIT_DIR] [REV]
# MIRROR_GIT_DIR: a FastVideo git directory (a clone or mirror of
#   github:hao-ai-lab/FastVideo). REV: a commit or ref (HEAD).
# Only two files are taken; both import nothing but torch, triton (and the
# standard library), so the folder is self-contained. .peer/ is git-ignored:
# never commit it; the product never depends on it. To use it on the GPU
# host, copy .peer/ there with the tree and run python3 tests/gpu/triton_peer.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
mirror=${1:-/work/.mirror/hao-ai-lab+FastVideo/repo}
rev=${2:-HEAD}
src=fastvideo-kernel/python/fastvideo_kernel/triton_kernels
dst=.peer/fastvideo_triton
files="block_sparse_attn_triton.py index.py"

git -C "$mirror" rev-parse --git-dir > /dev/null
commit=$(git -C "$mirror" rev-parse --verify "$rev^{commit}")
grep -qx '/\.peer/' .gitignore 2>/dev/null || grep -qx '\.peer/' .gitignore 2>/dev/null \
  || echo '/.peer/' >> .gitignore

rm -rf "$dst"
mkdir -p "$dst"
for f in $files; do
  git -C "$mirror" show "$commit:$src/$f" > "$dst/$f"
done
git -C "$mirror" show "$commit:fastvideo-kernel/LICENSE" > "$dst/LICENSE" 2>/dev/null \
  || git -C "$mirror" show "$commit:LICENSE" > "$dst/LICENSE" 2>/dev/null || true
: > "$dst/__init__.py"
{
  echo "$commit"
  git -C "$mirror" log -1 --format='%cd %s' "$commit"
  for f in $files; do
    echo "$src/$f $(git -C "$mirror" log -1 --format=%h "$commit" -- "$src/$f")"
  done
} > "$dst/COMMIT"

# Self-containment: every import must be torch, triton or the standard library.
bad=$(grep -hE '^\s*(import|from)\s' $(for f in $files; do echo "$dst/$f"; done) \
  | grep -vE '^\s*(import|from)\s+(torch|triton|math|typing|os|functools|__future__)\b' || true)
if [ -n "$bad" ]; then
  echo "fetch_peer.sh: unexpected imports in the peer files:" >&2
  echo "$bad" >&2
  exit 1
fi
for sym in triton_block_sparse_attn_forward triton_block_sparse_attn_backward; do
  grep -q "^def $sym(" "$dst/block_sparse_attn_triton.py" \
    || { echo "fetch_peer.sh: $sym not found at $commit" >&2; exit 1; }
done
grep -q '^def invert_indices(' "$dst/index.py" \
  || { echo "fetch_peer.sh: invert_indices not found at $commit" >&2; exit 1; }
echo "fetch_peer.sh: $dst from FastVideo $commit"
ls -l "$dst"
