# Writes OUT (git_rev.h) with the project revision, "-dirty" when tracked
# files differ from HEAD. Runs at every build, so the binary never holds a
# stale revision; the file is only rewritten when the text changes.
#
# Where the revision comes from, first found wins:
#   REV                    -DVSA_GIT_REV=... at configure time (a packager's
#                          build, or a copy of the tree with no history);
#   git rev-parse          a git checkout;
#   cmake/revision.txt     a `git archive` tarball: .gitattributes marks the
#                          file export-subst, so git writes the commit there;
#   "unknown"              none of these.
#   cmake -DROOT=SRC -DOUT=git_rev.h [-DREV=R] -P cmake/gitrev.cmake
set(rev "${REV}")
if(rev AND NOT rev MATCHES "^[A-Za-z0-9._+-]+$")
  message(FATAL_ERROR "VSA_GIT_REV '${rev}': expected letters, digits and . _ + - (a commit, a tag)")
endif()
set(dirty "")
if(NOT rev)
  execute_process(COMMAND git -C ${ROOT} rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rev)
    execute_process(COMMAND git -C ${ROOT} status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE dirty ERROR_QUIET)
  endif()
endif()
if(NOT rev AND EXISTS ${ROOT}/cmake/revision.txt)
  file(STRINGS ${ROOT}/cmake/revision.txt archived LIMIT_COUNT 1)
  # Unsubstituted ("$Format:%H$") outside an archive: no revision there.
  if(archived MATCHES "^[0-9a-f]+$")
    string(SUBSTRING "${archived}" 0 12 rev)
  endif()
endif()
if(NOT rev)
  set(rev "unknown")
endif()
if(dirty)
  set(rev "${rev}-dirty")
endif()
file(WRITE ${OUT}.tmp "#define VSA_GIT_REV \"${rev}\"\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
