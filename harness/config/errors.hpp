// Errors the config and CLI layers raise. perf-launch prints UsageError's message as is and exits
// with status 2, so every message names the field or flag, the value given and what is accepted.
#pragma once

#include <stdexcept>
#include <string>

namespace shardbench {

class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

// Not an error: --help was given. what() is the help text; perf-launch prints it and exits 0.
class HelpRequested : public std::runtime_error {
 public:
  explicit HelpRequested(const std::string& help_text) : std::runtime_error(help_text) {}
};

}  // namespace shardbench
