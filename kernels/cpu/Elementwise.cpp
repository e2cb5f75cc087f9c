// Elementwise kernels: unary math, broadcasting binary ops, compare, where,
// cast, dropout and iota.

#include "kernels/cpu/KernelSupport.h"

#include <cmath>
#include <limits>

namespace loom::cpu::detail {

namespace {

// Per-element costs handed to parallelFor, in "simple operations".
constexpr int64_t kCheapOpCost = 1;
constexpr int64_t kTranscendentalCost = 20;

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

template <typename T> T sigmoidOf(T x) {
  // Split by sign so exp never overflows.
  if (x >= T(0))
    return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

template <UnaryOp Op, typename T> T unaryValue(T x) {
  if constexpr (std::is_integral_v<T>) {
    const uint64_t bits = static_cast<uint64_t>(x);
    if constexpr (Op == UnaryOp::Neg)
      return static_cast<T>(0 - bits); // wraps like two's complement hardware
    else if constexpr (Op == UnaryOp::Abs)
      return x < 0 ? static_cast<T>(0 - bits) : x;
    else
      return x > 0 ? x : 0; // Relu
  } else {
    if constexpr (Op == UnaryOp::Neg)
      return -x;
    else if constexpr (Op == UnaryOp::Abs)
      return std::fabs(x);
    else if constexpr (Op == UnaryOp::Exp)
      return std::exp(x);
    else if constexpr (Op == UnaryOp::Log)
      return std::log(x);
    else if constexpr (Op == UnaryOp::Sqrt)
      return std::sqrt(x);
    else if constexpr (Op == UnaryOp::Rsqrt)
      return T(1) / std::sqrt(x);
    else if constexpr (Op == UnaryOp::Reciprocal)
      return T(1) / x;
    else if constexpr (Op == UnaryOp::Tanh)
      return std::tanh(x);
    else if constexpr (Op == UnaryOp::Erf)
      return std::erf(x);
    else if constexpr (Op == UnaryOp::Sigmoid)
      return sigmoidOf(x);
    else if constexpr (Op == UnaryOp::Silu)
      return x * sigmoidOf(x);
    else if constexpr (Op == UnaryOp::Relu)
      return std::isnan(x) ? x : (x > T(0) ? x : T(0));
    else if constexpr (Op == UnaryOp::GeluErf)
      return x * T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
    else { // GeluTanh
      const T kSqrt2OverPi = T(0.79788456080286535588);
      return T(0.5) * x *
             (T(1) + std::tanh(kSqrt2OverPi * (x + T(0.044715) * x * x * x)));
    }
  }
}

template <UnaryOp Op, typename T>
void mapUnary(const KernelCall &call, int64_t cost) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  InputArray<T> src(in);
  OutputArray<T> dst(out);
  const T *s = src.data();
  T *d = dst.data();
  parallelFor(call.ctx, in.numElements(), cost, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      d[i] = unaryValue<Op>(s[i]);
  });
  dst.commit();
}

template <typename T> llvm::Error runUnaryAs(const KernelCall &call, UnaryOp op) {
  switch (op) {
#define LOOM_UNARY_CASE(OP, COST)                                              \
  case UnaryOp::OP:                                                            \
    mapUnary<UnaryOp::OP, T>(call, COST);                                      \
    return llvm::Error::success();
    LOOM_UNARY_CASE(Neg, kCheapOpCost)
    LOOM_UNARY_CASE(Abs, kCheapOpCost)
    LOOM_UNARY_CASE(Relu, kCheapOpCost)
    LOOM_UNARY_CASE(Reciprocal, kCheapOpCost)
    LOOM_UNARY_CASE(Sqrt, kCheapOpCost)
    LOOM_UNARY_CASE(Rsqrt, kCheapOpCost)
    LOOM_UNARY_CASE(Exp, kTranscendentalCost)
    LOOM_UNARY_CASE(Log, kTranscendentalCost)
    LOOM_UNARY_CASE(Tanh, kTranscendentalCost)
    LOOM_UNARY_CASE(Erf, kTranscendentalCost)
    LOOM_UNARY_CASE(Sigmoid, kTranscendentalCost)
    LOOM_UNARY_CASE(Silu, kTranscendentalCost)
    LOOM_UNARY_CASE(GeluErf, kTranscendentalCost)
    LOOM_UNARY_CASE(GeluTanh, kTranscendentalCost)
#undef LOOM_UNARY_CASE
  }
  return kernelError("unknown unary op");
}

template <> llvm::Error runUnaryAs<int64_t>(const KernelCall &call, UnaryOp op) {
  switch (op) {
  case UnaryOp::Neg:
    mapUnary<UnaryOp::Neg, int64_t>(call, kCheapOpCost);
    return llvm::Error::success();
  case UnaryOp::Abs:
    mapUnary<UnaryOp::Abs, int64_t>(call, kCheapOpCost);
    return llvm::Error::success();
  case UnaryOp::Relu:
    mapUnary<UnaryOp::Relu, int64_t>(call, kCheapOpCost);
    return llvm::Error::success();
  default:
    return kernelError(llvm::Twine("unsupported dtype ") +
                       dtypeName(call.inputs[0].dtype) + " (a float type is required)");
  }
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

template <BinaryOp Op, typename T> T binaryValue(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
    if constexpr (Op == BinaryOp::Add)
      return static_cast<T>(ua + ub); // wraps
    else if constexpr (Op == BinaryOp::Sub)
      return static_cast<T>(ua - ub);
    else if constexpr (Op == BinaryOp::Mul)
      return static_cast<T>(ua * ub);
    else if constexpr (Op == BinaryOp::Div) // divisors were checked nonzero
      return (b == -1) ? static_cast<T>(0 - ua) : a / b; // truncates toward 0
    else if constexpr (Op == BinaryOp::Maximum)
      return a > b ? a : b;
    else if constexpr (Op == BinaryOp::Minimum)
      return a < b ? a : b;
    else
      return 0; // Pow is rejected before this is reached
  } else {
    if constexpr (Op == BinaryOp::Add)
      return a + b;
    else if constexpr (Op == BinaryOp::Sub)
      return a - b;
    else if constexpr (Op == BinaryOp::Mul)
      return a * b;
    else if constexpr (Op == BinaryOp::Div)
      return a / b;
    else if constexpr (Op == BinaryOp::Pow)
      return std::pow(a, b);
    else if constexpr (Op == BinaryOp::Maximum) // NaN propagates
      return std::isnan(a) ? a : std::isnan(b) ? b : (a > b ? a : b);
    else
      return std::isnan(a) ? a : std::isnan(b) ? b : (a < b ? a : b);
  }
}

template <BinaryOp Op, typename T>
void mapBinary(const KernelCall &call, const std::vector<int64_t> &aStrides,
               const std::vector<int64_t> &bStrides) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.outputs[0];
  InputArray<T> lhs(a), rhs(b);
  OutputArray<T> dst(out);
  const T *pa = lhs.data(), *pb = rhs.data();
  T *d = dst.data();
  const int64_t count = out.numElements();
  const int64_t cost = Op == BinaryOp::Pow ? kTranscendentalCost : kCheapOpCost;
  if (a.shape == out.shape && b.shape == out.shape) {
    parallelFor(call.ctx, count, cost, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        d[i] = binaryValue<Op>(pa[i], pb[i]);
    });
  } else {
    parallelFor(call.ctx, count, cost + 2, [&](int64_t begin, int64_t end) {
      StridedWalker<2> walker(out.shape, {aStrides.data(), bStrides.data()}, begin);
      for (int64_t i = begin; i < end; ++i, walker.next())
        d[i] = binaryValue<Op>(pa[walker.offset(0)], pb[walker.offset(1)]);
    });
  }
  dst.commit();
}

