// Elementwise CUDA kernels: unary math, broadcasting binary ops, compare,
// where, cast, dropout, iota, the reductions, the activation gradients and
// AdamW. Each mirrors its CPU reference (kernels/cpu): the same dtypes, the
// same compute type (f32 for the narrow floats, f64 for f64, int64 for the
// integers), the same rounding on store.
//
// Where the GPU cannot do what the CPU does:
//  - Integer division by zero (the CPU rejects it after reading the divisor on
//    the host) yields 0: the divisor lives on the device.
//  - nn.adamw reads lr and step on the device; a step below 1 (an error on the
//    CPU) leaves parameter and moments unchanged (copied to the outputs).
//  - Transcendental functions (exp, log, tanh, erf, pow) come from CUDA's math
//    library, within a few ulps of the host's; everything else rounds
//    identically.
//  - Float sums accumulate in double like the CPU's, in a fixed order: one
//    thread walking the reduced elements in order (then bitwise equal to the
//    CPU) or, for long reductions, a fixed tree of per-thread partial sums.

#include "kernels/cuda/DeviceSupport.cuh"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::cuda {

using cpu::detail::broadcastStrides;
using cpu::detail::checkSameDType;
using cpu::detail::checkSameShape;
using cpu::detail::contiguousStrides;
using cpu::detail::normalizeDim;
using cpu::detail::shapeToString;

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

/// A binary map broadcasting both inputs to `out`'s shape (NumPy rules).
template <typename Op, typename O, typename A, typename B>
llvm::Error launchMap2(const LaunchContext &ctx, const Tensor &out, const Tensor &a,
                       const char *aRole, const Tensor &b, const char *bRole, Op op) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> aStrides, broadcastStrides(a.shape, out.shape, aRole));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> bStrides, broadcastStrides(b.shape, out.shape, bRole));
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
                       const char *aRole, const Tensor &b, const char *bRole, const Tensor &c,
                       const char *cRole, Op op) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> aStrides, broadcastStrides(a.shape, out.shape, aRole));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> bStrides, broadcastStrides(b.shape, out.shape, bRole));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> cStrides, broadcastStrides(c.shape, out.shape, cRole));
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

enum class UnaryOp {
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Reciprocal, Tanh, Erf, Sigmoid, Silu, Relu,
  GeluErf, GeluTanh,
};

/// 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) otherwise, without a
/// branch: both sides are the same exp and one division (a divergent branch
/// would run both).
template <typename T> __device__ __forceinline__ T sigmoidOf(T x) {
  const bool nonNegative = x >= T(0);
  const T e = dev::mexp(nonNegative ? -x : x);
  return (nonNegative ? T(1) : e) / (T(1) + e);
}

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
    return dev::Elem<D>::store(unaryValue<Op>(dev::Elem<D>::load(x)));
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
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(in, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  static const std::pair<std::string_view, UnaryOp> kOps[] = {
      {"nn.neg", UnaryOp::Neg},         {"nn.abs", UnaryOp::Abs},
      {"nn.exp", UnaryOp::Exp},         {"nn.log", UnaryOp::Log},
      {"nn.sqrt", UnaryOp::Sqrt},       {"nn.rsqrt", UnaryOp::Rsqrt},
      {"nn.reciprocal", UnaryOp::Reciprocal}, {"nn.tanh", UnaryOp::Tanh},
      {"nn.erf", UnaryOp::Erf},         {"nn.sigmoid", UnaryOp::Sigmoid},
      {"nn.silu", UnaryOp::Silu},       {"nn.relu", UnaryOp::Relu},
      {"nn.gelu", UnaryOp::GeluErf},
  };
  std::optional<UnaryOp> op;
  for (const auto &[name, value] : kOps)
    if (name == call.name)
      op = value;
  if (!op)
    return kernelError("not a unary kernel");
  if (*op == UnaryOp::GeluErf) {
    LOOM_ASSIGN_OR_RETURN(std::string approximate,
                          call.attrs.getStr("approximate", std::string("none")));
    if (approximate == "tanh")
      op = UnaryOp::GeluTanh;
    else if (approximate != "none")
      return kernelError("attribute 'approximate' is '" + approximate +
                         "', expected 'none' or 'tanh'");
  }
  if (in.dtype == DType::I64)
    return launchUnaryAs<DType::I64>(call, *op);
  if (in.dtype == DType::I32)
    return launchUnaryAs<DType::I32>(call, *op);
  return dispatchFloatDType(in.dtype, "input", [&](auto tag) {
    return launchUnaryAs<decltype(tag)::value>(call, *op);
  });
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Maximum, Minimum };

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

template <DType D> llvm::Error launchBinaryAs(const KernelCall &call, BinaryOp op) {
  using S = StorageOf<D>;
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.outputs[0];
  switch (op) {
#define LOOM_BINARY_CASE(OP)                                                   \
  case BinaryOp::OP:                                                           \
    return launchMap2<BinaryFn<BinaryOp::OP, D>, S, S, S>(call.ctx, out, a, "lhs", b, "rhs", \
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
      return launchMap2<BinaryFn<BinaryOp::Pow, D>, S, S, S>(call.ctx, out, a, "lhs", b, "rhs",
                                                             BinaryFn<BinaryOp::Pow, D>{});
  }
  return kernelError("unknown binary op");
}

llvm::Error launchBinary(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameDType(a, "lhs", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(b, "rhs", out, "output"));
  static const std::pair<std::string_view, BinaryOp> kOps[] = {
      {"nn.add", BinaryOp::Add},         {"nn.sub", BinaryOp::Sub},
      {"nn.mul", BinaryOp::Mul},         {"nn.div", BinaryOp::Div},
      {"nn.pow", BinaryOp::Pow},         {"nn.maximum", BinaryOp::Maximum},
      {"nn.minimum", BinaryOp::Minimum},
  };
  std::optional<BinaryOp> op;
  for (const auto &[name, value] : kOps)
    if (name == call.name)
      op = value;
  if (!op)
    return kernelError("not a binary kernel");
  if (out.dtype == DType::I64)
    return launchBinaryAs<DType::I64>(call, *op);
  if (out.dtype == DType::I32)
    return launchBinaryAs<DType::I32>(call, *op);
  return dispatchFloatDType(out.dtype, "operands", [&](auto tag) {
    return launchBinaryAs<decltype(tag)::value>(call, *op);
  });
}

//===----------------------------------------------------------------------===//
// Compare and where
//===----------------------------------------------------------------------===//

enum class Pred : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };

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
  LOOM_RETURN_IF_ERROR(checkSameDType(a, "lhs", b, "rhs"));
  if (out.dtype != DType::I1)
    return kernelError(llvm::Twine("output dtype is ") + dtypeName(out.dtype) +
                       ", expected i1");
  LOOM_ASSIGN_OR_RETURN(std::string predicate, call.attrs.getStr("predicate"));
  static const std::pair<std::string_view, Pred> kPreds[] = {
      {"eq", Pred::Eq}, {"ne", Pred::Ne}, {"lt", Pred::Lt},
      {"le", Pred::Le}, {"gt", Pred::Gt}, {"ge", Pred::Ge}};
  std::optional<Pred> pred;
  for (const auto &[name, value] : kPreds)
    if (name == predicate)
      pred = value;
  if (!pred)
    return kernelError("attribute 'predicate' is '" + predicate +
                       "', expected eq, ne, lt, le, gt or ge");
  return dispatchAnyDType(a.dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    using S = StorageOf<D>;
    return launchMap2<CompareFn<D>, uint8_t, S, S>(call.ctx, out, a, "lhs", b, "rhs",
                                                   CompareFn<D>{*pred});
  });
}

template <typename Word> struct SelectFn {
  __device__ Word operator()(int64_t, uint8_t cond, Word a, Word b) const {
    return cond ? a : b;
  }
};

template <typename Word> llvm::Error launchWhereWords(const KernelCall &call) {
  const Tensor &cond = call.inputs[0], &a = call.inputs[1], &b = call.inputs[2];
  return launchMap3<SelectFn<Word>, Word, uint8_t, Word, Word>(
      call.ctx, call.outputs[0], cond, "condition", a, "lhs", b, "rhs", SelectFn<Word>{});
}

