#include "harness/config/field_checks.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "harness/config/errors.hpp"
#include "harness/config/gpu_probe.hpp"
#include "harness/config/run_device.hpp"
#include "harness/config/text.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream out;
  out.precision(17);
  out << v;
  // Shortest form that reads back: 0.1 rather than 0.10000000000000001.
  for (int p = 1; p <= 17; ++p) {
    std::ostringstream s;
    s.precision(p);
    s << v;
    if (std::stod(s.str()) == v) return s.str();
  }
  return out.str();
}

std::string source_part(const Provenance& provenance, const std::string& key) {
  const auto source = provenance.last_source(key);
  return source ? " (from " + *source + ")" : "";
}

[[noreturn]] void refuse(const std::string& key, const json& value, const Provenance& provenance,
                         const std::string& problem, const std::string& accepted) {
  refuse_setting(key, value, provenance, problem, accepted);
}

bool is_number_type(FieldType type) {
  return type == FieldType::kInt || type == FieldType::kDouble || type == FieldType::kIntList;
}

std::string range_text(const FieldInfo& field) {
  const FieldDomain& d = field.domain;
  const bool integer = field.type != FieldType::kDouble;
  const auto bound = [&](double v) {
    return integer ? std::to_string(static_cast<int64_t>(v)) : number_text(v);
  };
  const std::string kind = integer ? "an integer" : "a finite number";
  if (d.min && d.max && !d.min_exclusive && !d.max_exclusive && integer) {
    return kind + " from " + bound(*d.min) + " to " + bound(*d.max);
  }
  std::string text = kind;
  if (d.min) text += std::string(d.min_exclusive ? " > " : " >= ") + bound(*d.min);
  if (d.min && d.max) text += " and";
  if (d.max) text += std::string(d.max_exclusive ? " < " : " <= ") + bound(*d.max);
  return text;
}

bool in_range(const FieldDomain& d, double v) {
  if (!std::isfinite(v)) return false;
  if (d.min && (d.min_exclusive ? v <= *d.min : v < *d.min)) return false;
  if (d.max && (d.max_exclusive ? v >= *d.max : v > *d.max)) return false;
  return true;
}

std::vector<json> accepted_values(const FieldInfo& field) {
  if (!field.domain.only.empty()) return field.domain.only;
  return {field.default_value};
}

std::string values_text(const std::vector<json>& values) {
  std::vector<std::string> parts;
  for (const json& v : values) parts.push_back(message_value(v));
  return join(parts, ", ");
}

