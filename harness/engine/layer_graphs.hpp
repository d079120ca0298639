// Per-layer CUDA graphs (model.cuda_graph_impl=local with model.cuda_graph_scope=[attn], [mlp] or
// [attn, mlp]; docs/cuda-graphs.md, "Per-layer scopes"): a C++ torch.cuda.make_graphed_callables
// for every layer's attention and MLP parts, next to the whole-step graph of step_graph.hpp.
//
// The first `warmup_steps` steps run eagerly. In the next one, each layer's sub-block is captured
// where the forward first reaches it (its weights gathered, as at every replay): its forward on a
// static input that requires grad, then its backward, torch::autograd::grad of the static output
// with respect to the static input and the sub-block's weights for a static output gradient,
// both graphs in one memory pool on the run's compute stream. From then on every micro-batch
// copies the sub-block's input into the static input and replays the forward graph; the output
// goes on through an autograd node whose backward copies the incoming gradient into the static
// output gradient, replays the backward graph and returns the gradients of the input and of the
// weights. Autograd then accumulates the weights' gradients into their leaves, so the engine's
// hooks (its gradient buffers, the reductions they launch) run outside the graphs as in eager
// mode. One graph pair per sub-block and layer suffices: a micro-batch's backward ends before
// the next micro-batch's forward begins (no pipeline schedule).
//
// What a replay cannot do is checked at each use and throws std::logic_error: a weight that is
// not where the graphs read it (the engine keeps units' gathered weights in place under
// EngineOptions::stable_unit_weights), or, under gradient-accumulation fusion, a main-grad buffer
// that moved. The fused linears' report to the engine (ModuleHooks::main_grad_accumulated) is host
// code a replay does not run: the runner records it at capture and repeats it after every
// backward replay.
//
// The graphs themselves go through a GraphBackend: CUDA graphs on a GPU, and for the CPU tests an
// emulation that "captures" by running the body once and "replays" by running it again on the
// same static buffers, so that the autograd plumbing above is tested without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "harness/engine/train_step.hpp"
#include "harness/measure/phase_timer.hpp"
#include "harness/model/layer_graphs.hpp"
#include "harness/report/run_record.hpp"

namespace shardbench {

class GraphBackend {
 public:
  // Returns the graph's outputs: tensors that every replay writes in place.
  using Body = std::function<std::vector<at::Tensor>()>;
  virtual ~GraphBackend() = default;
  // Captures `body` as a new graph (`id`) and returns its outputs.
  virtual std::vector<at::Tensor> capture(const Body& body, size_t& id) = 0;
  virtual void replay(size_t id) = 0;
  // Device bytes the captures reserved (the graphs' pool); 0 for the emulation.
  virtual int64_t pool_bytes() const = 0;
};

// CUDA graphs on the current stream of `device`, all in one private memory pool, captured in
// thread-local mode (autograd's device thread launches the backward into the capture).
std::unique_ptr<GraphBackend> cuda_graph_backend(at::Device device);
// The emulation for tests: capture runs `body` and keeps its outputs; a replay runs `body` again
// and copies what it returns into those outputs.
std::unique_ptr<GraphBackend> emulated_graph_backend();

class LayerGraphs final : public LayerGraphRunner {
 public:
  // `scopes`: the sub-blocks captured (the others run eagerly); not empty.
  LayerGraphs(int64_t warmup_steps, std::vector<LayerScope> scopes,
              std::unique_ptr<GraphBackend> backend);
  ~LayerGraphs() override;
  LayerGraphs(const LayerGraphs&) = delete;
  LayerGraphs& operator=(const LayerGraphs&) = delete;

  // One training step (collective, like train_step): eager while warming up, then with the
  // layers' sub-blocks captured (the first graphed step) or replayed. `phases` may be null; the
  // forward and backward phases are measured as in an eager step.
  StepOutputs step(const TrainableModel& model, DataParallelEngine& engine, const StepInputs& in,
                   PhaseTimer* phases);
  // What step() does before it runs the step: counts it and decides whether its sub-blocks run
  // eagerly or through graphs (tests drive run() with it directly).
  void begin_step();

  // LayerGraphRunner: the model's sub-blocks come here.
  at::Tensor run(const LayerBlock& block) override;

  // What the report says: the scopes, per scope the layers and graphs captured and the
  // replays, the capture's host time and the pool's bytes.
  CudaGraphRecord record() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardbench
