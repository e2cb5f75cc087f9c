#include "kernels/cuda/CudaKernels.h"

namespace loom::cuda {

namespace {
const llvm::StringMap<Launcher> &registry() {
  static const llvm::StringMap<Launcher> kernels = [] {
    llvm::StringMap<Launcher> r;
    registerElementwiseKernels(r);
    registerDataMovementKernels(r);
    registerReductionKernels(r);
    registerNormalizationKernels(r);
    registerAttentionKernels(r);
    registerLossKernels(r);
    registerOptimizerKernels(r);
    registerMatmulKernels(r);
    return r;
  }();
  return kernels;
}
} // namespace

llvm::Error cudaError(cudaError_t status, const char *what) {
  if (status == cudaSuccess)
    return llvm::Error::success();
  return llvm::createStringError(std::errc::io_error, "%s: CUDA error %s (%s)", what,
                                 cudaGetErrorName(status), cudaGetErrorString(status));
}

bool hasKernel(std::string_view name) { return registry().count(name); }

llvm::Error launchKernel(std::string_view name, llvm::ArrayRef<cpu::Tensor> inputs,
                         llvm::ArrayRef<cpu::Tensor> outputs, const cpu::KernelAttrs &attrs,
                         const LaunchContext &ctx) {
  auto it = registry().find(name);
  if (it == registry().end())
    return llvm::createStringError(std::errc::not_supported,
                                   "%s: no CUDA kernel in this build", std::string(name).c_str());
  KernelCall call{name, inputs, outputs, attrs, ctx};
  if (llvm::Error err = it->second(call))
    return llvm::createStringError(std::errc::invalid_argument, "%s: %s",
                                   std::string(name).c_str(),
                                   llvm::toString(std::move(err)).c_str());
  // Launch errors (bad configuration) surface here; faults at the next sync.
  return cudaError(cudaGetLastError(), std::string(name).c_str());
}

} // namespace loom::cuda
