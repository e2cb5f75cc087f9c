// Elementwise CUDA kernels: unary math, broadcasting binary ops, compare,
// where, cast, dropout, iota and the activation gradients (the reductions are
// Reduction.cu, AdamW Optimizer.cu). Each mirrors its CPU reference (kernels/cpu): the same dtypes, the
// same compute type (f32 for the narrow floats, f64 for f64, int64 for the
// integers), the same rounding on store.
//
// Where the GPU cannot do what the CPU does:
//  - Integer division by zero (the CPU rejects it after reading the divisor on
//    the host) yields 0: the divisor lives on the device.
//  - Transcendental functions (exp, log, tanh, erf, pow) come from CUDA's math
//    library, within a few ulps of the host's; everything else rounds
//    identically.

#include "kernels/cuda/DeviceSupport.cuh"
#include "kernels/cuda/Fp8Epilogue.cuh"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::cuda {

using cpu::detail::Activation;
using cpu::detail::BinaryOp;
using cpu::detail::checkSameShape;
using cpu::detail::UnaryOp;
using Pred = cpu::detail::ComparePred;

namespace {

//===----------------------------------------------------------------------===//
// Generic map kernels: contiguous (vectorized) and strided (broadcasting)
//===----------------------------------------------------------------------===//

template <typename... Ts> constexpr int vectorWidth() {
  constexpr size_t widest = std::max({sizeof(Ts)...});
  return static_cast<int>(16 / widest);
}

/// out[i] = op(i, a[i]); V elements per access when V > 1 (the pointers are
/// then 16-byte aligned). An output may be the input's own buffer.
template <int V, typename Op, typename O, typename A>
__global__ void __launch_bounds__(kBlockSize)
map1Kernel(int64_t n, O *out, const A *a, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = n / V;
  for (int64_t v = first; v < vectors; v += stride) {
    const dev::Vec<A, V> va = reinterpret_cast<const dev::Vec<A, V> *>(a)[v];
    dev::Vec<O, V> vo;
#pragma unroll
    for (int k = 0; k < V; ++k)
      vo.v[k] = op(v * V + k, va.v[k]);
    reinterpret_cast<dev::Vec<O, V> *>(out)[v] = vo;
  }
  for (int64_t i = vectors * V + first; i < n; i += stride)
    out[i] = op(i, a[i]);
}

template <int V, typename Op, typename O, typename A, typename B>
__global__ void __launch_bounds__(kBlockSize)
map2Kernel(int64_t n, O *out, const A *a, const B *b, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = n / V;
  for (int64_t v = first; v < vectors; v += stride) {
    const dev::Vec<A, V> va = reinterpret_cast<const dev::Vec<A, V> *>(a)[v];
    const dev::Vec<B, V> vb = reinterpret_cast<const dev::Vec<B, V> *>(b)[v];
    dev::Vec<O, V> vo;
#pragma unroll
    for (int k = 0; k < V; ++k)
      vo.v[k] = op(v * V + k, va.v[k], vb.v[k]);
    reinterpret_cast<dev::Vec<O, V> *>(out)[v] = vo;
  }
  for (int64_t i = vectors * V + first; i < n; i += stride)
    out[i] = op(i, a[i], b[i]);
}

template <int V, typename Op, typename O, typename A, typename B, typename C>
__global__ void __launch_bounds__(kBlockSize)
map3Kernel(int64_t n, O *out, const A *a, const B *b, const C *c, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = n / V;
  for (int64_t v = first; v < vectors; v += stride) {
    const dev::Vec<A, V> va = reinterpret_cast<const dev::Vec<A, V> *>(a)[v];
    const dev::Vec<B, V> vb = reinterpret_cast<const dev::Vec<B, V> *>(b)[v];
    const dev::Vec<C, V> vc = reinterpret_cast<const dev::Vec<C, V> *>(c)[v];
    dev::Vec<O, V> vo;
#pragma unroll
    for (int k = 0; k < V; ++k)
      vo.v[k] = op(v * V + k, va.v[k], vb.v[k], vc.v[k]);
    reinterpret_cast<dev::Vec<O, V> *>(out)[v] = vo;
  }
  for (int64_t i = vectors * V + first; i < n; i += stride)
    out[i] = op(i, a[i], b[i], c[i]);
}

/// out[i] = op(i, a[offset0(i)], b[offset1(i)]) over the output's positions.
template <typename Index, typename Op, typename O, typename A, typename B>
__global__ void __launch_bounds__(kBlockSize)
map2StridedKernel(Index n, const __grid_constant__ StridedMap<2> map, O *out, const A *a,
                  const B *b, Op op) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    Index offsets[2];
    stridedOffsets(map, i, offsets);
    out[i] = op(static_cast<int64_t>(i), a[offsets[0]], b[offsets[1]]);
  }
}

template <typename Index, typename Op, typename O, typename A, typename B, typename C>
__global__ void __launch_bounds__(kBlockSize)
map3StridedKernel(Index n, const __grid_constant__ StridedMap<3> map, O *out, const A *a,
                  const B *b, const C *c, Op op) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    Index offsets[3];
    stridedOffsets(map, i, offsets);
    out[i] = op(static_cast<int64_t>(i), a[offsets[0]], b[offsets[1]], c[offsets[2]]);
  }
}

/// Elements per access of a unary map: 16 bytes of the wider operand, except
/// that a narrowing map (output narrower than input) stores 16 bytes of output
/// from at most two 16-byte loads.
template <typename O, typename A> constexpr int map1VectorWidth() {
  if constexpr (sizeof(O) < sizeof(A)) {
    constexpr int narrow = static_cast<int>(16 / sizeof(O));
    constexpr int wide = static_cast<int>(32 / sizeof(A));
    return narrow < wide ? narrow : wide;
  } else {
    return vectorWidth<O, A>();
  }
}