llvm::Error launchWhere(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 1, 1));
  const Tensor &cond = call.inputs[0], &a = call.inputs[1], &b = call.inputs[2];
  const Tensor &out = call.outputs[0];
  if (cond.dtype != DType::I1)
    return kernelError(llvm::Twine("condition dtype is ") + dtypeName(cond.dtype) +
                       ", expected i1");
  LOOM_RETURN_IF_ERROR(checkSameDType(a, "lhs", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(b, "rhs", out, "output"));
  switch (dtypeSize(out.dtype)) {
  case 1:
    return launchWhereWords<uint8_t>(call);
  case 2:
    return launchWhereWords<uint16_t>(call);
  case 4:
    return launchWhereWords<uint32_t>(call);
  default:
    return launchWhereWords<uint64_t>(call);
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
  LOOM_RETURN_IF_ERROR(checkSameShape(in, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  LOOM_ASSIGN_OR_RETURN(double p, call.attrs.getF64("p"));
  LOOM_ASSIGN_OR_RETURN(int64_t seed, call.attrs.getInt("seed"));
  if (!(p >= 0.0 && p <= 1.0))
    return kernelError("attribute 'p' is " + std::to_string(p) + ", expected [0, 1]");
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
  LOOM_ASSIGN_OR_RETURN(int64_t rawDim, call.attrs.getInt("dim"));
  LOOM_ASSIGN_OR_RETURN(double start, call.attrs.getF64("start", 0.0));
  LOOM_ASSIGN_OR_RETURN(double step, call.attrs.getF64("step", 1.0));
  const int64_t rank = static_cast<int64_t>(out.shape.size());
  if (rank == 0)
    return kernelError("output must have rank >= 1");
  LOOM_ASSIGN_OR_RETURN(int64_t dim, normalizeDim(rawDim, rank, "attribute 'dim'"));
  const int64_t n = out.numElements();
  if (n == 0)
    return llvm::Error::success();
  const int64_t size = out.shape[dim];
  const int64_t inner = contiguousStrides(out.shape)[dim];
  return dispatchAnyDType(out.dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    iotaKernel<D><<<gridFor(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        n, inner, size, start, step, static_cast<StorageOf<D> *>(out.data));
    return llvm::Error::success();
  });
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

enum class ReduceOp { Sum, Mean, Max };

/// The running value of a reduction: Acc, its identity, folding in element
/// `index` (fold) and merging two partial results (merge; `a` holds the
/// lower positions for the max's tie-break, which keeps the first maximum,
/// or the first NaN, exactly as the CPU's in-order walk does).
template <ReduceOp Op, bool IsInt> struct Reducer;

template <ReduceOp Op> struct Reducer<Op, false> { // Sum, Mean over floats: f64
  struct Acc {
    double value;
  };
  __device__ static Acc identity() { return {0.0}; }
  __device__ static void fold(Acc &acc, double v, int64_t) { acc.value = dev::add(acc.value, v); }
  __device__ static Acc merge(Acc a, Acc b) { return {dev::add(a.value, b.value)}; }
  __device__ static Acc shuffleDown(Acc a, int offset) {
    return {__shfl_down_sync(0xFFFFFFFFu, a.value, offset)};
  }
};

template <> struct Reducer<ReduceOp::Max, false> {
  struct Acc {
    double value;
    int64_t index; // of the element that gave `value`
  };
  __device__ static Acc identity() { return {-INFINITY, INT64_MAX}; }
  __device__ static bool better(double v, int64_t i, const Acc &acc) {
    const bool vNaN = v != v, accNaN = acc.value != acc.value;
    if (vNaN)
      return !accNaN || i < acc.index;
    return !accNaN && (v > acc.value || (v == acc.value && i < acc.index));
  }
  __device__ static void fold(Acc &acc, double v, int64_t i) {
    if (better(v, i, acc))
      acc = {v, i};
  }
  __device__ static Acc merge(Acc a, Acc b) { return better(b.value, b.index, a) ? b : a; }
  __device__ static Acc shuffleDown(Acc a, int offset) {
    return {__shfl_down_sync(0xFFFFFFFFu, a.value, offset),
            static_cast<int64_t>(__shfl_down_sync(
                0xFFFFFFFFu, static_cast<long long>(a.index), offset))};
  }
};

template <> struct Reducer<ReduceOp::Sum, true> { // wrapping int64
  struct Acc {
    int64_t value;
  };
  __device__ static Acc identity() { return {0}; }
  __device__ static void fold(Acc &acc, int64_t v, int64_t) {
    acc.value = static_cast<int64_t>(static_cast<uint64_t>(acc.value) + static_cast<uint64_t>(v));
  }
  __device__ static Acc merge(Acc a, Acc b) {
    return {static_cast<int64_t>(static_cast<uint64_t>(a.value) + static_cast<uint64_t>(b.value))};
  }
  __device__ static Acc shuffleDown(Acc a, int offset) {
    return {static_cast<int64_t>(
        __shfl_down_sync(0xFFFFFFFFu, static_cast<long long>(a.value), offset))};
  }
};

template <> struct Reducer<ReduceOp::Max, true> {
  struct Acc {
    int64_t value;
  };
  __device__ static Acc identity() { return {INT64_MIN}; }
  __device__ static void fold(Acc &acc, int64_t v, int64_t) {
    acc.value = v > acc.value ? v : acc.value;
  }
  __device__ static Acc merge(Acc a, Acc b) { return {b.value > a.value ? b.value : a.value}; }
  __device__ static Acc shuffleDown(Acc a, int offset) {
    return {static_cast<int64_t>(
        __shfl_down_sync(0xFFFFFFFFu, static_cast<long long>(a.value), offset))};
  }
};

template <ReduceOp Op, DType D> struct ReduceTraits {
  static constexpr bool kInt = dev::isIntDType(D);
  using R = Reducer<Op, kInt>;
  using Acc = typename R::Acc;
  __device__ static auto loadValue(StorageOf<D> s) {
    if constexpr (kInt)
      return dev::Elem<D>::load(s);
    else
      return dev::Elem<D>::loadDouble(s);
  }
  __device__ static StorageOf<D> finish(Acc acc, int64_t count) {
    if constexpr (kInt)
      return dev::Elem<D>::store(acc.value);
    else if constexpr (Op == ReduceOp::Mean)
      return dev::Elem<D>::storeDouble(acc.value / static_cast<double>(count));
    else
      return dev::Elem<D>::storeDouble(acc.value);
  }
};

/// One group of Group threads per output element (Group = 32: a warp, or 256:
/// the whole block); the group's threads take reduced positions r = lane,
/// lane + Group, ... and their partial results merge in a fixed tree. For
/// reductions whose innermost input dim is reduced (contiguous reads).
template <ReduceOp Op, DType D, int Group>
__global__ void __launch_bounds__(kBlockSize)
reduceGroupKernel(int64_t outCount, int64_t reduceCount,
                  const __grid_constant__ StridedMap<1> kept,
                  const __grid_constant__ StridedMap<1> reduced, const StorageOf<D> *in,
                  StorageOf<D> *out) {
  using Traits = ReduceTraits<Op, D>;
  using R = typename Traits::R;
  using Acc = typename Traits::Acc;
  constexpr int kGroupsPerBlock = kBlockSize / Group;
  constexpr int kWarps = kBlockSize / 32;
  __shared__ Acc warpResults[kWarps];
  const int group = threadIdx.x / Group, lane = threadIdx.x % Group;
  const int warp = threadIdx.x / 32, warpLane = threadIdx.x % 32;
  // The loop bound is uniform over the block (Group = 256 has one group).
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock; first < outCount;
       first += static_cast<int64_t>(gridDim.x) * kGroupsPerBlock) {
    const int64_t o = first + group;
    Acc acc = R::identity();
    if (o < outCount) {
      int64_t base[1];
      stridedOffsets(kept, o, base);
      for (int64_t r = lane; r < reduceCount; r += Group) {
        int64_t offset[1];
        stridedOffsets(reduced, r, offset);
        R::fold(acc, Traits::loadValue(in[base[0] + offset[0]]), r);
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      acc = R::merge(acc, R::shuffleDown(acc, offset));
    if constexpr (Group == 32) {
      if (lane == 0 && o < outCount)
        out[o] = Traits::finish(acc, reduceCount);
    } else {
      if (warpLane == 0)
        warpResults[warp] = acc;
      __syncthreads();
      if (warp == 0) {
        acc = warpLane < kWarps ? warpResults[warpLane] : R::identity();
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2)
          acc = R::merge(acc, R::shuffleDown(acc, offset));
        if (warpLane == 0 && o < outCount)
          out[o] = Traits::finish(acc, reduceCount);
      }
      __syncthreads();
    }
  }
}

/// Columns x Rows threads per block: threadIdx.x picks the output element
/// (neighbouring outputs are neighbouring inputs when the innermost dim is
/// kept), threadIdx.y the reduced positions r = y, y + Rows, ...; the Rows
/// partial results merge in a fixed tree. With Rows = 1 each thread walks its
/// reduction in order, as the CPU does.
template <ReduceOp Op, DType D, int Rows>
__global__ void __launch_bounds__(kBlockSize)
reduceColumnsKernel(int64_t outCount, int64_t reduceCount,
                    const __grid_constant__ StridedMap<1> kept,
                    const __grid_constant__ StridedMap<1> reduced, const StorageOf<D> *in,
                    StorageOf<D> *out) {
  using Traits = ReduceTraits<Op, D>;
  using R = typename Traits::R;
  using Acc = typename Traits::Acc;
  constexpr int kColumns = kBlockSize / Rows;
  __shared__ Acc partial[Rows > 1 ? Rows : 1][kColumns];
  const int x = threadIdx.x, y = threadIdx.y;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kColumns; first < outCount;
       first += static_cast<int64_t>(gridDim.x) * kColumns) {
    const int64_t o = first + x;
    Acc acc = R::identity();
    if (o < outCount) {
      int64_t base[1];
      stridedOffsets(kept, o, base);
      for (int64_t r = y; r < reduceCount; r += Rows) {
        int64_t offset[1];
        stridedOffsets(reduced, r, offset);
        R::fold(acc, Traits::loadValue(in[base[0] + offset[0]]), r);
      }
    }
    if constexpr (Rows > 1) {
      partial[y][x] = acc;
      __syncthreads();
#pragma unroll
      for (int half = Rows / 2; half > 0; half /= 2) {
        if (y < half)
          partial[y][x] = R::merge(partial[y][x], partial[y + half][x]);
        __syncthreads();
      }
      acc = partial[0][x];
      __syncthreads(); // partial is rewritten by the next iteration
    }
    if (y == 0 && o < outCount)
      out[o] = Traits::finish(acc, reduceCount);
  }
}

/// Reduction over the leading dims of a row-major [reduceCount, outCount]
/// input (the kept dims innermost and contiguous): a block owns Cols * V
/// neighbouring outputs, each thread V of them loaded as one 16-byte vector
/// per row, for the rows r = y, y + Rows, ... (in order); the Rows partial
/// results of each output merge in a fixed tree.
template <ReduceOp Op, DType D, int V, int Cols>
__global__ void __launch_bounds__(kBlockSize)
reduceLeadingKernel(int64_t outCount, int64_t reduceCount, const StorageOf<D> *in,
                    StorageOf<D> *out) {
  using Traits = ReduceTraits<Op, D>;
  using R = typename Traits::R;
  using Acc = typename Traits::Acc;
  using S = StorageOf<D>;
  using Vec = dev::Vec<S, V>;
  constexpr int Rows = kBlockSize / Cols;
  constexpr int kTile = Cols * V;
  constexpr int kUnroll = 8;
  __shared__ Acc partial[Rows][kTile];
  const int x = threadIdx.x % Cols, y = threadIdx.x / Cols;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kTile; first < outCount;
       first += static_cast<int64_t>(gridDim.x) * kTile) {
    const S *column = in + first + x * V;
    Acc acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k)
      acc[k] = R::identity();
    int64_t r = y;
    for (; r + (kUnroll - 1) * Rows < reduceCount; r += kUnroll * Rows) {
      Vec loaded[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        loaded[u] = *reinterpret_cast<const Vec *>(column + (r + u * Rows) * outCount);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int k = 0; k < V; ++k)
          R::fold(acc[k], Traits::loadValue(loaded[u].v[k]), r + u * Rows);
    }
    for (; r < reduceCount; r += Rows) {
      const Vec loaded = *reinterpret_cast<const Vec *>(column + r * outCount);
#pragma unroll
      for (int k = 0; k < V; ++k)
        R::fold(acc[k], Traits::loadValue(loaded.v[k]), r);
    }
#pragma unroll
    for (int k = 0; k < V; ++k)
      partial[y][x * V + k] = acc[k];
    __syncthreads();
#pragma unroll
    for (int half = Rows / 2; half > 0; half /= 2) {
      for (int i = threadIdx.x; i < half * kTile; i += kBlockSize) {
        const int row = i / kTile, c = i % kTile;
        partial[row][c] = R::merge(partial[row][c], partial[row + half][c]);
      }
      __syncthreads();
    }
    if (threadIdx.x < kTile)
      out[first + threadIdx.x] = Traits::finish(partial[0][threadIdx.x], reduceCount);
    __syncthreads(); // partial is rewritten by the next iteration
  }
}

