// The ATen operators of mixture-of-experts routing (issue 21), as
// transformers 5 exports them: topk and sort become nn.topk and nn.sort;
// transformers' own grouped_mm_fallback becomes nn.grouped_matmul; the
// rest (histc, a running sum of per-expert counts, gather and scatter along
// the experts, floor division of positions, the inverse of a sort's
// permutation) are built from elementwise, compare, reduction and matmul
// ops. The built ones materialize a one-hot over the experts (or a
// triangle over the counts), which is small for routing; each refuses,
// with a one-line error, a size where that would not be.

#include "frontend/common/Compositions.h"
#include "frontend/torch_export/GraphImporter.h"
#include "frontend/torch_export/TorchTypes.h"

#include "dialects/nn/NNOps.h"

#include "llvm/ADT/StringMap.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace loom::torch_export {
namespace {

using llvm::Error;
using llvm::Expected;

/// The most elements a one-hot or triangle built here may hold.
constexpr int64_t kMaxBuiltElements = int64_t(1) << 26;

RankedTensorType tensorType(Value value) { return cast<RankedTensorType>(value.getType()); }

Expected<int64_t> lastDim(int64_t dim, int64_t rank, llvm::StringRef what) {
  int64_t extent = std::max<int64_t>(rank, 1);
  if (dim < -extent || dim >= extent)
    return importError(what + llvm::Twine(": dim ") + llvm::Twine(dim) +
                       " is out of range for rank " + llvm::Twine(rank));
  int64_t axis = dim < 0 ? dim + extent : dim;
  if (axis != rank - 1)
    return importError(what + llvm::Twine(" along dim ") + llvm::Twine(dim) + " of a rank-" +
                       llvm::Twine(rank) + " tensor: only the last dim is supported");
  return axis;
}

Error tooLarge(llvm::StringRef what, int64_t elements) {
  return importError(what + llvm::Twine(" would build ") + llvm::Twine(elements) +
                     " elements (more than " + llvm::Twine(kMaxBuiltElements) +
                     "); this size is not supported");
}

/// The op's results set from an op of several results.
Error setResults(NodeContext &node, Operation *op) {
  if (llvm::Error err = node.importer().verify(op))
    return err;
  for (unsigned i = 0; i < op->getNumResults(); ++i)
    if (llvm::Error err = node.setResult(i, op->getResult(i)))
      return err;
  return Error::success();
}

/// Sets the node's result 0 from `value`: reshaped to the result's shape
/// and cast to its element type where they differ.
Error setShapedResult(NodeContext &node, Value value) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  GraphImporter &g = node.importer();
  auto shaped = g.reshapeTo(value, type->getShape());
  if (!shaped)
    return shaped.takeError();
  auto result = g.castTo(*shaped, type->getElementType());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// `v` with dim `axis` and its last dim swapped (a permutation that is its
/// own inverse, so the same call swaps them back); `v` itself when `axis`
/// is the last.
Expected<Value> swapWithLast(GraphImporter &g, Value v, int64_t axis) {
  return buildSwapWithLast(g.builder(), g.loc(), v, axis);
}

/// A constant i64 row 0 .. n-1 of shape [1, ..., 1, n] (rank `rank`).
Expected<Value> positions(GraphImporter &g, int64_t n, int64_t rank) {
  SmallVector<int64_t> shape(rank, 1);
  shape.back() = n;
  auto type = RankedTensorType::get(shape, g.builder().getI64Type());
  return g.create<nn::IotaOp>(type, g.builder().getI64IntegerAttr(rank - 1),
                              g.builder().getF64FloatAttr(0), g.builder().getF64FloatAttr(1));
}

Expected<Value> compareValues(GraphImporter &g, nn::ComparePredicate predicate, Value x, Value y,
                              ArrayRef<int64_t> shape) {
  auto type = RankedTensorType::get(shape, IntegerType::get(g.context(), 1));
  return g.create<nn::CompareOp>(type, nn::ComparePredicateAttr::get(g.context(), predicate), x,
                                 y);
}

/// oneHot[..., j, n] = (index[..., j] == n), in `element`: [..., k, N].
Expected<Value> oneHot(GraphImporter &g, Value index, int64_t n, Type element,
                       llvm::StringRef what) {
  RankedTensorType indexType = tensorType(index);
  SmallVector<int64_t> column(indexType.getShape()), full(indexType.getShape());
  column.push_back(1);
  full.push_back(n);
  int64_t elements = indexType.getNumElements() * n;
  if (elements > kMaxBuiltElements)
    return tooLarge(what, elements);
  auto idx = g.reshapeTo(index, column);
  if (!idx)
    return idx.takeError();
  auto idx64 = g.castTo(*idx, g.builder().getI64Type());
  if (!idx64)
    return idx64.takeError();
  auto row = positions(g, n, int64_t(column.size()));
  if (!row)
    return row.takeError();
  auto hit = compareValues(g, nn::ComparePredicate::eq, *idx64, *row, full);
  if (!hit)
    return hit.takeError();
  return g.castTo(*hit, element);
}

/// aten.topk(self, k, dim=-1, largest=True, sorted=True): best first, ties by
/// position (torch leaves the order of sorted=False open, and the routing
/// reads it only through sums over the k choices).
Error convertTopk(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto k = node.integer("k", 1);
  if (!k)
    return k.takeError();
  auto dim = node.integer("dim", 2, -1);
  if (!dim)
    return dim.takeError();
  auto largest = node.boolean("largest", 3, true);
  if (!largest)
    return largest.takeError();
  RankedTensorType type = tensorType(*self);
  if (auto axis = lastDim(*dim, type.getRank(), "topk"); !axis)
    return axis.takeError();
  auto values = node.resultType(0);
  if (!values)
    return values.takeError();
  auto indices = node.resultType(1);
  if (!indices)
    return indices.takeError();
  GraphImporter &g = node.importer();
  OpBuilder &b = g.builder();
  auto op = b.create<nn::TopkOp>(g.loc(), TypeRange{*values, *indices}, *self,
                                 b.getI64IntegerAttr(*k),
                                 *largest ? UnitAttr() : b.getUnitAttr());
  return setResults(node, op);
}

/// aten.sort(self, dim=-1, descending=False) and sort.stable (keyword
/// arguments): stable either way.
Error convertSort(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  bool stableOverload = node.has("stable", 1);
  auto dim = node.integer("dim", stableOverload ? 2 : 1, -1);
  if (!dim)
    return dim.takeError();
  auto descending = node.boolean("descending", stableOverload ? 3 : 2, false);
  if (!descending)
    return descending.takeError();
  if (auto axis = lastDim(*dim, tensorType(*self).getRank(), "sort"); !axis)
    return axis.takeError();
  auto values = node.resultType(0);
  if (!values)
    return values.takeError();
  auto indices = node.resultType(1);
  if (!indices)
    return indices.takeError();
  GraphImporter &g = node.importer();
  auto op = g.builder().create<nn::SortOp>(g.loc(), TypeRange{*values, *indices}, *self,
                                           *descending ? g.builder().getUnitAttr() : UnitAttr());
  return setResults(node, op);
}

/// transformers.grouped_mm_fallback(input [S, K], weight [E, K, N], offs [E]),
/// and PyTorch's own aten._grouped_mm(self, mat2, offs, bias, out_dtype)
/// (what transformers calls for bf16 experts) in that form: rows grouped by
/// the running counts `offs`, one weight per group.
Error convertGroupedMm(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  const bool aten = node.target().contains("_grouped_mm.");
  auto input = node.tensor(aten ? "self" : "input", 0);
  if (!input)
    return input.takeError();
  auto weight = node.tensor(aten ? "mat2" : "weight", 1);
  if (!weight)
    return weight.takeError();
  if (aten) {
    auto bias = node.optionalTensor("bias", 3);
    if (!bias)
      return bias.takeError();
    if (*bias)
      return importError("_grouped_mm with a bias is not supported");
    auto offsGiven = node.optionalTensor("offs", 2);
    if (!offsGiven)
      return offsGiven.takeError();
    if (!*offsGiven || tensorType(*input).getRank() != 2 || tensorType(*weight).getRank() != 3)
      return importError("_grouped_mm is supported as rows [S, K] grouped by offs times "
                         "weights [E, K, N]; got " +
                         typeString(tensorType(*input)) + " and " +
                         typeString(tensorType(*weight)) +
                         (*offsGiven ? "" : " without offs"));
  }
  auto offs = node.tensor("offs", 2);
  if (!offs)
    return offs.takeError();
  GraphImporter &g = node.importer();
  auto w = g.castTo(*weight, type->getElementType());
  if (!w)
    return w.takeError();
  auto x = g.castTo(*input, type->getElementType());
  if (!x)
    return x.takeError();
  auto result = g.create<nn::GroupedMatmulOp>(*type, *x, *w, *offs, IntegerAttr());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// histc's counts: of x [count, 1], those in [start[b], end[b]) (rows of
/// [1, bins]) and at most `max`, per bin, counted in i64 (which a bf16 step
/// leaves alone, so counts stay exact), cast to the result's type.
Error countInBins(NodeContext &node, Value x, Value start, Value end, Value max, int64_t count,
                  int64_t bins) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  GraphImporter &g = node.importer();
  Type i64 = g.builder().getI64Type();
  SmallVector<int64_t> grid{count, bins};
  auto above = compareValues(g, nn::ComparePredicate::ge, x, start, grid);
  if (!above)
    return above.takeError();
  auto below = compareValues(g, nn::ComparePredicate::lt, x, end, grid);
  if (!below)
    return below.takeError();
  auto inRange = compareValues(g, nn::ComparePredicate::le, x, max, {count, 1});
  if (!inRange)
    return inRange.takeError();
  Value member;
  for (Value v : {*above, *below, *inRange}) {
    auto f = g.castTo(v, i64);
    if (!f)
      return f.takeError();
    if (!member) {
      member = *f;
      continue;
    }
    auto product = g.create<nn::MulOp>(RankedTensorType::get(grid, i64), member, *f);
    if (!product)
      return product.takeError();
    member = *product;
  }
  auto counts = g.create<nn::ReduceSumOp>(RankedTensorType::get({bins}, i64), member,
                                          g.builder().getDenseI64ArrayAttr({0}), UnitAttr());
  if (!counts)
    return counts.takeError();
  return setShapedResult(node, *counts);
}

/// aten.histc(self, bins, min, max): counts of `self` in `bins` equal bins
/// over [min, max] (the last one closed), as floats.
Error convertHistc(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto bins = node.integer("bins", 1, 100);
  if (!bins)
    return bins.takeError();
  auto lo = node.number("min", 2, 0.0);
  if (!lo)
    return lo.takeError();
  auto hi = node.number("max", 3, 0.0);
  if (!hi)
    return hi.takeError();
  if (*bins < 1)
    return importError("histc needs at least one bin, got " + llvm::Twine(*bins));
  if (!(*hi > *lo))
    return importError("histc with min >= max takes its range from the data; only a given "
                       "range (min < max) is supported");
  GraphImporter &g = node.importer();
  RankedTensorType selfType = tensorType(*self);
  int64_t count = selfType.getNumElements();
  if (count * *bins > kMaxBuiltElements)
    return tooLarge("histc", count * *bins);
  // Counted in i64, which a bf16 step leaves alone: counts stay exact.
  Type f32 = g.builder().getF32Type(), i64 = g.builder().getI64Type();
  // Integers cast to float (expert ids): binned as integers, so no float
  // type (a bf16 step's) rounds an id. An integer x is in [a, b) iff
  // ceil(a) <= x < ceil(b), and at most max iff x <= floor(max).
  if (auto cast = self->getDefiningOp<nn::CastOp>();
      cast && isa<IntegerType>(tensorType(cast.getInput()).getElementType()) &&
      !tensorType(cast.getInput()).getElementType().isInteger(1)) {
    auto flatIds = g.reshapeTo(cast.getInput(), {count, 1});
    if (!flatIds)
      return flatIds.takeError();
    auto ids = g.castTo(*flatIds, i64);
    if (!ids)
      return ids.takeError();
    double width = (*hi - *lo) / double(*bins);
    std::vector<int64_t> starts(*bins), ends(*bins);
    for (int64_t b = 0; b < *bins; ++b) {
      starts[b] = int64_t(std::ceil(*lo + double(b) * width));
      ends[b] = b + 1 == *bins ? std::numeric_limits<int64_t>::max()
                               : int64_t(std::ceil(*lo + double(b + 1) * width));
    }
    auto binType = RankedTensorType::get({1, *bins}, i64);
    Value start = g.constant(DenseElementsAttr::get(binType, llvm::ArrayRef<int64_t>(starts)));
    Value end = g.constant(DenseElementsAttr::get(binType, llvm::ArrayRef<int64_t>(ends)));
    return countInBins(node, *ids, start, end, g.scalar(i64, std::floor(*hi)), count, *bins);
  }
  auto flat = g.reshapeTo(*self, {count, 1});
  if (!flat)
    return flat.takeError();
  auto x = g.castTo(*flat, f32);
  if (!x)
    return x.takeError();
  // Bin b holds [lo + b w, lo + (b + 1) w); the last one also max.
  double width = (*hi - *lo) / double(*bins);
  std::vector<float> starts(*bins), ends(*bins);
  for (int64_t b = 0; b < *bins; ++b) {
    starts[b] = float(*lo + double(b) * width);
    ends[b] = b + 1 == *bins ? std::numeric_limits<float>::infinity()
                             : float(*lo + double(b + 1) * width);
  }
  auto binType = RankedTensorType::get({1, *bins}, f32);
  Value start = g.constant(DenseElementsAttr::get(binType, llvm::ArrayRef<float>(starts)));
  Value end = g.constant(DenseElementsAttr::get(binType, llvm::ArrayRef<float>(ends)));
  return countInBins(node, *x, start, end, g.scalar(f32, *hi), count, *bins);
}

} // namespace

