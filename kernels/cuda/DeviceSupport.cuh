#ifndef LOOM_KERNELS_CUDA_DEVICESUPPORT_CUH
#define LOOM_KERNELS_CUDA_DEVICESUPPORT_CUH

// Shared machinery of the CUDA kernel families (not part of the public
// interface): element formats ported bit for bit from
// runtime/support/FloatTypes.cpp, per-dtype element traits, strided index
// maps with merged dims, and launch helpers. Device arithmetic that must match
// the CPU reference to the bit uses the explicitly rounded intrinsics
// (__fmul_rn, ...) so that nvcc never contracts it into an FMA. The row
// kernels' helpers (softmax, norms, losses: f32/bf16/f16 as CUDA types, warp
// and block reductions) are here too, so every .cu file shares one header.
// Operand checks are not: they are kernels/cpu/OperandChecks.h, which the CPU
// kernels share.

#include "kernels/cpu/OperandChecks.h"
#include "kernels/cuda/CudaKernels.h"
#include "runtime/support/FloatTypes.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <array>
#include <climits>

#include <cstdint>
#include <type_traits>

namespace loom::cuda {

using cpu::Tensor;
using cpu::detail::kernelError;

namespace dev {

//===----------------------------------------------------------------------===//
// Narrow float formats (ports of FloatTypes.cpp)
//===----------------------------------------------------------------------===//

template <typename Wide> struct WideFormat;
template <> struct WideFormat<float> {
  using Bits = uint32_t;
  static constexpr int kManBits = 23;
  static constexpr int kExpBits = 8;
  static constexpr int kBias = 127;
  __device__ static Bits bits(float v) { return __float_as_uint(v); }
  __device__ static int leadingBit(Bits m) { return 31 - __clz(static_cast<int>(m)); }
};
template <> struct WideFormat<double> {
  using Bits = uint64_t;
  static constexpr int kManBits = 52;
  static constexpr int kExpBits = 11;
  static constexpr int kBias = 1023;
  __device__ static Bits bits(double v) {
    return static_cast<uint64_t>(__double_as_longlong(v));
  }
  __device__ static int leadingBit(Bits m) {
    return 63 - __clzll(static_cast<long long>(m));
  }
};

/// narrowFrom of FloatTypes.cpp: rounds to the ExpBits/ManBits format, to
/// nearest even; HasInf=false is the "FN" encoding (overflow becomes NaN).
template <int ExpBits, int ManBits, bool HasInf, typename Wide>
__device__ uint32_t narrowFrom(Wide value) {
  using Fmt = WideFormat<Wide>;
  using Bits = typename Fmt::Bits;
  constexpr uint32_t kExpAllOnes = (1u << ExpBits) - 1;
  constexpr uint32_t kManMask = (1u << ManBits) - 1;
  constexpr int kBias = (1 << (ExpBits - 1)) - 1;
  constexpr int kMinNormalExp = 1 - kBias;
  constexpr int kWideBits = 1 + Fmt::kExpBits + Fmt::kManBits;

  const Bits bits = Fmt::bits(value);
  const uint32_t signOut = static_cast<uint32_t>(bits >> (kWideBits - 1))
                           << (ExpBits + ManBits);
  const uint32_t nanOrOverflowFN = signOut | (kExpAllOnes << ManBits) | kManMask;
  const Bits absBits = bits & ((Bits(1) << (kWideBits - 1)) - 1);
  const int wideExp = static_cast<int>(absBits >> Fmt::kManBits);
  const Bits wideMan = absBits & ((Bits(1) << Fmt::kManBits) - 1);

  if (wideExp == (1 << Fmt::kExpBits) - 1) {
    if (!HasInf)
      return nanOrOverflowFN;
    if (wideMan == 0)
      return signOut | (kExpAllOnes << ManBits);
    uint32_t payload = static_cast<uint32_t>(wideMan >> (Fmt::kManBits - ManBits));
    if (payload == 0)
      payload = 1u << (ManBits - 1);
    return signOut | (kExpAllOnes << ManBits) | payload;
  }
  if (absBits == 0)
    return signOut;

  Bits mant;
  int exp2;
  if (wideExp == 0) {
    mant = wideMan;
    exp2 = 1 - Fmt::kBias;
  } else {
    mant = wideMan | (Bits(1) << Fmt::kManBits);
    exp2 = wideExp - Fmt::kBias;
  }
  const int leadingBit = Fmt::leadingBit(mant);
  const int valueExp = exp2 - Fmt::kManBits + leadingBit;
  int ulpExp = (valueExp > kMinNormalExp ? valueExp : kMinNormalExp) - ManBits;
  const int shift = ulpExp - (exp2 - Fmt::kManBits);
  if (shift > Fmt::kManBits + 1)
    return signOut;
  uint64_t rounded = static_cast<uint64_t>(mant >> shift);
  const Bits remainder = mant & ((Bits(1) << shift) - 1);
  const Bits half = Bits(1) << (shift - 1);
  if (remainder > half || (remainder == half && (rounded & 1)))
    ++rounded;
  if (rounded == 0)
    return signOut;
  if (rounded >> (ManBits + 1)) {
    rounded >>= 1;
    ++ulpExp;
  }
  int biased;
  uint32_t manField;
  if (rounded < (1u << ManBits)) {
    biased = 0;
    manField = static_cast<uint32_t>(rounded);
  } else {
    biased = ulpExp + ManBits + kBias;
    manField = static_cast<uint32_t>(rounded) & kManMask;
  }
  if (HasInf) {
    if (biased >= static_cast<int>(kExpAllOnes))
      return signOut | (kExpAllOnes << ManBits);
  } else if (biased > static_cast<int>(kExpAllOnes) ||
             (biased == static_cast<int>(kExpAllOnes) && manField == kManMask)) {
    return nanOrOverflowFN;
  }
  return signOut | (static_cast<uint32_t>(biased) << ManBits) | manField;
}

/// narrowToFloat of FloatTypes.cpp: exact widening (every format but bf16).
template <int ExpBits, int ManBits, bool HasInf>
__device__ float narrowToFloat(uint32_t bits) {
  constexpr uint32_t kExpAllOnes = (1u << ExpBits) - 1;
  constexpr uint32_t kManMask = (1u << ManBits) - 1;
  constexpr int kBias = (1 << (ExpBits - 1)) - 1;
  constexpr int kMinNormalExp = 1 - kBias;
  const uint32_t sign = (bits >> (ExpBits + ManBits)) & 1;
  const uint32_t exp = (bits >> ManBits) & kExpAllOnes;
  const uint32_t man = bits & kManMask;
  uint32_t out = sign << 31;
  if (exp == kExpAllOnes && (HasInf || man == kManMask)) {
    out |= 0x7F800000u | (man << (23 - ManBits));
  } else if (exp == 0) {
    if (man != 0) {
      const int leadingBit = 31 - __clz(static_cast<int>(man));
      const int valueExp = kMinNormalExp - ManBits + leadingBit;
      out |= static_cast<uint32_t>(valueExp + 127) << 23 |
             ((man << (23 - leadingBit)) & 0x7FFFFFu);
    }
  } else {
    out |= static_cast<uint32_t>(static_cast<int>(exp) - kBias + 127) << 23 |
           man << (23 - ManBits);
  }
  return __uint_as_float(out);
}

__device__ __forceinline__ float bf16ToFloat(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}
/// floatToBf16 of FloatTypes.cpp (RNE as an add on the raw bits).
__device__ __forceinline__ uint16_t floatToBf16(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    const uint16_t narrowed = static_cast<uint16_t>(bits >> 16);
    return (narrowed & 0x7F) ? narrowed : static_cast<uint16_t>(narrowed | 0x40);
  }
  const uint32_t roundingBias = 0x7FFFu + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

/// saturatingTruncate of FloatTypes.cpp: NaN -> 0, saturating at the range.
template <typename Int> __device__ __forceinline__ Int saturatingTruncate(double value) {
  static_assert(std::is_same_v<Int, int64_t> || std::is_same_v<Int, int32_t>);
  constexpr double kUpper = sizeof(Int) == 8 ? 9223372036854775808.0 : 2147483648.0;
  constexpr Int kMax = sizeof(Int) == 8 ? Int(INT64_MAX) : Int(INT32_MAX);
  constexpr Int kMin = sizeof(Int) == 8 ? Int(INT64_MIN) : Int(INT32_MIN);
  if (value != value)
    return 0;
  if (value >= kUpper)
    return kMax;
  if (value <= -kUpper)
    return kMin;
  return static_cast<Int>(value);
}

//===----------------------------------------------------------------------===//
// Element traits: storage type, compute type, conversions (as FloatTypes.h)
//===----------------------------------------------------------------------===//

/// Per dtype: Storage (the bytes), Compute (f32 for the narrow floats, f64
/// for f64, int64 for the integers), load/store between the two (rounding to
/// nearest even on store), and loadDouble/storeDouble (loadAsDouble and
/// storeFromDouble of FloatTypes.h).
template <DType D> struct Elem;

template <> struct Elem<DType::F32> {
  using Storage = float;
  using Compute = float;
  __device__ static float load(float s) { return s; }
  __device__ static float store(float v) { return v; }
  __device__ static double loadDouble(float s) { return s; }
  __device__ static float storeDouble(double v) { return static_cast<float>(v); }
};
template <> struct Elem<DType::F64> {
  using Storage = double;
  using Compute = double;
  __device__ static double load(double s) { return s; }
  __device__ static double store(double v) { return v; }
  __device__ static double loadDouble(double s) { return s; }
  __device__ static double storeDouble(double v) { return v; }
};
template <> struct Elem<DType::BF16> {
  using Storage = uint16_t;
  using Compute = float;
  __device__ static float load(uint16_t s) { return bf16ToFloat(s); }
  __device__ static uint16_t store(float v) { return floatToBf16(v); }
  __device__ static double loadDouble(uint16_t s) { return bf16ToFloat(s); }
  __device__ static uint16_t storeDouble(double v) {
    return static_cast<uint16_t>(narrowFrom<8, 7, true>(v));
  }
};
template <> struct Elem<DType::F16> {
  using Storage = uint16_t;
  using Compute = float;
  __device__ static float load(uint16_t s) { return narrowToFloat<5, 10, true>(s); }
  __device__ static uint16_t store(float v) {
    return static_cast<uint16_t>(narrowFrom<5, 10, true>(v));
  }
  __device__ static double loadDouble(uint16_t s) { return load(s); }
  __device__ static uint16_t storeDouble(double v) {
    return static_cast<uint16_t>(narrowFrom<5, 10, true>(v));
  }
};
/// A finite value within an FP8 format's range through the hardware's
/// conversion (round to nearest even, as narrowFrom); NaN, infinities and
/// overflow through narrowFrom, whose encodings the CPU reference shares.
template <int ExpBits, int ManBits, bool HasInf>
__device__ __forceinline__ uint8_t storeFp8(float v, float largest, __nv_fp8_interpretation_t kind) {
  if (fabsf(v) <= largest)
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, kind));
  return static_cast<uint8_t>(narrowFrom<ExpBits, ManBits, HasInf>(v));
}

