#ifndef LOOM_KERNELS_CPU_KERNELSUPPORT_H
#define LOOM_KERNELS_CPU_KERNELSUPPORT_H

// Shared machinery of the CPU kernels (not part of the public interface):
// the call record, element access, static threading. The operand checks
// and errors are in OperandChecks.h, which the CUDA kernels share.

#include "kernels/cpu/CpuKernels.h"
#include "kernels/cpu/OperandChecks.h"
#include "runtime/support/FloatTypes.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string_view>
#include <cstring>
#include <type_traits>

namespace loom::cpu::detail {

struct KernelCall {
  std::string_view name;
  KernelId id;
  llvm::ArrayRef<Tensor> inputs;
  llvm::ArrayRef<Tensor> outputs;
  const KernelAttrs &attrs;
  const KernelContext &ctx;
};

using KernelFn = llvm::Error (*)(const KernelCall &call);

// One entry point per kernel family; each switches on call.id.
llvm::Error runUnary(const KernelCall &call);
llvm::Error runBinary(const KernelCall &call);
llvm::Error runCompare(const KernelCall &call);
llvm::Error runWhere(const KernelCall &call);
llvm::Error runCast(const KernelCall &call);
llvm::Error runDropout(const KernelCall &call);
llvm::Error runIota(const KernelCall &call);
llvm::Error runMatmul(const KernelCall &call);
llvm::Error runReduce(const KernelCall &call);
llvm::Error runSoftmax(const KernelCall &call);
llvm::Error runLayerNorm(const KernelCall &call);
llvm::Error runRmsNorm(const KernelCall &call);
llvm::Error runRope(const KernelCall &call);
llvm::Error runAttention(const KernelCall &call);
llvm::Error runAttentionWithStats(const KernelCall &call);
llvm::Error runEmbedding(const KernelCall &call);
llvm::Error runTranspose(const KernelCall &call);
llvm::Error runBroadcast(const KernelCall &call);
llvm::Error runSlice(const KernelCall &call);
llvm::Error runConcat(const KernelCall &call);
llvm::Error runSplit(const KernelCall &call);
llvm::Error runGather(const KernelCall &call);
llvm::Error runCrossEntropy(const KernelCall &call);
llvm::Error runLinearCrossEntropy(const KernelCall &call); // Loss.cpp
// The vocabulary-parallel cross-entropy (BlockLoss.cpp).
llvm::Error runCrossEntropyStats(const KernelCall &call);
llvm::Error runCrossEntropyCombine(const KernelCall &call);
llvm::Error runCrossEntropyBlockGrad(const KernelCall &call);
// Backward kernels (Kernels.def's last section).
llvm::Error runActivationGrad(const KernelCall &call); // gelu_grad, silu_grad
llvm::Error runNormGrad(const KernelCall &call);       // layer_norm_grad, rms_norm_grad
llvm::Error runAttentionGrad(const KernelCall &call);
llvm::Error runAttentionGradWithStats(const KernelCall &call);
llvm::Error runEmbeddingGrad(const KernelCall &call);
llvm::Error runGatherGrad(const KernelCall &call);
llvm::Error runCrossEntropyGrad(const KernelCall &call);
llvm::Error runPad(const KernelCall &call);
llvm::Error runAdamW(const KernelCall &call);
llvm::Error runScaledMatmul(const KernelCall &call);

llvm::Error runAdamWMulti(const KernelCall &call);
llvm::Error runSumSquaresMulti(const KernelCall &call); // Reduction.cpp
llvm::Error runCastMulti(const KernelCall &call);       // Elementwise.cpp
llvm::Error runSwiglu(const KernelCall &call);          // Elementwise.cpp
llvm::Error runSwigluGrad(const KernelCall &call);      // Elementwise.cpp
llvm::Error runQuantize(const KernelCall &call);        // Fp8.cpp
llvm::Error runDequantize(const KernelCall &call);      // Fp8.cpp
llvm::Error runAmax(const KernelCall &call);            // Fp8.cpp
llvm::Error runQuantizeTiles(const KernelCall &call);   // Fp8.cpp
llvm::Error runQuantizeTensor(const KernelCall &call);  // Fp8.cpp
llvm::Error runFp8Scale(const KernelCall &call);        // Fp8.cpp
llvm::Error runNormWeightGrad(const KernelCall &call);  // Normalization.cpp
llvm::Error runRouter(const KernelCall &call);          // Moe.cpp
llvm::Error runTopk(const KernelCall &call);            // Moe.cpp
llvm::Error runSort(const KernelCall &call);            // Moe.cpp
llvm::Error runGroupedMatmul(const KernelCall &call);   // Moe.cpp
llvm::Error runGroupedMatmulWeightGrad(const KernelCall &call); // Moe.cpp
// nn.fused: the body's members one by one (Fused.cpp).
llvm::Error runFused(const KernelCall &call);

/// Calls body(begin, end) over [0, count) split into contiguous chunks, on up
/// to ctx.numThreads threads; uses one thread when count * costPerItem is
/// small. Chunks never change what an item computes, only who computes it.
void parallelFor(const KernelContext &ctx, int64_t count, int64_t costPerItem,
                 llvm::function_ref<void(int64_t begin, int64_t end)> body);

/// Walks output positions [begin, end) of `shape`, tracking one offset per
/// stride vector (each with one stride per dim of `shape`).
template <int N> class StridedWalker {
public:
  StridedWalker(llvm::ArrayRef<int64_t> shape,
                std::array<const int64_t *, N> strides, int64_t start)
      : shape_(shape), index_(shape.size(), 0), strides_(strides) {
    for (int s = 0; s < N; ++s)
      offsets_[s] = 0;
    int64_t remaining = start;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (shape[d] == 0)
        return;
      index_[d] = remaining % shape[d];
      remaining /= shape[d];
      for (int s = 0; s < N; ++s)
        offsets_[s] += index_[d] * strides_[s][d];
    }
  }
  int64_t offset(int s) const { return offsets_[s]; }
  void next() {
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 1; d >= 0; --d) {
      for (int s = 0; s < N; ++s)
        offsets_[s] += strides_[s][d];
      if (++index_[d] < shape_[d])
        return;
      for (int s = 0; s < N; ++s)
        offsets_[s] -= index_[d] * strides_[s][d];
      index_[d] = 0;
    }
  }

