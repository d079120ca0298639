// harness/engine/layer_graphs.hpp
#include "harness/engine/layer_graphs.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "harness/engine/device_runtime.hpp"
#include "harness/engine/train_step_phases.hpp"
#include "harness/measure/nvtx.hpp"

namespace shardbench {

namespace {

class CudaGraphBackend final : public GraphBackend {
 public:
  explicit CudaGraphBackend(at::Device device)
      : device_(device), pool_(at::cuda::graph_pool_handle()) {}

  std::vector<at::Tensor> capture(const Body& body, size_t& id) override {
    const auto stream = at::cuda::getCurrentCUDAStream(device_.index());
    if (stream == at::cuda::getDefaultCUDAStream(device_.index())) {
      throw std::logic_error(
          "LayerGraphs: the run's compute stream is the default stream (use_graph_compute_stream "
          "was not called before the model and the engine were built)");
    }
    // Nothing still queued may run into the capture's window.
    at::cuda::device_synchronize();
    const int64_t before = allocator_reserved_bytes(device_);
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    // Thread-local mode: autograd's device thread launches the backward into the capture while
    // the communicators' watchdog threads keep querying their own events.
    graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    std::vector<at::Tensor> outputs;
    try {
      outputs = body();
    } catch (...) {
      try {
        graph->capture_end();
      } catch (...) {
      }
      throw;
    }
    graph->capture_end();
    pool_bytes_ += allocator_reserved_bytes(device_) - before;
    graphs_.push_back(std::move(graph));
    id = graphs_.size() - 1;
    return outputs;
  }

  void replay(size_t id) override { graphs_.at(id)->replay(); }
  int64_t pool_bytes() const override { return pool_bytes_; }

 private:
  at::Device device_;
  at::cuda::MempoolId_t pool_;
  std::vector<std::unique_ptr<at::cuda::CUDAGraph>> graphs_;
  int64_t pool_bytes_ = 0;
};

class EmulatedGraphBackend final : public GraphBackend {
 public:
  std::vector<at::Tensor> capture(const Body& body, size_t& id) override {
    graphs_.push_back({body, body()});
    id = graphs_.size() - 1;
    return graphs_.back().outputs;
  }

  void replay(size_t id) override {
    Graph& g = graphs_.at(id);
    const std::vector<at::Tensor> fresh = g.body();
    at::NoGradGuard no_grad;
    if (fresh.size() != g.outputs.size()) {
      throw std::logic_error("emulated graph: the replay returned another number of outputs");
    }
    for (size_t i = 0; i < fresh.size(); ++i) {
      if (fresh[i].defined() != g.outputs[i].defined()) {
        throw std::logic_error("emulated graph: output " + std::to_string(i) +
                               " is defined in one run and not in the other");
      }
      if (g.outputs[i].defined()) g.outputs[i].copy_(fresh[i]);
    }
  }

  int64_t pool_bytes() const override { return 0; }

 private:
  struct Graph {
    Body body;
    std::vector<at::Tensor> outputs;
  };
  std::vector<Graph> graphs_;
};

// Stands in for the engine as the hooks of a captured sub-block's fused weight-gradient linears:
// at capture it asks the engine for each weight's main-grad buffer and notes which weights
// reported an accumulation; later it hands out the same buffers (what the graph writes) and
// repeats the reports after every backward replay.
class WgradRecorder final : public ModuleHooks {
 public:
  explicit WgradRecorder(ModuleHooks* engine) : engine_(engine) {}

  void pre_forward(int) override {}
  at::Tensor post_forward(int, at::Tensor output) override { return output; }

  at::Tensor main_grad(const at::Tensor& w) override {
    for (const auto& [weight, target] : targets_) {
      if (weight.is_same(w)) return target;
    }
    if (!capturing) {
      throw std::logic_error(
          "LayerGraphs: a fused weight-gradient linear asked for a buffer outside the capture");
    }
    at::Tensor target = engine_->main_grad(w);
    targets_.emplace_back(w, target);
    return target;
  }

  void main_grad_accumulated(const at::Tensor& w) override {
    if (capturing) fused_.push_back(w);
  }

  // Before a backward replay: every buffer the graph accumulates into is still where the engine
  // keeps that weight's main grad.
  void check_targets(const std::string& where) const {
    for (const auto& [weight, target] : targets_) {
      if (!target.defined()) continue;
      const at::Tensor now = engine_->main_grad(weight);
      if (!now.defined() || now.data_ptr() != target.data_ptr()) {
        throw std::logic_error("LayerGraphs: " + where +
                               ": a weight's main-grad buffer moved since the capture; the "
                               "backward graph accumulates into the old one");
      }
    }
  }