template <> struct Elem<DType::F8E4M3FN> {
  using Storage = uint8_t;
  using Compute = float;
  __device__ static float load(uint8_t s) { return narrowToFloat<4, 3, false>(s); }
  __device__ static uint8_t store(float v) { return storeFp8<4, 3, false>(v, 448.f, __NV_E4M3); }
  __device__ static double loadDouble(uint8_t s) { return load(s); }
  __device__ static uint8_t storeDouble(double v) {
    return static_cast<uint8_t>(narrowFrom<4, 3, false>(v));
  }
};
template <> struct Elem<DType::F8E5M2> {
  using Storage = uint8_t;
  using Compute = float;
  __device__ static float load(uint8_t s) { return narrowToFloat<5, 2, true>(s); }
  __device__ static uint8_t store(float v) { return storeFp8<5, 2, true>(v, 57344.f, __NV_E5M2); }
  __device__ static double loadDouble(uint8_t s) { return load(s); }
  __device__ static uint8_t storeDouble(double v) {
    return static_cast<uint8_t>(narrowFrom<5, 2, true>(v));
  }
};
template <> struct Elem<DType::I64> {
  using Storage = int64_t;
  using Compute = int64_t;
  __device__ static int64_t load(int64_t s) { return s; }
  __device__ static int64_t store(int64_t v) { return v; }
  __device__ static double loadDouble(int64_t s) { return static_cast<double>(s); }
  __device__ static int64_t storeDouble(double v) { return saturatingTruncate<int64_t>(v); }
};
template <> struct Elem<DType::I32> {
  using Storage = int32_t;
  using Compute = int64_t;
  __device__ static int64_t load(int32_t s) { return s; }
  // Wraps (two's complement), as storeInt does.
  __device__ static int32_t store(int64_t v) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
  }
  __device__ static double loadDouble(int32_t s) { return s; }
  __device__ static int32_t storeDouble(double v) { return saturatingTruncate<int32_t>(v); }
};
template <> struct Elem<DType::I1> {
  using Storage = uint8_t;
  using Compute = int64_t;
  __device__ static int64_t load(uint8_t s) { return s != 0; }
  __device__ static uint8_t store(int64_t v) { return v != 0; }
  __device__ static double loadDouble(uint8_t s) { return s != 0 ? 1.0 : 0.0; }
  __device__ static uint8_t storeDouble(double v) { return v != 0.0; }
};