private:
  llvm::ArrayRef<int64_t> shape_;
  std::vector<int64_t> index_;
  std::array<const int64_t *, N> strides_;
  int64_t offsets_[N];
};

/// Integer element access: i64, i32 and i1 (any nonzero byte is 1).
int64_t loadInt(const void *data, DType type, int64_t index);
/// i32 wraps (two's complement), i1 stores value != 0.
void storeInt(void *data, DType type, int64_t index, int64_t value);
inline bool isIntLike(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I1;
}

/// The dtype whose storage is T (f32 for float, f64 for double, i64 for
/// int64_t).
template <typename T> constexpr DType nativeDType() {
  if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::F64;
  else
    return DType::I64;
}

template <typename T> T loadElement(const void *data, DType type, int64_t i) {
  if constexpr (std::is_same_v<T, float>)
    return loadAsFloat(data, type, i);
  else if constexpr (std::is_same_v<T, double>)
    return loadAsDouble(data, type, i);
  else
    return loadInt(data, type, i);
}
template <typename T> void storeElement(void *data, DType type, int64_t i, T v) {
  if constexpr (std::is_same_v<T, float>)
    storeFromFloat(data, type, i, v);
  else if constexpr (std::is_same_v<T, double>)
    storeFromDouble(data, type, i, v);
  else
    storeInt(data, type, i, v);
}