struct ReducePlan {
  std::vector<int64_t> keptShape, keptStrides;       // output order
  std::vector<int64_t> reducedShape, reducedStrides; // input strides
  int64_t reduceCount = 1;
};

llvm::Expected<ReducePlan> planReduction(const Tensor &in, const Tensor &out,
                                         const std::vector<int64_t> &rawDims, bool keepDim) {
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  std::vector<bool> reduced(rank, false);
  for (int64_t rawDim : rawDims) {
    LOOM_ASSIGN_OR_RETURN(int64_t dim, normalizeDim(rawDim, rank, "reduced dim"));
    if (reduced[dim])
      return kernelError("dim " + llvm::Twine(rawDim) + " is listed twice in 'dims'");
    reduced[dim] = true;
  }
  ReducePlan plan;
  std::vector<int64_t> expected;
  const std::vector<int64_t> strides = contiguousStrides(in.shape);
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      plan.reducedShape.push_back(in.shape[d]);
      plan.reducedStrides.push_back(strides[d]);
      plan.reduceCount *= in.shape[d];
      if (keepDim)
        expected.push_back(1);
    } else {
      plan.keptShape.push_back(in.shape[d]);
      plan.keptStrides.push_back(strides[d]);
      expected.push_back(in.shape[d]);
    }
  }
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  return plan;
}