template <typename Op, typename O, typename A>
void launchMap1(const LaunchContext &ctx, int64_t n, O *out, const A *a, Op op) {
  if (n <= 0)
    return;
  constexpr int V = map1VectorWidth<O, A>();
  if (V > 1 && isAligned(out, 16) && isAligned(a, 16))
    map1Kernel<V><<<gridFor(n / V + 1, ctx), kBlockSize, 0, ctx.stream>>>(n, out, a, op);
  else
    map1Kernel<1><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(n, out, a, op);
}

template <typename Op, typename O, typename A, typename B>
void launchMap2Contiguous(const LaunchContext &ctx, int64_t n, O *out, const A *a, const B *b,
                          Op op) {
  if (n <= 0)
    return;
  constexpr int V = vectorWidth<O, A, B>();
  if (V > 1 && isAligned(out, 16) && isAligned(a, 16) && isAligned(b, 16))
    map2Kernel<V><<<gridFor(n / V + 1, ctx), kBlockSize, 0, ctx.stream>>>(n, out, a, b, op);
  else
    map2Kernel<1><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(n, out, a, b, op);
}

/// A binary map reading both inputs broadcast to `out`'s shape (NumPy rules)
/// with the strides the operand checks computed.
template <typename Op, typename O, typename A, typename B>
llvm::Error launchMap2(const LaunchContext &ctx, const Tensor &out, const Tensor &a,
                       llvm::ArrayRef<int64_t> aStrides, const Tensor &b,
                       llvm::ArrayRef<int64_t> bStrides, Op op) {
  const int64_t n = out.numElements();
  if (n == 0)
    return llvm::Error::success();
  O *o = static_cast<O *>(out.data);
  const A *pa = static_cast<const A *>(a.data);
  const B *pb = static_cast<const B *>(b.data);
  LOOM_ASSIGN_OR_RETURN(StridedMap<2> map,
                        makeStridedMap<2>(out.shape, {aStrides, bStrides}));
  if (map.rank == 0 || (map.rank == 1 && map.strides[0][0] == 1 && map.strides[1][0] == 1)) {
    launchMap2Contiguous(ctx, n, o, pa, pb, op);
  } else if (fitsIn32Bits(map, n)) {
    map2StridedKernel<uint32_t><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(
        static_cast<uint32_t>(n), map, o, pa, pb, op);
  } else {
    map2StridedKernel<int64_t><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(n, map, o, pa,
                                                                               pb, op);
  }
  return llvm::Error::success();
}