bool contains(const std::vector<json>& values, const json& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

void check_one(const FieldInfo& field, const json& value, const Provenance& provenance) {
  const FieldDomain& d = field.domain;
  if (value.is_null()) {
    if (!d.null_ok && field.nullable) {
      refuse(field.name, value, provenance, "must be set", accepted_text(field));
    }
    return;
  }
  if (is_number_type(field.type)) {
    const json items = value.is_array() ? value : json::array({value});
    for (const json& item : items) {
      if (!item.is_number() || !in_range(d, item.get<double>())) {
        refuse(field.name, value, provenance, "out of range", accepted_text(field));
      }
    }
  }
  // An honoured field restricted to the values the engine implements.
  if (d.support != Support::kNotImplemented && !d.only.empty() && !contains(d.only, value)) {
    refuse(field.name, value, provenance, "not implemented" + (d.note.empty() ? "" : ": " + d.note),
           accepted_text(field));
  }
}

// ---- relations between fields

// ddp.nccl_ub and its companions (docs/nccl-user-buffers.md): NCCL only, DDP and Megatron FSDP
// only, manual registration Megatron FSDP's only (MLM's arguments.py: "fsdp_manual_registration
// requires FSDP and nccl_ub") and only where a second iteration comes to register in.
void nccl_user_buffers(const ConfigContainer& c, const Provenance& p, const FieldCheckContext& ctx,
                       const std::string& run_backend) {
  const auto& s = c.shardbench;
  if (c.ddp.nccl_ub) {
    bool gloo = run_backend == "gloo";
    if (!gloo && backend_choice(s) == BackendChoice::kAuto &&
        device_choice(s) == DeviceChoice::kAuto && ctx.probe_gpus) {
      gloo = (ctx.cuda_device_count ? ctx.cuda_device_count() : visible_cuda_devices()) < 1;
    }
    if (gloo) {
      refuse("ddp.nccl_ub", true, p,
             "NCCL user buffers are CUDA memory registered with NCCL communicators, and this run "
             "communicates over gloo on the CPU",
             "false with gloo (or run on GPUs over NCCL)");
    }
    if (c.dist.use_torch_fsdp2) {
      refuse("ddp.nccl_ub", true, p,
             "not implemented for the FSDP2-style wrapper (user buffers are DDP's and Megatron "
             "FSDP's)",
             "false with dist.use_torch_fsdp2=true");
    }
  }
  // The finalize set turns manual registration off without nccl_ub, as Megatron-Bridge's does;
  // a user who asked for it would otherwise run without what they asked for.
  if (!c.ddp.nccl_ub) {
    for (const ProvenanceEntry& entry : p.history("ddp.fsdp_manual_registration")) {
      if (!is_builtin_source(entry.source) && entry.value == json(true)) {
        throw UsageError("ddp.fsdp_manual_registration=true (from " + entry.source +
                         "): DDP.fsdp_manual_registration requires DDP.nccl_ub!; accepted: "
                         "false, or with ddp.nccl_ub=true (--nccl_ub true)");
      }
    }
  }
  if (c.ddp.fsdp_manual_registration && c.ddp.nccl_ub) {
    if (!c.ddp.use_megatron_fsdp) {
      refuse("ddp.fsdp_manual_registration", true, p,
             "manual registration is Megatron FSDP's (fsdp_manual_registration requires FSDP and "
             "nccl_ub); DDP registers its buffers when it allocates them",
             "false with DDP");
    }
    if (c.train.train_iters < 2) {
      refuse("ddp.fsdp_manual_registration", true, p,
             "the buffers are registered at the start of the second iteration, and "
             "train.train_iters=" +
                 std::to_string(c.train.train_iters) + " has none",
             "train.train_iters >= 2 (ddp.nccl_ub under Megatron FSDP registers manually)");
    }
  }
}

// Selective and MLP recompute and output recompute: what the engine implements, and the lists
// that mean nothing without selective granularity.
void recompute_relations(const ConfigContainer& c, const Provenance& p) {
  const auto& m = c.model;
  // Selective recompute: the modules the engine implements; the list means nothing without
  // selective granularity, so a set list is refused there rather than ignored.
  const bool selective = m.recompute_granularity.value_or("") == "selective";
  if (selective) {
    for (const std::string& module : m.recompute_modules) {
      if (module != "layernorm") {
        refuse("model.recompute_modules", json(m.recompute_modules), p,
               "module '" + module + "' is not implemented",
               "[\"layernorm\"] (the input and pre-MLP RMSNorm outputs)");
      }
    }
    // MCore's TransformerConfig: selective recompute takes no layer count.
    if (m.recompute_num_layers) {
      refuse("model.recompute_num_layers", *m.recompute_num_layers, p,
             "set with model.recompute_granularity=selective",
             "null (selective recompute applies to every layer)");
    }
    if (m.recompute_modules.empty()) {
      refuse("model.recompute_modules", json(m.recompute_modules), p,
             "selective recompute of no module", "[\"layernorm\"]");
    }
  } else if (m.recompute_modules != ModelConfig{}.recompute_modules) {
    refuse("model.recompute_modules", json(m.recompute_modules), p,
           "read only with model.recompute_granularity=selective (it is " +
               m.recompute_granularity.value_or("null") + ")",
           "model.recompute_granularity=selective, or the default [\"core_attn\"]");
  }
  if (c.shardbench.recompute_fc1_layers > 0) {
    const int64_t fc1 = c.shardbench.recompute_fc1_layers;
    if (fc1 > c.model.num_layers) {
      refuse("shardbench.recompute_fc1_layers", fc1, p,
             "more layers than the model's " + std::to_string(c.model.num_layers),
             "0.." + std::to_string(c.model.num_layers));
    }
    if (c.mixed_precision.fp8) {
      refuse("shardbench.recompute_fc1_layers", fc1, p,
             "the MLP recompute in front of the FP8 linears is not implemented",
             "0 with FP8 compute");
    }
  }
  const bool output_recompute = selective || c.shardbench.recompute_swiglu;
  if (output_recompute && c.mixed_precision.fp8) {
    refuse(selective ? "model.recompute_modules" : "shardbench.recompute_swiglu",
           selective ? json(m.recompute_modules) : json(true), p,
           "output recompute in front of the FP8 linears is not implemented",
           selective ? "full recompute (-rl N) with FP8" : "false with FP8 compute");
  }
}

// The backend the run communicates over against Megatron's recorded one, NCCL user buffers, and
// a CUDA device where the run needs one.
void backend_relations(const ConfigContainer& c, const Provenance& p,
                       const FieldCheckContext& ctx) {
  const auto& s = c.shardbench;
  // Megatron's backend field is not read; the run's backend is shardbench.backend. A value that
  // disagrees with the backend the run will use would label the report wrongly.
  const std::string run_backend = run_backend_of(s);
  if (!run_backend.empty() && c.dist.distributed_backend != run_backend) {
    refuse("dist.distributed_backend", c.dist.distributed_backend, p,
           "this run communicates over " + run_backend + " (shardbench.backend, --backend)",
           run_backend);
  }
  nccl_user_buffers(c, p, ctx, run_backend);
  const DeviceChoice device = device_choice(s);
  const bool needs_gpu =
      device == DeviceChoice::kCuda ||
      (backend_choice(s) == BackendChoice::kNccl && device != DeviceChoice::kCpu);
  if (needs_gpu && ctx.probe_gpus) {
    const int count = ctx.cuda_device_count ? ctx.cuda_device_count() : visible_cuda_devices();
    if (count < 1) {
      const bool cuda = device == DeviceChoice::kCuda;
      const std::string key = cuda ? "shardbench.device" : "shardbench.backend";
      refuse(key, get_field(c, key), p, "no CUDA device is visible on this machine",
             cuda ? "cpu or auto" : "gloo or auto");
    }
  }
}

// FP8 compute (-c fp8_cs, docs/fp8.md): the linears' GEMMs take bf16 activations and, on a GPU,
// run in cuBLASLt, whose FP8 GEMMs need compute capability 8.9 or above and dimensions that are
// multiples of 16. The GPU rules apply where the run will use one: shardbench.device=cuda, or
// auto with a device visible (the engine's choice, harness/engine/device_runtime.cpp).
void fp8_compute_rules(const ConfigContainer& c, const FieldCheckContext& ctx) {
  const auto& fp8 = c.mixed_precision.fp8;
  if (!fp8) return;
  const auto cannot = [](const std::string& field, const std::string& value,
                         const std::string& accepted) {
    throw UsageError(field + "=" + value + " cannot run FP8 compute; accepted: " + accepted);
  };
  if (compute_dtype_of(c.shardbench) != ComputeDtype::kBf16) {
    cannot("shardbench.compute_dtype", c.shardbench.compute_dtype,
           "bf16 with mixed_precision.fp8 (FP8 GEMMs take bf16 activations)");
  }
  const DeviceChoice device = device_choice(c.shardbench);
  if (device == DeviceChoice::kCpu) return;
  const int count = ctx.probe_gpus
                        ? (ctx.cuda_device_count ? ctx.cuda_device_count() : visible_cuda_devices())
                        : 0;
  if (device == DeviceChoice::kAuto && count < 1) return;  // auto picks the CPU
  // The devices' compute capabilities: injected, or asked of the driver unless the count was.
  std::vector<CudaDeviceInfo> gpus;
  if (count > 0 && ctx.cuda_device_list) {
    gpus = ctx.cuda_device_list();
  } else if (count > 0 && !ctx.cuda_device_count) {
    gpus = visible_cuda_device_list();
  }
  for (const CudaDeviceInfo& gpu : gpus) {
    if (gpu.compute_major * 10 + gpu.compute_minor < 89) {
      cannot("mixed_precision.fp8", *fp8,
             "null on this device (" + gpu.name + " has compute capability " +
                 std::to_string(gpu.compute_major) + "." + std::to_string(gpu.compute_minor) +
                 "; FP8 GEMMs need a GPU of compute capability >= 8.9, or the CPU)");
    }
  }
  const ModelConfig& m = c.model;
  const int64_t q_width = m.num_attention_heads * head_dim_of(m);
  const std::pair<const char*, int64_t> dims[] = {
      {"model.hidden_size", m.hidden_size},
      {"model.ffn_hidden_size", ffn_hidden_of(m)},
      {"attention width (heads x kv_channels)", q_width},
      {"qkv width", q_width + 2 * query_groups_of(m) * head_dim_of(m)},
      {"tokens per micro-batch (micro_batch_size x seq_length)",
       c.train.micro_batch_size * m.seq_length}};
  for (const auto& [name, v] : dims) {
    if (v % 16 != 0) cannot(name, std::to_string(v), "a multiple of 16");
  }
}

void relations(const ConfigContainer& c, const Provenance& p, const FieldCheckContext& ctx) {
  const auto& m = c.model;
  // Megatron's OptimizerParamScheduler asserts max_lr >= min_lr
  // (megatron/core/optimizer_param_scheduler.py): the decay runs from lr down to min_lr.
  if (c.optimizer.min_lr > c.optimizer.lr) {
    refuse("optimizer.min_lr", c.optimizer.min_lr, p,
           "more than optimizer.lr=" + number_text(c.optimizer.lr) +
               source_part(p, "optimizer.lr") + " (Megatron's scheduler requires min_lr <= lr)",
           "a number <= " + number_text(c.optimizer.lr));
  }
  if (m.recompute_num_layers && *m.recompute_num_layers > m.num_layers) {
    refuse("model.recompute_num_layers", *m.recompute_num_layers, p,
           "more than the model's model.num_layers=" + std::to_string(m.num_layers),
           "0.." + std::to_string(m.num_layers));
  }
  if (c.train.manual_gc && c.train.manual_gc_interval < 1) {
    refuse("train.manual_gc_interval", c.train.manual_gc_interval, p,
           "train.manual_gc=true needs an interval", "1 or more steps");
  }
  for (int64_t rank : c.profiling.profile_ranks) {
    if (rank < ctx.num_gpus) continue;
    const std::string problem = "rank " + std::to_string(rank) + " is outside the job";
    const std::string accepted = "ranks in [0, " + std::to_string(ctx.num_gpus) + ")";
    const auto source = p.last_source("profiling.profile_ranks");
    if (source && source->rfind("CLI flag ", 0) == 0) {
      throw UsageError(source->substr(9) + ": " + problem + "; accepted: " + accepted);
    }
    refuse("profiling.profile_ranks", get_field(c, "profiling.profile_ranks"), p, problem,
           accepted);
  }
  // Every rank builds the step's mock global batch: gbs * seq_length tokens of 8 bytes.
  constexpr int64_t kMaxTokensPerStep = int64_t{1} << 32;
  if (c.train.global_batch_size * m.seq_length > kMaxTokensPerStep) {
    refuse("train.global_batch_size", c.train.global_batch_size, p,
           "times model.seq_length=" + std::to_string(m.seq_length) +
               " is more than 2^32 tokens "
               "per step",
           "global_batch_size * seq_length <= 4294967296");
  }
  recompute_relations(c, p);
  // shardbench.fused_kernels=false is the A/B switch that turns every fusion off.
  if (c.shardbench.linear_cross_entropy_chunk > 0 && !c.shardbench.fused_kernels) {
    refuse("shardbench.linear_cross_entropy_chunk", c.shardbench.linear_cross_entropy_chunk, p,
           "a fusion, and shardbench.fused_kernels=false turns every fusion off",
           "0 with shardbench.fused_kernels=false");
  }
  fp8_compute_rules(c, ctx);
  if (c.dist.use_torch_fsdp2) {
    if (c.ddp.fsdp_double_buffer) {
      refuse("ddp.fsdp_double_buffer", true, p, "a Megatron FSDP knob",
             "false with dist.use_torch_fsdp2=true");
    }
    if (c.ddp.suggested_communication_unit_size) {
      refuse("ddp.suggested_communication_unit_size", *c.ddp.suggested_communication_unit_size, p,
             "a Megatron FSDP knob", "null with dist.use_torch_fsdp2=true");
    }
  }
  backend_relations(c, p, ctx);
}

}  // namespace

