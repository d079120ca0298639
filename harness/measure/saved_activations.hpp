// What autograd kept for backward during one forward pass, per module and per producing op: the
// record of the saved-activation census (workloads/llama/activation_census.hpp,
// docs/activation-memory.md). Torch-free, so that the report writer can hold it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardbench {

// Saved tensors of one module that share region, producing op, dtype and shape.
struct SavedTensorGroup {
  std::string region;  // the part of the module that saved them: "input_norm", "qkv", "attention"
  std::string op;      // the autograd node that produced the tensor; "-" for none (an input, or a
                       // non-differentiable output such as RMSNorm's rstd)
  std::string dtype;   // "bf16", "fp32", "int64", ...
  std::vector<int64_t> shape;
  int64_t count = 0;       // saved variables (one per saving node and tensor)
  int64_t new_bytes = 0;   // bytes of the storages these tensors were the first of the pass to keep
  int64_t view_bytes = 0;  // elements x element size of each saved tensor, summed
};

// One module of the model's forward (the FSDP units' order: embedding, layer 0..L-1, head).
struct ModuleSavedActivations {
  int module = 0;
  std::string name;             // "embedding", "layer 3", "head"
  int64_t bytes = 0;            // storages this module was the first to keep (sum of new_bytes)
  int64_t saved_tensors = 0;    // saved variables of activations (weights not counted)
  int64_t saved_again = 0;      // the very same view saved by a second node of the pass: no bytes
  int64_t shared_storage = 0;   // another view of a storage already kept: no bytes
  int64_t weights = 0;          // saved variables of weights and model constants: not activations
  int64_t offloaded_bytes = 0;  // part of `bytes` that -ol copies to the host after the layer
  std::vector<SavedTensorGroup> groups;
};

struct SavedActivations {
  std::string measured;     // which pass, e.g. "rank 0, iteration 1, micro-batch 1"
  int64_t total_bytes = 0;  // sum over modules: kept on the device from forward to backward, before
                            // offload moves any to the host
  int64_t offloaded_bytes = 0;  // of total_bytes, copied to the host by activation offload
  std::vector<ModuleSavedActivations> modules;
};

}  // namespace shardbench