template <ReduceOp Op, DType D>
llvm::Error launchReduceAs(const KernelCall &call, const ReducePlan &plan) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  const int64_t outCount = out.numElements();
  if (outCount == 0)
    return llvm::Error::success();
  LOOM_ASSIGN_OR_RETURN(StridedMap<1> kept,
                        makeStridedMap<1>(plan.keptShape, {plan.keptStrides}));
  LOOM_ASSIGN_OR_RETURN(StridedMap<1> reduced,
                        makeStridedMap<1>(plan.reducedShape, {plan.reducedStrides}));
  const int64_t reduceCount = plan.reduceCount;
  const auto *src = static_cast<const StorageOf<D> *>(in.data);
  auto *dst = static_cast<StorageOf<D> *>(out.data);
  cudaStream_t stream = call.ctx.stream;
  const bool innermostReduced =
      reduced.rank > 0 && reduced.strides[0][reduced.rank - 1] == 1;
  if (innermostReduced && reduceCount > 16) {
    if (reduceCount > 1024)
      reduceGroupKernel<Op, D, 256><<<gridFor(outCount * 256, call.ctx), kBlockSize, 0,
                                      stream>>>(outCount, reduceCount, kept, reduced, src,
                                                dst);
    else
      reduceGroupKernel<Op, D, 32><<<gridFor(outCount * 32, call.ctx), kBlockSize, 0,
                                     stream>>>(outCount, reduceCount, kept, reduced, src,
                                               dst);
    return llvm::Error::success();
  }
  // Leading dims reduced, the kept ones contiguous: 16-byte rows of a tile.
  constexpr int V = std::min(static_cast<int>(16 / sizeof(StorageOf<D>)), 8);
  constexpr int kCols = 2;
  if (V > 1 && kept.rank == 1 && kept.strides[0][0] == 1 && reduced.rank == 1 &&
      reduced.strides[0][0] == outCount && outCount % (kCols * V) == 0 &&
      reduceCount >= 64 && isAligned(src, 16)) {
    const int64_t tiles = outCount / (kCols * V);
    const int64_t cap = static_cast<int64_t>(call.ctx.multiprocessors > 0
                                                 ? call.ctx.multiprocessors
                                                 : 132) * 8;
    reduceLeadingKernel<Op, D, V, kCols>
        <<<static_cast<unsigned>(std::min(tiles, cap)), kBlockSize, 0, stream>>>(
            outCount, reduceCount, src, dst);
    return llvm::Error::success();
  }
  // Split each reduction over more threads only when the outputs alone leave
  // the GPU idle (a fixed rule, so results never depend on the device).
  int rows = 1;
  while (rows < 32 && outCount * rows < 256 * 1024 && reduceCount >= 64 * rows)
    rows *= 2;
  const unsigned blocks = gridFor(outCount * rows, call.ctx);
  switch (rows) {
  case 1:
    reduceColumnsKernel<Op, D, 1><<<blocks, dim3(kBlockSize, 1), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  case 2:
    reduceColumnsKernel<Op, D, 2><<<blocks, dim3(kBlockSize / 2, 2), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  case 4:
    reduceColumnsKernel<Op, D, 4><<<blocks, dim3(kBlockSize / 4, 4), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  case 8:
    reduceColumnsKernel<Op, D, 8><<<blocks, dim3(kBlockSize / 8, 8), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  case 16:
    reduceColumnsKernel<Op, D, 16><<<blocks, dim3(kBlockSize / 16, 16), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  default:
    reduceColumnsKernel<Op, D, 32><<<blocks, dim3(kBlockSize / 32, 32), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  }
  return llvm::Error::success();
}

