// Test helper: one main-grad buffer handed out as an engine hands out a weight's main-grad view
// under gradient-accumulation fusion (ModuleHooks::main_grad), counting the accumulations it is
// told of. For the fused linear cross-entropy's CPU and GPU tests.
#pragma once

#include <utility>

#include <ATen/ATen.h>

#include "workloads/llama/llama_model.hpp"

namespace shardbench::testing_util {

class BufferHooks : public ModuleHooks {
 public:
  explicit BufferHooks(at::Tensor buffer) : buffer_(std::move(buffer)) {}
  void pre_forward(int) override {}
  at::Tensor post_forward(int, at::Tensor out) override { return out; }
  at::Tensor main_grad(const at::Tensor&) override { return buffer_; }
  void main_grad_accumulated(const at::Tensor&) override { ++accumulated; }
  int accumulated = 0;

 private:
  at::Tensor buffer_;
};

}  // namespace shardbench::testing_util
