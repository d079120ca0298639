// Gradient-accumulation fusion's weight-gradient GEMM: main_grad [out, in] (fp32) += dy^T @ x, in
// one cuBLAS GEMM with beta = 1 and fp32 accumulation, reading bf16 activations and output
// gradients. Without it autograd writes a bf16 weight gradient and a hook adds it to the fp32
// buffer: one more kernel, one more full-size tensor, and the gradient rounded to bf16 before the
// add. Megatron's fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32 is the same operation.
#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#include "kernels/kernels.hpp"

namespace shardbench::kernels {
namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS ") + what + " failed with status " +
                             std::to_string(static_cast<int>(status)));
  }
}

// One handle per host thread and device (cuBLAS handles are not thread-safe, and are bound to
// the device current at creation). The autograd engine runs a device's backward on one thread.
cublasHandle_t handle_for_this_thread() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) throw std::runtime_error("cudaGetDevice failed");
  thread_local cublasHandle_t handles[64] = {};
  if (device < 0 || device >= 64) throw std::runtime_error("wgrad: device index out of range");
  if (!handles[device]) check(cublasCreate(&handles[device]), "cublasCreate");
  return handles[device];
}

}  // namespace

void wgrad_accumulate_fp32(const void* x, const void* dy, DType dtype, float* main_grad,
                           int64_t tokens, int64_t in_features, int64_t out_features,
                           Stream stream) {
  cublasHandle_t handle = handle_for_this_thread();
  check(cublasSetStream(handle, stream), "cublasSetStream");
  // Row-major W [out, in] is column-major Wc [in, out]; x [T, in] is Xc [in, T] and dy [T, out]
  // is DYc [out, T]. W = dy^T x  <=>  Wc = Xc * DYc^T: m = in, n = out, k = T.
  const float alpha = 1.f, beta = 1.f;
  const cudaDataType_t t = dtype == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
  check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(in_features),
                     static_cast<int>(out_features), static_cast<int>(tokens), &alpha, x, t,
                     static_cast<int>(in_features), dy, t, static_cast<int>(out_features), &beta,
                     main_grad, CUDA_R_32F, static_cast<int>(in_features), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx (weight gradient accumulation)");
}

}  // namespace shardbench::kernels
