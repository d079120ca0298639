// One run's section of the report: identity, config, per-step series, summary, memory, status.
#pragma once

#include <nlohmann/json.hpp>

#include "harness/measure/stats.hpp"
#include "harness/report/run_record.hpp"

namespace shardbench {

// Formula tag stored with every FLOPs-derived figure: MFU has no single definition
// (torchtitan counts attention without the causal discount), so the report names its own.
inline constexpr const char* kFlopsFormulaName = "megatron_causal";
inline constexpr const char* kFlopsFormulaExpression =
    "6*T*[L*(h*ffn*3 + h*(q+2k) + q*h) + h*V] + 6*B*s^2*L*q";
// Mixtures of experts: Megatron's num_floating_point_operations with its MoE and MLA terms
// (harness/measure/moe_flops.hpp, docs/moe.md section 4).
inline constexpr const char* kMoeFlopsFormulaName = "megatron_moe";
inline constexpr const char* kMoeFlopsFormulaExpression =
    "6*T*[dense layers' attention and MLP + MoE layers' attention, router, shared experts and "
    "top-k routed experts (3*h*F_moe*k) + h*V] + causal attention 6*B*s^2*L*(q heads x head "
    "dims), MLA's low-rank projections where the model has them";

// Builds the run object. Non-finite numbers become null with a flag; a NaN/Inf loss or grad
// norm, an empty step list or engine failure reasons set "status": "failed" with the reasons
// (Megatron-Bridge evaluate.py fails a run on NaN/Inf grad norm).
nlohmann::json run_to_json(const RunRecord& run, const WarmupRule& warmup = {});

}  // namespace shardbench
