#!/usr/bin/env bash
# fetch_peer.sh — FastVideo's public Triton VSA kernels (the triton peer,
# tests/gpu/peers/triton_peer.py) into the git-ignored .peer/fastvideo_triton/.
#
#   tests/gpu/fetch_peer.sh [--rev COMMIT] [CHECKOUT]
#
# Without CHECKOUT: a shallow clone of https://github.com/hao-ai-lab/FastVideo
# at the pinned commit (scripts/peers.lock, '@fastvideo'). CHECKOUT: a local
# FastVideo clone (a work tree or a bare git directory), read at --rev
# (default: the pinned commit). A revision without the fix of the Triton
# backward's gradients (FastVideo #1730, '@fastvideo-gradient-fix' in the
# lock file) is refused, as is one whose history cannot show it.
#
# Two files are taken (triton_kernels/block_sparse_attn_triton.py and
# index.py); both import only torch, triton and the standard library, so the
# folder is self-contained. .peer/ is git-ignored and the product never
# depends on it; on a GPU host without network, copy .peer/ there.
set -euo pipefail
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
root=$(cd "$(dirname "$0")/../.." && pwd)
lock=$root/scripts/peers.lock
pin=$(awk '$1 == "@fastvideo" {print $2}' "$lock")
fix=$(awk '$1 == "@fastvideo-gradient-fix" {print $2}' "$lock")
url=https://github.com/hao-ai-lab/FastVideo
rev= checkout=
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --rev) [ $# -ge 2 ] || { echo "fetch_peer.sh: --rev needs a commit" >&2; exit 2; }; rev=$2; shift 2 ;;
    --rev=*) rev=${1#--rev=}; shift ;;
    -*) echo "fetch_peer.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) [ -z "$checkout" ] || { echo "fetch_peer.sh: one CHECKOUT only (see --help)" >&2; exit 2; }
       checkout=$1; shift ;;
  esac
done
rev=${rev:-$pin}
src=fastvideo-kernel/python/fastvideo_kernel/triton_kernels
dst=$root/.peer/fastvideo_triton
files="block_sparse_attn_triton.py index.py"

tmp=
cleanup() { [ -z "$tmp" ] || rm -rf "$tmp"; }
trap cleanup EXIT
if [ -z "$checkout" ]; then
  tmp=$(mktemp -d)
  checkout=$tmp/FastVideo
  echo "fetch_peer.sh: shallow clone of $url at $rev"
  git init -q "$checkout"
  git -C "$checkout" remote add origin "$url"
  git -C "$checkout" fetch -q --depth 1 origin "$rev" \
    || { echo "fetch_peer.sh: cannot fetch $rev from $url (no network? give a local CHECKOUT)" >&2; exit 1; }
  rev=FETCH_HEAD
fi
git -C "$checkout" rev-parse --git-dir > /dev/null 2>&1 \
  || { echo "fetch_peer.sh: $checkout is not a git checkout" >&2; exit 2; }
commit=$(git -C "$checkout" rev-parse --verify -q "$rev^{commit}") \
  || { echo "fetch_peer.sh: no commit '$rev' in $checkout" >&2; exit 2; }
# The gradient fix must be in the revision's history (the pinned commit has it).
if [ "$commit" != "$pin" ]; then
  if ! git -C "$checkout" cat-file -e "$fix^{commit}" 2>/dev/null; then
    echo "fetch_peer.sh: cannot tell whether $commit includes FastVideo #1730 (commit $fix," \
      "the Triton backward's gradient fix): its history lacks it; use a full clone" >&2
    exit 1
  fi
  if ! git -C "$checkout" merge-base --is-ancestor "$fix" "$commit"; then
    echo "fetch_peer.sh: $commit predates FastVideo #1730 (commit $fix): its Triton backward" \
      "gives wrong gradients; use $pin or later" >&2
    exit 1
  fi
fi

grep -qxE '/?\.peer/' "$root/.gitignore" 2>/dev/null || echo '/.peer/' >> "$root/.gitignore"
rm -rf "$dst"
mkdir -p "$dst"
for f in $files; do
  git -C "$checkout" show "$commit:$src/$f" > "$dst/$f"
done
git -C "$checkout" show "$commit:fastvideo-kernel/LICENSE" > "$dst/LICENSE" 2>/dev/null \
  || git -C "$checkout" show "$commit:LICENSE" > "$dst/LICENSE" 2>/dev/null || true
: > "$dst/__init__.py"
{
  echo "$commit"
  git -C "$checkout" log -1 --format='%cd %s' "$commit"
  for f in $files; do echo "$src/$f"; done
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
for sym in invert_indices map_to_index; do
  grep -q "^def $sym(" "$dst/index.py" \
    || { echo "fetch_peer.sh: $sym not found at $commit" >&2; exit 1; }
done
echo "fetch_peer.sh: .peer/fastvideo_triton from FastVideo $commit"
ls -l "$dst"
