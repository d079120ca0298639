#include "harness/engine/run_model.hpp"

#include <stdexcept>

#include "harness/engine/run_build.hpp"
#include "harness/measure/flops.hpp"
#include "workloads/llama/llama_config.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {

RunModel describe_model(const ConfigContainer& config) {
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
  if (!m.llama) return;
  if (engine.options().gradient_accumulation_fusion) {
    m.llama->set_gradient_accumulation_fusion(&engine);
  }
  if (engine.gathers_fp8()) m.llama->set_fp8_weights(&engine);
  rec.fp8_param_gather = engine.gathers_fp8();
}

}  // namespace shardbench
