#!/usr/bin/env bash
# revision_test.sh — cmake/gitrev.cmake finds the revision a build records
# (run.git_rev, `vsalab --version`) without a git checkout: from
# -DVSA_GIT_REV, from a `git archive` tarball's cmake/revision.txt, else
# "unknown". Each case runs the script on a copy of cmake/ outside any git
# repository (ctest build_revision).
#
#   tests/build/revision_test.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# git must not find a repository above the copy.
export GIT_CEILING_DIRECTORIES=$tmp
failed=0
fail() { echo "revision_test: FAIL: $*" >&2; failed=1; }

# The header gitrev.cmake writes for a tree whose revision.txt reads $1,
# with extra cmake arguments after it.
header() {
  local text=$1; shift
  rm -rf "$tmp/src" "$tmp/git_rev.h"
  mkdir -p "$tmp/src/cmake"
  cp "$root/cmake/gitrev.cmake" "$tmp/src/cmake/"
  [ -n "$text" ] && printf '%s\n' "$text" > "$tmp/src/cmake/revision.txt"
  cmake -DROOT="$tmp/src" -DOUT="$tmp/git_rev.h" "$@" -P "$tmp/src/cmake/gitrev.cmake" >"$tmp/log" 2>&1 || return 1
  cat "$tmp/git_rev.h"
}
expect() { # expect WANT TEXT [cmake args]
  local want=$1; shift
  local got
  got=$(header "$@") || { fail "gitrev.cmake failed for '$1': $(cat "$tmp/log")"; return; }
  [ "$got" = "#define VSA_GIT_REV \"$want\"" ] || fail "revision.txt '$1' $2: got '$got', want $want"
}

# The shipped file is the export-subst placeholder in a checkout, and the
# commit git wrote there in an archive.
shipped=$(head -1 "$root/cmake/revision.txt")
[ "$shipped" = '$Format:%H$' ] || [[ "$shipped" =~ ^[0-9a-f]{40}$ ]] ||
  fail "cmake/revision.txt holds '$shipped': neither the \$Format:%H\$ placeholder nor a commit"
grep -q '^cmake/revision.txt export-subst$' "$root/.gitattributes" || fail ".gitattributes does not mark cmake/revision.txt export-subst"
# A tarball from `git archive`: git wrote the commit into revision.txt.
expect 0123456789ab 0123456789abcdef0123456789abcdef01234567
# The placeholder as it stands (a copy of a checkout, not an archive).
expect unknown '$Format:%H$'
expect unknown ''
# -DVSA_GIT_REV wins over the archive's commit.
expect v1.2.0-rc1 0123456789abcdef0123456789abcdef01234567 -DREV=v1.2.0-rc1
# ... and must be a plain name: it becomes a C string.
if header '' '-DREV=a"b' >/dev/null; then fail "-DREV with a quote was taken"; fi
grep -q "VSA_GIT_REV 'a\"b': expected letters" "$tmp/log" || fail "-DREV with a quote: $(cat "$tmp/log")"

[ $failed = 0 ] && echo "revision_test: ok"
exit $failed
