#include "harness/launch/fault_spec.hpp"

#include <charconv>
#include <cstdlib>
#include <vector>

#include "harness/config/errors.hpp"

namespace shardbench {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

bool to_int(const std::string& s, int64_t& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

FaultSpec check_fault_spec(const std::string& spec, int world_size, int64_t train_iters) {
  const std::string shape = "kill:<rank>:<step> or hang:<rank>:<step>";
  auto reject = [&](const std::string& accepted) -> FaultSpec {
    throw UsageError(std::string(kFaultVar) + "=\"" + spec +
                     "\" is invalid; accepted: " + accepted);
  };
  const std::vector<std::string> parts = split(spec, ':');
  int64_t rank = 0, step = 0;
  if (parts.size() != 3 || (parts[0] != "kill" && parts[0] != "hang") || !to_int(parts[1], rank) ||
      !to_int(parts[2], step)) {
    return reject(shape);
  }
  if (rank < 0 || rank >= world_size) {
    return reject(shape + " with <rank> in [0, " + std::to_string(world_size) + ") (world size " +
                  std::to_string(world_size) + ")");
  }
  if (step < 1 || step > train_iters) {
    return reject(shape + " with <step> in [1, " + std::to_string(train_iters) +
                  "] (train.train_iters)");
  }
  return {parts[0], static_cast<int>(rank), step};
}

std::optional<FaultSpec> check_fault_env(int world_size, int64_t train_iters) {
  const char* spec = std::getenv(kFaultVar);
  if (spec == nullptr) return std::nullopt;
  return check_fault_spec(spec, world_size, train_iters);
}

}  // namespace shardbench