constexpr bool isIntDType(DType d) {
  return d == DType::I64 || d == DType::I32 || d == DType::I1;
}

//===----------------------------------------------------------------------===//
// Arithmetic that is never contracted into an FMA
//===----------------------------------------------------------------------===//

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }

// The math library by precision (never the fast intrinsics).
__device__ __forceinline__ float mexp(float x) { return expf(x); }
__device__ __forceinline__ double mexp(double x) { return exp(x); }
__device__ __forceinline__ float mlog(float x) { return logf(x); }
__device__ __forceinline__ double mlog(double x) { return log(x); }
__device__ __forceinline__ float msqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double msqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float mtanh(float x) { return tanhf(x); }
__device__ __forceinline__ double mtanh(double x) { return tanh(x); }
__device__ __forceinline__ float merf(float x) { return erff(x); }
__device__ __forceinline__ double merf(double x) { return erf(x); }
__device__ __forceinline__ float mpow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double mpow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float mfabs(float x) { return fabsf(x); }
__device__ __forceinline__ double mfabs(double x) { return fabs(x); }

//===----------------------------------------------------------------------===//
// Vectors and the dropout hash
//===----------------------------------------------------------------------===//

/// V elements of T loaded or stored as one access of at most 16 bytes (larger
/// vectors become several 16-byte accesses).
template <typename T, int V>
struct alignas(sizeof(T) * V >= 16 ? 16 : sizeof(T) * V) Vec {
  T v[V];
};

