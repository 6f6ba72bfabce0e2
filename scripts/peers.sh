#!/usr/bin/env bash
# peers.sh — install the pinned Python packages of the cudnn_bsa and fa4
# peers (scripts/peers.lock) into the git-ignored .peers/, where the peers
# (tests/gpu/peers/*_peer.py) find them. Nothing in the product needs them.
#
#   scripts/peers.sh install          from the package registry (pip), here
#   scripts/peers.sh download DIR     the pinned wheels for a GPU host
#                                     (CPython 3.12, manylinux x86_64) into DIR,
#                                     on a connected machine
#   scripts/peers.sh pack DIR OUT     the wheels of DIR installed, trimmed and
#                                     packed as OUT/peers.tar.xz.NN parts of at
#                                     most 45 MiB each, with OUT/peers.sha256
#   scripts/peers.sh install DIR      on the GPU host, without a registry: from
#                                     DIR's parts (pack) or wheels (download)
#   scripts/peers.sh trim [FOLDER]    remove what the peers never load (default
#                                     .peers)
#   scripts/peers.sh check            import each peer's library from .peers/
#
# The host must already have torch (with CUDA 13), numpy, cuda-bindings and
# cuDNN (nvidia-cudnn-cu13): the packages go in with --no-deps. PYTHON picks
# the interpreter (default python3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lock=$root/scripts/peers.lock
dest=$root/.peers
py=${PYTHON:-python3}
part_size=45m
platform=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
  --only-binary=:all: --no-deps)

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "peers.sh: $*" >&2; exit 2; }
pins() { grep -E '^[A-Za-z0-9_.-]+==' "$lock"; }

# What the peers never load: other platforms' stubs, static libraries, C/C++
# headers, byte code (tvm_ffi loads its test library: it stays).
trim() {
  local d=$1
  [ -d "$d" ] || die "trim: no folder $d"
  # Only a peers install: trim deletes bin/ and include/ wholesale.
  [ -d "$d/nvidia_cutlass_dsl" ] && [ -d "$d/cudnn" ] ||
    die "trim: $d is not a peers install (no nvidia_cutlass_dsl/ and cudnn/ in it); nothing removed"
  rm -rf "$d"/nvidia_cutlass_dsl/cu13/lib/stubs "$d"/nvidia_cutlass_dsl/cu13/include \
    "$d"/nvidia_cutlass_dsl/cu13/lib/*.a "$d"/include \
    "$d"/bin
  find "$d" -name __pycache__ -type d -prune -exec rm -rf {} +
  echo "peers.sh: trimmed $d: $(du -sh "$d" | cut -f1)"
}

need_dir() { [ -n "${1:-}" ] || die "$2 needs a folder (see --help)"; }

cmd=${1:-}
case $cmd in
  -h|--help|help|"") usage; [ -n "$cmd" ] || exit 2; exit 0 ;;
  download)
    need_dir "${2:-}" download
    mkdir -p "$2"
    "$py" -m pip download "${platform[@]}" -d "$2" $(pins)
    ls -l "$2" ;;
  pack)
    need_dir "${2:-}" pack; need_dir "${3:-}" "pack DIR"
    ls "$2"/*.whl > /dev/null 2>&1 || die "pack: no wheels in $2 (scripts/peers.sh download $2 first)"
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    "$py" -m pip install -q --no-index --target "$stage/peers" "${platform[@]}" "$2"/*.whl
    trim "$stage/peers"
    mkdir -p "$3"
    rm -f "$3"/peers.tar.xz.* "$3"/peers.sha256
    tar -C "$stage" -cf - peers | xz -9 -T2 | split -b "$part_size" -d - "$3/peers.tar.xz."
    (cd "$3" && sha256sum peers.tar.xz.* > peers.sha256)
    ls -l "$3"
    echo "peers.sh: $(du -cb "$3"/peers.tar.xz.* | tail -1 | cut -f1) bytes in $(ls "$3"/peers.tar.xz.* | wc -l) parts" ;;
  install)
    # The new install is made beside .peers/ and replaces it only once it is
    # complete: a mistyped folder or a failed pip left no .peers/ at all.
    [ $# -lt 2 ] || [ -n "$2" ] || die "install: an empty folder name (no folder: from the registry)"
    if [ -n "${2:-}" ] && [ ! -f "$2/peers.sha256" ] && ! ls "$2"/*.whl > /dev/null 2>&1; then
      die "install: $2 holds neither peers.tar.xz parts (pack) nor wheels (download)"
    fi
    tmp=$(mktemp -d "$root/.peers-new.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    if [ -z "${2:-}" ]; then
      "$py" -m pip install --no-deps --target "$tmp/peers" $(pins)
    elif [ -f "$2/peers.sha256" ]; then
      (cd "$2" && sha256sum -c --quiet peers.sha256) || die "install: the parts in $2 do not match peers.sha256"
      cat "$2"/peers.tar.xz.* | xz -d | tar -C "$tmp" -xf -
    else
      "$py" -m pip install --no-index --no-deps --target "$tmp/peers" "$2"/*.whl
      trim "$tmp/peers"
    fi
    [ -d "$tmp/peers" ] || die "install: nothing was installed (.peers/ left as it was)"
    rm -rf "$dest"
    mv "$tmp/peers" "$dest"
    echo "peers.sh: installed into .peers/ ($(du -sh "$dest" | cut -f1)); check with: scripts/peers.sh check" ;;
  trim) trim "${2:-$dest}" ;;
  check)
    [ -d "$dest" ] || die "check: no .peers/ (scripts/peers.sh install)"
    "$py" - "$root" <<'PY'
import sys, os
sys.path.insert(0, os.path.join(sys.argv[1], "tests", "gpu", "peers"))
import peer_torch as pt
pt.use_peer_packages()
ok = True
for name, mod in (("cudnn_bsa", "cudnn.block_sparse_attention.api"), ("fa4", "flash_attn.cute.interface")):
    try:
        __import__(mod)
        print(f"{name}: {mod} imports")
    except Exception as e:
        ok = False
        print(f"{name}: {mod} does not import: {type(e).__name__}: {e}")
print(pt.peer_versions("nvidia-cudnn-frontend", "nvidia-cutlass-dsl", "apache-tvm-ffi", "flash-attn-4",
                       "quack-kernels"))
sys.exit(0 if ok else 1)
PY
    ;;
  *) die "unknown command '$cmd' (install, download, pack, trim, check; see --help)" ;;
esac
