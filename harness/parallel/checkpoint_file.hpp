// One rank's checkpoint shard file: named raw tensor bytes behind a small JSON header, with a
// checksum per tensor in a trailer. Layout:
//   "SBCKPT01" | u64 header_bytes | header JSON | tensor bytes, back to back |
//   u64 checksum per tensor | "SBCKEND1"
// The header lists each tensor's name, dtype, element count and byte count, so a reader knows
// the file's exact size before it reads any data: a truncated file is refused up front, a
// damaged one by its checksums. Integers are little-endian (the machines shardbench runs on).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace shardbench {

// Called after each tensor is written or read (liveness heartbeats during long saves).
using ShardProgress = std::function<void(const std::string& tensor_name)>;

struct ShardTensor {
  std::string name;  // unique in the file, e.g. "group3/exp_avg"
  at::Tensor tensor;
};

// Writes `tensors` (any device; copied to host one at a time) to `path` atomically: a temporary
// file in the same folder, fsynced and renamed. `header_extra` is stored in the header as
// "info". Returns the file's size in bytes. Throws std::runtime_error naming the path and the
// failing step.
int64_t write_shard_file(const std::filesystem::path& path, const std::vector<ShardTensor>& tensors,
                         const nlohmann::json& header_extra, const ShardProgress& progress = {});

// The dtype names files and metadata use: float32, bfloat16, float16, float64, uint8. Throws
// std::invalid_argument for other dtypes.
const char* checkpoint_dtype_name(at::ScalarType dtype);

// What a reader expects of one tensor; the file must hold exactly these, in this order.
struct ShardExpectation {
  std::string name;
  at::ScalarType dtype;
  int64_t numel;
};

// Reads the whole file into new host tensors (one per expectation) and verifies everything:
// size, header, names, dtypes, element counts, checksums. Nothing is returned unless all of it
// checks out. Throws std::runtime_error naming the path and what differs.
std::vector<at::Tensor> read_shard_file(const std::filesystem::path& path,
                                        const std::vector<ShardExpectation>& expected,
                                        nlohmann::json* header_extra = nullptr,
                                        const ShardProgress& progress = {});

}  // namespace shardbench
