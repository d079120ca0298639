#include "harness/config/context_parallel.hpp"

#include <cstdint>
#include <string>

#include "harness/config/errors.hpp"
#include "harness/config/field_checks.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

// A feature the context-parallel engine does not implement.
[[noreturn]] void not_with_cp(const std::string& key, const json& value, int64_t cp,
                              const std::string& what, const std::string& accepted,
                              const Provenance& p) {
  refuse_setting(key, value, p,
                 what +
                     " is not implemented with context parallelism (model.context_parallel_size=" +
                     std::to_string(cp) + ")",
                 accepted + ", or model.context_parallel_size=1");
}

}  // namespace

void check_context_parallel(const ConfigContainer& c, const Provenance& p) {
  const auto& m = c.model;
  const int64_t cp = m.context_parallel_size;
  if (cp < 1)
    refuse_setting("model.context_parallel_size", cp, p, "out of range", "an integer >= 1");
  if (cp == 1) return;
  const int64_t tp = m.tensor_model_parallel_size;
  if (tp >= 1 && m.seq_length % (2 * cp * tp) != 0) {
    refuse_setting(
        "model.seq_length", m.seq_length, p,
        "not divisible by 2 x context_parallel_size x tensor_model_parallel_size = " +
            std::to_string(2 * cp * tp) +
            " (2 x CP chunks per sequence, each CP rank's positions split over the TP ranks)",
        "a multiple of " + std::to_string(2 * cp * tp));
  }
  // A CP rank's query chunks see longer key ranges than their own (an explicit causal mask):
  // the flash kernel takes no mask.
  if (c.shardbench.sdpa_backend == "flash") {
    not_with_cp("shardbench.sdpa_backend", c.shardbench.sdpa_backend, cp,
                "the flash kernel (the chunks' attention takes an explicit causal mask)",
                "auto, efficient, cudnn or math", p);
  }
  if (m.num_moe_experts) {
    not_with_cp("model.num_moe_experts", *m.num_moe_experts, cp,
                "a mixture of experts (the router's counts and the token dispatch over CP ranks)",
                "null (a dense Llama recipe)", p);
  }
  if (c.mixed_precision.fp8) {
    not_with_cp("mixed_precision.fp8", *c.mixed_precision.fp8, cp, "FP8 compute",
                "null (bf16 compute: -c bf16)", p);
  }
  if (c.ddp.fp8_param_gather) {
    not_with_cp("ddp.fp8_param_gather", true, cp, "the FP8 parameter gather", "false", p);
  }
  if (m.cpu_offloading || m.cpu_offloading_num_layers > 0) {
    const bool flag = m.cpu_offloading;
    not_with_cp(flag ? "model.cpu_offloading" : "model.cpu_offloading_num_layers",
                flag ? json(true) : json(m.cpu_offloading_num_layers), cp,
                "CPU activation offload (-ol)", flag ? "false" : "0", p);
  }
}

}  // namespace shardbench
