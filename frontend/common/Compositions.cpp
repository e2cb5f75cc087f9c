#include "frontend/common/Compositions.h"

#include "dialects/nn/NNOps.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace loom {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

Value reshaped(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  if (typeOf(v).getShape() == shape)
    return v;
  return b.create<nn::ReshapeOp>(loc, typeOf(v).clone(shape), v);
}

/// v[start : start + (count - 1) * step + 1 : step] along `dim`.
Value window(OpBuilder &b, Location loc, Value v, int64_t dim, int64_t start, int64_t count,
             int64_t step) {
  RankedTensorType type = typeOf(v);
  SmallVector<int64_t> starts(type.getRank(), 0), limits(type.getShape()),
      strides(type.getRank(), 1), shape(type.getShape());
  starts[dim] = start;
  limits[dim] = start + (count - 1) * step + 1;
  strides[dim] = step;
  shape[dim] = count;
  if (step == 1 && start == 0 && count == type.getDimSize(dim))
    return v;
  return b.create<nn::SliceOp>(loc, type.clone(shape), v, b.getDenseI64ArrayAttr(starts),
                               b.getDenseI64ArrayAttr(limits), b.getDenseI64ArrayAttr(strides));
}

Value scalar(OpBuilder &b, Location loc, Type element, double value) {
  auto type = RankedTensorType::get({}, element);
  Attribute attr = isa<FloatType>(element)
                       ? Attribute(b.getFloatAttr(element, value))
                       : Attribute(b.getIntegerAttr(element, int64_t(value)));
  return b.create<nn::ConstantOp>(loc, type, DenseElementsAttr::get(type, attr));
}

constexpr int64_t kMaxAmount = int64_t(1) << 31;

} // namespace

FailureOr<Value> buildConstantPad(OpBuilder &b, Location loc, Value input,
                                  ArrayRef<int64_t> before, ArrayRef<int64_t> after,
                                  double value, std::string &why) {
  RankedTensorType type = typeOf(input);
  const int64_t rank = type.getRank();
  if (int64_t(before.size()) != rank || int64_t(after.size()) != rank) {
    why = "pad amounts for " + std::to_string(before.size()) + " dims of a rank-" +
          std::to_string(rank) + " tensor";
    return failure();
  }
  SmallVector<int64_t> low(rank, 0), high(rank, 0);
  Value x = input;
  for (int64_t d = 0; d < rank; ++d) {
    if (before[d] <= -kMaxAmount || before[d] >= kMaxAmount || after[d] <= -kMaxAmount ||
        after[d] >= kMaxAmount) {
      why = "pad amount out of range: " + std::to_string(before[d]) + ", " +
            std::to_string(after[d]);
      return failure();
    }
    int64_t size = typeOf(x).getDimSize(d);
    int64_t cropLow = std::max<int64_t>(-before[d], 0), cropHigh = std::max<int64_t>(-after[d], 0);
    if (cropLow + cropHigh > size) {
      why = "pad crops more than dim " + std::to_string(d) + " holds";
      return failure();
    }
    if (cropLow || cropHigh)
      x = window(b, loc, x, d, cropLow, size - cropLow - cropHigh, 1);
    low[d] = std::max<int64_t>(before[d], 0);
    high[d] = std::max<int64_t>(after[d], 0);
  }
  if (llvm::all_of(low, [](int64_t v) { return v == 0; }) &&
      llvm::all_of(high, [](int64_t v) { return v == 0; }))
    return x;
  SmallVector<int64_t> shape(typeOf(x).getShape());
  for (int64_t d = 0; d < rank; ++d)
    shape[d] += low[d] + high[d];
  SmallVector<int64_t> interior(rank, 0);
  return b
      .create<nn::PadOp>(loc, typeOf(x).clone(shape), x, b.getDenseI64ArrayAttr(low),
                         b.getDenseI64ArrayAttr(high), b.getDenseI64ArrayAttr(interior),
                         b.getF64FloatAttr(value))
      .getResult();
}

