#include "kernels/cuda/CudaKernels.h"
#include "kernels/cpu/OperandChecks.h"

namespace loom::cuda {

namespace {
/// Every family's launchers, registered once by KernelId.
const KernelRegistry &registry() {
  static const KernelRegistry kernels = [] {
    KernelRegistry r;
    registerElementwiseKernels(r);
    registerDataMovementKernels(r);
    registerReductionKernels(r);
    registerNormalizationKernels(r);
    registerAttentionKernels(r);
    registerLossKernels(r);
    registerOptimizerKernels(r);
    registerMatmulKernels(r);
    registerFusedKernels(r);
    registerFp8Kernels(r);
    registerMoeKernels(r);
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

bool hasKernel(std::string_view name) {
  std::optional<KernelId> id = findKernel(name);
  return id && registry().get(*id);
}

bool loadsAtFirstUse(KernelId kernel) {
  // A fusion group's kernel is generated, compiled and loaded at its first
  // call; cuDNN builds an attention's plan and loads its kernels at the
  // first call. Loading a module waits for the process's other GPUs: with
  // ranks as threads, a peer already spinning in a transfer of the first
  // step would wait for this rank forever, so these load before any rank
  // starts (Backend::prepareKernel).
  return kernel == KernelId::Matmul || kernel == KernelId::ScaledMatmul ||
         kernel == KernelId::Fused || kernel == KernelId::Attention ||
         kernel == KernelId::AttentionWithStats || kernel == KernelId::AttentionGrad ||
         kernel == KernelId::AttentionGradWithStats;
}

llvm::Error launchKernel(std::string_view name, llvm::ArrayRef<cpu::Tensor> inputs,
                         llvm::ArrayRef<cpu::Tensor> outputs, const cpu::KernelAttrs &attrs,
                         const LaunchContext &ctx) {
  std::optional<KernelId> id = findKernel(name);
  if (!id)
    return llvm::createStringError(std::errc::invalid_argument, "unknown kernel '%s'",
                                   std::string(name).c_str());
  return launchKernel(*id, inputs, outputs, attrs, ctx);
}

llvm::Error launchKernel(KernelId id, llvm::ArrayRef<cpu::Tensor> inputs,
                         llvm::ArrayRef<cpu::Tensor> outputs, const cpu::KernelAttrs &attrs,
                         const LaunchContext &ctx) {
  std::string_view name = kernelName(id);
  Launcher launcher = registry().get(id);
  if (!launcher)
    return llvm::createStringError(std::errc::not_supported,
                                   "%s: no CUDA kernel in this build", std::string(name).c_str());
  auto failed = [&](llvm::Error err) {
    return llvm::createStringError(std::errc::invalid_argument, "%s: %s",
                                   std::string(name).c_str(),
                                   llvm::toString(std::move(err)).c_str());
  };
  // Results with no elements (the weights of an expert of size 0 and their
  // gradients) need no launch, and a grid of no blocks is a launch error.
  if (!outputs.empty() && llvm::all_of(outputs, [](const cpu::Tensor &t) {
        return cpu::detail::product(t.shape) == 0;
      }))
    return llvm::Error::success();
  // The FP8 scale epilogue (KernelList.h), where the launcher does not run
  // it itself: the kernel on its own outputs, then each scale.
  if (attrs.has(kFp8ScaleOfAttr) && !registry().runsFp8ScaleEpilogue(id)) {
    Fp8ScaleEpilogueAttrs split;
    if (std::string problem = splitFp8ScaleEpilogue(attrs.all(), outputs.size(), split);
        !problem.empty())
      return failed(llvm::createStringError(std::errc::invalid_argument, "%s", problem.c_str()));
    llvm::ArrayRef<cpu::Tensor> kernelOutputs = outputs.drop_back(split.outputs.size());
    const cpu::KernelAttrs ownAttrs(split.kernelAttrs);
    if (llvm::Error err = launcher(KernelCall{name, id, inputs, kernelOutputs, ownAttrs, ctx}))
      return failed(std::move(err));
    for (size_t j = 0; j < split.outputs.size(); ++j)
      if (llvm::Error err = launchFp8ScaleOf(kernelOutputs[split.outputs[j]],
                                             outputs[kernelOutputs.size() + j], split.format,
                                             split.margin, ctx))
        return failed(std::move(err));
    return cudaError(cudaGetLastError(), std::string(name).c_str());
  }
  KernelCall call{name, id, inputs, outputs, attrs, ctx};
  if (llvm::Error err = launcher(call))
    return failed(std::move(err));
  // Launch errors (bad configuration) surface here; faults at the next sync.
  return cudaError(cudaGetLastError(), std::string(name).c_str());
}

} // namespace loom::cuda
