#include "workloads/llama/activation_census.hpp"

#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include "harness/parallel/tensor_bytes.hpp"

namespace shardbench {
namespace {

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return "bf16";
    case at::kHalf:
      return "fp16";
    case at::kFloat:
      return "fp32";
    case at::kDouble:
      return "fp64";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kBool:
      return "bool";
    case at::kByte:
      return "uint8";
    case at::kFloat8_e4m3fn:
      return "fp8_e4m3";
    case at::kFloat8_e5m2:
      return "fp8_e5m2";
    default:
      return c10::toString(t);
  }
}

// One view of a storage, as autograd saved it.
using ViewKey = std::tuple<const c10::StorageImpl*, int64_t, std::vector<int64_t>,
                           std::vector<int64_t>, at::ScalarType>;
using GroupKey = std::tuple<std::string, std::string, std::string, std::vector<int64_t>>;

struct OpenModule;
thread_local OpenModule* t_module = nullptr;
thread_local const char* t_region = "";

}  // namespace

struct ActivationCensus::Impl {
  std::mutex mu;
  std::vector<ModuleSavedActivations> modules;
  std::vector<std::map<GroupKey, size_t>> group_index;  // per module
  // Storages kept so far, referenced until finish(): no address can be reused meanwhile.
  std::unordered_map<const c10::StorageImpl*, c10::Storage> storages;
  std::set<ViewKey> views;
  bool finished = false;

  void record(size_t module, const std::unordered_set<const c10::StorageImpl*>& weights,
              const char* region, const at::Tensor& t, bool offloaded);
};

namespace {

struct OpenModule {
  ActivationCensus::Impl* census = nullptr;
  size_t index = 0;
  std::unordered_set<const c10::StorageImpl*> weights;
};

}  // namespace

void ActivationCensus::Impl::record(size_t module,
                                    const std::unordered_set<const c10::StorageImpl*>& weights,
                                    const char* region, const at::Tensor& t, bool offloaded) {
  std::lock_guard<std::mutex> lock(mu);
  if (finished) return;
  ModuleSavedActivations& m = modules.at(module);
  const c10::StorageImpl* storage = t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
  if (storage != nullptr && weights.count(storage) != 0) {
    ++m.weights;
    return;
  }
  ++m.saved_tensors;
  // The op that produced the tensor; the saving node is not known to a pack hook.
  const std::shared_ptr<torch::autograd::Node>& fn = t.grad_fn();
  GroupKey gkey{region, fn ? fn->name() : std::string("-"), dtype_name(t.scalar_type()),
                t.sizes().vec()};
  auto [git, inserted] = group_index.at(module).emplace(gkey, m.groups.size());
  if (inserted) {
    SavedTensorGroup g;
    std::tie(g.region, g.op, g.dtype, g.shape) = gkey;
    m.groups.push_back(std::move(g));
  }
  SavedTensorGroup& g = m.groups[git->second];
  ++g.count;
  g.view_bytes += tensor_bytes(t);
  if (storage == nullptr) return;
  if (!views
           .emplace(storage, t.storage_offset(), t.sizes().vec(), t.strides().vec(),
                    t.scalar_type())
           .second) {
    ++m.saved_again;
    return;
  }
  if (!storages.emplace(storage, t.storage()).second) {
    ++m.shared_storage;
    return;
  }
  const auto bytes = static_cast<int64_t>(t.storage().nbytes());
  g.new_bytes += bytes;
  m.bytes += bytes;
  if (offloaded) m.offloaded_bytes += bytes;
}

ActivationCensus::ActivationCensus() : impl_(std::make_unique<Impl>()) {}
ActivationCensus::~ActivationCensus() = default;

ActivationCensus::ModuleScope::ModuleScope(ActivationCensus& census, int module, std::string name,
                                           const std::vector<at::Tensor>& weights) {
  if (t_module != nullptr) throw std::logic_error("activation census: module scopes do not nest");
  auto open = std::make_unique<OpenModule>();
  open->census = census.impl_.get();
  for (const auto& w : weights) {
    if (w.defined() && w.has_storage()) open->weights.insert(w.storage().unsafeGetStorageImpl());
  }
  {
    std::lock_guard<std::mutex> lock(open->census->mu);
    open->index = open->census->modules.size();
    ModuleSavedActivations m;
    m.module = module;
    m.name = std::move(name);
    open->census->modules.push_back(std::move(m));
    open->census->group_index.emplace_back();
  }
  t_region = "";
  t_module = open.release();
}

ActivationCensus::ModuleScope::~ModuleScope() {
  delete t_module;
  t_module = nullptr;
  t_region = "";
}

SavedActivations ActivationCensus::finish(std::string measured) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->finished = true;
  impl_->storages.clear();
  impl_->views.clear();
  SavedActivations out;
  out.measured = std::move(measured);
  for (const auto& m : impl_->modules) {
    out.total_bytes += m.bytes;
    out.offloaded_bytes += m.offloaded_bytes;
  }
  out.modules = std::move(impl_->modules);
  impl_->modules.clear();
  impl_->group_index.clear();
  return out;
}

namespace census {

void region(const char* name) { t_region = name; }

bool open_on_this_thread() { return t_module != nullptr; }

void record(const at::Tensor& saved, bool offloaded) {
  OpenModule* open = t_module;
  if (open == nullptr) return;
  open->census->record(open->index, open->weights, t_region, saved, offloaded);
}

namespace {

// Keeps the saved tensor by reference, as a SavedVariable without hooks does. Detached: a node's
// own output must not hold that node through its grad_fn (a cycle); SavedVariable restores the
// autograd metadata on unpack.
class CensusHooks final : public torch::autograd::SavedVariableHooks {
 public:
  void call_pack_hook(const at::Tensor& tensor) override {
    record(tensor, /*offloaded=*/false);
    saved_ = tensor.detach();
  }
  at::Tensor call_unpack_hook() override { return saved_; }

 private:
  at::Tensor saved_;
};

}  // namespace

std::unique_ptr<torch::autograd::SavedVariableHooks> make_hooks() {
  return std::make_unique<CensusHooks>();
}

}  // namespace census
}  // namespace shardbench
