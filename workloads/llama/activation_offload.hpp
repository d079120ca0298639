// CPU activation offload (Megatron's -ol N: model.cpu_offloading=true,
// cpu_offloading_num_layers=N, cpu_offloading_weights=false): the tensors autograd saves during
// the forward of the first N layers are copied to host memory at the end of each layer's forward
// and copied back when backward reaches the layer, one layer ahead (Megatron's double-buffered
// group offload handler).
//
// libtorch's saved-tensor hooks take Python objects only; C++ gets them through the autograd
// engine, whose get_default_saved_variable_hooks() every SavedVariable consults when it is built.
// install_offload_autograd_engine() makes Engine::get_default_engine() an engine that returns
// offload hooks while a LayerScope is open on the calling thread, and no hooks otherwise.
// Torch internals stay in activation_offload.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

namespace shardbench {

// Counters since construction (or reset_stats()), over all layers and forwards.
struct OffloadStats {
  int64_t packed_tensors = 0;     // saved tensors seen by the pack hook
  int64_t offloaded_tensors = 0;  // device-to-host copies (after deduplication)
  int64_t offloaded_bytes = 0;
  int64_t deduplicated_tensors = 0;  // saved again by another node of the layer: no new copy
  int64_t kept_tensors = 0;          // weights, model constants, tensors on another device
  int64_t reloaded_tensors = 0;      // host-to-device copies
  int64_t reloaded_bytes = 0;
  int64_t sync_reloads = 0;  // groups reloaded by an unpack, not ahead of backward
  // Device bytes whose host copy has started but which are not released yet (a gauge, not a
  // counter: reset_stats() leaves it alone).
  int64_t held_bytes = 0;
};

// The layer at the end of whose forward offloaded group `group` (of `offloaded` groups, in a
// model of `layers` layers) is released: Transformer Engine's window map for Megatron's
// double-buffered CPU offload (AsyncDoubleBufferGroupOffloadHandler.layer_window_map), which
// spreads the releases evenly over the forward so that the last one falls on the last layer.
int64_t offload_release_layer(int64_t layers, int64_t offloaded, int64_t group);

class ActivationOffload {
 public:
  // `device`: where the model computes. On CUDA the copies go to pinned host memory on side
  // streams; on CPU they are plain copies (the same bookkeeping, for tests).
  explicit ActivationOffload(at::Device device);
  ~ActivationOffload();
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  // Starts a forward pass that offloads `layers` layers: earlier groups are forgotten (their
  // graphs keep what they still need).
  void begin_forward(int64_t layers);

  // While alive, tensors saved for backward on this thread go to `layer`'s group, except those
  // whose storage is one of `keep`'s (weights: never offloaded, FSDP regathers them in place;
  // model constants). Its destructor starts the device-to-host copies of the group.
  class LayerScope {
   public:
    LayerScope(ActivationOffload& offload, int64_t layer, const std::vector<at::Tensor>& keep);
    ~LayerScope();
    LayerScope(const LayerScope&) = delete;
    LayerScope& operator=(const LayerScope&) = delete;

   private:
    ActivationOffload& offload_;
    int64_t layer_;
  };

  // Drops the device tensors of the closed groups of layers 0..`through_layer`, the compute
  // stream waiting for their copies first (a GPU-side wait; the host goes on), and of any later
  // closed group whose copies have already finished. Until then an offloaded layer's activations
  // still occupy the device.
  void release_copied(int64_t through_layer);

  // At the end of the forward of `layer` (of `model_layers`): release_copied() through the last
  // group whose offload_release_layer() window has ended.
  void release_after_layer(int64_t layer, int64_t model_layers);

  // Marks `layer_output` so that when backward reaches it the layer's group is copied back and
  // the groups of the `prefetch` layers below it start copying too (1: one layer ahead,
  // Megatron's double buffer). Returns it.
  at::Tensor reload_before_backward(at::Tensor layer_output, int64_t layer, int64_t prefetch = 1);

  OffloadStats stats() const;
  void reset_stats();

  // Called with every tensor the pack hook receives and whether it will be copied to the host
  // (false: kept by reference). For tests; on the thread that runs the forward.
  using PackObserver = std::function<void(const at::Tensor& saved, bool offloaded)>;
  void set_pack_observer(PackObserver observer);

  struct Impl;  // activation_offload.cpp

 private:
  std::shared_ptr<Impl> impl_;
};

// Makes the autograd engine one that asks ActivationOffload for saved-tensor hooks. Idempotent
// and thread-safe. It runs when shardbench's engine library loads: it must happen before the
// process's first backward (torch starts autograd's device threads once, for the engine that
// runs first), so it is not left to the moment offload is turned on.
void install_offload_autograd_engine();
// Whether torch::autograd::Engine::get_default_engine() is the engine installed above.
bool offload_autograd_engine_active();
// Whether the default engine would give hooks to a tensor saved on this thread now.
bool offload_hooks_active_on_this_thread();

}  // namespace shardbench
