// The saved-activation census: which tensors autograd keeps from a forward pass for its backward,
// by module and by producing op, and how many bytes they hold (docs/activation-memory.md).
//
// It uses the same entry point as activation offload: every SavedVariable asks the default
// autograd engine for saved-tensor hooks when it is built, and shardbench's engine
// (activation_offload.cpp) answers census hooks while a census module scope is open on the
// calling thread. The hooks keep the saved tensor by reference, exactly as autograd would without
// them: the pass being measured holds the same memory as any other.
//
// Bytes are counted by storage: a storage counts once, for the module whose tensor was the first
// in the pass to keep it. A second view of it (q, k and v cut from one qkv projection) and the
// same view saved again by another node (a residual that two ops save) add no bytes and are
// counted as such: they are what "saved twice" looks like. Weights and model constants named by
// the module scope are not activations and are counted apart.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "harness/measure/saved_activations.hpp"

namespace torch::autograd {
struct SavedVariableHooks;
}

namespace shardbench {

class ActivationCensus {
 public:
  ActivationCensus();
  ~ActivationCensus();
  ActivationCensus(const ActivationCensus&) = delete;
  ActivationCensus& operator=(const ActivationCensus&) = delete;

  // While alive, tensors saved for backward on this thread are recorded for module `module`
  // (named `name`), except weights and constants whose storage is one of `weights`'.
  class ModuleScope {
   public:
    ModuleScope(ActivationCensus& census, int module, std::string name,
                const std::vector<at::Tensor>& weights);
    ~ModuleScope();
    ModuleScope(const ModuleScope&) = delete;
    ModuleScope& operator=(const ModuleScope&) = delete;
  };

  // The census so far. Storages stay referenced until this is called (so that a freed storage's
  // address cannot be taken for a new one during the pass): call it once the pass's forward is
  // over, before its backward frees what it saved. `measured` describes the pass.
  SavedActivations finish(std::string measured);

  struct Impl;  // activation_census.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

namespace census {

// Names the part of the module that saves the next tensors ("qkv", "attention", ...), while a
// census module scope is open on this thread; costs a thread-local store otherwise.
void region(const char* name);

// Whether a census module scope is open on this thread.
bool open_on_this_thread();

// Records `saved` in the open module scope of this thread (no-op without one). `offloaded`: the
// activation offload copies it to the host after the layer. Called from saved-tensor pack hooks.
void record(const at::Tensor& saved, bool offloaded);

// Hooks for one SavedVariable built while a census scope is open (activation_offload.cpp's
// engine hands them out): pack records the tensor and keeps it by reference.
std::unique_ptr<torch::autograd::SavedVariableHooks> make_hooks();

}  // namespace census
}  // namespace shardbench