template <typename T>
llvm::Error runBinaryAs(const KernelCall &call, BinaryOp op,
                        const std::vector<int64_t> &aStrides,
                        const std::vector<int64_t> &bStrides) {
  switch (op) {
#define LOOM_BINARY_CASE(OP)                                                   \
  case BinaryOp::OP:                                                           \
    mapBinary<BinaryOp::OP, T>(call, aStrides, bStrides);                      \
    return llvm::Error::success();
    LOOM_BINARY_CASE(Add)
    LOOM_BINARY_CASE(Sub)
    LOOM_BINARY_CASE(Mul)
    LOOM_BINARY_CASE(Div)
    LOOM_BINARY_CASE(Pow)
    LOOM_BINARY_CASE(Maximum)
    LOOM_BINARY_CASE(Minimum)
#undef LOOM_BINARY_CASE
  }
  return kernelError("unknown binary op");
}

//===----------------------------------------------------------------------===//
// Byte-level selection (where)
//===----------------------------------------------------------------------===//

template <typename Word>
void selectWords(const KernelCall &call, const std::vector<int64_t> *strides) {
  const uint8_t *cond = static_cast<const uint8_t *>(call.inputs[0].data);
  const Word *a = static_cast<const Word *>(call.inputs[1].data);
  const Word *b = static_cast<const Word *>(call.inputs[2].data);
  Word *out = static_cast<Word *>(call.outputs[0].data);
  const Tensor &outTensor = call.outputs[0];
  parallelFor(call.ctx, outTensor.numElements(), 3, [&](int64_t begin, int64_t end) {
    StridedWalker<3> walker(outTensor.shape,
                            {strides[0].data(), strides[1].data(), strides[2].data()},
                            begin);
    for (int64_t i = begin; i < end; ++i, walker.next())
      out[i] = cond[walker.offset(0)] ? a[walker.offset(1)] : b[walker.offset(2)];
  });
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

llvm::Error runUnary(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(std::optional<UnaryOp> op,
                        checkUnary(call.id, in, out, call.attrs));
  if (in.dtype == DType::I64 || in.dtype == DType::I32)
    return runUnaryAs<int64_t>(call, *op);
  return dispatchFloat(in.dtype, "input", [&](auto tag) {
    return runUnaryAs<decltype(tag)>(call, *op);
  });
}

llvm::Error runBinary(const KernelCall &call) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(BinaryPlan plan, checkBinary(call.id, a, b, out));
  const std::vector<int64_t> &aStrides = plan.lhsStrides, &bStrides = plan.rhsStrides;
  const std::optional<BinaryOp> op = plan.op;
  if (out.dtype == DType::I64 || out.dtype == DType::I32) {
    if (*op == BinaryOp::Div) {
      for (int64_t i = 0, n = b.numElements(); i < n; ++i)
        if (loadInt(b.data, b.dtype, i) == 0)
          return kernelError("integer division by zero (rhs element " +
                             llvm::Twine(i) + ")");
    }
    return runBinaryAs<int64_t>(call, *op, aStrides, bStrides);
  }
  return dispatchFloat(out.dtype, "operands", [&](auto tag) {
    return runBinaryAs<decltype(tag)>(call, *op, aStrides, bStrides);
  });
}

