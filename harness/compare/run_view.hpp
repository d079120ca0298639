// One run of a report, reduced to what perf-compare matches on and measures: its identity and
// per-step series. Everything else in the report is ignored, so unknown fields never matter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/compare/report_reader.hpp"

namespace shardbench {

struct MatchOptions {
  // Identity fields dropped from the match key (e.g. "gpu" to compare an H100 run with an H200
  // run, or "sdpa_backend").
  std::vector<std::string> ignore_fields;
  // Extra resolved-config fields that must agree, dotted as in perf-launch --dryrun
  // ("ddp.bucket_size").
  std::vector<std::string> extra_config_fields;
};

// Identity fields that make two runs comparable. "gpu" is the first GPU's name from the
// environment (or "cpu"); the config fields are ones a user can change without changing the
// recipe name (perf-launch --hidden_size, key=value overrides).
std::vector<std::string> identity_field_names();
inline constexpr const char* kIdentityConfigFields[] = {
    "model.hidden_size",         "model.num_layers",           "model.num_attention_heads",
    "ddp.overlap_grad_reduce",   "ddp.overlap_param_gather",   "ddp.bucket_size",
    "ddp.average_in_collective", "model.recompute_granularity"};

struct RunView {
  std::string file;
  std::size_t index = 0;  // in its report's runs
  std::string label;
  bool golden = false;
  nlohmann::json identity;  // the fields of the match key (object, sorted keys)
  std::string key;          // identity.dump(): equal keys match
  std::string name;         // short display name: recipe, label, world size, gpu, dtype
  std::string status = "ok";
  // shardbench.ranks_per_gpu (identity "ranks_per_gpu"; 1 when absent). Above 1 the run is
  // functional only (ranks shared GPUs): compare_sides() refuses to pair it with a real run.
  int64_t ranks_per_gpu = 1;
  std::vector<std::string> failure_reasons;
  // 1-based iteration of the first step whose lm loss is NaN/Inf (or null); 0 when all finite.
  long long first_nonfinite_loss_iteration = 0;
  // Per step, index 0 = iteration 1; nullopt where the report has null.
  std::vector<std::optional<double>> tflops_per_gpu;
  std::vector<std::optional<double>> tokens_per_sec_per_gpu;
  std::vector<std::optional<double>> step_time_ms;
  std::vector<std::optional<double>> loss;  // lm loss; nullopt where null or non-finite
  std::vector<long long> iterations;        // each step's 1-based iteration
  std::size_t measured_begin = 1;           // first index of the report's measured window
  // evaluate.py's memory scalars (GB): first snapshot's allocated / max_allocated, the largest
  // max_reserved; absent without a caching allocator (CPU).
  std::optional<double> alloc_gb, max_alloc_gb, max_reserved_gb;
  // Engine buffers per rank (bytes): the memory figure a CPU run has.
  std::optional<double> engine_static_bytes, engine_temporary_peak_bytes;
  std::string start_time_utc;
  std::string git_revision;
  std::string git_branch;
  // Where the run ran, for the noise model (harness/report/noise_model.hpp): the device class
  // ("cpu", "h100", "h200", ..) and environment.host_name; empty for golden values.
  std::string device_class;
  std::string host_name;
  nlohmann::json config;  // resolved config (pass-through), for listing differences
  // The report's loss parity of this run against its DDP baseline (comparisons[].loss_parity of
  // the comparison whose head_index is this run), or null.
  nlohmann::json loss_parity;
};

// The runs of one loaded report. Throws InputError naming the file and JSON pointer when a
// required field (identity, steps) is missing or of the wrong type.
std::vector<RunView> runs_of(const LoadedReport& report, const MatchOptions& options = {});

// Makes `run` match `like`: used for golden values, which carry no identity.
void adopt_identity(RunView& run, const RunView& like);

// The head run golden values stand for: the run labelled `golden_head_label`, or with an empty
// label the first run of the first head report; nullptr when there is none.
const RunView* golden_stand_in(const std::vector<RunView>& head,
                               const std::string& golden_head_label);

// Leaves of two config objects that differ, as "dotted.key: base -> head" (at most `limit`).
std::vector<std::string> config_differences(const nlohmann::json& base, const nlohmann::json& head,
                                            std::size_t limit = 20);

}  // namespace shardbench
