# Writes OUT, a header defining KVDICE_GIT_COMMIT: the commit of the tree in SOURCE_DIR (12 hex digits),
# "-dirty" after it when tracked files differ from that commit, "unknown" outside git. Run by the
# kvdice_git_commit target at every build (cmake -DSOURCE_DIR=... -DOUT=... -P git_commit.cmake); the
# header is rewritten only when its value changes, so only the files that include it recompile.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SOURCE_DIR}"
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE differs
                  ERROR_QUIET)
  if(differs EQUAL 1)
    string(APPEND commit "-dirty")
  endif()
endif()
file(WRITE "${OUT}.new" "// Written by cmake/git_commit.cmake at build time.\n#pragma once\n#define KVDICE_GIT_COMMIT \"${commit}\"\n")
file(COPY_FILE "${OUT}.new" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.new")