llvm::Error runCompare(const KernelCall &call) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(ComparePlan plan, checkCompare(a, b, out, call.attrs));
  const std::vector<int64_t> &aStrides = plan.lhsStrides, &bStrides = plan.rhsStrides;
  using Pred = ComparePred;
  const std::optional<Pred> pred = plan.pred;
  auto compareAll = [&](auto tag) {
    using T = decltype(tag);
    // Widening to double (floats) or int64 (integers) is exact.
    InputArray<T> lhs(a), rhs(b);
    uint8_t *d = static_cast<uint8_t *>(out.data);
    parallelFor(call.ctx, out.numElements(), 3, [&](int64_t begin, int64_t end) {
      StridedWalker<2> walker(out.shape, {aStrides.data(), bStrides.data()}, begin);
      for (int64_t i = begin; i < end; ++i, walker.next()) {
        const T x = lhs[walker.offset(0)], y = rhs[walker.offset(1)];
        bool result = false;
        switch (*pred) {
        case Pred::Eq: result = x == y; break;
        case Pred::Ne: result = x != y; break;
        case Pred::Lt: result = x < y; break;
        case Pred::Le: result = x <= y; break;
        case Pred::Gt: result = x > y; break;
        case Pred::Ge: result = x >= y; break;
        }
        d[i] = result;
      }
    });
  };
  if (isIntLike(a.dtype))
    compareAll(int64_t{});
  else
    compareAll(double{});
  return llvm::Error::success();
}

llvm::Error runWhere(const KernelCall &call) {
  const Tensor &cond = call.inputs[0], &a = call.inputs[1], &b = call.inputs[2];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(auto strideSet, checkWhere(cond, a, b, out));
  const std::vector<int64_t> *strides = strideSet.data();
  switch (dtypeSize(out.dtype)) {
  case 1:
    selectWords<uint8_t>(call, strides);
    break;
  case 2:
    selectWords<uint16_t>(call, strides);
    break;
  case 4:
    selectWords<uint32_t>(call, strides);
    break;
  default:
    selectWords<uint64_t>(call, strides);
    break;
  }
  return llvm::Error::success();
}