template <typename Op, typename O, typename A, typename B, typename C>
llvm::Error launchMap3(const LaunchContext &ctx, const Tensor &out, const Tensor &a,
                       const Tensor &b, const Tensor &c,
                       const std::array<std::vector<int64_t>, 3> &strides, Op op) {
  llvm::ArrayRef<int64_t> aStrides = strides[0], bStrides = strides[1], cStrides = strides[2];
  const int64_t n = out.numElements();
  if (n == 0)
    return llvm::Error::success();
  O *o = static_cast<O *>(out.data);
  const A *pa = static_cast<const A *>(a.data);
  const B *pb = static_cast<const B *>(b.data);
  const C *pc = static_cast<const C *>(c.data);
  LOOM_ASSIGN_OR_RETURN(StridedMap<3> map,
                        makeStridedMap<3>(out.shape, {aStrides, bStrides, cStrides}));
  const bool contiguous =
      map.rank == 0 || (map.rank == 1 && map.strides[0][0] == 1 && map.strides[1][0] == 1 &&
                        map.strides[2][0] == 1);
  if (contiguous) {
    constexpr int V = vectorWidth<O, A, B, C>();
    if (V > 1 && isAligned(o, 16) && isAligned(pa, 16) && isAligned(pb, 16) &&
        isAligned(pc, 16))
      map3Kernel<V><<<gridFor(n / V + 1, ctx), kBlockSize, 0, ctx.stream>>>(n, o, pa, pb, pc,
                                                                            op);
    else
      map3Kernel<1><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(n, o, pa, pb, pc, op);
  } else if (fitsIn32Bits(map, n)) {
    map3StridedKernel<uint32_t><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(
        static_cast<uint32_t>(n), map, o, pa, pb, pc, op);
  } else {
    map3StridedKernel<int64_t><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(n, map, o, pa,
                                                                               pb, pc, op);
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

/// 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) otherwise, without a
/// branch: both sides are the same exp and one division (a divergent branch
/// would run both).
template <typename T> __device__ __forceinline__ T sigmoidOf(T x) {
  const bool nonNegative = x >= T(0);
  const T e = dev::mexp(nonNegative ? -x : x);
  return (nonNegative ? T(1) : e) / (T(1) + e);
}

/// The logistic function for results stored in bf16 or f16: the fast exp and
/// division (errors of a few f32 ulps, far below those formats' rounding,
/// where the IEEE paths made silu and its gradient compute-bound).
__device__ __forceinline__ float sigmoidNarrow(float x) {
  const float e = __expf(-fabsf(x));
  return __fdividef(x >= 0.f ? 1.f : e, 1.f + e);
}

constexpr bool isNarrowFloat(DType d) { return d == DType::BF16 || d == DType::F16; }

template <UnaryOp Op, typename T> __device__ __forceinline__ T unaryValue(T x) {
  using namespace dev;
  if constexpr (std::is_integral_v<T>) {
    const uint64_t bits = static_cast<uint64_t>(x);
    if constexpr (Op == UnaryOp::Neg)
      return static_cast<T>(0 - bits);
    else if constexpr (Op == UnaryOp::Abs)
      return x < 0 ? static_cast<T>(0 - bits) : x;
    else
      return x > 0 ? x : 0; // Relu
  } else {
    if constexpr (Op == UnaryOp::Neg)
      return -x;
    else if constexpr (Op == UnaryOp::Abs)
      return mfabs(x);
    else if constexpr (Op == UnaryOp::Exp)
      return mexp(x);
    else if constexpr (Op == UnaryOp::Log)
      return mlog(x);
    else if constexpr (Op == UnaryOp::Sqrt)
      return msqrt(x);
    else if constexpr (Op == UnaryOp::Rsqrt)
      return T(1) / msqrt(x);
    else if constexpr (Op == UnaryOp::Reciprocal)
      return T(1) / x;
    else if constexpr (Op == UnaryOp::Tanh)
      return mtanh(x);
    else if constexpr (Op == UnaryOp::Erf)
      return merf(x);
    else if constexpr (Op == UnaryOp::Sigmoid)
      return sigmoidOf(x);
    else if constexpr (Op == UnaryOp::Silu)
      return mul(x, sigmoidOf(x));
    else if constexpr (Op == UnaryOp::Relu)
      return x != x ? x : (x > T(0) ? x : T(0));
    else if constexpr (Op == UnaryOp::GeluErf)
      return mul(mul(x, T(0.5)), add(T(1), merf(mul(x, T(0.70710678118654752440)))));
    else { // GeluTanh
      const T kSqrt2OverPi = T(0.79788456080286535588);
      const T cube = mul(mul(mul(T(0.044715), x), x), x);
      return mul(mul(T(0.5), x), add(T(1), mtanh(mul(kSqrt2OverPi, add(x, cube)))));
    }
  }
}

template <UnaryOp Op, DType D> struct UnaryFn {
  using S = StorageOf<D>;
  __device__ S operator()(int64_t, S x) const {
    if constexpr (isNarrowFloat(D) && (Op == UnaryOp::Silu || Op == UnaryOp::Sigmoid)) {
      const float v = dev::Elem<D>::load(x), s = sigmoidNarrow(v);
      return dev::Elem<D>::store(Op == UnaryOp::Silu ? v * s : s);
    } else {
      return dev::Elem<D>::store(unaryValue<Op>(dev::Elem<D>::load(x)));
    }
  }
};

template <DType D> llvm::Error launchUnaryAs(const KernelCall &call, UnaryOp op) {
  using S = StorageOf<D>;
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  const int64_t n = in.numElements();
  S *o = static_cast<S *>(out.data);
  const S *a = static_cast<const S *>(in.data);
  if constexpr (dev::isIntDType(D)) {
    switch (op) {
    case UnaryOp::Neg:
      launchMap1(call.ctx, n, o, a, UnaryFn<UnaryOp::Neg, D>{});
      return llvm::Error::success();
    case UnaryOp::Abs:
      launchMap1(call.ctx, n, o, a, UnaryFn<UnaryOp::Abs, D>{});
      return llvm::Error::success();
    case UnaryOp::Relu:
      launchMap1(call.ctx, n, o, a, UnaryFn<UnaryOp::Relu, D>{});
      return llvm::Error::success();
    default:
      return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(D) +
                         " (a float type is required)");
    }
  } else {
    switch (op) {
#define LOOM_UNARY_CASE(OP)                                                    \
  case UnaryOp::OP:                                                            \
    launchMap1(call.ctx, n, o, a, UnaryFn<UnaryOp::OP, D>{});                  \
    return llvm::Error::success();
      LOOM_UNARY_CASE(Neg)
      LOOM_UNARY_CASE(Abs)
      LOOM_UNARY_CASE(Exp)
      LOOM_UNARY_CASE(Log)
      LOOM_UNARY_CASE(Sqrt)
      LOOM_UNARY_CASE(Rsqrt)
      LOOM_UNARY_CASE(Reciprocal)
      LOOM_UNARY_CASE(Tanh)
      LOOM_UNARY_CASE(Erf)
      LOOM_UNARY_CASE(Sigmoid)
      LOOM_UNARY_CASE(Silu)
      LOOM_UNARY_CASE(Relu)
      LOOM_UNARY_CASE(GeluErf)
      LOOM_UNARY_CASE(GeluTanh)
#undef LOOM_UNARY_CASE
    }
    return kernelError("unknown unary op");
  }
}

llvm::Error launchUnary(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, 1));
  const Tensor &in = call.inputs[0];
  LOOM_ASSIGN_OR_RETURN(UnaryOp op, cpu::detail::checkUnary(call.id, in, call.outputs[0],
                                                            call.attrs));
  if (in.dtype == DType::I64)
    return launchUnaryAs<DType::I64>(call, op);
  if (in.dtype == DType::I32)
    return launchUnaryAs<DType::I32>(call, op);
  return dispatchFloatDType(in.dtype, "input", [&](auto tag) {
    return launchUnaryAs<decltype(tag)::value>(call, op);
  });
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

