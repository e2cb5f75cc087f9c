#ifndef LOOM_KERNELS_CUDA_CUDAKERNELS_H
#define LOOM_KERNELS_CUDA_CUDAKERNELS_H

// Loom's CUDA kernels: one launcher per entry of Kernels.def, each checking
// shapes on the host and launching on the given stream. Tensors hold device
// pointers; shapes and attributes are on the host. Kernels compute in f32
// (bf16/f16 loaded and rounded on store) unless noted, and are deterministic
// (no atomics where a fixed-order reduction does).

#include "kernels/cpu/CpuKernels.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <vector>

namespace loom::cuda {

/// What every launch needs besides its tensors.
struct LaunchContext {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t cublasLt = nullptr;
  void *workspace = nullptr; // for cuBLASLt
  size_t workspaceBytes = 0;
  int multiprocessors = 132;
  /// kCounterWords words of this stream's own, zero between kernels: a
  /// kernel may count and accumulate in them (a whole-tensor reduction's
  /// blocks, the last of which finishes it) if it leaves them zero. Kernels
  /// of one stream run one after another, so one set a stream suffices.
  /// Null where the caller keeps none: kernels then take a slower path.
  unsigned *counters = nullptr;
};

/// The words of LaunchContext::counters.
inline constexpr int kCounterWords = 64;

struct KernelCall {
  std::string_view name;
  KernelId id;
  llvm::ArrayRef<cpu::Tensor> inputs;
  llvm::ArrayRef<cpu::Tensor> outputs;
  const cpu::KernelAttrs &attrs;
  const LaunchContext &ctx;
};

using Launcher = llvm::Error (*)(const KernelCall &call);

/// The launchers of the contract's kernels, indexed by KernelId.
class KernelRegistry {
public:
  KernelRegistry() : launchers_(kNumKernels, nullptr), fp8Scales_(kNumKernels, false) {}
  void add(KernelId id, Launcher launcher) { launchers_[kernelIndex(id)] = launcher; }
  Launcher get(KernelId id) const { return launchers_[kernelIndex(id)]; }
  /// The launcher of `id` runs the FP8 scale epilogue (KernelList.h) itself,
  /// finishing the amax as it writes the output: it is called with the
  /// epilogue's attributes and outputs. Other launchers are called without,
  /// and launchKernel runs launchFp8ScaleOf after them.
  void addFp8ScaleEpilogue(KernelId id) { fp8Scales_[kernelIndex(id)] = true; }
  bool runsFp8ScaleEpilogue(KernelId id) const { return fp8Scales_[kernelIndex(id)]; }

private:
  std::vector<Launcher> launchers_;
  std::vector<bool> fp8Scales_;
};

/// nn.fp8_scale (format, margin) of nn.amax of all of x into `scale` (a
/// rank-0 f32): one launch where ctx.counters is set.
llvm::Error launchFp8ScaleOf(const cpu::Tensor &x, const cpu::Tensor &scale,
                             const std::string &format, int64_t margin,
                             const LaunchContext &ctx);

/// Runs kernel `name` on ctx.stream (asynchronously). Errors name the kernel.
llvm::Error launchKernel(std::string_view name, llvm::ArrayRef<cpu::Tensor> inputs,
                         llvm::ArrayRef<cpu::Tensor> outputs, const cpu::KernelAttrs &attrs,
                         const LaunchContext &ctx);
/// The same for a kernel already resolved: what the backend calls.
llvm::Error launchKernel(KernelId id, llvm::ArrayRef<cpu::Tensor> inputs,
                         llvm::ArrayRef<cpu::Tensor> outputs, const cpu::KernelAttrs &attrs,
                         const LaunchContext &ctx);
bool hasKernel(std::string_view name);
/// Row-major c[m, n] = op(a) op(b), a [m, k] ([k, m] when transA) and b
/// [k, n] ([n, k] when transB) of dtype `in`, c of `out` (`in` or f32); with
/// `accumulate` c is added to (beta = 1). One cuBLASLt GEMM on ctx.stream:
/// for kernels built from GEMMs (nn.linear_cross_entropy).
llvm::Error gemmRowMajor(const LaunchContext &ctx, DType in, DType out, const void *a, bool transA,
                         const void *b, bool transB, void *c, int64_t m, int64_t n, int64_t k,
                         bool accumulate);
/// How cuBLASLt reads an FP8 GEMM operand's scales: one per row (outer
/// vector), one per row and 128 elements of K (VEC128, laid out [K tiles][ld
/// >= rows]), or one per 128 x 128 block (BLK128x128, [row blocks][ld >= K
/// tiles]).
enum class Fp8ScaleLayout { OuterVec, Vec128, Blk128 };
/// Writes `scale` (f32, [] or [rows tiles, scaleCols], a tiling of an
/// operand [rows, k] whose row tiles span `rowTile` rows) into `dst` as
/// cuBLASLt's `layout` reads it, on ctx.stream; `ld` is the layout's
/// leading dimension. The tiling must be one the layout can express.
llvm::Error writeFp8Scales(const LaunchContext &ctx, const float *scale, int64_t scaleCols,
                           int64_t rowTile, int64_t rows, int64_t k,
                           Fp8ScaleLayout layout, float *dst, int64_t ld);
/// Whether the kernel loads its code at first use (cuBLASLt's GEMMs; a fusion
/// group's generated kernel, compiled and loaded at its first call), so the
/// backend runs it once before any step (Backend::prepareKernel).
bool loadsAtFirstUse(KernelId kernel);

// Each family registers its launchers (kernels/cuda/<Family>.cu).
void registerElementwiseKernels(KernelRegistry &registry);
void registerDataMovementKernels(KernelRegistry &registry);
void registerReductionKernels(KernelRegistry &registry);
void registerNormalizationKernels(KernelRegistry &registry);
void registerAttentionKernels(KernelRegistry &registry);
void registerLossKernels(KernelRegistry &registry);
void registerOptimizerKernels(KernelRegistry &registry);
void registerMatmulKernels(KernelRegistry &registry);
void registerFusedKernels(KernelRegistry &registry);
void registerFp8Kernels(KernelRegistry &registry);
void registerMoeKernels(KernelRegistry &registry);

//===----------------------------------------------------------------------===//
// Generated kernels (FusedKernels.cpp): nn.fused
//===----------------------------------------------------------------------===//

/// Compiles CUDA C++ `source` into a cubin for `arch` ("sm_90") with NVRTC,
/// opened at first use ($LOOM_NVRTC, else libnvrtc.so.<CUDA major>). Needs no
/// GPU. Errors are one line (the compile log's errors).
llvm::Expected<std::string> compileWithNvrtc(const std::string &source, const std::string &arch);
/// Why NVRTC cannot be opened here, or an empty string.
std::string nvrtcUnavailableReason();
/// What the fusion kernels of this process cost so far: kernels compiled
/// with NVRTC (and the seconds it took), kernels read from the disk cache.
struct FusedKernelStats {
  int64_t compiled = 0;
  int64_t diskHits = 0;
  double compileSeconds = 0;
};
FusedKernelStats fusedKernelStats();
/// Where compiled fusion kernels are kept: $LOOM_CACHE_DIR/kernels, else
/// $XDG_CACHE_HOME/loom/kernels, else ~/.cache/loom/kernels; empty with
/// LOOM_CACHE_DIR=off (nothing is kept on disk).
std::string fusedKernelCacheDirectory();
/// Forgets the compiled fusion kernels of this process, so the next call of
/// each reads the disk cache again (tests).
void forgetFusedKernels();

/// A CUDA error as an llvm::Error naming what failed.
llvm::Error cudaError(cudaError_t status, const char *what);

} // namespace loom::cuda

#endif
