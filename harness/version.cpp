#include "harness/version.hpp"

namespace shardbench {

const char* version() { return SHARDBENCH_VERSION; }

const char* source_dir() { return SHARDBENCH_SOURCE_DIR; }

}  // namespace shardbench