llvm::Error runCast(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(in, "input", out, "output"));
  const int64_t count = in.numElements();
  if (in.dtype == out.dtype) {
    if (count > 0 && in.data != out.data)
      std::memmove(out.data, in.data, in.sizeInBytes());
    return llvm::Error::success();
  }
  const DType from = in.dtype, to = out.dtype;
  parallelFor(call.ctx, count, 4, [&](int64_t begin, int64_t end) {
    if (isIntLike(from) && isIntLike(to)) {
      for (int64_t i = begin; i < end; ++i)
        storeInt(out.data, to, i, loadInt(in.data, from, i));
    } else if (from == DType::I64 && to == DType::F32) {
      // int64 -> f32 directly: one rounding, where going through f64 is two.
      for (int64_t i = begin; i < end; ++i)
        storeFromFloat(out.data, to, i, loadAsFloat(in.data, from, i));
    } else {
      // Every float and i32 widens exactly to f64; narrowing then rounds once.
      for (int64_t i = begin; i < end; ++i)
        storeFromDouble(out.data, to, i, loadAsDouble(in.data, from, i));
    }
  });
  return llvm::Error::success();
}

llvm::Error runDropout(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(DropoutParams params, checkDropout(in, out, call.attrs));
  const double p = params.p;
  const int64_t seed = params.seed;
  return dispatchFloat(in.dtype, "input", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> src(in);
    OutputArray<T> dst(out);
    const T scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    parallelFor(call.ctx, in.numElements(), 10, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const bool keep = dropoutUniform(static_cast<uint64_t>(seed),
                                         static_cast<uint64_t>(i)) >= p;
        dst[i] = keep ? src[i] * scale : T(0);
      }
    });
    dst.commit();
    return llvm::Error::success();
  });
}

llvm::Error runIota(const KernelCall &call) {
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(IotaPlan plan, checkIota(out, call.attrs));
  const double start = plan.start, step = plan.step;
  const int64_t size = plan.size, inner = plan.inner;
  parallelFor(call.ctx, out.numElements(), 4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      storeFromDouble(out.data, out.dtype, i,
                      start + static_cast<double>((i / inner) % size) * step);
  });
  return llvm::Error::success();
}

namespace {
/// Operands of one float type and shape, as nn.swiglu(_grad) take them.
llvm::Error checkSwiglu(llvm::ArrayRef<Tensor> in, llvm::ArrayRef<Tensor> out) {
  for (const Tensor *t : {&in.front(), &out.front()})
    if (t->dtype != DType::F32 && t->dtype != DType::BF16 && t->dtype != DType::F16)
      return kernelError(llvm::Twine("operands must be f32, bf16 or f16, got ") +
                         dtypeName(t->dtype));
  for (llvm::ArrayRef<Tensor> list : {in, out})
    for (const Tensor &t : list)
      if (t.dtype != in.front().dtype || t.shape != in.front().shape)
        return kernelError("every operand must be " + shapeToString(in.front().shape) + " " +
                           std::string(dtypeName(in.front().dtype)) + ", got " +
                           shapeToString(t.shape) + " " + std::string(dtypeName(t.dtype)));
  return llvm::Error::success();
}
} // namespace

// nn.swiglu and nn.swiglu_grad: the unfused kernels, in order, so the
// results are theirs bit for bit.
llvm::Error runSwiglu(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkSwiglu(call.inputs, call.outputs));
  const Tensor &g = call.inputs[0], &u = call.inputs[1], &s = call.outputs[0],
               &h = call.outputs[1];
  LOOM_RETURN_IF_ERROR(runKernel(KernelId::Silu, {g}, {s}, KernelAttrs(), call.ctx));
  return runKernel(KernelId::Mul, {s, u}, {h}, KernelAttrs(), call.ctx);
}

llvm::Error runSwigluGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkSwiglu(call.inputs, call.outputs));
  const Tensor &g = call.inputs[0], &u = call.inputs[1], &s = call.inputs[2],
               &dy = call.inputs[3], &dg = call.outputs[0], &du = call.outputs[1];
  std::vector<char> scratch(dy.sizeInBytes());
  Tensor a{scratch.data(), dy.dtype, dy.shape};
  LOOM_RETURN_IF_ERROR(runKernel(KernelId::Mul, {dy, u}, {a}, KernelAttrs(), call.ctx));
  LOOM_RETURN_IF_ERROR(runKernel(KernelId::Mul, {dy, s}, {du}, KernelAttrs(), call.ctx));
  return runKernel(KernelId::SiluGrad, {g, a}, {dg}, KernelAttrs(), call.ctx);
}

llvm::Error runCastMulti(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkCastMulti(call.inputs, call.outputs));
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const KernelCall one{call.name, KernelId::Cast, call.inputs.slice(i, 1),
                         call.outputs.slice(i, 1), call.attrs, call.ctx};
    LOOM_RETURN_IF_ERROR(runCast(one));
  }
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
