// One measured training run on this rank: build the run for `config` (run_build.hpp), train
// train.train_iters iterations, time each one, and return the report's record of it
// (run_records.hpp; complete on rank 0, other ranks return their own view).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "harness/config/config.hpp"
#include "harness/engine/run_build.hpp"  // engine_options_from, fused_kernels_from
#include "harness/engine/worker_context.hpp"
#include "harness/measure/flops.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/report/run_record.hpp"
#include "workloads/llama/llama_config.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {

RunRecord run_benchmark(const ConfigContainer& config, const nlohmann::json& provenance,
                        const std::string& recipe, WorkerContext& ctx);

}  // namespace shardbench