std::string message_value(const json& value) {
  if (value.is_number_float()) return number_text(value.get<double>());
  if (value.is_array()) {
    std::vector<std::string> parts;
    for (const json& item : value) parts.push_back(message_value(item));
    return "[" + join(parts, ",") + "]";
  }
  return value_text(value);
}

void refuse_setting(const std::string& key, const json& value, const Provenance& provenance,
                    const std::string& problem, const std::string& accepted) {
  throw UsageError(key + "=" + message_value(value) + source_part(provenance, key) + ": " +
                   problem + "; accepted: " + accepted);
}

std::string accepted_text(const FieldInfo& field) {
  const FieldDomain& d = field.domain;
  std::string text;
  if (d.support == Support::kNotImplemented || !d.only.empty()) {
    text = values_text(accepted_values(field));
  } else if (is_number_type(field.type) && (d.min || d.max)) {
    text = (field.type == FieldType::kIntList ? "a list of " : "") + range_text(field);
    if (field.nullable && d.null_ok) text += " or null";
  } else {
    text = field.accepted();
  }
  return text;
}

std::optional<std::string> dryrun_only_refusal(const ConfigContainer& config,
                                               const Provenance& provenance) {
  const FieldInfo* first = nullptr;
  json first_value;
  for (const FieldInfo& field : field_registry()) {
    if (field.domain.support != Support::kDryrunOnly) continue;
    const json value = field.get(config);
    if (value == field.default_value) continue;
    if (first == nullptr || field.name == "model.num_moe_experts") {
      first = &field;
      first_value = value;
    }
    if (field.name == "model.num_moe_experts") break;
  }
  if (first == nullptr) return std::nullopt;
  return first->name + "=" + message_value(first_value) + source_part(provenance, first->name) +
         ": " + first->domain.note + " (--dryrun describes this run); accepted for a real run: " +
         values_text({first->default_value}) +
         (first->name == "model.num_moe_experts" ? " (a dense model)" : "");
}

