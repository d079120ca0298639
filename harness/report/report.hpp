// The versioned JSON report of one shardbench invocation: environment, one or more runs (the
// requested run and, in comparison mode, the other wrappers asked for and the DDP baseline) and
// each FSDP run's comparison with DDP.
// Its shape is described by results/report.schema.json.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <span>

#include <nlohmann/json.hpp>

#include "harness/measure/stats.hpp"
#include "harness/atomic_write.hpp"
#include "harness/report/environment.hpp"
#include "harness/report/run_record.hpp"

namespace shardbench {

// Bumped on any change a reader must know about (renamed or removed field: major; added: minor).
// 1.1: "comparisons" (every FSDP run against DDP; Torch FSDP2 runs, wrapper "torch_fsdp2").
// 1.2: runs[].context_parallel and the steps' phases.cp_exchange (context parallelism).
// 1.3: runs[].cuda_graph and the steps' phases.graph (CUDA graphs, docs/cuda-graphs.md).
// 1.4: runs[].cuda_graph.optimizer_captured and .single_mempool (the optimizer graph).
// 1.5: runs[].cuda_graph for per-layer scopes: scope "attn", "mlp" or "attn,mlp", with "scopes"
//      and "stable_weight_buffer_bytes" (docs/cuda-graphs.md, "Per-layer scopes").
inline constexpr const char* kReportSchemaVersion = "1.5";

struct ReportOptions {
  WarmupRule warmup;
  // The comparison pair. When unset, the first FSDP run (wrapper "megatron_fsdp" or
  // "torch_fsdp2") is compared against the first "ddp" run, and "comparisons" holds every FSDP
  // run against that DDP run; without both there is no comparison (null, and an empty list).
  std::optional<std::size_t> head_index;
  std::optional<std::size_t> baseline_index;
  // shardbench.ranks_per_gpu of the runs: recorded in every run's identity ("ranks_per_gpu", and
  // "functional_only": true above 1, where ranks share GPUs and timings are not performance).
  int ranks_per_gpu = 1;
  // The order the runs ran in (run_order_json, harness/report/run_order.hpp); null: not recorded.
  nlohmann::json run_order;
};

nlohmann::json build_report(const EnvironmentInfo& env, std::span<const RunRecord> runs,
                            const ReportOptions& options = {});

// Writes the report atomically (see atomic_write.hpp), pretty-printed with a final newline.
// `existing` kRefuse (default names) never replaces a file; an explicit path may replace a
// regular file. Anything but a regular file at `path` is refused either way.
void write_report(const std::filesystem::path& path, const nlohmann::json& report,
                  ExistingFile existing = ExistingFile::kReplace);

}  // namespace shardbench
