#include "workloads/llama/activation_offload.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_set>

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include "harness/parallel/tensor_bytes.hpp"
#include "workloads/llama/activation_census.hpp"

namespace shardbench {
namespace {

struct Counters {
  std::atomic<int64_t> packed_tensors{0}, offloaded_tensors{0}, offloaded_bytes{0},
      deduplicated_tensors{0}, kept_tensors{0}, reloaded_tensors{0}, reloaded_bytes{0},
      sync_reloads{0}, held_bytes{0};
};

// The host copy: the source's strides where they describe a dense block, else contiguous (a
// view with gaps, such as a narrow of the fused qkv projection, is copied without them).
at::Tensor host_copy_of(const at::Tensor& src, const at::TensorOptions& options) {
  if (src.is_non_overlapping_and_dense()) {
    return at::empty_strided(src.sizes(), src.strides(), options);
  }
  return at::empty(src.sizes(), options);
}

// What the device copy must look like: the saved tensor's sizes and strides again (kernels such
// as SDPA's backward may care about them), in a buffer spanning the view; contiguous only for a
// view whose elements may overlap (an expand).
struct SavedLayout {
  std::vector<int64_t> sizes, strides;
  int64_t span_elems = -1;  // buffer that holds the view at its strides; -1: use contiguous

  static SavedLayout of(const at::Tensor& t) {
    SavedLayout l{t.sizes().vec(), t.strides().vec(), -1};
    // Innermost dimension first: each stride must clear everything the inner ones reach.
    std::vector<size_t> dims;
    for (size_t i = 0; i < l.sizes.size(); ++i) {
      if (l.sizes[i] == 0) return l;
      if (l.sizes[i] > 1) dims.push_back(i);
    }
    std::sort(dims.begin(), dims.end(),
              [&](size_t a, size_t b) { return l.strides[a] < l.strides[b]; });
    int64_t reach = 1;
    for (size_t i : dims) {
      if (l.strides[i] < reach) return l;
      reach += (l.sizes[i] - 1) * l.strides[i];
    }
    l.span_elems = reach;
    return l;
  }
  at::Tensor empty(const at::TensorOptions& options) const {
    if (span_elems < 0) return at::empty(sizes, options);
    return at::empty({span_elems}, options).as_strided(sizes, strides);
  }
};

struct OffloadGroup;

}  // namespace

struct ActivationOffload::Impl {
  explicit Impl(at::Device d) : device(d) {
    if (device.is_cuda()) {
      const c10::impl::VirtualGuardImpl guard(device.type());
      if (!device.has_index()) device = guard.getDevice();
      // Megatron's handler copies on two side streams, one per direction, so that a layer's
      // reload never queues behind another layer's offload.
      d2h_stream = guard.getStreamFromGlobalPool(device);
      h2d_stream = guard.getStreamFromGlobalPool(device);
    }
  }
  c10::Stream current_stream() const {
    return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
  }

  at::Device device;
  std::optional<c10::Stream> d2h_stream, h2d_stream;  // CUDA only
  Counters counters;
  PackObserver observer;
  std::mutex mu;
  std::vector<std::shared_ptr<OffloadGroup>> groups;  // of the current forward
};

namespace {

using Impl = ActivationOffload::Impl;

struct OffloadEntry {
  at::Tensor source;    // the saved tensor, until the group is released after its copies
  at::Tensor host;      // its host copy; or, when `offloaded` is false, the kept tensor itself
  at::Tensor reloaded;  // the device copy, once the group's reload started
  SavedLayout layout;   // of the saved tensor
  bool offloaded = false;
  int live_hooks = 0;  // saved variables that still unpack this entry
};

// A tensor saved by several nodes of a layer (a norm's input that is also the residual, the
// views SDPA saves) is copied once.
using DedupKey = std::tuple<const c10::StorageImpl*, int64_t, std::vector<int64_t>,
                            std::vector<int64_t>, at::ScalarType>;

// One offloaded layer of one forward pass.
struct OffloadGroup {
  explicit OffloadGroup(std::shared_ptr<Impl> owner) : impl(std::move(owner)) {}

