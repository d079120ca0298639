# Writes the revision of the source tree being built into a C++ file, at build time (a target
# that runs on every build, see CMakeLists.txt), so that reports name the code that ran:
#   cmake -DSOURCE_DIR=<checkout> -DOUTPUT=<file.cpp> -P cmake/build_revision.cmake
# revision: `git rev-parse HEAD`; dirty: tracked files differ from HEAD (`git diff HEAD` is not
# empty); diff_sha256: SHA-256 of `git diff HEAD --binary`, empty when clean. Not a checkout:
# empty revision (reports then write git: null). The file is rewritten only when it changes.
if(NOT SOURCE_DIR OR NOT OUTPUT)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<dir> -DOUTPUT=<file> -P build_revision.cmake")
endif()

set(revision "")
set(branch "")
set(dirty false)
set(diff_sha256 "")
find_program(GIT_EXECUTABLE git)
if(GIT_EXECUTABLE)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --verify HEAD
                  OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE rev_rc ERROR_QUIET)
  if(NOT rev_rc EQUAL 0)
    set(revision "")
  endif()
endif()
if(revision)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --abbrev-ref HEAD
                  OUTPUT_VARIABLE branch OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} diff HEAD --binary
                  OUTPUT_VARIABLE diff RESULT_VARIABLE diff_rc ERROR_QUIET)
  if(NOT diff_rc EQUAL 0)
    message(FATAL_ERROR "build_revision: git diff HEAD failed in ${SOURCE_DIR}")
  endif()
  if(NOT diff STREQUAL "")
    set(dirty true)
    string(SHA256 diff_sha256 "${diff}")
  endif()
endif()

set(text "// Generated at build time by cmake/build_revision.cmake from ${SOURCE_DIR}. Do not edit.
#include \"harness/version.hpp\"

namespace shardbench {

const BuildRevision& build_revision() {
  static const BuildRevision revision{\"${revision}\", \"${branch}\", ${dirty}, \"${diff_sha256}\"};
  return revision;
}

}  // namespace shardbench
")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old_text)
else()
  set(old_text "")
endif()
if(NOT old_text STREQUAL text)
  file(WRITE ${OUTPUT} "${text}")
endif()