template <ReduceOp Op> llvm::Error reduceDispatch(const KernelCall &call, const ReducePlan &plan) {
  const DType type = call.inputs[0].dtype;
  if (type == DType::I64 || type == DType::I32) {
    if constexpr (Op == ReduceOp::Mean)
      return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(type) +
                         " (a float type is required)");
    else if (type == DType::I64)
      return launchReduceAs<Op, DType::I64>(call, plan);
    else
      return launchReduceAs<Op, DType::I32>(call, plan);
  }
  return dispatchFloatDType(type, "input", [&](auto tag) {
    return launchReduceAs<Op, decltype(tag)::value>(call, plan);
  });
}

llvm::Error launchReduce(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, 1));
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, call.attrs.getInts("dims"));
  LOOM_ASSIGN_OR_RETURN(bool keepDim, call.attrs.getBool("keepdim", false));
  LOOM_ASSIGN_OR_RETURN(ReducePlan plan, planReduction(in, out, dims, keepDim));
  if (call.name == "nn.reduce_sum")
    return reduceDispatch<ReduceOp::Sum>(call, plan);
  if (call.name == "nn.reduce_mean")
    return reduceDispatch<ReduceOp::Mean>(call, plan);
  if (plan.reduceCount == 0)
    return kernelError("cannot take the maximum of an empty set (a reduced dim "
                       "has size 0)");
  return reduceDispatch<ReduceOp::Max>(call, plan);
}

//===----------------------------------------------------------------------===//
// Activation gradients
//===----------------------------------------------------------------------===//

enum class Activation { GeluErf, GeluTanh, Silu };

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
    return E::store(dev::mul(E::load(dy), activationDerivative<A>(E::load(x))));
  }
};

llvm::Error launchActivationGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &x = call.inputs[0], &dy = call.inputs[1], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", dy, "grad"));
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", dy, "grad"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", out, "output"));
  Activation activation = Activation::Silu;
  if (call.name == "nn.gelu_grad") {
    LOOM_ASSIGN_OR_RETURN(std::string approximate,
                          call.attrs.getStr("approximate", std::string("none")));
    if (approximate == "none")
      activation = Activation::GeluErf;
    else if (approximate == "tanh")
      activation = Activation::GeluTanh;
    else
      return kernelError("attribute 'approximate' is '" + approximate +
                         "', expected 'none' or 'tanh'");
  }
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
// AdamW
//===----------------------------------------------------------------------===//

struct AdamWParams {
  double beta1, beta2, oneMinusBeta1, oneMinusBeta2, epsilon, decay;
};

/// One element of Optimizer.cpp's update, in double, rounded to f32 on store.
__device__ __forceinline__ void adamwElement(const AdamWParams &h, double lr, double c1,
                                             double c2, float p, float g, float m, float v,
                                             float &pOut, float &mOut, float &vOut) {
  using namespace dev;
  const double grad = g;
  const double m1 = add(mul(h.beta1, static_cast<double>(m)), mul(h.oneMinusBeta1, grad));
  const double v1 =
      add(mul(h.beta2, static_cast<double>(v)), mul(mul(h.oneMinusBeta2, grad), grad));
  const double update = (m1 / c1) / add(msqrt(v1 / c2), h.epsilon);
  const double p0 = p;
  pOut = static_cast<float>(sub(p0, mul(lr, add(mul(h.decay, p0), update))));
  mOut = static_cast<float>(m1);
  vOut = static_cast<float>(v1);
}

/// lr and step are read on the device. Every element reads its own p, g, m, v
/// before writing its own results, so outputs may alias inputs.
template <int V>
__global__ void __launch_bounds__(kBlockSize)
adamwKernel(int64_t n, AdamWParams h, const float *lrPtr, const float *stepPtr,
            const float *p, const float *g, const float *m, const float *v, float *pOut,
            float *mOut, float *vOut) {
  // The bias corrections, once per block (pow is costly next to one element).
  __shared__ double corrections[2];
  const double lr = *lrPtr, step = *stepPtr;
  const bool valid = step >= 1; // otherwise leave everything as it is
  if (threadIdx.x < 2)
    corrections[threadIdx.x] =
        valid ? 1.0 - pow(threadIdx.x == 0 ? h.beta1 : h.beta2, step) : 1.0;
  __syncthreads();
  const double c1 = corrections[0], c2 = corrections[1];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = n / V;
  using F = dev::Vec<float, V>;
  for (int64_t i = first; i < vectors; i += stride) {
    const F vp = reinterpret_cast<const F *>(p)[i], vg = reinterpret_cast<const F *>(g)[i];
    const F vm = reinterpret_cast<const F *>(m)[i], vv = reinterpret_cast<const F *>(v)[i];
    F op = vp, om = vm, ov = vv;
    if (valid) {
#pragma unroll
      for (int k = 0; k < V; ++k)
        adamwElement(h, lr, c1, c2, vp.v[k], vg.v[k], vm.v[k], vv.v[k], op.v[k], om.v[k],
                     ov.v[k]);
    }
    reinterpret_cast<F *>(pOut)[i] = op;
    reinterpret_cast<F *>(mOut)[i] = om;
    reinterpret_cast<F *>(vOut)[i] = ov;
  }
  for (int64_t i = vectors * V + first; i < n; i += stride) {
    float op = p[i], om = m[i], ov = v[i];
    if (valid)
      adamwElement(h, lr, c1, c2, p[i], g[i], m[i], v[i], op, om, ov);
    pOut[i] = op;
    mOut[i] = om;
    vOut[i] = ov;
  }
}