  size_t pack(const at::Tensor& saved);
  void close();                 // end of the layer's forward: start the device-to-host copies
  // Drops the device tensors the copies read. With `only_if_copied`, only when the copies have
  // finished; otherwise the compute stream waits for them first. Callers hold `mu`.
  void release_sources_locked(bool only_if_copied);
  void reload(bool on_unpack);  // start the host-to-device copies (once)
  at::Tensor unpack(size_t index);
  void release(size_t index);

  std::shared_ptr<Impl> impl;
  std::mutex mu;
  std::vector<OffloadEntry> entries;
  std::map<DedupKey, size_t> index_of;  // while the layer's forward runs
  std::unordered_set<const c10::StorageImpl*> keep;
  bool closed = false;
  bool released = false;  // the device tensors the offload copied are dropped
  bool reload_started = false;
  std::optional<c10::Event> offload_done, reload_done;  // CUDA only
};

// The group whose layer is running its forward on this thread.
thread_local std::shared_ptr<OffloadGroup> t_open_group;

size_t OffloadGroup::pack(const at::Tensor& saved) {
  std::lock_guard<std::mutex> lock(mu);
  auto& c = impl->counters;
  ++c.packed_tensors;
  // Detached: the entry must not hold the saved tensor's grad_fn (for a node's own output that
  // would be a cycle through this hook). SavedVariable restores the autograd metadata on unpack.
  at::Tensor t = saved.detach();
  const c10::StorageImpl* storage = t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
  // No size threshold: a layer saves few tensors, and Megatron offloads every activation.
  const bool kept = closed || storage == nullptr || keep.count(storage) != 0 ||
                    t.layout() != at::kStrided || t.device().type() != impl->device.type();
  census::record(saved, /*offloaded=*/!kept);
  if (kept) {
    ++c.kept_tensors;
    if (impl->observer) impl->observer(t, false);
    OffloadEntry& e = entries.emplace_back();
    e.host = std::move(t);
    e.live_hooks = 1;
    return entries.size() - 1;
  }
  if (impl->observer) impl->observer(t, true);
  DedupKey key{storage, t.storage_offset(), t.sizes().vec(), t.strides().vec(), t.scalar_type()};
  if (auto it = index_of.find(key); it != index_of.end()) {
    ++c.deduplicated_tensors;
    ++entries[it->second].live_hooks;
    return it->second;
  }
  // The source stays alive until close(), so no other tensor of this layer can get its storage
  // (and its key) meanwhile.
  OffloadEntry& e = entries.emplace_back();
  e.source = std::move(t);
  e.offloaded = true;
  e.live_hooks = 1;
  index_of.emplace(std::move(key), entries.size() - 1);
  return entries.size() - 1;
}

void OffloadGroup::close() {
  std::lock_guard<std::mutex> lock(mu);
  closed = true;
  index_of.clear();
  keep.clear();
  at::NoGradGuard no_grad;
  auto& c = impl->counters;
  const bool cuda = impl->device.is_cuda();
  std::optional<c10::StreamGuard> on_d2h;
  if (cuda) {
    // The copies read what the layer's kernels wrote on the compute stream.
    c10::Event ready(impl->device.type());
    ready.record(impl->current_stream());
    ready.block(*impl->d2h_stream);
    on_d2h.emplace(*impl->d2h_stream);
  }
  const auto host_options = at::TensorOptions().device(at::kCPU).pinned_memory(cuda);
  for (auto& e : entries) {
    if (!e.offloaded || !e.source.defined()) continue;
    e.layout = SavedLayout::of(e.source);
    e.host = host_copy_of(e.source, host_options.dtype(e.source.scalar_type()));
    e.host.copy_(e.source, /*non_blocking=*/cuda);
    ++c.offloaded_tensors;
    c.offloaded_bytes += tensor_bytes(e.host);
    c.held_bytes += tensor_bytes(e.host);
  }
  if (cuda) {
    offload_done.emplace(impl->device.type());
    offload_done->record(*impl->d2h_stream);
  }
}

// The device tensors stay referenced until the group is released, not handed back with
// record_stream: the caching allocator frees a block recorded on another stream only once a
// later allocation on the host finds the copy's event complete, and the host runs the whole
// forward ahead of the GPU, so no offloaded block was free by the time the head allocated (the
// peak): offload lowered nothing. Released with the compute stream waiting for the copies, a
// block is free on the host's timeline at once, and the compute stream, the only one that can
// reuse it, runs nothing on it before the copies finished.
void OffloadGroup::release_sources_locked(bool only_if_copied) {
  if (!closed || released) return;
  if (offload_done) {
    if (only_if_copied && !offload_done->query()) return;
    offload_done->block(impl->current_stream());
  }
  for (auto& e : entries) {
    if (!e.offloaded || !e.source.defined()) continue;
    impl->counters.held_bytes -= tensor_bytes(e.source);
    e.source.reset();
  }
  released = true;
}

void OffloadGroup::reload(bool on_unpack) {
  std::lock_guard<std::mutex> lock(mu);
  if (reload_started || !closed) return;
  release_sources_locked(/*only_if_copied=*/false);
  reload_started = true;
  at::NoGradGuard no_grad;
  auto& c = impl->counters;
  if (on_unpack) ++c.sync_reloads;
  const bool cuda = impl->device.is_cuda();
  const auto device_options = at::TensorOptions().device(impl->device);
  // Destinations come from the compute stream's pool, where backward frees and reuses them.
  for (auto& e : entries) {
    if (!e.offloaded || !e.host.defined()) continue;
    e.reloaded = e.layout.empty(device_options.dtype(e.host.scalar_type()));
  }
  std::optional<c10::StreamGuard> on_h2d;
  if (cuda) {
    // The side stream may write a destination only after the compute stream's earlier use of
    // its block, and only after the group's offload finished.
    c10::Event ready(impl->device.type());
    ready.record(impl->current_stream());
    ready.block(*impl->h2d_stream);
    if (offload_done) offload_done->block(*impl->h2d_stream);
    on_h2d.emplace(*impl->h2d_stream);
  }
  for (auto& e : entries) {
    if (!e.reloaded.defined()) continue;
    e.reloaded.copy_(e.host, /*non_blocking=*/cuda);
    if (cuda) e.reloaded.record_stream(*impl->h2d_stream);
    ++c.reloaded_tensors;
    c.reloaded_bytes += tensor_bytes(e.reloaded);
    // The host copy is no longer needed (a second backward through the graph is not supported,
    // as with retain_graph=false).
    e.host.reset();
  }
  if (cuda) {
    reload_done.emplace(impl->device.type());
    reload_done->record(*impl->h2d_stream);
  }
}

at::Tensor OffloadGroup::unpack(size_t index) {
  {
    std::lock_guard<std::mutex> lock(mu);
    const OffloadEntry& e = entries.at(index);
    if (!e.offloaded) return e.host;
    if (!closed) return e.source;  // unpacked during the layer's own forward
  }
  // Not reloaded ahead of backward (a graph without the reload hook): reload now; correct, only
  // without overlap.
  reload(/*on_unpack=*/true);
  std::lock_guard<std::mutex> lock(mu);
  if (reload_done) reload_done->block(impl->current_stream());
  const OffloadEntry& e = entries.at(index);
  TORCH_CHECK(e.reloaded.defined(), "activation offload: saved tensor ", index,
              " was released before backward used it (backward through the graph twice?)");
  return e.reloaded;
}

void OffloadGroup::release(size_t index) {
  std::lock_guard<std::mutex> lock(mu);
  OffloadEntry& e = entries.at(index);
  if (--e.live_hooks > 0) return;
  if (e.source.defined() && e.offloaded) {
    // Freed before the group's release (its node ran backward early): not held any more. The
    // copy may still read it on the side stream.
    if (offload_done) e.source.record_stream(*impl->d2h_stream);
    impl->counters.held_bytes -= tensor_bytes(e.source);
  }
  e.source.reset();
  e.host.reset();
  e.reloaded.reset();
}

// One per SavedVariable built while a layer's scope is open; autograd destroys it when it frees
// the saved variable (after the node's backward), which releases the entry's memory.
class OffloadHooks final : public torch::autograd::SavedVariableHooks {
 public:
  explicit OffloadHooks(std::shared_ptr<OffloadGroup> group) : group_(std::move(group)) {}
  ~OffloadHooks() override {
    if (index_) group_->release(*index_);
  }
  void call_pack_hook(const at::Tensor& tensor) override { index_ = group_->pack(tensor); }
  at::Tensor call_unpack_hook() override {
    TORCH_CHECK(index_.has_value(), "activation offload: unpack before pack");
    return group_->unpack(*index_);
  }

