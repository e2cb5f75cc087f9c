#ifndef LOOM_KERNELS_CPU_CPUKERNELS_H
#define LOOM_KERNELS_CPU_CPUKERNELS_H

// The CPU reference kernels: every kernel of runtime/abi/Kernels.def,
// dispatched by name. Plain C++17; no LLVM library is needed beyond the
// llvm::Error/ArrayRef headers and LLVMSupport at link time.
//
// Numerics (the contract the CUDA kernels are compared against):
//  - f32/f64 tensors compute in their own precision; bf16, f16 and the f8
//    types load to f32, compute in f32 and round to nearest even on store.
//  - nn.matmul accumulates in the compute type (f32 for all but f64), in
//    increasing k order for every output element.
//  - Everything else that reduces (reduce_sum/mean, softmax, log_softmax,
//    layer_norm, rms_norm, attention, attention_with_stats, cross_entropy,
//    and the backward kernels layer_norm_grad, rms_norm_grad,
//    attention_grad, attention_grad_with_stats, cross_entropy_grad,
//    embedding_grad, gather_grad) accumulates in double and rounds once on
//    store; gelu_grad and silu_grad compute in the compute type.
//  - Results are bitwise identical for any KernelContext::numThreads: work is
//    split into fixed chunks, each output element is computed by one thread,
//    and the order of every accumulation is fixed.
//  - Float -> integer casts truncate toward zero, saturate, and map NaN to 0.
//
// Tensors are contiguous row-major; inputs are only read. An output may be
// the very buffer of an input of the same shape and dtype in the elementwise
// kernels (unary, binary, where, cast, dropout, gelu_grad, silu_grad), the
// norms and their gradients, softmax/log_softmax and rope; elsewhere outputs
// must not overlap inputs.

#include "runtime/abi/KernelAttrs.h"
#include "runtime/abi/KernelList.h"
#include "runtime/abi/DType.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::cpu {

struct Tensor {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  /// Product of the dims (1 for a scalar).
  int64_t numElements() const;
  size_t sizeInBytes() const;
};

/// A kernel's attributes, looked up by name. Getters return the value, the
/// default when the attribute is absent and a default is given, and an error
/// naming the attribute when it is absent without default or of another type.
/// Integers are accepted where an f64 is asked for.
class KernelAttrs {
public:
  KernelAttrs() = default;
  explicit KernelAttrs(std::vector<NamedAttr> attrs);

  /// Adds or replaces `name`; returns *this so calls chain.
  KernelAttrs &set(std::string name, AttrValue value);
  const AttrValue *find(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != nullptr; }

  llvm::Expected<int64_t> getInt(std::string_view name,
                                 std::optional<int64_t> dflt = std::nullopt) const;
  /// An int attribute that must be 0 or 1.
  llvm::Expected<bool> getBool(std::string_view name,
                               std::optional<bool> dflt = std::nullopt) const;
  llvm::Expected<double> getF64(std::string_view name,
                                std::optional<double> dflt = std::nullopt) const;
  llvm::Expected<std::string>
  getStr(std::string_view name, std::optional<std::string> dflt = std::nullopt) const;
  llvm::Expected<std::vector<int64_t>>
  getInts(std::string_view name,
          std::optional<std::vector<int64_t>> dflt = std::nullopt) const;
  llvm::Expected<std::vector<double>>
  getF64List(std::string_view name,
             std::optional<std::vector<double>> dflt = std::nullopt) const;

  const std::vector<NamedAttr> &all() const { return attrs_; }

private:
  std::vector<NamedAttr> attrs_;
};

struct KernelContext {
  /// Threads a kernel may use (>= 1). Kernels start std::threads only when
  /// the work is large enough to pay for them.
  int numThreads = 1;
};

/// Runs kernel `name` (e.g. "nn.matmul") reading `inputs` and writing
/// `outputs`, whose shapes and dtypes must already be the results'. Returns
/// an error naming the kernel and the problem for an unknown kernel, a wrong
/// number of operands, an unsupported dtype, inconsistent shapes, a bad
/// attribute or out-of-range indices; it never crashes on such input.
llvm::Error runKernel(std::string_view name, llvm::ArrayRef<Tensor> inputs,
                      llvm::ArrayRef<Tensor> outputs, const KernelAttrs &attrs,
                      const KernelContext &ctx = KernelContext());
/// The same for a kernel already resolved (runtime/abi/KernelList.h): what
/// the runtime calls, indexing a table instead of comparing names.
llvm::Error runKernel(KernelId id, llvm::ArrayRef<Tensor> inputs,
                      llvm::ArrayRef<Tensor> outputs, const KernelAttrs &attrs,
                      const KernelContext &ctx = KernelContext());

/// Whether runKernel implements `name`.
bool hasKernel(std::string_view name);
/// Every implemented kernel name, in Kernels.def order (KernelId order).
std::vector<std::string_view> kernelNames();

/// SplitMix64's finalizer (Steele, Lea, Flood 2014), used as a counter-based
/// hash.
inline uint64_t splitMix64(uint64_t state) {
  uint64_t z = state + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// nn.dropout's uniform draw for element `index` (the row-major linear index
/// into the input) under `seed`: the top 24 bits of
/// splitMix64(splitMix64(seed) + index), scaled to [0, 1). Exact in f32, so
/// any device reproduces it bit for bit. An element is kept when
/// dropoutUniform(seed, index) >= p, compared in double, and then scaled by
/// 1/(1-p) (computed in double, rounded to the compute type).
inline float dropoutUniform(uint64_t seed, uint64_t index) {
  const uint64_t hash = splitMix64(splitMix64(seed) + index);
  return static_cast<float>(hash >> 40) * (1.0f / 16777216.0f);
}

} // namespace loom::cpu

#endif