llvm::Error launchAdamW(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 6, 6, 3, 3));
  const Tensor &param = call.inputs[0];
  for (size_t i = 0; i < 4; ++i) {
    LOOM_RETURN_IF_ERROR(checkSameShape(call.inputs[i], "operand", param, "param"));
    if (call.inputs[i].dtype != DType::F32)
      return kernelError("parameter, gradient and moments must be f32");
  }
  for (size_t i = 4; i < 6; ++i)
    if (call.inputs[i].dtype != DType::F32 || call.inputs[i].numElements() != 1)
      return kernelError("learning rate and step must be f32 scalars");
  for (const Tensor &out : call.outputs) {
    LOOM_RETURN_IF_ERROR(checkSameShape(out, "result", param, "param"));
    if (out.dtype != DType::F32)
      return kernelError("results must be f32");
  }
  LOOM_ASSIGN_OR_RETURN(double beta1, call.attrs.getF64("beta1"));
  LOOM_ASSIGN_OR_RETURN(double beta2, call.attrs.getF64("beta2"));
  LOOM_ASSIGN_OR_RETURN(double epsilon, call.attrs.getF64("epsilon"));
  LOOM_ASSIGN_OR_RETURN(double decay, call.attrs.getF64("weight_decay"));
  const int64_t n = param.numElements();
  if (n == 0)
    return llvm::Error::success();
  const AdamWParams h{beta1, beta2, 1 - beta1, 1 - beta2, epsilon, decay};
  auto f = [](const Tensor &t) { return static_cast<float *>(t.data); };
  const auto &in = call.inputs;
  const auto &out = call.outputs;
  bool aligned = true;
  for (const Tensor &t : in.take_front(4))
    aligned = aligned && isAligned(t.data, 16);
  for (const Tensor &t : out)
    aligned = aligned && isAligned(t.data, 16);
  if (aligned)
    adamwKernel<4><<<gridFor(n / 4 + 1, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        n, h, f(in[4]), f(in[5]), f(in[0]), f(in[1]), f(in[2]), f(in[3]), f(out[0]), f(out[1]),
        f(out[2]));
  else
    adamwKernel<1><<<gridFor(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        n, h, f(in[4]), f(in[5]), f(in[0]), f(in[1]), f(in[2]), f(in[3]), f(out[0]), f(out[1]),
        f(out[2]));
  return llvm::Error::success();
}

/// Up to kMultiTensors parameters per launch, passed by value (the kernel
/// parameter space holds them, no device-side table to allocate).
constexpr int kMultiTensors = 36;
constexpr int64_t kMultiChunk = 16384; // elements per block

struct AdamWMultiArgs {
  int count;
  int64_t n[kMultiTensors];
  int64_t firstBlock[kMultiTensors + 1];
  double decay[kMultiTensors];
  const float *g[kMultiTensors];
  float *p[kMultiTensors], *m[kMultiTensors], *v[kMultiTensors];
};

/// Each block updates one chunk of one parameter, in place (the fused kernel
/// writes p, m, v back where it read them, as --loom-fuse-adamw arranges).
__global__ void __launch_bounds__(kBlockSize)
adamwMultiKernel(const __grid_constant__ AdamWMultiArgs a, AdamWParams hyper, const float *lrPtr,
                 const float *stepPtr, const float *scalePtr) {
  __shared__ double corrections[2];
  const double lr = *lrPtr, step = *stepPtr;
  const bool valid = step >= 1;
  if (!valid)
    return;
  if (threadIdx.x < 2)
    corrections[threadIdx.x] = 1.0 - pow(threadIdx.x == 0 ? hyper.beta1 : hyper.beta2, step);
  __syncthreads();
  const double c1 = corrections[0], c2 = corrections[1];
  int t = 0;
  while (t + 1 < a.count && a.firstBlock[t + 1] <= blockIdx.x)
    ++t;
  const int64_t n = a.n[t];
  const int64_t begin = (blockIdx.x - a.firstBlock[t]) * kMultiChunk;
  const int64_t end = begin + kMultiChunk < n ? begin + kMultiChunk : n;
  const float scale = scalePtr ? *scalePtr : 1.0f;
  float *p = a.p[t], *m = a.m[t], *v = a.v[t];
  const float *g = a.g[t];
  AdamWParams h = hyper;
  h.decay = a.decay[t];
  using F = dev::Vec<float, 4>;
  const bool aligned = ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(g) |
                         reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) &
                        15) == 0;
  // Chunks start at multiples of kMultiChunk, so an aligned tensor's chunks
  // are aligned too.
  const int64_t vecEnd = aligned ? begin + (end - begin) / 4 * 4 : begin;
  for (int64_t i = begin + 4 * threadIdx.x; i < vecEnd; i += 4 * kBlockSize) {
    const F vp = *reinterpret_cast<const F *>(p + i), vg = *reinterpret_cast<const F *>(g + i);
    const F vm = *reinterpret_cast<const F *>(m + i), vv = *reinterpret_cast<const F *>(v + i);
    F op, om, ov;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float grad = scalePtr ? vg.v[k] * scale : vg.v[k];
      adamwElement(h, lr, c1, c2, vp.v[k], grad, vm.v[k], vv.v[k], op.v[k], om.v[k], ov.v[k]);
    }
    *reinterpret_cast<F *>(p + i) = op;
    *reinterpret_cast<F *>(m + i) = om;
    *reinterpret_cast<F *>(v + i) = ov;
  }
  for (int64_t j = vecEnd + threadIdx.x; j < end; j += kBlockSize) {
    const float grad = scalePtr ? g[j] * scale : g[j];
    float op, om, ov;
    adamwElement(h, lr, c1, c2, p[j], grad, m[j], v[j], op, om, ov);
    p[j] = op;
    m[j] = om;
    v[j] = ov;
  }
}