/// splitMix64 and dropoutUniform of kernels/cpu/CpuKernels.h.
__device__ __forceinline__ uint64_t splitMix64(uint64_t state) {
  uint64_t z = state + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ float dropoutUniform(uint64_t seedHash, uint64_t index) {
  // seedHash = splitMix64(seed), hoisted out of the loop.
  const uint64_t hash = splitMix64(seedHash + index);
  return __fmul_rn(static_cast<float>(hash >> 40), 1.0f / 16777216.0f);
}

} // namespace dev

template <DType D> using StorageOf = typename dev::Elem<D>::Storage;
template <DType D> using ComputeOf = typename dev::Elem<D>::Compute;

//===----------------------------------------------------------------------===//
// Strided index maps
//===----------------------------------------------------------------------===//

/// Dims a strided map may keep after merging; a tensor of higher rank whose
/// dims do not merge is rejected on the host.
constexpr int kMaxRank = 10;

/// N offsets into row-major operands as functions of the linear index of a
/// walk over `shape` (row-major). Dims of size 1 are dropped and neighbours
/// that every operand steps through contiguously are merged.
template <int N> struct StridedMap {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[N][kMaxRank] = {};
};

/// Builds the map of `shape` with one stride vector per operand (each with one
/// entry per dim of `shape`).
template <int N>
llvm::Expected<StridedMap<N>> makeStridedMap(llvm::ArrayRef<int64_t> shape,
                                             std::array<llvm::ArrayRef<int64_t>, N> strides) {
  StridedMap<N> map;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    if (map.rank > 0) {
      const int last = map.rank - 1;
      bool mergeable = true;
      for (int s = 0; s < N; ++s)
        mergeable = mergeable && strides[s][d] * shape[d] == map.strides[s][last];
      if (mergeable) {
        map.shape[last] *= shape[d];
        for (int s = 0; s < N; ++s)
          map.strides[s][last] = strides[s][d];
        continue;
      }
    }
    if (map.rank == kMaxRank)
      return kernelError("shape " + cpu::detail::shapeToString(shape) + " has more than " +
                         llvm::Twine(kMaxRank) + " dims that do not merge");
    map.shape[map.rank] = shape[d];
    for (int s = 0; s < N; ++s)
      map.strides[s][map.rank] = strides[s][d];
    ++map.rank;
  }
  return map;
}