FailureOr<Value> buildConv1d(OpBuilder &b, Location loc, Value input, Value weight, Value bias,
                             const Conv1dShape &s, std::string &why) {
  RankedTensorType inType = typeOf(input), wType = typeOf(weight);
  const bool batched = inType.getRank() == 3;
  Type element = inType.getElementType();
  if ((inType.getRank() != 2 && !batched) || wType.getRank() != 3 ||
      !isa<FloatType>(element) || wType.getElementType() != element ||
      (bias && (typeOf(bias).getRank() != 1 || typeOf(bias).getElementType() != element))) {
    why = "conv1d takes float data [B, C, T] or [C, T], a weight [O, C / groups, K] and a "
          "bias [O] of its type";
    return failure();
  }
  if (s.stride < 1 || s.dilation < 1 || s.padLow < 0 || s.padHigh < 0 ||
      s.stride >= kMaxAmount || s.dilation >= kMaxAmount || s.padLow >= kMaxAmount ||
      s.padHigh >= kMaxAmount) {
    why = "conv1d needs a positive stride and dilation and padding >= 0";
    return failure();
  }
  const int64_t c = inType.getDimSize(batched ? 1 : 0), o = wType.getDimSize(0),
                k = wType.getDimSize(2);
  // One slice and product per tap: a short convolution's handful, not a
  // long filter's thousands.
  constexpr int64_t kMaxTaps = 256;
  if (k < 1 || k > kMaxTaps || c < 1 || o < 1) {
    why = "conv1d with " + std::to_string(k) + " taps is not supported (1 to " +
          std::to_string(kMaxTaps) + ")";
    return failure();
  }
  const bool depthwise = s.groups == c && o == c && wType.getDimSize(1) == 1;
  if (!depthwise && !(s.groups == 1 && wType.getDimSize(1) == c)) {
    why = "conv1d with " + std::to_string(s.groups) + " groups of " + std::to_string(c) +
          " channels into " + std::to_string(o) +
          " is not supported (groups 1, or depthwise: groups = channels = outputs)";
    return failure();
  }
  if (bias && typeOf(bias).getDimSize(0) != o) {
    why = "conv1d's bias has " + std::to_string(typeOf(bias).getDimSize(0)) + " elements for " +
          std::to_string(o) + " outputs";
    return failure();
  }
  const int64_t timeDim = inType.getRank() - 1;
  const int64_t t = inType.getDimSize(timeDim) + s.padLow + s.padHigh;
  const int64_t tOut = t < 1 ? 0 : (t - s.dilation * (k - 1) - 1) / s.stride + 1;
  if (t - s.dilation * (k - 1) < 1 || tOut < 1) {
    why = "conv1d's window is longer than its padded input";
    return failure();
  }
  SmallVector<int64_t> before(inType.getRank(), 0), after(inType.getRank(), 0);
  before[timeDim] = s.padLow;
  after[timeDim] = s.padHigh;
  FailureOr<Value> padded = buildConstantPad(b, loc, input, before, after, 0.0, why);
  if (failed(padded))
    return failure();
  SmallVector<int64_t> outShape(inType.getShape());
  outShape[timeDim - 1] = o;
  outShape[timeDim] = tOut;
  auto outType = inType.clone(outShape);
  Value sum;
  for (int64_t tap = 0; tap < k; ++tap) {
    Value xs = window(b, loc, *padded, timeDim, tap * s.dilation, tOut, s.stride);
    Value wTap = window(b, loc, weight, 2, tap, 1, 1);
    Value term;
    if (depthwise) {
      // weight[:, 0, tap] as [C, 1], against [B, C, T'] or [C, T'].
      term = b.create<nn::MulOp>(loc, outType, xs, reshaped(b, loc, wTap, {c, 1}));
    } else {
      Value m = reshaped(b, loc, wTap, {o, c});
      if (batched)
        m = b.create<nn::BroadcastOp>(loc, typeOf(m).clone({inType.getDimSize(0), o, c}), m);
      term = b.create<nn::MatmulOp>(loc, outType, m, xs, UnitAttr(), UnitAttr());
    }
    sum = sum ? b.create<nn::AddOp>(loc, outType, sum, term).getResult() : term;
  }
  if (bias)
    sum = b.create<nn::AddOp>(loc, outType, sum, reshaped(b, loc, bias, {o, 1}));
  return sum;
}

