#include "harness/engine/run_model.hpp"

#include <stdexcept>

#include "harness/engine/run_build.hpp"
#include "harness/measure/flops.hpp"
#include "workloads/llama/llama_config.hpp"
#include "workloads/llama/llama_model.hpp"
#include "workloads/moe/moe_config.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {

namespace {

RunModel describe_moe(const ConfigContainer& config) {
  RunModel m;
  const MoeDims dims = moe_dims_from(config.model);
  m.family = "moe";
  m.seq_length = dims.seq_length;
  m.vocab = dims.vocab;
  m.num_parameters = moe_parameter_count(dims).total_with_mtp();  // what the run trains
  m.flops_per_step = moe_model_flops_per_step(moe_flops_dims(dims), config.train.global_batch_size,
                                              dims.seq_length);
  m.moe_dims = dims;
  return m;
}

// The MoE model with the run's router, expert parallelism and experts path; its parameters are
// this EP rank's (MoeSpec).
void build_moe(RunModel& m, const ConfigContainer& config, const WorkerContext& ctx) {
  const MoeDims& dims = *m.moe_dims;
  const int ep = static_cast<int>(config.model.expert_model_parallel_size);
  const int ep_rank = ctx.engine_pgs.ep ? ctx.engine_pgs.ep->rank() : 0;
  auto moe = std::make_unique<MoeModel>(dims, moe_router_from(config.model), ctx.device);
  moe->set_expert_parallel(ctx.engine_pgs.ep, ep, ep_rank);
  if (!config.model.moe_grouped_gemm) moe->force_experts_path(MoeExpertsPath::kLoop);
  // The routed experts' weighted SwiGLU kernel (docs/moe.md), within shardbench.fused_kernels.
  moe->set_fused_kernels(config.shardbench.fused_kernels);
  moe->set_fused_cross_entropy(config.model.cross_entropy_loss_fusion);
  moe->set_token_dropping(config.model.moe_expert_capacity_factor,
                          config.model.moe_token_drop_policy == "position"
                              ? MoeDropPolicy::kPosition
                              : MoeDropPolicy::kProbs,
                          config.model.moe_pad_expert_input_to_capacity);
  // Megatron sums the expert-bias token counts over TP x DP x CP: the whole run here.
  if (dims.router_expert_bias) moe->set_expert_bias_group(ctx.pgs.world);
  m.moe = moe.get();
  m.trainable = std::move(moe);
  m.spec = std::make_unique<MoeSpec>(dims, ep, ep_rank);
}

}  // namespace

RunModel describe_model(const ConfigContainer& config) {
  if (is_moe_config(config.model)) return describe_moe(config);
  RunModel m;
  const LlamaDims dims = llama_dims_from(config);
  m.family = "llama";
  m.seq_length = dims.seq_length;
  m.vocab = dims.vocab;
  for (const ParamSpec& spec : llama_param_specs(dims)) m.num_parameters += spec.numel();
  m.flops_per_step =
      model_flops_per_step(decoder_dims(dims), config.train.global_batch_size, dims.seq_length);
  m.llama_dims = dims;
  return m;
}

void build_model(RunModel& m, const ConfigContainer& config, const EngineOptions& options,
                 const WorkerContext& ctx, RunRecord& rec) {
  if (m.moe_dims) {
    build_moe(m, config, ctx);
    return;
  }
  const LlamaDims& dims = *m.llama_dims;
  auto llama = std::make_unique<LlamaModel>(dims, ctx.device);
  configure_model(*llama, config, options, dims, ctx, rec);
  if (ctx.tp > 1) {
    llama->set_tensor_parallel({ctx.tp, ctx.engine_pgs.tp->rank(), ctx.engine_pgs.tp});
  }
  m.llama = llama.get();
  m.trainable = std::move(llama);
  m.spec = std::make_unique<LlamaSpec>(dims);
}

void attach_engine(RunModel& m, DataParallelEngine& engine, RunRecord& rec) {
  if (m.moe && engine.options().gradient_accumulation_fusion) {
    m.moe->set_gradient_accumulation_fusion(&engine);
  }
  if (!m.llama) return;
  if (engine.options().gradient_accumulation_fusion) {
    m.llama->set_gradient_accumulation_fusion(&engine);
  }
  if (engine.gathers_fp8()) m.llama->set_fp8_weights(&engine);
  rec.fp8_param_gather = engine.gathers_fp8();
}

}  // namespace shardbench
