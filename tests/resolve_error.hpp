// Resolution's refusal of the tiny CPU recipe on one rank with extra CLI words (flags and
// key=value overrides), for tests of what resolution refuses before any worker starts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/config/errors.hpp"
#include "harness/config/resolve.hpp"

namespace shardbench::testing_util {

// A validation context that sees no GPU and no environment variable.
inline ValidationContext no_gpu() {
  ValidationContext ctx;
  ctx.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  ctx.cuda_device_count = [] { return 0; };
  return ctx;
}

// perf-launch's words for the tiny CPU recipe on `gpus` gloo ranks, then `extra`.
inline std::vector<std::string> tiny_cpu_args(const std::vector<std::string>& extra,
                                              const std::string& gpus = "1") {
  std::vector<std::string> args = {"-m",  "llama", "-mr", "llama3_tiny_cpu",
                                   "-ng", gpus,    "-g",  "cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The tiny CPU recipe on `gpus` gloo ranks with `extra`, resolved with no GPU and no environment
// variable visible (throws resolution's UsageError).
inline ResolvedConfig resolve_tiny_cpu(const std::vector<std::string>& extra,
                                       const std::string& gpus = "1") {
  return resolve_from_args(tiny_cpu_args(extra, gpus), no_gpu());
}

// The UsageError's message, or "" when the configuration resolves. No GPU is visible to it.
inline std::string resolve_error(const std::vector<std::string>& extra) {
  const std::vector<std::string> args = tiny_cpu_args(extra);
  ValidationContext ctx;
  ctx.cuda_device_count = [] { return 0; };
  try {
    resolve_from_args(args, ctx);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace shardbench::testing_util
