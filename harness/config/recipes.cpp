#include "harness/config/recipes.hpp"

#include "harness/config/errors.hpp"
#include "harness/config/text.hpp"

namespace shardbench {

void apply_cpu_fp32(ConfigContainer& c) {
  c.shardbench.device = "cpu";
  c.shardbench.backend = "gloo";
  c.shardbench.compute_dtype = "fp32";
  c.mixed_precision.name = std::nullopt;
  c.mixed_precision.bf16 = false;
  c.mixed_precision.params_dtype = "fp32";
  c.dist.distributed_backend = "gloo";
}

void apply_pretrain_common(ConfigContainer& c) {
  c.ddp.use_distributed_optimizer = true;
  c.ddp.overlap_grad_reduce = true;
  c.ddp.overlap_param_gather = true;
  c.ddp.grad_reduce_in_fp32 = true;
  c.ddp.average_in_collective = true;
  c.optimizer.use_distributed_optimizer = true;
  c.optimizer.overlap_param_gather = true;
  c.optimizer.lr_decay_style = "cosine";
  c.optimizer.lr_warmup_iters = 2000;
  c.checkpoint.ckpt_format = "torch_dist";
}

const RecipeSpec& find_recipe(const std::string& name) {
  std::vector<std::string> names;
  for (const RecipeSpec& recipe : recipes()) {
    if (recipe.name == name) return recipe;
    names.push_back(recipe.name);
  }
  throw UsageError("-mr/--model_recipe_name: unknown recipe '" + name + "'" +
                   did_you_mean(name, names) + "; accepted: " + join(names, ", "));
}

std::string precision_name(const std::string& compute_dtype) {
  if (compute_dtype == "bf16" || compute_dtype == "nvfp4") return compute_dtype;
  if (compute_dtype.rfind("fp8_", 0) == 0) return "fp8" + compute_dtype.substr(4);
  throw UsageError("-c/--compute_dtype: invalid value '" + compute_dtype +
                   "'; expected one of bf16, fp8_cs, fp8_mx, fp8_sc, nvfp4");
}

std::string flat_recipe_name(const std::string& model_recipe_name, const std::string& task,
                             int64_t num_gpus, const std::string& gpu,
                             const std::string& compute_dtype) {
  return model_recipe_name + "_" + task + "_" + std::to_string(num_gpus) + "gpu_" + gpu + "_" +
         precision_name(compute_dtype) + "_config";
}

int64_t weak_scaled_global_batch_size(int64_t base_gbs, int64_t dp, int64_t base_dp) {
  if (base_dp <= 0 || (base_gbs * dp) % base_dp != 0) {
    throw UsageError("weak scaling: global batch size " + std::to_string(base_gbs) + " * DP " +
                     std::to_string(dp) + " / base DP " + std::to_string(base_dp) +
                     " is not an integer; pass -gb/--global_batch_size explicitly (a multiple "
                     "of micro_batch_size * DP)");
  }
  return base_gbs * dp / base_dp;
}

}  // namespace shardbench
