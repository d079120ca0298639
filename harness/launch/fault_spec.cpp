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
  const std::vector<std::string> parts = split(spec, ':');
  const bool oom = parts[0] == "oom";
  const std::string shape = oom ? "oom:<rank>:<micro_batch>[:<run label prefix>]"
                                : "kill:<rank>:<step> or hang:<rank>:<step>";
  auto reject = [&](const std::string& accepted) -> FaultSpec {
    throw UsageError(std::string(kFaultVar) + "=\"" + spec +
                     "\" is invalid; accepted: " + accepted);
  };
  int64_t rank = 0, number = 0;
  if (parts[0] != "kill" && parts[0] != "hang" && !oom) {
    return reject(
        "kill:<rank>:<step>, hang:<rank>:<step> or "
        "oom:<rank>:<micro_batch>[:<run label prefix>]");
  }
  if ((parts.size() != 3 && !(oom && parts.size() == 4)) || !to_int(parts[1], rank) ||
      !to_int(parts[2], number)) {
    return reject(shape);
  }
  if (rank < 0 || rank >= world_size) {
    return reject(shape + " with <rank> in [0, " + std::to_string(world_size) + ") (world size " +
                  std::to_string(world_size) + ")");
  }
  FaultSpec f;
  f.kind = parts[0];
  f.rank = static_cast<int>(rank);
  if (oom) {
    if (number < 1) return reject(shape + " with <micro_batch> >= 1");
    f.micro_batch = number;
    if (parts.size() == 4) f.label_prefix = parts[3];
    return f;
  }
  if (number < 1 || number > train_iters) {
    return reject(shape + " with <step> in [1, " + std::to_string(train_iters) +
                  "] (train.train_iters)");
  }
  f.step = number;
  return f;
}

std::optional<FaultSpec> check_fault_env(int world_size, int64_t train_iters) {
  const char* spec = std::getenv(kFaultVar);
  if (spec == nullptr) return std::nullopt;
  return check_fault_spec(spec, world_size, train_iters);
}

}  // namespace shardbench
