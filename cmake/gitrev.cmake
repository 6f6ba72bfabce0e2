# Writes OUT (git_rev.h) with the project revision, "-dirty" when tracked
# files differ from HEAD. Runs at every build, so the binary never holds a
# stale revision; the file is only rewritten when the text changes.
execute_process(COMMAND git -C ${ROOT} rev-parse --short=12 HEAD
                OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git -C ${ROOT} status --porcelain --untracked-files=no
                OUTPUT_VARIABLE dirty ERROR_QUIET)
if(NOT rev)
  set(rev "unknown")
endif()
if(dirty)
  set(rev "${rev}-dirty")
endif()
file(WRITE ${OUT}.tmp "#define VSA_GIT_REV \"${rev}\"\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