template <BinaryOp Op, typename T> __device__ __forceinline__ T binaryValue(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
    if constexpr (Op == BinaryOp::Add)
      return static_cast<T>(ua + ub);
    else if constexpr (Op == BinaryOp::Sub)
      return static_cast<T>(ua - ub);
    else if constexpr (Op == BinaryOp::Mul)
      return static_cast<T>(ua * ub);
    else if constexpr (Op == BinaryOp::Div) // x / 0 is 0 here (the CPU rejects it)
      return b == 0 ? T(0) : b == -1 ? static_cast<T>(0 - ua) : a / b;
    else if constexpr (Op == BinaryOp::Maximum)
      return a > b ? a : b;
    else if constexpr (Op == BinaryOp::Minimum)
      return a < b ? a : b;
    else
      return 0; // Pow is rejected on the host
  } else {
    if constexpr (Op == BinaryOp::Add)
      return dev::add(a, b);
    else if constexpr (Op == BinaryOp::Sub)
      return dev::sub(a, b);
    else if constexpr (Op == BinaryOp::Mul)
      return dev::mul(a, b);
    else if constexpr (Op == BinaryOp::Div)
      return a / b;
    else if constexpr (Op == BinaryOp::Pow)
      return dev::mpow(a, b);
    else if constexpr (Op == BinaryOp::Maximum)
      return a != a ? a : b != b ? b : (a > b ? a : b);
    else
      return a != a ? a : b != b ? b : (a < b ? a : b);
  }
}

template <BinaryOp Op, DType D> struct BinaryFn {
  using S = StorageOf<D>;
  __device__ S operator()(int64_t, S a, S b) const {
    return dev::Elem<D>::store(binaryValue<Op>(dev::Elem<D>::load(a), dev::Elem<D>::load(b)));
  }
};

template <DType D>
llvm::Error launchBinaryAs(const KernelCall &call, const cpu::detail::BinaryPlan &plan) {
  using S = StorageOf<D>;
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.outputs[0];
  switch (plan.op) {
#define LOOM_BINARY_CASE(OP)                                                   \
  case BinaryOp::OP:                                                           \
    return launchMap2<BinaryFn<BinaryOp::OP, D>, S, S, S>(call.ctx, out, a, plan.lhsStrides, b, \
                                                          plan.rhsStrides,               \
                                                          BinaryFn<BinaryOp::OP, D>{});
    LOOM_BINARY_CASE(Add)
    LOOM_BINARY_CASE(Sub)
    LOOM_BINARY_CASE(Mul)
    LOOM_BINARY_CASE(Div)
    LOOM_BINARY_CASE(Maximum)
    LOOM_BINARY_CASE(Minimum)
#undef LOOM_BINARY_CASE
  case BinaryOp::Pow:
    if constexpr (dev::isIntDType(D))
      return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(D) +
                         " (a float type is required)");
    else
      return launchMap2<BinaryFn<BinaryOp::Pow, D>, S, S, S>(
          call.ctx, out, a, plan.lhsStrides, b, plan.rhsStrides, BinaryFn<BinaryOp::Pow, D>{});
  }
  return kernelError("unknown binary op");
}

llvm::Error launchBinary(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::BinaryPlan plan,
                        cpu::detail::checkBinary(call.id, call.inputs[0], call.inputs[1], out));
  if (out.dtype == DType::I64)
    return launchBinaryAs<DType::I64>(call, plan);
  if (out.dtype == DType::I32)
    return launchBinaryAs<DType::I32>(call, plan);
  return dispatchFloatDType(out.dtype, "operands", [&](auto tag) {
    return launchBinaryAs<decltype(tag)::value>(call, plan);
  });
}

//===----------------------------------------------------------------------===//
// Compare and where
//===----------------------------------------------------------------------===//

template <DType D> struct CompareFn {
  using S = StorageOf<D>;
  Pred pred;
  __device__ uint8_t operator()(int64_t, S a, S b) const {
    // Widening to f32/f64 (floats) or int64 (integers) is exact.
    const auto x = dev::Elem<D>::load(a), y = dev::Elem<D>::load(b);
    switch (pred) {
    case Pred::Eq: return x == y;
    case Pred::Ne: return x != y;
    case Pred::Lt: return x < y;
    case Pred::Le: return x <= y;
    case Pred::Gt: return x > y;
    case Pred::Ge: return x >= y;
    }
    return 0;
  }
};

llvm::Error launchCompare(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::ComparePlan plan,
                        cpu::detail::checkCompare(a, b, out, call.attrs));
  return dispatchAnyDType(a.dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    using S = StorageOf<D>;
    return launchMap2<CompareFn<D>, uint8_t, S, S>(call.ctx, out, a, plan.lhsStrides, b,
                                                   plan.rhsStrides, CompareFn<D>{plan.pred});
  });
}

template <typename Word> struct SelectFn {
  __device__ Word operator()(int64_t, uint8_t cond, Word a, Word b) const {
    return cond ? a : b;
  }
};

template <typename Word>
llvm::Error launchWhereWords(const KernelCall &call,
                             const std::array<std::vector<int64_t>, 3> &strides) {
  const Tensor &cond = call.inputs[0], &a = call.inputs[1], &b = call.inputs[2];
  return launchMap3<SelectFn<Word>, Word, uint8_t, Word, Word>(
      call.ctx, call.outputs[0], cond, a, b, strides, SelectFn<Word>{});
}

llvm::Error launchWhere(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 1, 1));
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(auto strides, cpu::detail::checkWhere(call.inputs[0], call.inputs[1],
                                                              call.inputs[2], out));
  switch (dtypeSize(out.dtype)) {
  case 1:
    return launchWhereWords<uint8_t>(call, strides);
  case 2:
    return launchWhereWords<uint16_t>(call, strides);
  case 4:
    return launchWhereWords<uint32_t>(call, strides);
  default:
    return launchWhereWords<uint64_t>(call, strides);
  }
}

//===----------------------------------------------------------------------===//
// Cast
//===----------------------------------------------------------------------===//

