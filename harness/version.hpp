#pragma once

#include <string>

namespace shardbench {

// shardbench's own version (CMake project version).
const char* version();

// The source tree this binary was built from (the override sets, the report schema and the docs
// live there). Defined in version.cpp alone: a clone-specific path in every translation unit's
// compile definitions would make ccache miss in every other clone (docs/development.md).
const char* source_dir();

// The source tree this binary was built from, fixed at build time (cmake/build_revision.cmake
// runs on every build), so that a report names the code that ran, not the checkout's state when
// it ran.
struct BuildRevision {
  std::string revision;     // full SHA of HEAD; empty when built outside a git checkout
  std::string branch;       // "HEAD" when detached
  bool dirty = false;       // tracked files differed from HEAD
  std::string diff_sha256;  // SHA-256 of `git diff HEAD --binary`; empty when clean
};

const BuildRevision& build_revision();

}  // namespace shardbench
