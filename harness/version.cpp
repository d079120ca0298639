#include "harness/version.hpp"

namespace shardbench {

const char* version() { return SHARDBENCH_VERSION; }

}  // namespace shardbench