template <DType From, DType To> struct CastFn {
  __device__ StorageOf<To> operator()(int64_t, StorageOf<From> x) const {
    if constexpr (From == DType::F32 && To == DType::BF16)
      return dev::floatToBf16(x); // f32 widens exactly: the same single rounding
    else if constexpr (dev::isIntDType(From) && dev::isIntDType(To))
      return dev::Elem<To>::store(dev::Elem<From>::load(x));
    else if constexpr (From == DType::I64 && To == DType::F32)
      return static_cast<float>(x); // one rounding, as the CPU does
    else // every float and i32 widens exactly to f64; narrowing rounds once
      return dev::Elem<To>::storeDouble(dev::Elem<From>::loadDouble(x));
  }
};

llvm::Error launchCast(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, 1));
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(in, "input", out, "output"));
  const int64_t n = in.numElements();
  if (n == 0)
    return llvm::Error::success();
  if (in.dtype == out.dtype) {
    if (in.data == out.data)
      return llvm::Error::success();
    return cudaError(cudaMemcpyAsync(out.data, in.data, in.sizeInBytes(),
                                     cudaMemcpyDeviceToDevice, call.ctx.stream),
                     "cudaMemcpyAsync");
  }
  return dispatchAnyDType(in.dtype, [&](auto fromTag) {
    constexpr DType From = decltype(fromTag)::value;
    return dispatchAnyDType(out.dtype, [&](auto toTag) {
      constexpr DType To = decltype(toTag)::value;
      launchMap1(call.ctx, n, static_cast<StorageOf<To> *>(out.data),
                 static_cast<const StorageOf<From> *>(in.data), CastFn<From, To>{});
      return llvm::Error::success();
    });
  });
}

/// nn.cast_multi: up to kCastTensors pairs a launch, a block per chunk of
/// kCastChunk elements; 4 elements a thread where both sides are aligned.
constexpr int kCastTensors = 64;
constexpr int64_t kCastChunk = 16384;

struct CastMultiArgs {
  int count;
  int64_t n[kCastTensors];
  int64_t firstBlock[kCastTensors + 1];
  const void *x[kCastTensors];
  void *y[kCastTensors];
};

template <DType From, DType To>
__global__ void __launch_bounds__(kBlockSize) castMultiKernel(const __grid_constant__ CastMultiArgs a) {
  using S = StorageOf<From>;
  using D = StorageOf<To>;
  struct alignas(4 * sizeof(S)) In4 { S v[4]; };
  struct alignas(4 * sizeof(D)) Out4 { D v[4]; };
  int t = 0;
  while (t + 1 < a.count && a.firstBlock[t + 1] <= blockIdx.x)
    ++t;
  const int64_t begin = (blockIdx.x - a.firstBlock[t]) * kCastChunk;
  const int64_t end = begin + kCastChunk < a.n[t] ? begin + kCastChunk : a.n[t];
  const S *x = static_cast<const S *>(a.x[t]);
  D *y = static_cast<D *>(a.y[t]);
  const CastFn<From, To> cast;
  const bool aligned = (reinterpret_cast<uintptr_t>(x) % sizeof(In4)) == 0 &&
                       (reinterpret_cast<uintptr_t>(y) % sizeof(Out4)) == 0;
  const int64_t vecEnd = aligned ? begin + (end - begin) / 4 * 4 : begin;
  for (int64_t i = begin + 4 * int64_t(threadIdx.x); i < vecEnd; i += 4 * int64_t(kBlockSize)) {
    const In4 in = *reinterpret_cast<const In4 *>(x + i);
    Out4 out;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      out.v[k] = cast(i + k, in.v[k]);
    *reinterpret_cast<Out4 *>(y + i) = out;
  }
  for (int64_t j = vecEnd + threadIdx.x; j < end; j += kBlockSize)
    y[j] = cast(j, x[j]);
}

llvm::Error launchCastMulti(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(cpu::detail::checkCastMulti(call.inputs, call.outputs));
  const DType from = call.inputs[0].dtype, to = call.outputs[0].dtype;
  if (from == to) {
    for (size_t i = 0; i < call.inputs.size(); ++i)
      if (call.inputs[i].numElements() > 0 && call.inputs[i].data != call.outputs[i].data)
        LOOM_RETURN_IF_ERROR(cudaError(cudaMemcpyAsync(call.outputs[i].data, call.inputs[i].data,
                                                       call.inputs[i].sizeInBytes(),
                                                       cudaMemcpyDeviceToDevice, call.ctx.stream),
                                       "cudaMemcpyAsync"));
    return llvm::Error::success();
  }
  return dispatchAnyDType(from, [&](auto fromTag) {
    constexpr DType From = decltype(fromTag)::value;
    return dispatchAnyDType(to, [&](auto toTag) {
      constexpr DType To = decltype(toTag)::value;
      for (size_t start = 0; start < call.inputs.size();) {
        CastMultiArgs a{};
        int64_t blocks = 0;
        size_t i = start;
        for (; i < call.inputs.size() && a.count < kCastTensors; ++i) {
          const int64_t n = call.inputs[i].numElements();
          if (n == 0)
            continue;
          a.n[a.count] = n;
          a.firstBlock[a.count] = blocks;
          a.x[a.count] = call.inputs[i].data;
          a.y[a.count] = call.outputs[i].data;
          blocks += (n + kCastChunk - 1) / kCastChunk;
          ++a.count;
        }
        a.firstBlock[a.count] = blocks;
        start = i;
        if (blocks > 0)
          castMultiKernel<From, To><<<unsigned(blocks), kBlockSize, 0, call.ctx.stream>>>(a);
      }
      return llvm::Error::success();
    });
  });
}

