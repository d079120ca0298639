// Helpers shared by the launch layer's unit tests (tests/unit/launch_*_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace shardbench::launch_test {

// Like gmock's HasSubstr, without linking gmock into the shared unit-test binary.
inline ::testing::AssertionResult HasSubstr(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

// The message of the std::invalid_argument `fn` throws; fails the test when it throws nothing.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return "";
}

}  // namespace shardbench::launch_test