/// Whether every offset and linear index of a walk of `count` positions fits
/// 32-bit unsigned arithmetic (with room for a grid stride).
template <int N> bool fitsIn32Bits(const StridedMap<N> &map, int64_t count) {
  constexpr int64_t kLimit = int64_t(1) << 31;
  if (count >= kLimit)
    return false;
  for (int s = 0; s < N; ++s) {
    int64_t extent = 0;
    for (int d = 0; d < map.rank; ++d)
      extent += (map.shape[d] - 1) * map.strides[s][d];
    if (extent >= kLimit)
      return false;
  }
  return true;
}

/// The N offsets of position `linear`. The outermost dim needs no division.
template <typename Index, int N>
__device__ __forceinline__ void stridedOffsets(const StridedMap<N> &map, Index linear,
                                               Index (&offsets)[N]) {
#pragma unroll
  for (int s = 0; s < N; ++s)
    offsets[s] = 0;
  for (int d = map.rank - 1; d >= 0; --d) {
    Index index;
    if (d > 0) {
      const Index size = static_cast<Index>(map.shape[d]);
      index = linear % size;
      linear /= size;
    } else {
      index = linear;
    }
#pragma unroll
    for (int s = 0; s < N; ++s)
      offsets[s] += index * static_cast<Index>(map.strides[s][d]);
  }
}

//===----------------------------------------------------------------------===//
// Host-side helpers
//===----------------------------------------------------------------------===//

constexpr int kBlockSize = 256;

/// Blocks for a grid-stride loop over `work` items: enough to fill the GPU a
/// few times over, never more than the items need.
inline unsigned gridFor(int64_t work, const LaunchContext &ctx, int blockSize = kBlockSize) {
  const int64_t needed = (work + blockSize - 1) / blockSize;
  const int64_t cap = static_cast<int64_t>(ctx.multiprocessors > 0 ? ctx.multiprocessors : 132) *
                      (2048 / blockSize) * 4;
  const int64_t blocks = needed < cap ? needed : cap;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

inline bool isAligned(const void *ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

/// Checks the operand counts (launchKernel does not; the message is the CPU
/// registry's) and every tensor.
inline llvm::Error checkOperands(const KernelCall &call, size_t minInputs, size_t maxInputs,
                                 size_t minOutputs, size_t maxOutputs) {
  auto range = [](size_t lo, size_t hi) {
    return lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi);
  };
  if (call.inputs.size() < minInputs || call.inputs.size() > maxInputs)
    return kernelError("takes " + range(minInputs, maxInputs) + " inputs, got " +
                       llvm::Twine(call.inputs.size()));
  if (call.outputs.size() < minOutputs || call.outputs.size() > maxOutputs)
    return kernelError("produces " + range(minOutputs, maxOutputs) + " outputs, got " +
                       llvm::Twine(call.outputs.size()));
  for (size_t i = 0; i < call.inputs.size(); ++i)
    if (llvm::Error err = cpu::detail::checkTensor(call.inputs[i], "input"))
      return kernelError("input " + llvm::Twine(i) + ": " + llvm::toString(std::move(err)));
  for (size_t i = 0; i < call.outputs.size(); ++i)
    if (llvm::Error err = cpu::detail::checkTensor(call.outputs[i], "output"))
      return kernelError("output " + llvm::Twine(i) + ": " + llvm::toString(std::move(err)));
  return llvm::Error::success();
}

template <DType D> using DTypeTag = std::integral_constant<DType, D>;

/// Calls fn(DTypeTag<D>{}) for a float dtype; an error otherwise.
template <typename Fn> llvm::Error dispatchFloatDType(DType type, const char *role, Fn &&fn) {
  switch (type) {
  case DType::F32:
    return fn(DTypeTag<DType::F32>{});
  case DType::F64:
    return fn(DTypeTag<DType::F64>{});
  case DType::BF16:
    return fn(DTypeTag<DType::BF16>{});
  case DType::F16:
    return fn(DTypeTag<DType::F16>{});
  case DType::F8E4M3FN:
    return fn(DTypeTag<DType::F8E4M3FN>{});
  case DType::F8E5M2:
    return fn(DTypeTag<DType::F8E5M2>{});
  default:
    return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(type) + " for " + role +
                       " (a float type is required)");
  }
}