//===----------------------------------------------------------------------===//
// Dropout and iota
//===----------------------------------------------------------------------===//

template <DType D> struct DropoutFn {
  using S = StorageOf<D>;
  using T = ComputeOf<D>;
  uint64_t seedHash;
  double p;
  T scale;
  __device__ S operator()(int64_t i, S x) const {
    const bool keep =
        static_cast<double>(dev::dropoutUniform(seedHash, static_cast<uint64_t>(i))) >= p;
    return dev::Elem<D>::store(keep ? dev::mul(dev::Elem<D>::load(x), scale) : T(0));
  }
};

llvm::Error launchDropout(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, 1));
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::DropoutParams params,
                        cpu::detail::checkDropout(in, out, call.attrs));
  const double p = params.p;
  const int64_t seed = params.seed;
  const uint64_t seedHash = cpu::splitMix64(static_cast<uint64_t>(seed));
  return dispatchFloatDType(in.dtype, "input", [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    using T = ComputeOf<D>;
    const T scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    launchMap1(call.ctx, in.numElements(), static_cast<StorageOf<D> *>(out.data),
               static_cast<const StorageOf<D> *>(in.data), DropoutFn<D>{seedHash, p, scale});
    return llvm::Error::success();
  });
}

template <DType D>
__global__ void __launch_bounds__(kBlockSize)
iotaKernel(int64_t n, int64_t inner, int64_t size, double start, double step,
           StorageOf<D> *out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const double k = static_cast<double>((i / inner) % size);
    out[i] = dev::Elem<D>::storeDouble(dev::add(start, dev::mul(k, step)));
  }
}

llvm::Error launchIota(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 0, 0, 1, 1));
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::IotaPlan plan, cpu::detail::checkIota(out, call.attrs));
  const double start = plan.start, step = plan.step;
  const int64_t size = plan.size, inner = plan.inner;
  const int64_t n = out.numElements();
  if (n == 0)
    return llvm::Error::success();
  return dispatchAnyDType(out.dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    iotaKernel<D><<<gridFor(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        n, inner, size, start, step, static_cast<StorageOf<D> *>(out.data));
    return llvm::Error::success();
  });
}

//===----------------------------------------------------------------------===//
// Activation gradients
//===----------------------------------------------------------------------===//

/// d/dx of the activation at x (Backward.cpp's activationDerivative).
template <Activation A, typename T> __device__ __forceinline__ T activationDerivative(T x) {
  using namespace dev;
  if constexpr (A == Activation::GeluErf) {
    const T kInvSqrt2 = T(0.70710678118654752440);
    const T kInvSqrt2Pi = T(0.39894228040143267794);
    const T cdf = mul(T(0.5), add(T(1), merf(mul(x, kInvSqrt2))));
    return add(cdf, mul(mul(x, kInvSqrt2Pi), mexp(mul(mul(T(-0.5), x), x))));
  } else if constexpr (A == Activation::GeluTanh) {
    const T kSqrt2OverPi = T(0.79788456080286535588);
    const T kCubic = T(0.044715);
    const T t = mtanh(mul(kSqrt2OverPi, add(x, mul(mul(mul(kCubic, x), x), x))));
    const T du = mul(kSqrt2OverPi, add(T(1), mul(mul(mul(T(3), kCubic), x), x)));
    return add(mul(T(0.5), add(T(1), t)), mul(mul(mul(T(0.5), x), sub(T(1), mul(t, t))), du));
  } else {
    const T s = x >= T(0) ? T(1) / add(T(1), mexp(-x)) : mexp(x) / add(T(1), mexp(x));
    return mul(s, add(T(1), mul(x, sub(T(1), s))));
  }
}

template <Activation A, DType D> struct ActivationGradFn {
  using S = StorageOf<D>;
  __device__ S operator()(int64_t, S x, S dy) const {
    using E = dev::Elem<D>;
    if constexpr (isNarrowFloat(D) && A == Activation::Silu) {
      const float v = E::load(x), s = sigmoidNarrow(v);
      return E::store(E::load(dy) * (s * (1.f + v * (1.f - s))));
    } else {
      return E::store(dev::mul(E::load(dy), activationDerivative<A>(E::load(x))));
    }
  }
};

llvm::Error launchActivationGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &x = call.inputs[0], &dy = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(Activation activation,
                        cpu::detail::checkActivationGrad(call.id, x, dy, out, call.attrs));
  return dispatchFloatDType(x.dtype, "input", [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    using S = StorageOf<D>;
    const int64_t n = x.numElements();
    S *o = static_cast<S *>(out.data);
    const S *px = static_cast<const S *>(x.data), *pdy = static_cast<const S *>(dy.data);
    switch (activation) {
    case Activation::GeluErf:
      launchMap2Contiguous(call.ctx, n, o, px, pdy, ActivationGradFn<Activation::GeluErf, D>{});
      break;
    case Activation::GeluTanh:
      launchMap2Contiguous(call.ctx, n, o, px, pdy, ActivationGradFn<Activation::GeluTanh, D>{});
      break;
    case Activation::Silu:
      launchMap2Contiguous(call.ctx, n, o, px, pdy, ActivationGradFn<Activation::Silu, D>{});
      break;
    }
    return llvm::Error::success();
  });
}

//===----------------------------------------------------------------------===//
// SwiGLU (--loom-fuse-swiglu): the product and its gradients, one pass each
//===----------------------------------------------------------------------===//