void check_dryrun_only_fields(const ConfigContainer& config, const Provenance& provenance) {
  if (auto refusal = dryrun_only_refusal(config, provenance)) throw UsageError(*refusal);
}

bool is_builtin_source(const std::string& source) {
  if (source.rfind("recipe ", 0) == 0 || source.rfind("validation: ", 0) == 0 ||
      source.rfind("weak scaling", 0) == 0) {
    return true;
  }
  const std::string set = "override set ";
  if (source.rfind(set, 0) != 0) return false;
  // A built-in set is named; a user's --override_set file is a path.
  const std::string name = source.substr(set.size());
  return name.find('/') == std::string::npos && !name.ends_with(".set");
}

void check_field_domains(const ConfigContainer& config, const Provenance& provenance,
                         const FieldCheckContext& context) {
  for (const FieldInfo& field : field_registry()) {
    if (field.type == FieldType::kStringMap) continue;
    check_one(field, field.get(config), provenance);
  }
  relations(config, provenance, context);
}

void check_field_support(const ConfigContainer& config, const Provenance& provenance) {
  for (const FieldInfo& field : field_registry()) {
    const FieldDomain& d = field.domain;
    const json value = field.get(config);
    if (d.support == Support::kNotImplemented) {
      // The user's value counts even when a later built-in rule resets it (the finalize set
      // turns ddp.fsdp_manual_registration off without nccl_ub): it was asked for and ignored.
      for (const ProvenanceEntry& entry : provenance.history(field.name)) {
        if (!is_builtin_source(entry.source) && !contains(accepted_values(field), entry.value)) {
          throw UsageError(field.name + "=" + message_value(entry.value) + " (from " +
                           entry.source + "): not implemented by shardbench: " + d.note +
                           "; accepted: " + accepted_text(field));
        }
      }
      if (!contains(accepted_values(field), value)) {
        refuse(field.name, value, provenance, "not implemented by shardbench: " + d.note,
               accepted_text(field));
      }
    } else if (d.support == Support::kBuiltinOnly) {
      std::vector<json> accepted = {field.default_value};
      for (const ProvenanceEntry& entry : provenance.history(field.name)) {
        if (is_builtin_source(entry.source) && !contains(accepted, entry.value)) {
          accepted.push_back(entry.value);
        }
      }
      if (!contains(accepted, value)) {
        refuse(field.name, value, provenance,
               "not implemented by shardbench yet: " + d.note +
                   " (only the value a built-in override set or recipe gives is recorded)",
               values_text(accepted));
      }
    }
  }
}

}  // namespace shardbench