/// Calls fn(DTypeTag<D>{}) for any dtype.
template <typename Fn> llvm::Error dispatchAnyDType(DType type, Fn &&fn) {
  switch (type) {
  case DType::I64:
    return fn(DTypeTag<DType::I64>{});
  case DType::I32:
    return fn(DTypeTag<DType::I32>{});
  case DType::I1:
    return fn(DTypeTag<DType::I1>{});
  default:
    return dispatchFloatDType(type, "operand", std::forward<Fn>(fn));
  }
}

//===----------------------------------------------------------------------===//
// Row kernels (softmax, norms, cross-entropy): f32, bf16 and f16 as their CUDA
// types, G threads a row, warp and block reductions in a fixed order
//===----------------------------------------------------------------------===//

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float toF(float v) { return v; }
__device__ __forceinline__ float toF(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float toF(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T fromF(float v);
template <> __device__ __forceinline__ float fromF<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 fromF<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half fromF<__half>(float v) {
  return __float2half_rn(v);
}

/// A running (max, sum of exp(x - max)) pair: online softmax statistics.
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ MaxSum mergeMaxSum(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) // both empty
    return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ void addToMaxSum(MaxSum &a, float x) {
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.f;
    a.m = x;
  } else if (x != -INFINITY) { // -inf adds nothing (and -inf - -inf is NaN)
    a.s += expf(x - a.m);
  }
}

__device__ __forceinline__ float shflXor(float v, int o) {
  return __shfl_xor_sync(kFullMask, v, o);
}
__device__ __forceinline__ double shflXor(double v, int o) {
  return __shfl_xor_sync(kFullMask, v, o);
}
__device__ __forceinline__ long long shflXor(long long v, int o) {
  return __shfl_xor_sync(kFullMask, v, o);
}
__device__ __forceinline__ MaxSum shflXor(MaxSum v, int o) {
  return {shflXor(v.m, o), shflXor(v.s, o)};
}

struct SumOp {
  template <typename V> __device__ V operator()(V a, V b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MaxSumOp {
  __device__ MaxSum operator()(MaxSum a, MaxSum b) const { return mergeMaxSum(a, b); }
};

/// Reduces v over the G consecutive threads that own one row (G a multiple
/// of 32 dividing blockDim.x, or G = 32). Every thread of the block must call
/// it (it synchronizes the block when G > 32); every thread of the group gets
/// the same, bitwise identical result (the butterfly combines the same pairs
/// in both partners, and the cross-warp step runs in a fixed order).
template <int G, typename V, typename Op>
__device__ __forceinline__ V groupReduce(V v, V *smem, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, shflXor(v, o));
  if constexpr (G > 32) {
    const int warp = threadIdx.x >> 5;
    __syncthreads(); // the previous call's readers are done with smem
    if ((threadIdx.x & 31) == 0)
      smem[warp] = v;
    __syncthreads();
    const int first = (threadIdx.x / G) * (G / 32);
    v = smem[first];
#pragma unroll
    for (int w = 1; w < G / 32; ++w)
      v = op(v, smem[first + w]);
  }
  return v;
}

/// Reduces v over the 16 lanes of a half warp (lanes 0-15 or 16-31).
template <typename V, typename Op> __device__ __forceinline__ V halfWarpReduce(V v, Op op) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1)
    v = op(v, shflXor(v, o));
  return v;
}

constexpr int cacheSlots(int k) { return k > 0 ? k : 1; }

/// Loads the row elements a thread owns (j = lane + k*G) into registers; K = 0
/// caches nothing (the row is read from global memory on every pass).
template <int G, int K, typename T>
__device__ __forceinline__ void loadRowCache(const T *row, int n, int lane,
                                             float (&cache)[cacheSlots(K)]) {
  if constexpr (K > 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = lane + k * G;
      cache[k] = j < n ? toF(row[j]) : 0.f;
    }
  }
}