  // After a backward replay: what the fused linears told the engine at capture.
  void report() const {
    for (const at::Tensor& w : fused_) engine_->main_grad_accumulated(w);
  }

  bool capturing = false;

 private:
  ModuleHooks* engine_;
  std::vector<std::pair<at::Tensor, at::Tensor>> targets_;  // (weight, its buffer)
  std::vector<at::Tensor> fused_;
};

// One layer's sub-block with its two graphs and static buffers.
struct CapturedBlock {
  GraphBackend* backend = nullptr;
  LayerBlock block;  // as captured: its weights and the function that runs it
  std::string name;  // "layer 3 attn"
  std::optional<WgradRecorder> recorder;
  std::vector<const void*> param_ptrs;  // where the graphs read the weights
  at::Tensor static_in, live_out, static_out, static_grad_out;
  std::vector<at::Tensor> static_grads;  // of the input, then of each weight (none if fused)
  size_t forward_graph = 0, backward_graph = 0;
  int64_t forward_replays = 0, backward_replays = 0;

  void capture(const LayerBlock& b) {
    block = b;
    block.input = at::Tensor();  // the capture step's activations: not kept
    for (const at::Tensor& p : b.params) param_ptrs.push_back(p.data_ptr());
    ModuleHooks* hooks = nullptr;
    if (b.wgrad) hooks = &recorder.emplace(b.wgrad);
    {
      at::NoGradGuard no_grad;
      static_in = b.input.detach().clone();
    }
    static_in.requires_grad_(true);
    if (recorder) recorder->capturing = true;
    const GraphBackend::Body forward_body = [this, hooks] {
      at::AutoGradMode grad_mode(true);
      live_out = block.forward(static_in, hooks);
      return std::vector<at::Tensor>{live_out.detach()};
    };
    static_out = backend->capture(forward_body, forward_graph).at(0);
    static_grad_out = at::zeros_like(static_out);
    // retain_graph: the forward graph's saved tensors stay where the backward graph reads them,
    // so that no later capture in the shared pool reuses their memory.
    const GraphBackend::Body backward_body = [this] {
      std::vector<at::Tensor> inputs{static_in};
      inputs.insert(inputs.end(), block.params.begin(), block.params.end());
      return torch::autograd::grad({live_out}, inputs, {static_grad_out}, /*retain_graph=*/true,
                                   /*create_graph=*/false, /*allow_unused=*/true);
    };
    static_grads = backend->capture(backward_body, backward_graph);
    if (recorder) recorder->capturing = false;
  }

  void check_weights(at::TensorList weights, const char* pass) const {
    for (size_t i = 0; i < weights.size(); ++i) {
      if (weights[i].data_ptr() != param_ptrs[i]) {
        throw std::logic_error("LayerGraphs: " + name + " " + pass + ": weight " +
                               std::to_string(i) +
                               " is not where the graphs read it (captured at another address; "
                               "EngineOptions::stable_unit_weights keeps gathered units in place)");
      }
    }
  }

  at::Tensor forward(at::TensorList inputs) {
    check_weights(inputs.slice(1), "forward");
    if (inputs[0].sizes() != static_in.sizes()) {
      throw std::invalid_argument("LayerGraphs: " + name +
                                  ": the input's shape changed since the "
                                  "capture (a graph replays fixed shapes)");
    }
    static_in.copy_(inputs[0]);
    backend->replay(forward_graph);
    ++forward_replays;
    return static_out.detach();
  }

  std::vector<at::Tensor> backward(const at::Tensor& grad) {
    check_weights(block.params, "backward");
    if (grad.defined()) {
      static_grad_out.copy_(grad);
    } else {
      static_grad_out.zero_();
    }
    if (recorder) recorder->check_targets(name + " backward");
    backend->replay(backward_graph);
    ++backward_replays;
    if (recorder) recorder->report();
    std::vector<at::Tensor> grads;
    for (const at::Tensor& g : static_grads) grads.push_back(g.defined() ? g.detach() : g);
    return grads;
  }
};

// The autograd node of a replayed sub-block. Inputs: the sub-block's input, then its weights (so
// that autograd accumulates the weights' gradients into their leaves and runs the engine's
// hooks), then the block (not a tensor).
struct GraphedBlockFn : torch::autograd::Function<GraphedBlockFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs, int64_t block) {
    ctx->saved_data["block"] = block;
    return {reinterpret_cast<CapturedBlock*>(block)->forward(inputs)};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* block = reinterpret_cast<CapturedBlock*>(ctx->saved_data["block"].toInt());
    torch::autograd::variable_list out = block->backward(grads[0]);
    out.emplace_back();  // the block
    return out;
  }
};

}  // namespace