/// s = silu(g), h = s * u.
template <DType D> struct SwigluFn {
  using S = StorageOf<D>;
  __device__ void operator()(const S *x, S *y) const {
    y[0] = UnaryFn<UnaryOp::Silu, D>{}(0, x[0]);
    y[1] = BinaryFn<BinaryOp::Mul, D>{}(0, y[0], x[1]);
  }
};

/// (g, u, s, dy) -> dg = silu_grad(g, dy * u), du = dy * s.
template <DType D> struct SwigluGradFn {
  using S = StorageOf<D>;
  __device__ void operator()(const S *x, S *y) const {
    const S a = BinaryFn<BinaryOp::Mul, D>{}(0, x[3], x[1]);
    y[1] = BinaryFn<BinaryOp::Mul, D>{}(0, x[3], x[2]);
    y[0] = ActivationGradFn<Activation::Silu, D>{}(0, x[0], a);
  }
};

template <int IN, int OUT, typename LaunchFn>
llvm::Error launchMultiMap(const KernelCall &call, LaunchFn &&launch) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, IN, IN, OUT, OUT));
  const Tensor &first = call.inputs[0];
  for (llvm::ArrayRef<Tensor> list : {call.inputs, call.outputs})
    for (const Tensor &t : list)
      if (t.dtype != first.dtype || t.shape != first.shape)
        return kernelError("every operand must be " + cpu::detail::shapeToString(first.shape) +
                           " " + std::string(dtypeName(first.dtype)) + ", got " +
                           cpu::detail::shapeToString(t.shape) + " " +
                           std::string(dtypeName(t.dtype)));
  return dispatchFloatDType(first.dtype, "operand", [&](auto tag) -> llvm::Error {
    constexpr DType D = decltype(tag)::value;
    using S = StorageOf<D>;
    const int64_t n = first.numElements();
    if (n == 0)
      return llvm::Error::success();
    bool aligned = true;
    // The pointer arrays travel as kernel arguments (by value, in a struct).
    struct Pointers {
      const S *in[IN];
      S *out[OUT];
    } p;
    for (int i = 0; i < IN; ++i) {
      p.in[i] = static_cast<const S *>(call.inputs[i].data);
      aligned = aligned && isAligned(p.in[i], 16);
    }
    for (int o = 0; o < OUT; ++o) {
      p.out[o] = static_cast<S *>(call.outputs[o].data);
      aligned = aligned && isAligned(p.out[o], 16);
    }
    constexpr int V = 16 / sizeof(S);
    const int64_t work = aligned ? std::max<int64_t>(n / V, 1) : n;
    launch(tag, p, n, aligned, gridFor(work, call.ctx));
    return cudaError(cudaGetLastError(), "launch");
  });
}

/// The pointer arrays as a kernel's by-value argument.
template <typename S, int IN, int OUT> struct PointerArgs {
  const S *in[IN];
  S *out[OUT];
};

/// Each element as the unfused kernels compute it (UnaryFn, BinaryFn,
/// ActivationGradFn): 16-byte vectors where every pointer is aligned, then
/// the tail one by one.
template <DType D, typename Fn, int IN, int OUT>
__global__ void __launch_bounds__(kBlockSize)
    multiMapArgsKernel(Fn fn, PointerArgs<StorageOf<D>, IN, OUT> p, int64_t n, bool vectors,
                       Fp8ScaleEpilogue epi) {
  using S = StorageOf<D>;
  constexpr int V = 16 / sizeof(S);
  struct alignas(16) P {
    S v[V];
  };
  // The FP8 scale epilogue: each thread's largest |y| of each output it
  // names (mask), indexed at compile time so y stays in registers.
  unsigned mo[OUT] = {};
  unsigned mask = 0;
  for (int j = 0; j < epi.count; ++j)
    mask |= 1u << epi.output[j];
  auto track = [&](const S (&y)[OUT]) {
#pragma unroll
    for (int o = 0; o < OUT; ++o)
      if (mask >> o & 1u)
        mo[o] = max(mo[o], absBits(dev::Elem<D>::load(y[o])));
  };
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nv = vectors ? n / V : 0;
  for (int64_t q = first; q < nv; q += stride) {
    P a[IN], r[OUT];
#pragma unroll
    for (int i = 0; i < IN; ++i)
      a[i] = reinterpret_cast<const P *>(p.in[i])[q];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      S x[IN], y[OUT];
#pragma unroll
      for (int i = 0; i < IN; ++i)
        x[i] = a[i].v[e];
      fn(x, y);
#pragma unroll
      for (int o = 0; o < OUT; ++o)
        r[o].v[e] = y[o];
      track(y);
    }
#pragma unroll
    for (int o = 0; o < OUT; ++o)
      reinterpret_cast<P *>(p.out[o])[q] = r[o];
  }
  for (int64_t k = nv * V + first; k < n; k += stride) {
    S x[IN], y[OUT];
#pragma unroll
    for (int i = 0; i < IN; ++i)
      x[i] = p.in[i][k];
    fn(x, y);
#pragma unroll
    for (int o = 0; o < OUT; ++o)
      p.out[o][k] = y[o];
    track(y);
  }
  if (epi.count > 0) {
    unsigned m[Fp8ScaleEpilogue::kMax] = {0, 0};
    for (int j = 0; j < epi.count; ++j)
#pragma unroll
      for (int o = 0; o < OUT; ++o)
        if (o == epi.output[j])
          m[j] = mo[o];
    finishFp8Scales(m, epi);
  }
}