/// Calls f(j, row[j]) for the elements j < n a thread owns, from the cache
/// when K > 0.
template <int G, int K, typename T, typename F>
__device__ __forceinline__ void forRow(const T *row, int n, int lane,
                                       const float (&cache)[cacheSlots(K)], F &&f) {
  if constexpr (K > 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = lane + k * G;
      if (j < n)
        f(j, cache[k]);
    }
  } else {
    for (int j = lane; j < n; j += G)
      f(j, toF(row[j]));
  }
}

/// 16 bytes of T, the unit of the vectorized row kernels.
template <typename T> struct alignas(16) Pack16 {
  static constexpr int kWidth = 16 / sizeof(T);
  T v[kWidth];
};

template <typename T> struct TypeTag {
  using type = T;
};

/// Calls fn(TypeTag<T>{}) with T the device type of an f32, bf16 or f16
/// tensor; an error for other dtypes.
template <typename Fn> llvm::Error dispatchType(DType type, const char *role, Fn &&fn) {
  switch (type) {
  case DType::F32:
    return fn(TypeTag<float>{});
  case DType::BF16:
    return fn(TypeTag<__nv_bfloat16>{});
  case DType::F16:
    return fn(TypeTag<__half>{});
  default:
    return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(type) + " for " + role +
                       " (the CUDA kernels take f32, bf16 or f16)");
  }
}

template <typename Fn> llvm::Error dispatchLabels(DType type, Fn &&fn) {
  switch (type) {
  case DType::I32:
    return fn(TypeTag<int32_t>{});
  case DType::I64:
    return fn(TypeTag<int64_t>{});
  default:
    return kernelError(llvm::Twine("labels dtype is ") + dtypeName(type) +
                       ", expected i32 or i64");
  }
}

inline llvm::Error checkFitsInt(int64_t value, const char *what) {
  if (value > INT_MAX)
    return kernelError(llvm::Twine(what) + " " + llvm::Twine(value) +
                       " is too large for the CUDA kernel");
  return llvm::Error::success();
}

/// Threads per row (G) and elements cached in registers per thread (K) of the
/// row kernels, by row length.
template <int G_, int K_> struct RowConfig {
  static constexpr int G = G_;
  static constexpr int K = K_;
  static constexpr int threads = G_ < 256 ? 256 : G_;
  static constexpr int rowsPerBlock = threads / G_;
};

template <typename Fn> void withRowConfig(int64_t n, Fn &&fn) {
  if (n <= 256)
    fn(RowConfig<32, 8>{});
  else if (n <= 1024)
    fn(RowConfig<128, 8>{});
  else if (n <= 4096)
    fn(RowConfig<512, 8>{});
  else if (n <= 8192)
    fn(RowConfig<1024, 8>{});
  else
    fn(RowConfig<1024, 0>{});
}

/// The vectorized row kernels' config (G threads per row, K 16-byte vectors
/// each) for rows of n elements of T: false (nothing launched) when the rows
/// are not whole aligned vectors or too long to sit in registers.
template <typename T, int KV = 8, typename Fn>
bool withVecRowConfig(int64_t n, bool aligned, Fn &&fn) {
  constexpr int VN = 16 / sizeof(T);
  if (!aligned || n % VN != 0)
    return false;
  const int64_t nv = n / VN;
  if (nv <= 32 * KV)
    fn(RowConfig<32, KV>{});
  else if (nv <= 64 * KV)
    fn(RowConfig<64, KV>{});
  else if (nv <= 128 * KV)
    fn(RowConfig<128, KV>{});
  else if (nv <= 256 * KV)
    fn(RowConfig<256, KV>{});
  else if (nv <= 512 * KV)
    fn(RowConfig<512, KV>{});
  else if (KV < 8 && nv <= 1024 * KV)
    fn(RowConfig<1024, KV>{});
  else
    return false;
  return true;
}

template <typename Cfg> unsigned rowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + Cfg::rowsPerBlock - 1) / Cfg::rowsPerBlock);
}

inline llvm::Error checkRowCount(int64_t rows) {
  if (rows >= INT_MAX)
    return kernelError("too many rows (" + llvm::Twine(rows) + ") for one launch");
  return llvm::Error::success();
}

} // namespace loom::cuda

#endif