llvm::Error launchAdamWMulti(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(bool hasScale, call.attrs.getBool("has_scale"));
  LOOM_ASSIGN_OR_RETURN(size_t first, cpu::detail::adamwMultiFirstGroup(
                                           call.inputs.size(), call.outputs.size(), hasScale));
  const size_t groups = call.outputs.size() / 3;
  for (size_t i = 0; i < first; ++i)
    if (call.inputs[i].dtype != DType::F32 || call.inputs[i].numElements() != 1)
      return kernelError("learning rate, step and scale must be f32 scalars");
  LOOM_ASSIGN_OR_RETURN(double beta1, call.attrs.getF64("beta1"));
  LOOM_ASSIGN_OR_RETURN(double beta2, call.attrs.getF64("beta2"));
  LOOM_ASSIGN_OR_RETURN(double epsilon, call.attrs.getF64("epsilon"));
  LOOM_ASSIGN_OR_RETURN(std::vector<double> decays, call.attrs.getF64List("weight_decays"));
  if (decays.size() != groups)
    return kernelError("weight_decays has " + std::to_string(decays.size()) +
                       " entries for " + std::to_string(groups) + " parameters");
  const AdamWParams h{beta1, beta2, 1 - beta1, 1 - beta2, epsilon, 0};
  for (size_t i = 0; i < groups; ++i) {
    llvm::ArrayRef<Tensor> in = call.inputs.slice(first + 4 * i, 4);
    llvm::ArrayRef<Tensor> out = call.outputs.slice(3 * i, 3);
    for (const Tensor &t : in) {
      LOOM_RETURN_IF_ERROR(checkSameShape(t, "operand", in[0], "param"));
      if (t.dtype != DType::F32)
        return kernelError("parameter, gradient and moments must be f32");
    }
    // In place only: each result is its own input's buffer.
    if (out[0].data != in[0].data || out[1].data != in[2].data || out[2].data != in[3].data)
      return kernelError("parameter " + std::to_string(i) +
                         ": the CUDA kernel updates in place; results must be the "
                         "parameter's and moments' own buffers");
  }
  auto f = [](const Tensor &t) { return static_cast<float *>(t.data); };
  const float *scale = hasScale ? f(call.inputs[2]) : nullptr;
  for (size_t start = 0; start < groups;) {
    AdamWMultiArgs a{};
    int64_t blocks = 0;
    size_t i = start;
    for (; i < groups && a.count < kMultiTensors; ++i) {
      llvm::ArrayRef<Tensor> in = call.inputs.slice(first + 4 * i, 4);
      const int64_t n = in[0].numElements();
      if (n == 0)
        continue;
      a.n[a.count] = n;
      a.decay[a.count] = decays[i];
      a.firstBlock[a.count] = blocks;
      a.p[a.count] = f(in[0]);
      a.g[a.count] = f(in[1]);
      a.m[a.count] = f(in[2]);
      a.v[a.count] = f(in[3]);
      blocks += (n + kMultiChunk - 1) / kMultiChunk;
      ++a.count;
    }
    a.firstBlock[a.count] = blocks;
    start = i;
    if (blocks == 0)
      continue;
    adamwMultiKernel<<<unsigned(blocks), kBlockSize, 0, call.ctx.stream>>>(
        a, h, f(call.inputs[0]), f(call.inputs[1]), scale);
  }
  return llvm::Error::success();
}

} // namespace

void registerElementwiseKernels(llvm::StringMap<Launcher> &registry) {
  for (const char *name : {"nn.neg", "nn.abs", "nn.exp", "nn.log", "nn.sqrt", "nn.rsqrt",
                           "nn.reciprocal", "nn.tanh", "nn.erf", "nn.sigmoid", "nn.silu",
                           "nn.relu", "nn.gelu"})
    registry[name] = launchUnary;
  for (const char *name :
       {"nn.add", "nn.sub", "nn.mul", "nn.div", "nn.pow", "nn.maximum", "nn.minimum"})
    registry[name] = launchBinary;
  registry["nn.compare"] = launchCompare;
  registry["nn.where"] = launchWhere;
  registry["nn.cast"] = launchCast;
  registry["nn.dropout"] = launchDropout;
  registry["nn.iota"] = launchIota;
  for (const char *name : {"nn.reduce_sum", "nn.reduce_mean", "nn.reduce_max"})
    registry[name] = launchReduce;
  registry["nn.gelu_grad"] = launchActivationGrad;
  registry["nn.silu_grad"] = launchActivationGrad;
  registry["nn.adamw"] = launchAdamW;
  registry["nn.adamw_multi"] = launchAdamWMulti;
}

} // namespace loom::cuda