/// aten.cumsum(self, dim, dtype) of a value known only at run time
/// (buildCumSum): integers summed in i64, floats in the result's type.
Error convertCumsumAtRunTime(NodeContext &node, Value self, int64_t dim) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  GraphImporter &g = node.importer();
  const int64_t rank = tensorType(self).getRank();
  const int64_t extent = std::max<int64_t>(rank, 1);
  if (dim < -extent || dim >= extent)
    return importError("cumsum: dim " + llvm::Twine(dim) + " is out of range for rank " +
                       llvm::Twine(rank));
  if (isa<FloatType>(type->getElementType())) {
    auto cast = g.castTo(self, type->getElementType());
    if (!cast)
      return cast.takeError();
    self = *cast;
  }
  std::string why;
  FailureOr<Value> sums = buildCumSum(g.builder(), node.loc(), self, dim < 0 ? dim + extent : dim,
                                      /*exclusive=*/false, /*reverse=*/false, why);
  if (failed(sums))
    return importError("cumsum: " + why);
  return setShapedResult(node, *sums);
}

namespace {


/// aten.floor_divide(self, other) on integers (and div with rounding_mode
/// 'floor', or 'trunc' when `floor` is false): truncating division, then,
/// for floor, one less where the remainder is nonzero and the signs differ.
Error divideRounded(NodeContext &node, bool floor) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  Type element = type->getElementType();
  if (!isa<IntegerType>(element))
    return importError(llvm::Twine(floor ? "floor" : "truncating") + " division of " +
                       typeString(element) + " is not supported (integers only)");
  GraphImporter &g = node.importer();
  auto self = node.tensorOrNumber("self", 0, element);
  if (!self)
    return self.takeError();
  auto other = node.tensorOrNumber("other", 1, element);
  if (!other)
    return other.takeError();
  auto x = g.castTo(*self, element);
  if (!x)
    return x.takeError();
  auto y = g.castTo(*other, element);
  if (!y)
    return y.takeError();
  auto q = g.create<nn::DivOp>(*type, *x, *y);
  if (!q)
    return q.takeError();
  if (!floor)
    return node.setResult(0, *q);
  auto qy = g.create<nn::MulOp>(*type, *q, *y);
  if (!qy)
    return qy.takeError();
  auto r = g.create<nn::SubOp>(*type, *x, *qy);
  if (!r)
    return r.takeError();
  Value zero = g.scalar(element, 0);
  auto nonzero = compareValues(g, nn::ComparePredicate::ne, *r, zero, type->getShape());
  auto rNegative = compareValues(g, nn::ComparePredicate::lt, *r, zero, type->getShape());
  auto yNegative = compareValues(g, nn::ComparePredicate::lt, *y, zero, tensorType(*y).getShape());
  if (!nonzero || !rNegative || !yNegative)
    return importError("floor_divide: cannot compare its remainder");
  auto differ = compareValues(g, nn::ComparePredicate::ne, *rNegative, *yNegative,
                              type->getShape());
  if (!differ)
    return differ.takeError();
  auto adjust = g.create<nn::WhereOp>(type->clone(IntegerType::get(g.context(), 1)), *nonzero,
                                      *differ, g.scalar(IntegerType::get(g.context(), 1), 0));
  if (!adjust)
    return adjust.takeError();
  auto one = g.create<nn::WhereOp>(*type, *adjust, g.scalar(element, 1), zero);
  if (!one)
    return one.takeError();
  auto result = g.create<nn::SubOp>(*type, *q, *one);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// aten.gather(self, dim, index): out[..., j] = self[..., index[..., j]]
/// along the last dim (another dim swapped there and back), self's values
/// chosen by a one-hot and summed over the last dim (the gradient goes back
/// the same way); floats or integers (BERT's buffered token type ids).
Error convertGatherElements(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto dim = node.integer("dim", 1);
  if (!dim)
    return dim.takeError();
  auto index = node.tensor("index", 2);
  if (!index)
    return index.takeError();
  GraphImporter &g = node.importer();
  const int64_t rank = tensorType(*self).getRank();
  if (*dim < -std::max<int64_t>(rank, 1) || *dim >= std::max<int64_t>(rank, 1))
    return importError("gather: dim " + llvm::Twine(*dim) + " is out of range for rank " +
                       llvm::Twine(rank));
  const int64_t axis = *dim < 0 ? *dim + std::max<int64_t>(rank, 1) : *dim;
  if (rank == 0 || tensorType(*index).getRank() != rank)
    return importError("gather: index " + typeString(tensorType(*index)) + " and self " +
                       typeString(tensorType(*self)) + " must have one rank, at least 1");
  // Along another dim: that dim and the last swapped in self, index and
  // the result (GPT-J gathers its rotary table along the positions).
  auto swapped = [&](Value v) { return swapWithLast(g, v, axis); };
  auto selfLast = swapped(*self);
  if (!selfLast)
    return selfLast.takeError();
  auto indexLast = swapped(*index);
  if (!indexLast)
    return indexLast.takeError();
  RankedTensorType selfType = tensorType(*selfLast), indexType = tensorType(*indexLast);
  if (indexType.getRank() != selfType.getRank() ||
      indexType.getShape().drop_back() != selfType.getShape().drop_back())
    return importError("gather: index " + typeString(indexType) + " and self " +
                       typeString(selfType) + " differ outside the gathered dim");
  Type element = selfType.getElementType();
  if (element.isInteger(1))
    return importError("gather of " + typeString(selfType) + " is not supported (numbers only)");
  int64_t n = selfType.getShape().back();
  auto hot = oneHot(g, *indexLast, n, IntegerType::get(g.context(), 1), "gather");
  if (!hot)
    return hot.takeError();
  SmallVector<int64_t> rowShape(selfType.getShape());
  rowShape.insert(rowShape.end() - 1, 1);
  auto rows = g.reshapeTo(*selfLast, rowShape);
  if (!rows)
    return rows.takeError();
  SmallVector<int64_t> full(indexType.getShape());
  full.push_back(n);
  // Selected by a mask (not multiplied by a one-hot), so the picked values
  // keep self's type through a bf16 step.
  auto fullRows = g.broadcastTo(*rows, full);
  if (!fullRows)
    return fullRows.takeError();
  auto picked = g.create<nn::WhereOp>(RankedTensorType::get(full, element), *hot, *fullRows,
                                      g.scalar(element, 0));
  if (!picked)
    return picked.takeError();
  auto result = g.create<nn::ReduceSumOp>(indexType.clone(element), *picked,
                                          g.builder().getDenseI64ArrayAttr({int64_t(full.size()) - 1}),
                                          UnitAttr());
  if (!result)
    return result.takeError();
  // Swapping the two dims back is the same permutation again.
  auto back = swapped(*result);
  if (!back)
    return back.takeError();
  if (tensorType(*back) != *type)
    return importError("gather: the result " + typeString(tensorType(*back)) +
                       " is not the node's " + typeString(*type));
  return node.setResult(0, *back);
}

/// aten.scatter(self, dim, index, value) along the last dim, with a scalar
/// value or a tensor src the shape of index: self where no index hits, the
/// value where one does.
Error convertScatterValue(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto dim = node.integer("dim", 1);
  if (!dim)
    return dim.takeError();
  auto index = node.tensor("index", 2);
  if (!index)
    return index.takeError();
  if (node.has("reduce", 4))
    return importError("scatter with a reduction is not supported (only plain assignment)");
  RankedTensorType selfType = tensorType(*self), indexType = tensorType(*index);
  if (auto axis = lastDim(*dim, selfType.getRank(), "scatter"); !axis)
    return axis.takeError();
  if (indexType.getRank() != selfType.getRank() ||
      indexType.getShape().drop_back() != selfType.getShape().drop_back())
    return importError("scatter: index " + typeString(indexType) + " and self " +
                       typeString(selfType) + " differ outside the scattered dim");
  GraphImporter &g = node.importer();
  Type element = type->getElementType();
  int64_t n = selfType.getShape().back();
  Type i64 = g.builder().getI64Type();
  auto hot = oneHot(g, *index, n, i64, "scatter");
  if (!hot)
    return hot.takeError();
  Expected<Value> value = Value();
  if (node.isNumber("value", 3)) {
    value = node.tensorOrNumber("value", 3, element);
  } else {
    // A tensor of values (scatter.src, Llama 4's router scores): value j of
    // each row lands at index j; summed over j, a position no index names
    // gets zero here and self's value below. An index repeated within a row
    // (torch leaves which value wins open; top-k indices never repeat) gets
    // the sum of its values.
    auto src = node.tensor("src", 3);
    if (!src)
      return src.takeError();
    if (tensorType(*src).getShape() != indexType.getShape())
      return importError("scatter: src " + typeString(tensorType(*src)) + " is not the shape of index " +
                         typeString(indexType));
    auto srcCast = g.castTo(*src, element);
    if (!srcCast)
      return srcCast.takeError();
    SmallVector<int64_t> column(indexType.getShape()), full(indexType.getShape());
    column.push_back(1);
    full.push_back(n);
    auto srcColumn = g.reshapeTo(*srcCast, column);
    if (!srcColumn)
      return srcColumn.takeError();
    auto srcFull = g.broadcastTo(*srcColumn, full);
    if (!srcFull)
      return srcFull.takeError();
    auto hotMask = g.castTo(*hot, IntegerType::get(g.context(), 1));
    if (!hotMask)
      return hotMask.takeError();
    auto placed = g.create<nn::WhereOp>(RankedTensorType::get(full, element), *hotMask, *srcFull,
                                        g.scalar(element, 0));
    if (!placed)
      return placed.takeError();
    value = g.create<nn::ReduceSumOp>(*type, *placed,
                                      g.builder().getDenseI64ArrayAttr({int64_t(full.size()) - 2}),
                                      UnitAttr());
  }
  if (!value)
    return value.takeError();
  auto hits = g.create<nn::ReduceMaxOp>(
      RankedTensorType::get(selfType.getShape(), i64), *hot,
      g.builder().getDenseI64ArrayAttr({selfType.getRank() - 1}), UnitAttr());
  if (!hits)
    return hits.takeError();
  auto hit = compareValues(g, nn::ComparePredicate::gt, *hits, g.scalar(i64, 0),
                           selfType.getShape());
  if (!hit)
    return hit.takeError();
  auto cast = g.castTo(*value, element);
  if (!cast)
    return cast.takeError();
  // A splat self (zeros_like) as a scalar: no constant of the export's
  // batch stays in the program, so a new batch re-infers it.
  Value base;
  if (std::optional<DenseElementsAttr> c = g.constantValue(*self); c && c->isSplat()) {
    Attribute v = c->getSplatValue<Attribute>();
    double x = 0;
    if (auto f = dyn_cast<FloatAttr>(v))
      x = f.getValueAsDouble();
    else if (auto i = dyn_cast<IntegerAttr>(v))
      x = double(i.getValue().getSExtValue());
    base = g.scalar(element, x);
  } else {
    auto selfCast = g.castTo(*self, element);
    if (!selfCast)
      return selfCast.takeError();
    base = *selfCast;
  }
  auto result = g.create<nn::WhereOp>(*type, *hit, *cast, base);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

} // namespace

/// index_put(self, [index], values) with one integer index into dim 0.
/// Values 0, 1, ... put at a permutation's positions are its inverse: the
/// positions that sort it. Otherwise a one-hot of the index (rows whose
/// index no value names keep self's).
llvm::Error convertIndexPutIntegers(NodeContext &node, Value self, Value index, Value values,
                                    bool accumulate) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  GraphImporter &g = node.importer();
  RankedTensorType indexType = tensorType(index), valuesType = tensorType(values);
  if (indexType.getRank() != 1)
    return importError("index_put with a " + typeString(indexType) +
                       " index is not supported (a 1-D index into dim 0)");
  int64_t n = indexType.getDimSize(0), rows = type->getRank() ? type->getDimSize(0) : 1;
  // An iota of the index's length: the inverse permutation.
  auto isIota = [&](Value v) {
    if (auto iota = v.getDefiningOp<nn::IotaOp>())
      return iota.getStart().convertToDouble() == 0 && iota.getStep().convertToDouble() == 1;
    std::optional<DenseElementsAttr> constant = g.constantValue(v);
    if (!constant || !isa<IntegerType>(constant->getElementType()))
      return false;
    int64_t i = 0;
    for (const llvm::APInt &x : constant->getValues<llvm::APInt>())
      if (x.getSExtValue() != i++)
        return false;
    return true;
  };
  if (!accumulate && type->getRank() == 1 && rows == n &&
      valuesType.getShape() == type->getShape() && isIota(values))
    {
      auto sorted = g.builder().create<nn::SortOp>(
          g.loc(), TypeRange{indexType, RankedTensorType::get({n}, g.builder().getI64Type())},
          index, UnitAttr());
      if (llvm::Error err = g.verify(sorted))
        return err;
      auto result = g.castTo(sorted.getIndices(), type->getElementType());
      if (!result)
        return result.takeError();
      return node.setResult(0, *result);
    }
  if (!isa<FloatType>(type->getElementType()) && !isa<IntegerType>(type->getElementType()))
    return importError("index_put of " + typeString(*type) + " is not supported");
  // hot[i, r] = (index[i] == r); per row r: sum_i hot[i, r] * values[i].
  Type f32 = isa<FloatType>(type->getElementType()) ? type->getElementType()
                                                     : Type(g.builder().getF32Type());
  auto hot = oneHot(g, index, rows, f32, "index_put");
  if (!hot)
    return hot.takeError();
  SmallVector<int64_t> trailing(type->getShape().drop_front());
  int64_t width = 1;
  for (int64_t d : trailing)
    width *= d;
  SmallVector<int64_t> valueShape{n};
  valueShape.append(trailing);
  auto v = g.broadcastTo(values, valueShape);
  if (!v)
    return v.takeError();
  auto vFlat = g.reshapeTo(*v, {n, width});
  if (!vFlat)
    return vFlat.takeError();
  auto vCast = g.castTo(*vFlat, f32);
  if (!vCast)
    return vCast.takeError();
  auto placed = g.create<nn::MatmulOp>(RankedTensorType::get({rows, width}, f32), *hot, *vCast,
                                       g.builder().getUnitAttr(), UnitAttr());
  if (!placed)
    return placed.takeError();
  auto rowHits = g.create<nn::ReduceSumOp>(RankedTensorType::get({rows}, f32), *hot,
                                           g.builder().getDenseI64ArrayAttr({0}), UnitAttr());
  if (!rowHits)
    return rowHits.takeError();
  auto hits = g.reshapeTo(*rowHits, {rows, 1});
  if (!hits)
    return hits.takeError();
  auto selfFlat = g.reshapeTo(self, {rows, width});
  if (!selfFlat)
    return selfFlat.takeError();
  auto selfCast = g.castTo(*selfFlat, f32);
  if (!selfCast)
    return selfCast.takeError();
  Value combined;
  RankedTensorType flatType = RankedTensorType::get({rows, width}, f32);
  if (accumulate) {
    auto sum = g.create<nn::AddOp>(flatType, *selfCast, *placed);
    if (!sum)
      return sum.takeError();
    combined = *sum;
  } else {
    auto hit = compareValues(g, nn::ComparePredicate::gt, *hits, g.scalar(f32, 0), {rows, 1});
    if (!hit)
      return hit.takeError();
    auto chosen = g.create<nn::WhereOp>(flatType, *hit, *placed, *selfCast);
    if (!chosen)
      return chosen.takeError();
    combined = *chosen;
  }
  return setShapedResult(node, combined);
}