Value buildLogSumExp(OpBuilder &b, Location loc, Value input, ArrayRef<int64_t> dims,
                     bool keepdim) {
  RankedTensorType type = typeOf(input);
  Type element = type.getElementType();
  SmallVector<int64_t> kept(type.getShape()), result;
  for (int64_t d : dims)
    kept[d] = 1;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (keepdim || !llvm::is_contained(dims, d))
      result.push_back(kept[d]);
  auto keptType = type.clone(kept);
  auto dimsAttr = b.getDenseI64ArrayAttr(dims);
  Value m = b.create<nn::ReduceMaxOp>(loc, keptType, input, dimsAttr, b.getUnitAttr());
  // m is finite where m - m == 0 (inf - inf and NaN are NaN).
  Value zero = scalar(b, loc, element, 0);
  Value mm = b.create<nn::SubOp>(loc, keptType, m, m);
  Value finite = b.create<nn::CompareOp>(
      loc, keptType.clone(b.getI1Type()),
      nn::ComparePredicateAttr::get(b.getContext(), nn::ComparePredicate::eq), mm, zero);
  Value shift = b.create<nn::WhereOp>(loc, keptType, finite, m, zero);
  Value centered = b.create<nn::SubOp>(loc, type, input, shift);
  Value e = b.create<nn::ExpOp>(loc, type, centered);
  Value total = b.create<nn::ReduceSumOp>(loc, keptType, e, dimsAttr, b.getUnitAttr());
  Value logTotal = b.create<nn::LogOp>(loc, keptType, total);
  Value sum = b.create<nn::AddOp>(loc, keptType, logTotal, shift);
  return reshaped(b, loc, sum, result);
}

Value buildSwapWithLast(OpBuilder &b, Location loc, Value v, int64_t axis) {
  RankedTensorType type = typeOf(v);
  const int64_t rank = type.getRank();
  if (rank == 0 || axis == rank - 1)
    return v;
  SmallVector<int64_t> order = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(order[axis], order.back());
  SmallVector<int64_t> shape;
  for (int64_t d : order)
    shape.push_back(type.getDimSize(d));
  return b.create<nn::TransposeOp>(loc, type.clone(shape), v, b.getDenseI64ArrayAttr(order));
}

FailureOr<Value> buildCumSum(OpBuilder &b, Location loc, Value input, int64_t axis,
                             bool exclusive, bool reverse, std::string &why) {
  RankedTensorType inputType = typeOf(input);
  const int64_t rank = inputType.getRank();
  if (rank > 0 && (axis < 0 || axis >= rank)) {
    why = "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank);
    return failure();
  }
  Value x = buildSwapWithLast(b, loc, input, axis);
  SmallVector<int64_t> movedShape(typeOf(x).getShape());
  const int64_t n = rank ? movedShape.back() : 1;
  if (n * n > (int64_t(1) << 26)) {
    why = "a running sum over " + std::to_string(n) + " elements needs a triangle of " +
          std::to_string(n * n) + " (more than 2^26)";
    return failure();
  }
  const int64_t rows = n ? typeOf(x).getNumElements() / n : 0;
  // tri[j, i] = 1 where x[j] counts towards out[i].
  auto counts = [&](int64_t j, int64_t i) {
    return reverse ? (exclusive ? j > i : j >= i) : (exclusive ? j < i : j <= i);
  };
  Type element = inputType.getElementType();
  Value sums;
  if (!isa<FloatType>(element)) {
    Type i64 = b.getI64Type();
    Value flat = reshaped(b, loc, x, {rows, n, 1});
    if (!element.isInteger(64))
      flat = b.create<nn::CastOp>(loc, typeOf(flat).clone(i64), flat);
    std::vector<int64_t> ones(n * n);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < n; ++i)
        ones[j * n + i] = counts(j, i);
    auto triType = RankedTensorType::get({1, n, n}, i64);
    Value tri = b.create<nn::ConstantOp>(
        loc, triType, DenseElementsAttr::get(triType, llvm::ArrayRef<int64_t>(ones)));
    Value terms = b.create<nn::MulOp>(loc, RankedTensorType::get({rows, n, n}, i64), flat, tri);
    sums = b.create<nn::ReduceSumOp>(loc, RankedTensorType::get({rows, n}, i64), terms,
                                     b.getDenseI64ArrayAttr({1}), UnitAttr());
    element = i64;
  } else {
    Value flat = reshaped(b, loc, x, {rows, n});
    auto triType = RankedTensorType::get({n, n}, element);
    std::vector<Attribute> ones(n * n);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < n; ++i)
        ones[j * n + i] = b.getFloatAttr(element, counts(j, i) ? 1.0 : 0.0);
    Value tri = b.create<nn::ConstantOp>(loc, triType, DenseElementsAttr::get(triType, ones));
    sums = b.create<nn::MatmulOp>(loc, RankedTensorType::get({rows, n}, element), flat, tri,
                                  UnitAttr(), UnitAttr());
  }
  return buildSwapWithLast(b, loc, reshaped(b, loc, sums, movedShape), axis);
}

