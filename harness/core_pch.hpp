// Precompiled header of shardbench_core and the unit tests: the standard library and
// nlohmann/json, which 35 of the core's translation units include. Parsing them once instead of
// in every translation unit saves about a third of a core source's compile time (docs/
// development.md, "Build times"). No torch here: the core stays torch-free.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