namespace {

Error convertFloorDivide(NodeContext &node) { return divideRounded(node, true); }

/// any / all over `dim` (an int or a list; every dim when absent), as a
/// maximum of the elements that are (any) or are not (all) nonzero.
Error convertAnyAll(NodeContext &node, bool all) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  GraphImporter &g = node.importer();
  RankedTensorType selfType = tensorType(*self);
  int64_t rank = selfType.getRank();
  auto reduced = reductionDims(node, rank);
  if (!reduced)
    return reduced.takeError();
  SmallVector<int64_t> dims = std::move(*reduced);
  auto keepdim = node.boolean("keepdim", 2, false);
  if (!keepdim)
    return keepdim.takeError();
  Type i32 = g.builder().getI32Type();
  Value zero = g.scalar(selfType.getElementType().isInteger(1) ? i32 : selfType.getElementType(), 0);
  Value input = *self;
  if (selfType.getElementType().isInteger(1)) {
    auto widened = g.castTo(input, i32);
    if (!widened)
      return widened.takeError();
    input = *widened;
  }
  // Elements that decide: nonzero ones for any, zeros for all.
  auto hit = compareValues(g, all ? nn::ComparePredicate::eq : nn::ComparePredicate::ne, input,
                           zero, selfType.getShape());
  if (!hit)
    return hit.takeError();
  auto counted = g.castTo(*hit, i32);
  if (!counted)
    return counted.takeError();
  Value found = *counted;
  if (rank > 0) {
    SmallVector<int64_t> shape;
    for (int64_t d = 0; d < rank; ++d) {
      if (!llvm::is_contained(dims, d))
        shape.push_back(selfType.getDimSize(d));
      else if (*keepdim)
        shape.push_back(1);
    }
    auto reduced = g.create<nn::ReduceMaxOp>(RankedTensorType::get(shape, i32), *counted,
                                             g.builder().getDenseI64ArrayAttr(dims),
                                             *keepdim ? g.builder().getUnitAttr() : UnitAttr());
    if (!reduced)
      return reduced.takeError();
    found = *reduced;
  }
  auto result = compareValues(g, all ? nn::ComparePredicate::eq : nn::ComparePredicate::ne, found,
                              g.scalar(i32, 0), tensorType(found).getShape());
  if (!result)
    return result.takeError();
  auto cast = g.castTo(*result, type->getElementType());
  if (!cast)
    return cast.takeError();
  return node.setResult(0, *cast);
}

Error convertAny(NodeContext &node) { return convertAnyAll(node, false); }
Error convertAll(NodeContext &node) { return convertAnyAll(node, true); }

} // namespace

void addRoutingConverters(llvm::StringMap<OperatorConverter> &t) {
  t["aten.any"] = convertAny;
  t["aten.all"] = convertAll;
  t["aten.topk"] = convertTopk;
  t["aten.sort"] = convertSort;
  t["aten.histc"] = convertHistc;
  t["aten.floor_divide"] = convertFloorDivide;
  t["aten.gather"] = convertGatherElements;
  t["aten.scatter"] = convertScatterValue;
  t["transformers.grouped_mm_fallback"] = convertGroupedMm;
  t["aten._grouped_mm"] = convertGroupedMm;
}

Error convertRoundedDivide(NodeContext &node, llvm::StringRef mode) {
  if (mode != "floor" && mode != "trunc")
    return importError("rounding_mode '" + mode + "' is not supported (floor or trunc)");
  return divideRounded(node, mode == "floor");
}

} // namespace loom::torch_export