FailureOr<Value> buildMaskedAttention(OpBuilder &b, Location loc, Value query, Value key,
                                      Value value, Value mask, std::optional<double> scale,
                                      std::string &why) {
  RankedTensorType queryType = typeOf(query), keyType = typeOf(key), valueType = typeOf(value);
  if (queryType.getRank() != 4 || keyType.getRank() != 4 || valueType.getRank() != 4) {
    why = "attention needs rank-4 [batch, heads, seq, head_dim] query, key and value";
    return failure();
  }
  Type element = queryType.getElementType();
  int64_t batch = queryType.getDimSize(0), heads = queryType.getDimSize(1);
  int64_t queries = queryType.getDimSize(2), depth = queryType.getDimSize(3);
  int64_t kvHeads = keyType.getDimSize(1), keys = keyType.getDimSize(2);
  if (kvHeads == 0 || heads % kvHeads != 0 || valueType.getDimSize(1) != kvHeads) {
    why = "attention of " + std::to_string(heads) + " query heads over " +
          std::to_string(kvHeads) + " key/value heads";
    return failure();
  }
  auto repeat = [&](Value kv) -> Value {
    if (kvHeads == heads)
      return kv;
    SmallVector<int64_t> shape(typeOf(kv).getShape());
    SmallVector<int64_t> grouped{shape[0], kvHeads, 1, shape[2], shape[3]};
    Value one = reshaped(b, loc, kv, grouped);
    grouped[2] = heads / kvHeads;
    Value wide = b.create<nn::BroadcastOp>(loc, typeOf(kv).clone(grouped), one);
    return reshaped(b, loc, wide, {shape[0], heads, shape[2], shape[3]});
  };
  Value k = repeat(key), v = repeat(value);
  auto scoresType = RankedTensorType::get({batch, heads, queries, keys}, element);
  Value scores = b.create<nn::MatmulOp>(loc, scoresType, query, k, UnitAttr(), b.getUnitAttr());
  Value scaled = b.create<nn::MulOp>(
      loc, scoresType, scores,
      scalar(b, loc, element, scale.value_or(1.0 / std::sqrt(double(depth)))));
  Value masked = scaled;
  if (mask) {
    if (!nn::isBroadcastableTo(typeOf(mask).getShape(), scoresType.getShape())) {
      why = "the attention mask does not broadcast to the scores [" + std::to_string(batch) +
            ", " + std::to_string(heads) + ", " + std::to_string(queries) + ", " +
            std::to_string(keys) + "]";
      return failure();
    }
    if (typeOf(mask).getElementType().isInteger(1)) {
      masked = b.create<nn::WhereOp>(loc, scoresType, mask, scaled,
                                     scalar(b, loc, element,
                                            -std::numeric_limits<double>::infinity()));
    } else {
      Value cast = mask;
      if (typeOf(mask).getElementType() != element)
        cast = b.create<nn::CastOp>(loc, typeOf(mask).clone(element), mask);
      masked = b.create<nn::AddOp>(loc, scoresType, scaled, cast);
    }
  }
  Value probs = b.create<nn::SoftmaxOp>(loc, scoresType, masked, b.getI64IntegerAttr(3));
  auto resultType =
      RankedTensorType::get({batch, heads, queries, valueType.getDimSize(3)}, element);
  return Value(b.create<nn::MatmulOp>(loc, resultType, probs, v, UnitAttr(), UnitAttr()));
}

} // namespace loom