 private:
  std::shared_ptr<OffloadGroup> group_;
  std::optional<size_t> index_;
};

// SavedVariable's constructor asks the default engine for hooks when saved-tensor hooks are
// enabled (at::SavedTensorDefaultHooks::is_enabled()); the base engine answers none, Python's
// engine answers torch.autograd.graph.saved_tensors_hooks. This one answers offload hooks while
// a layer scope is open on the calling thread, and census hooks while a census module scope is
// (workloads/llama/activation_census.hpp). Everything else is the base engine's.
class ShardbenchAutogradEngine final : public torch::autograd::Engine {
 public:
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    // Offload first: its pack hook also tells an open census what it saw.
    if (t_open_group) return std::make_unique<OffloadHooks>(t_open_group);
    if (census::open_on_this_thread()) return census::make_hooks();
    return nullptr;
  }
};

// Leaked on purpose: autograd's device threads may still run at exit, and the base engine's
// static destruction order would otherwise have to be matched.
torch::autograd::Engine& shardbench_autograd_engine() {
  static auto* engine = new ShardbenchAutogradEngine();
  return *engine;
}

}  // namespace

int64_t offload_release_layer(int64_t layers, int64_t offloaded, int64_t group) {
  if (offloaded < 1 || offloaded > layers || group < 0 || group >= offloaded) {
    throw std::invalid_argument("offload_release_layer: group " + std::to_string(group) + " of " +
                                std::to_string(offloaded) + " offloaded in " +
                                std::to_string(layers) + " layers");
  }
  // TE: window[i] = (layers / offloaded) * (i + 1) - 1, plus i + 1 for the first
  // layers % offloaded groups and, after them, the last such shift (0 when none): the last
  // group's window is always the last layer.
  const int64_t base = layers / offloaded, extra = layers % offloaded;
  const int64_t shift = group < extra ? group + 1 : extra;
  return base * (group + 1) - 1 + shift;
}

