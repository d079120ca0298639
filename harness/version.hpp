#pragma once

namespace shardbench {

// shardbench's own version (CMake project version).
const char* version();

}  // namespace shardbench
