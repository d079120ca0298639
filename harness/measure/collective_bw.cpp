#include "harness/measure/collective_bw.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "harness/enum_names.hpp"

namespace shardbench {

const char* to_string(CollectiveOp op) {
  static constexpr EnumName<CollectiveOp> kNames[] = {
      {CollectiveOp::kAllReduce, "all_reduce"},
      {CollectiveOp::kAllGather, "all_gather"},
      {CollectiveOp::kReduceScatter, "reduce_scatter"}};
  return enum_name(kNames, op);
}

double bus_bandwidth_factor(CollectiveOp op, int world) {
  if (world < 1)
    throw std::invalid_argument("world size must be >= 1, got " + std::to_string(world));
  const double n = world;
  // nccl-tests src/all_reduce.cu: 2(n-1)/n (a ring reduce-scatter then all-gather);
  // all_gather.cu, reduce_scatter.cu: (n-1)/n.
  return op == CollectiveOp::kAllReduce ? 2.0 * (n - 1) / n : (n - 1) / n;
}

CollectiveMessage collective_message(CollectiveOp op, int64_t requested_bytes, int64_t elem_bytes,
                                     int world) {
  if (elem_bytes < 1 || world < 1 || requested_bytes < 0) {
    throw std::invalid_argument("collective_message: bytes " + std::to_string(requested_bytes) +
                                ", element size " + std::to_string(elem_bytes) + ", world " +
                                std::to_string(world));
  }
  const int64_t count = requested_bytes / elem_bytes;
  CollectiveMessage m;
  if (op == CollectiveOp::kAllReduce) {
    m.elems = count;
    m.rank_elems = count;
  } else {
    m.rank_elems = count / world;
    m.elems = m.rank_elems * world;
  }
  m.bytes = m.elems * elem_bytes;
  return m;
}

CollectiveBandwidth collective_bandwidth(CollectiveOp op, int64_t bytes, double seconds,
                                         int world) {
  if (!(seconds > 0)) {
    throw std::invalid_argument("collective_bandwidth: time must be > 0 s, got " +
                                std::to_string(seconds));
  }
  CollectiveBandwidth bw;
  bw.algbw_gbps = static_cast<double>(bytes) / 1.0e9 / seconds;
  bw.busbw_gbps = bw.algbw_gbps * bus_bandwidth_factor(op, world);
  return bw;
}

std::vector<int64_t> message_sizes(int64_t min_bytes, int64_t max_bytes, int64_t factor) {
  if (min_bytes < 1 || max_bytes < min_bytes || factor < 2) {
    throw std::invalid_argument(
        "message sizes: need 1 <= min_bytes <= max_bytes and factor >= 2, "
        "got min " +
        std::to_string(min_bytes) + ", max " + std::to_string(max_bytes) + ", factor " +
        std::to_string(factor));
  }
  std::vector<int64_t> sizes;
  for (int64_t size = min_bytes; size <= max_bytes; size *= factor) {
    sizes.push_back(size);
    if (size > max_bytes / factor) break;  // the next step would pass max (or overflow)
  }
  return sizes;
}

int64_t parse_size_bytes(std::string_view text) {
  const std::string s(text);
  const auto bad = [&] {
    return std::invalid_argument("size '" + s +
                                 "': expected a number of bytes with an optional K, M or G "
                                 "suffix (binary multiples), e.g. 8, 128K, 64M, 1G");
  };
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) throw bad();
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  const std::string suffix(end);
  double units = 1;
  if (suffix == "K" || suffix == "k") {
    units = 1024.0;
  } else if (suffix == "M" || suffix == "m") {
    units = 1024.0 * 1024;
  } else if (suffix == "G" || suffix == "g") {
    units = 1024.0 * 1024 * 1024;
  } else if (!suffix.empty()) {
    throw bad();
  }
  const double bytes = value * units;
  if (!std::isfinite(bytes) || bytes >= 9.0e18) throw bad();
  return static_cast<int64_t>(bytes);  // rounds down, as nccl-tests' size_t conversion
}

}  // namespace shardbench