ActivationOffload::ActivationOffload(at::Device device) : impl_(std::make_shared<Impl>(device)) {}

ActivationOffload::~ActivationOffload() = default;

void ActivationOffload::begin_forward(int64_t layers) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->groups.clear();
  for (int64_t l = 0; l < layers; ++l) {
    impl_->groups.push_back(std::make_shared<OffloadGroup>(impl_));
  }
}

ActivationOffload::LayerScope::LayerScope(ActivationOffload& offload, int64_t layer,
                                          const std::vector<at::Tensor>& keep)
    : offload_(offload), layer_(layer) {
  if (t_open_group) throw std::logic_error("activation offload: layer scopes do not nest");
  std::shared_ptr<OffloadGroup> group;
  {
    std::lock_guard<std::mutex> lock(offload_.impl_->mu);
    group = offload_.impl_->groups.at(static_cast<size_t>(layer));
  }
  {
    std::lock_guard<std::mutex> lock(group->mu);
    for (const auto& t : keep) {
      if (t.defined() && t.has_storage()) group->keep.insert(t.storage().unsafeGetStorageImpl());
    }
  }
  t_open_group = std::move(group);
}

ActivationOffload::LayerScope::~LayerScope() {
  std::shared_ptr<OffloadGroup> group = std::move(t_open_group);
  t_open_group.reset();
  // While unwinding, the graph is abandoned: copying would only delay the error.
  if (group && std::uncaught_exceptions() == 0) group->close();
}