/// An input's elements as a contiguous T array: borrowed when the tensor
/// already stores T, converted (exactly, for floats to f32) otherwise.
template <typename T> class InputArray {
public:
  explicit InputArray(const Tensor &tensor) {
    if (tensor.dtype == nativeDType<T>()) {
      ptr_ = static_cast<const T *>(tensor.data);
      return;
    }
    const int64_t count = tensor.numElements();
    storage_.resize(count);
    if constexpr (std::is_same_v<T, float>)
      loadFloats(tensor.data, tensor.dtype, 0, count, storage_.data());
    else
      for (int64_t i = 0; i < count; ++i)
        storage_[i] = loadElement<T>(tensor.data, tensor.dtype, i);
    ptr_ = storage_.data();
  }
  InputArray(const InputArray &) = delete; // ptr_ may point into storage_
  InputArray &operator=(const InputArray &) = delete;
  const T *data() const { return ptr_; }
  const T &operator[](int64_t i) const { return ptr_[i]; }

private:
  const T *ptr_ = nullptr;
  std::vector<T> storage_;
};

/// An output as a T array: the tensor's own memory when it stores T, else a
/// scratch array that commit() rounds into the tensor.
template <typename T> class OutputArray {
public:
  explicit OutputArray(const Tensor &tensor) : tensor_(tensor) {
    if (tensor.dtype == nativeDType<T>()) {
      ptr_ = static_cast<T *>(tensor.data);
    } else {
      storage_.resize(tensor.numElements());
      ptr_ = storage_.data();
    }
  }
  OutputArray(const OutputArray &) = delete; // ptr_ may point into storage_
  OutputArray &operator=(const OutputArray &) = delete;
  T *data() { return ptr_; }
  T &operator[](int64_t i) { return ptr_[i]; }
  void commit() {
    if (storage_.empty())
      return;
    if constexpr (std::is_same_v<T, float>)
      storeFloats(tensor_.data, tensor_.dtype, 0, storage_.size(), storage_.data());
    else
      for (size_t i = 0; i < storage_.size(); ++i)
        storeElement<T>(tensor_.data, tensor_.dtype, i, storage_[i]);
  }

private:
  const Tensor &tensor_;
  T *ptr_ = nullptr;
  std::vector<T> storage_;
};

/// Calls fn(T{}) with T = double for f64, float for the other float types;
/// an error for integer types.
template <typename Fn> llvm::Error dispatchFloat(DType type, const char *role, Fn &&fn) {
  if (type == DType::F64)
    return fn(double{});
  if (isFloat(type))
    return fn(float{});
  return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(type) + " for " +
                     role + " (a float type is required)");
}

/// A row's softmax normalizer in double: its largest value and the sum of
/// exp(x - largest), each in element order.
struct RowLogSumExp {
  double max, sum;
};
template <typename T> RowLogSumExp rowLogSumExp(const T *row, int64_t n) {
  RowLogSumExp out{-std::numeric_limits<double>::infinity(), 0.0};
  for (int64_t c = 0; c < n; ++c)
    out.max = std::max(out.max, static_cast<double>(row[c]));
  for (int64_t c = 0; c < n; ++c)
    out.sum += std::exp(static_cast<double>(row[c]) - out.max);
  return out;
}

/// The rows of `labels` that are not `ignoreIndex`, or an error naming the
/// first label outside [0, classes) that is not.
inline llvm::Expected<int64_t> countLabels(const Tensor &labels, int64_t rows, int64_t classes,
                                           int64_t ignoreIndex) {
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t label = loadInt(labels.data, labels.dtype, r);
    if (label == ignoreIndex)
      continue;
    if (label < 0 || label >= classes)
      return kernelError("label " + llvm::Twine(label) + " of row " + llvm::Twine(r) +
                         " is outside [0, " + llvm::Twine(classes) +
                         ") and is not ignore_index " + llvm::Twine(ignoreIndex));
    ++counted;
  }
  return counted;
}

/// The weight of row r in a cross-entropy's gradient: the loss gradient
/// over the counted rows (mean), the loss gradient (sum), or row r's own
/// (none).
struct LossRowWeight {
  const float *upstream;
  std::string_view reduction;
  int64_t counted;
  double operator()(int64_t r) const {
    if (reduction == "none")
      return upstream[r];
    if (reduction == "sum")
      return upstream[0];
    return counted == 0 ? 0.0 : upstream[0] / static_cast<double>(counted);
  }
};

} // namespace loom::cpu::detail

#endif