/// The FP8 scale epilogue of a call (KernelList.h) for a kernel that runs
/// it itself: the call without it (own outputs and attributes) and what the
/// kernel needs. Without the stream's counters, `epi.count` stays 0 and the
/// caller runs launchFp8ScaleOf after the kernel.
struct EpilogueSplit {
  Fp8ScaleEpilogueAttrs attrs; // attrs.outputs: fp8_scale_of
  cpu::KernelAttrs kernelAttrs;
  llvm::ArrayRef<Tensor> outputs; // the kernel's own
  Fp8ScaleEpilogue epi;
};

llvm::Expected<EpilogueSplit> splitFp8Epilogue(const KernelCall &call) {
  EpilogueSplit split;
  if (std::string problem = splitFp8ScaleEpilogue(call.attrs.all(), call.outputs.size(), split.attrs);
      !problem.empty())
    return kernelError(problem);
  const size_t extra = split.attrs.outputs.size();
  if (extra > size_t(Fp8ScaleEpilogue::kMax))
    return kernelError("fp8_scale_of lists " + llvm::Twine(extra) + " outputs; at most " +
                       llvm::Twine(Fp8ScaleEpilogue::kMax));
  split.kernelAttrs = cpu::KernelAttrs(split.attrs.kernelAttrs);
  split.outputs = call.outputs.drop_back(extra);
  if (extra > 0 && call.ctx.counters) {
    split.epi.count = int(extra);
    for (size_t j = 0; j < extra; ++j) {
      split.epi.output[j] = int(split.attrs.outputs[j]);
      split.epi.scale[j] = static_cast<float *>(call.outputs[split.outputs.size() + j].data);
    }
    split.epi.counters = call.ctx.counters;
    split.epi.headroom = std::ldexp(1.0f, int(split.attrs.margin));
    split.epi.limit =
        fp8MaxFinite(split.attrs.format == "e4m3" ? DType::F8E4M3FN : DType::F8E5M2);
  }
  return split;
}

/// After a kernel that could not run its epilogue (no counters, or nothing
/// to write): the scales in their own launches.
llvm::Error finishEpilogueApart(const KernelCall &call, const EpilogueSplit &split, bool ran) {
  if (ran)
    return llvm::Error::success();
  const std::vector<int64_t> &scaleOf = split.attrs.outputs;
  for (size_t j = 0; j < scaleOf.size(); ++j)
    LOOM_RETURN_IF_ERROR(launchFp8ScaleOf(split.outputs[scaleOf[j]],
                                          call.outputs[split.outputs.size() + j],
                                          split.attrs.format, split.attrs.margin, call.ctx));
  return llvm::Error::success();
}

template <template <DType> class Fn, int IN, int OUT>
llvm::Error launchMultiMapOf(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(EpilogueSplit split, splitFp8Epilogue(call));
  const KernelCall own{call.name, call.id, call.inputs, split.outputs, split.kernelAttrs, call.ctx};
  bool ran = false;
  auto launch = [&](auto tag, const auto &p, int64_t n, bool aligned, unsigned blocks) {
    constexpr DType D = decltype(tag)::value;
    using S = StorageOf<D>;
    PointerArgs<S, IN, OUT> args;
    for (int i = 0; i < IN; ++i)
      args.in[i] = p.in[i];
    for (int o = 0; o < OUT; ++o)
      args.out[o] = p.out[o];
    // With the epilogue, one wave of resident blocks: every block's atomics
    // go to the same words, so fewer blocks (each striding further) cost
    // less than the full grid's.
    if (split.epi.count > 0)
      blocks = std::min<unsigned>(
          blocks, unsigned(std::max(call.ctx.multiprocessors, 1) * (2048 / kBlockSize)));
    multiMapArgsKernel<D, Fn<D>, IN, OUT>
        <<<blocks, kBlockSize, 0, call.ctx.stream>>>(Fn<D>{}, args, n, aligned, split.epi);
    ran = split.epi.count > 0;
  };
  if (llvm::Error err = launchMultiMap<IN, OUT>(own, launch))
    return err;
  return finishEpilogueApart(call, split, ran);
}

llvm::Error launchSwiglu(const KernelCall &call) { return launchMultiMapOf<SwigluFn, 2, 2>(call); }
llvm::Error launchSwigluGrad(const KernelCall &call) {
  return launchMultiMapOf<SwigluGradFn, 4, 2>(call);
}

} // namespace

void registerElementwiseKernels(KernelRegistry &registry) {
  registry.add(KernelId::Swiglu, launchSwiglu);
  registry.add(KernelId::SwigluGrad, launchSwigluGrad);
  registry.addFp8ScaleEpilogue(KernelId::Swiglu);
  registry.addFp8ScaleEpilogue(KernelId::SwigluGrad);
  for (KernelId id : {KernelId::Neg, KernelId::Abs, KernelId::Exp, KernelId::Log, KernelId::Sqrt, KernelId::Rsqrt, KernelId::Reciprocal, KernelId::Tanh, KernelId::Erf, KernelId::Sigmoid, KernelId::Silu, KernelId::Relu, KernelId::Gelu})
    registry.add(id, launchUnary);
  for (KernelId id : {KernelId::Add, KernelId::Sub, KernelId::Mul, KernelId::Div, KernelId::Pow, KernelId::Maximum, KernelId::Minimum})
    registry.add(id, launchBinary);
  registry.add(KernelId::Compare, launchCompare);
  registry.add(KernelId::Where, launchWhere);
  registry.add(KernelId::Cast, launchCast);
  registry.add(KernelId::CastMulti, launchCastMulti);
  registry.add(KernelId::Dropout, launchDropout);
  registry.add(KernelId::Iota, launchIota);
  registry.add(KernelId::GeluGrad, launchActivationGrad);
  registry.add(KernelId::SiluGrad, launchActivationGrad);
}

} // namespace loom::cuda