void ActivationOffload::release_copied(int64_t through_layer) {
  std::vector<std::shared_ptr<OffloadGroup>> groups;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    groups = impl_->groups;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    std::lock_guard<std::mutex> lock(groups[g]->mu);
    groups[g]->release_sources_locked(
        /*only_if_copied=*/static_cast<int64_t>(g) > through_layer);
  }
}

void ActivationOffload::release_after_layer(int64_t layer, int64_t model_layers) {
  int64_t offloaded = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    offloaded = static_cast<int64_t>(impl_->groups.size());
  }
  int64_t due = -1;
  while (due + 1 < offloaded && offload_release_layer(model_layers, offloaded, due + 1) <= layer) {
    ++due;
  }
  release_copied(due);
}

at::Tensor ActivationOffload::reload_before_backward(at::Tensor layer_output, int64_t layer,
                                                     int64_t prefetch) {
  // Nearest first: the copies queue on one stream in this order.
  std::vector<std::shared_ptr<OffloadGroup>> groups;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    const auto n = static_cast<int64_t>(impl_->groups.size());
    for (int64_t g = layer; g >= std::max<int64_t>(0, layer - prefetch); --g) {
      if (g < n) groups.push_back(impl_->groups[static_cast<size_t>(g)]);
    }
  }
  if (groups.empty()) return layer_output;
  // A tensor hook runs when the output's gradient is complete, before the node that produced it:
  // the layer's first backward node. It captures the groups (a custom Function could only hold
  // them as raw pointers); they live as long as the graph does.
  layer_output.register_hook([groups = std::move(groups)](const at::Tensor&) {
    for (const auto& g : groups) g->reload(false);
  });
  return layer_output;
}

OffloadStats ActivationOffload::stats() const {
  const Counters& c = impl_->counters;
  OffloadStats s;
  s.packed_tensors = c.packed_tensors;
  s.offloaded_tensors = c.offloaded_tensors;
  s.offloaded_bytes = c.offloaded_bytes;
  s.deduplicated_tensors = c.deduplicated_tensors;
  s.kept_tensors = c.kept_tensors;
  s.reloaded_tensors = c.reloaded_tensors;
  s.reloaded_bytes = c.reloaded_bytes;
  s.sync_reloads = c.sync_reloads;
  s.held_bytes = c.held_bytes;
  return s;
}

void ActivationOffload::reset_stats() {
  Counters& c = impl_->counters;
  for (auto* v :
       {&c.packed_tensors, &c.offloaded_tensors, &c.offloaded_bytes, &c.deduplicated_tensors,
        &c.kept_tensors, &c.reloaded_tensors, &c.reloaded_bytes, &c.sync_reloads}) {
    v->store(0);
  }
}

void ActivationOffload::set_pack_observer(PackObserver observer) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->observer = std::move(observer);
}

void install_offload_autograd_engine() {
  static std::once_flag once;
  std::call_once(once,
                 [] { torch::autograd::set_default_engine_stub(&shardbench_autograd_engine); });
}

namespace {
// Installed when the library loads, before anything can run a backward. torch 2.11 starts
// autograd's CUDA device threads once per process (a function-local static in
// Engine::initialize_device_threads_pool), for whichever engine runs the first backward: an
// engine installed after a CUDA backward has no device queues and fails an internal assert on
// its first backward. The engine gives hooks only inside an offload scope, so every run goes
// through it unchanged.
[[maybe_unused]] const bool kInstalledAtLoad = (install_offload_autograd_engine(), true);
}  // namespace

bool offload_autograd_engine_active() {
  return dynamic_cast<ShardbenchAutogradEngine*>(&torch::autograd::Engine::get_default_engine()) !=
         nullptr;
}

bool offload_hooks_active_on_this_thread() {
  return torch::autograd::Engine::get_default_engine().get_default_saved_variable_hooks() !=
         nullptr;
}

}  // namespace shardbench