std::unique_ptr<GraphBackend> cuda_graph_backend(at::Device device) {
  if (!device.is_cuda()) {
    throw std::invalid_argument("CUDA graphs need a CUDA device, not " + device.str());
  }
  return std::make_unique<CudaGraphBackend>(device);
}

std::unique_ptr<GraphBackend> emulated_graph_backend() {
  return std::make_unique<EmulatedGraphBackend>();
}

struct LayerGraphs::Impl {
  int64_t warmup_steps = 0;
  std::vector<LayerScope> scopes;
  std::unique_ptr<GraphBackend> backend;
  int64_t steps = 0;
  bool graphed_step = false;
  std::map<std::pair<int64_t, LayerScope>, std::unique_ptr<CapturedBlock>> blocks;
  CudaGraphRecord rec;

  bool graphs(LayerScope s) const {
    return std::find(scopes.begin(), scopes.end(), s) != scopes.end();
  }
};

LayerGraphs::LayerGraphs(int64_t warmup_steps, std::vector<LayerScope> scopes,
                         std::unique_ptr<GraphBackend> backend)
    : impl_(std::make_unique<Impl>()) {
  if (warmup_steps < 0) {
    throw std::invalid_argument("cuda_graph_warmup_steps=" + std::to_string(warmup_steps) +
                                "; accepted: >= 0");
  }
  if (scopes.empty() || !backend) {
    throw std::invalid_argument("LayerGraphs: needs a scope and a graph backend");
  }
  Impl& s = *impl_;
  s.warmup_steps = warmup_steps;
  s.scopes = std::move(scopes);
  s.backend = std::move(backend);
  s.rec.impl = "local";
  for (LayerScope scope : s.scopes) {
    s.rec.scope += (s.rec.scope.empty() ? "" : ",") + std::string(layer_scope_name(scope));
    s.rec.scopes.push_back({layer_scope_name(scope)});
  }
  s.rec.warmup_steps = warmup_steps;
}

LayerGraphs::~LayerGraphs() = default;

void LayerGraphs::begin_step() {
  Impl& s = *impl_;
  const int64_t index = s.steps++;
  s.graphed_step = index >= s.warmup_steps;
  if (s.graphed_step) {
    if (s.rec.capture_iteration == 0) s.rec.capture_iteration = index + 1;
    s.rec.replays += 1;
  }
}

StepOutputs LayerGraphs::step(const TrainableModel& model, DataParallelEngine& engine,
                              const StepInputs& in, PhaseTimer* phases) {
  begin_step();
  return train_step(model, engine, in, phases);
}

at::Tensor LayerGraphs::run(const LayerBlock& block) {
  static const nvtx::Label kCaptureLabel{"cuda_graph_capture", nvtx::Color::kStep};
  Impl& s = *impl_;
  if (!s.graphed_step || !s.graphs(block.scope)) return block.forward(block.input, nullptr);
  std::unique_ptr<CapturedBlock>& captured = s.blocks[{block.layer, block.scope}];
  if (!captured) {
    nvtx::Range range(kCaptureLabel);
    const auto t0 = std::chrono::steady_clock::now();
    captured = std::make_unique<CapturedBlock>();
    captured->backend = s.backend.get();
    captured->name = "layer " + std::to_string(block.layer) + " " + layer_scope_name(block.scope);
    captured->capture(block);
    s.rec.capture_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::vector<at::Tensor> inputs{block.input};
  inputs.insert(inputs.end(), block.params.begin(), block.params.end());
  return GraphedBlockFn::apply(at::TensorList(inputs),
                               reinterpret_cast<int64_t>(captured.get()))[0];
}

CudaGraphRecord LayerGraphs::record() const {
  const Impl& s = *impl_;
  CudaGraphRecord r = s.rec;
  r.graph_pool_bytes = s.backend->pool_bytes();
  for (CudaGraphScopeRecord& scope : r.scopes) {
    for (const auto& [key, block] : s.blocks) {
      if (scope.scope != layer_scope_name(key.second)) continue;
      scope.layers += 1;
      scope.graphs += 2;
      scope.forward_replays += block->forward_replays;
      scope.backward_replays += block->backward_replays;
    }
  }
  return r;
}

}  // namespace shardbench
