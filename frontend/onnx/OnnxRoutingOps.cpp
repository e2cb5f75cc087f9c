// ONNX operators of mixture-of-experts routing (issue 21), as PyTorch's ONNX
// exporters write them for transformers' MoE models: TopK (nn.topk), ArgMax and ArgMin (a top-1), OneHot,
// GatherElements (along any axis) and ScatterElements along the last axis (masks of a
// one-hot over that axis, as the .pt2 importer builds aten.gather and
// aten.scatter), and ScatterND with constant indices (a slice assignment:
// one gather of the data and the updates together).

#include "frontend/onnx/OnnxNodeImporter.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

using namespace mlir;

namespace loom::onnx_import {
namespace {

/// The most elements a one-hot over the last axis may have.
constexpr int64_t kMaxOneHot = int64_t(1) << 26;

/// The last axis of a tensor of rank `rank`, which `axis` must name.
FailureOr<int64_t> lastAxis(NodeImporter &n, int64_t axis, int64_t rank) {
  FailureOr<int64_t> a = n.normalizeAxis(axis, rank, "axis");
  if (failed(a))
    return failure();
  if (*a != rank - 1)
    return n.fail("only the last axis (" + Twine(rank - 1) + ") is supported, got axis " +
                  Twine(axis));
  return *a;
}

/// TopK(X, K; axis, largest, sorted): the K best along the last axis, best
/// first and ties by position (which any `sorted` allows).
LogicalResult importTopK(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  FailureOr<std::vector<int64_t>> k = n.constantInts(1, "K");
  FailureOr<int64_t> axis = n.intAttr("axis", -1), largest = n.intAttr("largest", 1);
  if (failed(x) || failed(k) || failed(axis) || failed(largest))
    return failure();
  RankedTensorType type = NodeImporter::typeOf(*x);
  if (type.getRank() < 1 || !isa<FloatType>(type.getElementType()))
    return n.fail("X must be a float tensor of rank 1 or more");
  if (failed(lastAxis(n, *axis, type.getRank())))
    return failure();
  if (k->size() != 1 || (*k)[0] < 1 || (*k)[0] > type.getShape().back())
    return n.fail("K must be one value in [1, " + Twine(type.getShape().back()) + "]");
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = (*k)[0];
  auto op = n.b.create<nn::TopkOp>(
      n.loc, TypeRange{type.clone(shape), RankedTensorType::get(shape, n.b.getI64Type())}, *x,
      n.b.getI64IntegerAttr((*k)[0]), *largest ? UnitAttr() : n.b.getUnitAttr());
  if (failed(n.setOutput(0, op.getValues())))
    return failure();
  return n.wantsOutput(1) ? n.setOutput(1, op.getIndices()) : success();
}

/// hot[..., j, c] = (indices[..., j] == c) (i1) for c < classes, negative
/// indices counted from the end: [..., k, classes].
FailureOr<Value> oneHot(NodeImporter &n, Value indices, int64_t classes) {
  RankedTensorType type = NodeImporter::typeOf(indices);
  if (!type.getElementType().isInteger(64) && !type.getElementType().isInteger(32))
    return n.fail("indices must be int32 or int64");
  if (type.getNumElements() * classes > kMaxOneHot)
    return n.fail("the one-hot of " + Twine(type.getNumElements()) + " indices over " +
                  Twine(classes) + " classes is too large");
  Type i64 = n.b.getI64Type();
  Value wide = indices;
  if (!type.getElementType().isInteger(64))
    wide = n.b.create<nn::CastOp>(n.loc, type.clone(i64), indices);
  FailureOr<Value> negative =
      n.inferred<nn::CompareOp>(nn::ComparePredicate::lt, wide, n.scalar(i64, 0));
  FailureOr<Value> wrapped = n.inferred<nn::AddOp>(wide, n.scalar(i64, classes));
  if (failed(negative) || failed(wrapped))
    return failure();
  FailureOr<Value> index = n.inferred<nn::WhereOp>(*negative, *wrapped, wide);
  if (failed(index))
    return failure();
  SmallVector<int64_t> column(type.getShape());
  column.push_back(1);
  FailureOr<Value> col = n.reshape(*index, column);
  if (failed(col))
    return failure();
  SmallVector<int64_t> rowShape(column.size(), 1);
  rowShape.back() = classes;
  Value row = n.b.create<nn::IotaOp>(n.loc, RankedTensorType::get(rowShape, i64),
                                     n.b.getI64IntegerAttr(int64_t(rowShape.size()) - 1),
                                     n.b.getF64FloatAttr(0), n.b.getF64FloatAttr(1));
  return n.inferred<nn::CompareOp>(nn::ComparePredicate::eq, *col, row);
}

/// OneHot(indices, depth, values; axis): values[1] where an index (negative
/// ones counted from the end) names the class, values[0] elsewhere; the
/// classes along `axis` of the result (by default the last). Indices
/// outside [-depth, depth) give a row of values[0], as the operator asks.
LogicalResult importOneHot(NodeImporter &n) {
  FailureOr<Value> indices = n.input(0), values = n.input(2);
  FailureOr<std::vector<int64_t>> depth = n.constantInts(1, "depth");
  FailureOr<int64_t> axis = n.intAttr("axis", -1);
  if (failed(indices) || failed(values) || failed(depth) || failed(axis))
    return failure();
  if (depth->size() != 1 || (*depth)[0] < 1)
    return n.fail("depth must be one positive value");
  RankedTensorType valuesType = NodeImporter::typeOf(*values);
  if (valuesType.getRank() != 1 || valuesType.getDimSize(0) != 2)
    return n.fail("values must be [off_value, on_value], got " +
                  Twine(valuesType.getRank() == 1 ? valuesType.getDimSize(0) : -1) + " values");
  int64_t rank = NodeImporter::typeOf(*indices).getRank() + 1;
  FailureOr<int64_t> along = n.normalizeAxis(*axis, rank, "axis");
  if (failed(along))
    return failure();
  FailureOr<Value> hot = oneHot(n, *indices, (*depth)[0]);
  if (failed(hot))
    return failure();
  // values[hot]: a gather of the two values by 0 or 1.
  Value which = n.b.create<nn::CastOp>(
      n.loc, NodeImporter::typeOf(*hot).clone(n.b.getI64Type()), *hot);
  FailureOr<Value> result = n.inferred<nn::GatherOp>(*values, which, n.b.getI64IntegerAttr(0));
  if (failed(result))
    return failure();
  if (*along != rank - 1) {
    SmallVector<int64_t> permutation;
    for (int64_t d = 0; d < rank - 1; ++d) {
      if (d == *along)
        permutation.push_back(rank - 1);
      permutation.push_back(d);
    }
    result = n.inferred<nn::TransposeOp>(*result, n.b.getDenseI64ArrayAttr(permutation));
    if (failed(result))
      return failure();
  }
  return n.setOutput(0, *result);
}

/// `v` with dims `axis` and the last swapped (their own inverse); `v` itself
/// when `axis` is the last.
FailureOr<Value> swapWithLast(NodeImporter &n, Value v, int64_t axis) {
  int64_t rank = NodeImporter::typeOf(v).getRank();
  if (axis == rank - 1)
    return v;
  SmallVector<int64_t> permutation = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(permutation[axis], permutation.back());
  return n.inferred<nn::TransposeOp>(v, n.b.getDenseI64ArrayAttr(permutation));
}

/// ArgMax and ArgMin(data; axis, keepdims, select_last_index): the first
/// best position along `axis`, as i64: a top-1 (ties by position) along the
/// last axis, `axis` swapped with it first.
LogicalResult importArgBest(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  FailureOr<int64_t> axis = n.intAttr("axis", 0), keepdims = n.intAttr("keepdims", 1),
                     last = n.intAttr("select_last_index", 0);
  if (failed(x) || failed(axis) || failed(keepdims) || failed(last))
    return failure();
  RankedTensorType type = NodeImporter::typeOf(*x);
  if (type.getRank() < 1 || !isa<FloatType>(type.getElementType()))
    return n.fail("data must be a float tensor of rank 1 or more");
  if (*last)
    return n.fail("select_last_index = 1 is unsupported (ties go to the first index)");
  FailureOr<int64_t> along = n.normalizeAxis(*axis, type.getRank(), "axis");
  if (failed(along))
    return failure();
  FailureOr<Value> swapped = swapWithLast(n, *x, *along);
  if (failed(swapped))
    return failure();
  SmallVector<int64_t> shape(NodeImporter::typeOf(*swapped).getShape());
  shape.back() = 1;
  bool largest = n.node.op_type() == "ArgMax";
  auto top = n.b.create<nn::TopkOp>(
      n.loc,
      TypeRange{RankedTensorType::get(shape, type.getElementType()),
                RankedTensorType::get(shape, n.b.getI64Type())},
      *swapped, n.b.getI64IntegerAttr(1), largest ? UnitAttr() : n.b.getUnitAttr());
  FailureOr<Value> result = swapWithLast(n, top.getIndices(), *along);
  if (failed(result))
    return failure();
  if (!*keepdims) {
    SmallVector<int64_t> kept(type.getShape());
    kept.erase(kept.begin() + *along);
    result = n.reshape(*result, kept);
    if (failed(result))
      return failure();
  }
  return n.setOutput(0, *result);
}

/// GatherElements: out[..., j] = data[..., idx[..., j]] along the last
/// axis; along another axis (GPT-J's rotary table), that axis swapped with
/// the last in the data, the indices and the result.
LogicalResult importGatherElements(NodeImporter &n) {
  FailureOr<Value> data = n.input(0), indices = n.input(1);
  FailureOr<int64_t> axis = n.intAttr("axis", 0);
  if (failed(data) || failed(indices) || failed(axis))
    return failure();
  FailureOr<int64_t> along =
      n.normalizeAxis(*axis, NodeImporter::typeOf(*data).getRank(), "axis");
  if (failed(along))
    return failure();
  if (NodeImporter::typeOf(*indices).getRank() != NodeImporter::typeOf(*data).getRank())
    return n.fail("indices and data must have one rank");
  data = swapWithLast(n, *data, *along);
  indices = swapWithLast(n, *indices, *along);
  if (failed(data) || failed(indices))
    return failure();
  RankedTensorType dataType = NodeImporter::typeOf(*data),
                   indexType = NodeImporter::typeOf(*indices);
  if (!isa<FloatType>(dataType.getElementType()))
    return n.fail("only float data is supported");
  if (indexType.getShape().drop_back() != dataType.getShape().drop_back())
    return n.fail("indices and data must agree outside the gathered axis");
  int64_t classes = dataType.getShape().back();
  FailureOr<Value> hot = oneHot(n, *indices, classes);
  if (failed(hot))
    return failure();
  SmallVector<int64_t> rowShape(dataType.getShape());
  rowShape.insert(rowShape.end() - 1, 1);
  FailureOr<Value> rows = n.reshape(*data, rowShape);
  if (failed(rows))
    return failure();
  rows = n.broadcastTo(*rows, NodeImporter::typeOf(*hot).getShape());
  if (failed(rows))
    return failure();
  FailureOr<Value> picked =
      n.inferred<nn::WhereOp>(*hot, *rows, n.scalar(dataType.getElementType(), 0));
  if (failed(picked))
    return failure();
  FailureOr<Value> result = n.inferred<nn::ReduceSumOp>(
      *picked, n.b.getDenseI64ArrayAttr({dataType.getRank()}), UnitAttr());
  if (failed(result))
    return failure();
  result = swapWithLast(n, *result, *along);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// ScatterElements along the last axis (reduction none): data where no
/// index hits, the update of the index that does (indices distinct per row,
/// as ONNX requires for reduction none).
LogicalResult importScatterElements(NodeImporter &n) {
  FailureOr<Value> data = n.input(0), indices = n.input(1), updates = n.input(2);
  FailureOr<int64_t> axis = n.intAttr("axis", 0);
  FailureOr<std::string> reduction = n.stringAttr("reduction", "none");
  if (failed(data) || failed(indices) || failed(updates) || failed(axis) || failed(reduction))
    return failure();
  if (*reduction != "none")
    return n.fail("reduction '" + *reduction + "' is not supported (only none)");
  RankedTensorType dataType = NodeImporter::typeOf(*data),
                   indexType = NodeImporter::typeOf(*indices);
  if (failed(lastAxis(n, *axis, dataType.getRank())))
    return failure();
  if (!isa<FloatType>(dataType.getElementType()) || failed(n.requireSameElementType(*data, *updates)))
    return n.fail("data and updates must be floats of one type");
  if (indexType.getRank() != dataType.getRank() ||
      indexType.getShape().drop_back() != dataType.getShape().drop_back() ||
      NodeImporter::typeOf(*updates).getShape() != indexType.getShape())
    return n.fail("indices, updates and data must agree outside the last axis");
  int64_t classes = dataType.getShape().back();
  Type element = dataType.getElementType();
  FailureOr<Value> hot = oneHot(n, *indices, classes);
  if (failed(hot))
    return failure();
  SmallVector<int64_t> column(indexType.getShape());
  column.push_back(1);
  FailureOr<Value> values = n.reshape(*updates, column);
  if (failed(values))
    return failure();
  values = n.broadcastTo(*values, NodeImporter::typeOf(*hot).getShape());
  if (failed(values))
    return failure();
  // Sum over the indices of the update each one writes (one at most).
  FailureOr<Value> placed = n.inferred<nn::WhereOp>(*hot, *values, n.scalar(element, 0));
  if (failed(placed))
    return failure();
  int64_t kAxis = indexType.getRank() - 1;
  FailureOr<Value> written =
      n.inferred<nn::ReduceSumOp>(*placed, n.b.getDenseI64ArrayAttr({kAxis}), UnitAttr());
  Value hotI64 = n.b.create<nn::CastOp>(
      n.loc, NodeImporter::typeOf(*hot).clone(n.b.getI64Type()), *hot);
  FailureOr<Value> hits = n.inferred<nn::ReduceMaxOp>(hotI64,
                                                      n.b.getDenseI64ArrayAttr({kAxis}),
                                                      UnitAttr());
  if (failed(written) || failed(hits))
    return failure();
  FailureOr<Value> hit =
      n.inferred<nn::CompareOp>(nn::ComparePredicate::gt, *hits, n.scalar(n.b.getI64Type(), 0));
  if (failed(hit))
    return failure();
  FailureOr<Value> result = n.inferred<nn::WhereOp>(*hit, *written, *data);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// ScatterND whose index tuples enumerate a box in row-major order (a
/// slice assignment, `x[:, 1:3, :4] = u`, as the TorchScript exporter writes
/// one): the updates padded to the data's shape and chosen inside the box,
/// with no table of positions (a gather's table would hold one entry per row
/// of the data, in every such node). nullopt when the tuples are no box;
/// a null Value when building failed (the error is set).
std::optional<Value> placeBlock(NodeImporter &n, Value data, Value updates,
                                ArrayRef<int64_t> ids, int64_t k) {
  RankedTensorType type = NodeImporter::typeOf(data);
  int64_t tuples = int64_t(ids.size()) / k;
  SmallVector<int64_t> lo(k, std::numeric_limits<int64_t>::max()), size(k, 0);
  for (int64_t t = 0; t < tuples; ++t)
    for (int64_t d = 0; d < k; ++d)
      lo[d] = std::min(lo[d], ids[t * k + d]);
  int64_t boxed = 1;
  for (int64_t d = 0; d < k; ++d) {
    for (int64_t t = 0; t < tuples; ++t)
      size[d] = std::max(size[d], ids[t * k + d] - lo[d] + 1);
    boxed *= size[d];
  }
  if (tuples < 1 || boxed != tuples)
    return std::nullopt;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t rest = t;
    for (int64_t d = k - 1; d >= 0; --d) {
      if (ids[t * k + d] != lo[d] + rest % size[d])
        return std::nullopt;
      rest /= size[d];
    }
  }
  int64_t rank = type.getRank();
  SmallVector<int64_t> blockShape(size), low(rank, 0), high(rank, 0);
  blockShape.append(type.getShape().begin() + k, type.getShape().end());
  for (int64_t d = 0; d < k; ++d) {
    low[d] = lo[d];
    high[d] = type.getDimSize(d) - lo[d] - size[d];
  }
  FailureOr<Value> block = n.reshape(updates, blockShape);
  if (failed(block))
    return Value();
  Value padded = n.b.create<nn::PadOp>(n.loc, type, *block, n.b.getDenseI64ArrayAttr(low),
                                       n.b.getDenseI64ArrayAttr(high),
                                       n.b.getDenseI64ArrayAttr(SmallVector<int64_t>(rank, 0)),
                                       n.b.getF64FloatAttr(0));
  // Inside the box: lo <= i < lo + size along each of the first k dims.
  Type i64 = n.b.getI64Type();
  Value inside;
  for (int64_t d = 0; d < k; ++d) {
    if (low[d] == 0 && high[d] == 0)
      continue;
    SmallVector<int64_t> along(rank, 1);
    along[d] = type.getDimSize(d);
    Value at = n.b.create<nn::IotaOp>(n.loc, RankedTensorType::get(along, i64),
                                      n.b.getI64IntegerAttr(d), n.b.getF64FloatAttr(0),
                                      n.b.getF64FloatAttr(1));
    FailureOr<Value> above =
        n.inferred<nn::CompareOp>(nn::ComparePredicate::ge, at, n.scalar(i64, lo[d]));
    FailureOr<Value> below = n.inferred<nn::CompareOp>(nn::ComparePredicate::lt, at,
                                                       n.scalar(i64, lo[d] + size[d]));
    FailureOr<Value> both = failed(above) || failed(below)
                                ? FailureOr<Value>(failure())
                                : n.inferred<nn::WhereOp>(*above, *below,
                                                          n.scalar(n.b.getI1Type(), 0));
    if (failed(both))
      return Value();
    if (inside) {
      both = n.inferred<nn::WhereOp>(inside, *both, n.scalar(n.b.getI1Type(), 0));
      if (failed(both))
        return Value();
    }
    inside = *both;
  }
  if (!inside)
    return padded; // The box is the whole data.
  FailureOr<Value> result = n.inferred<nn::WhereOp>(inside, padded, data);
  return failed(result) ? Value() : *result;
}

/// ScatterND (reduction none) with constant indices: the rows the index
/// tuples name (over the data's leading K dims) take the updates, in order
/// (a later tuple naming the same row wins); the rest keep the data. One
/// gather along axis 0 of the data's rows and the updates' rows together.
LogicalResult importScatterND(NodeImporter &n) {
  FailureOr<Value> data = n.input(0), updates = n.input(2);
  FailureOr<std::string> reduction = n.stringAttr("reduction", "none");
  if (failed(data) || failed(updates) || failed(reduction))
    return failure();
  if (*reduction != "none")
    return n.fail("reduction '" + *reduction + "' is not supported (only none)");
  FailureOr<DenseElementsAttr> indexValues =
      n.constantInput(1, "indices: ScatterND is supported with constant indices only");
  if (failed(indexValues))
    return failure();
  RankedTensorType dataType = NodeImporter::typeOf(*data);
  auto indexType = cast<RankedTensorType>(indexValues->getType());
  int64_t q = indexType.getRank(), k = q ? indexType.getShape().back() : 0;
  if (q < 1 || k < 1 || k > dataType.getRank())
    return n.fail("the indices' last dim (" + Twine(k) + ") must be in [1, " +
                  Twine(dataType.getRank()) + "], the data's rank");
  if (failed(n.requireSameElementType(*data, *updates)))
    return failure();
  int64_t rows = 1;
  for (int64_t d = 0; d < k; ++d)
    rows *= dataType.getDimSize(d);
  int64_t tuples = indexType.getNumElements() / k;
  SmallVector<int64_t> rest(dataType.getShape().drop_front(k));
  SmallVector<int64_t> updateShape(indexType.getShape().drop_back());
  updateShape.append(rest);
  if (NodeImporter::typeOf(*updates).getShape() != ArrayRef<int64_t>(updateShape))
    return n.fail("updates must be [indices' leading dims..., data's dims past K]");
  std::vector<int64_t> ids = elementsAsInts(*indexValues);
  for (int64_t t = 0; t < tuples; ++t)
    for (int64_t d = 0; d < k; ++d) {
      int64_t dim = dataType.getDimSize(d), &id = ids[t * k + d];
      if (id < -dim || id >= dim)
        return n.fail("index " + Twine(id) + " is out of range for a dim of size " + Twine(dim));
      if (id < 0)
        id += dim;
    }
  if (std::optional<Value> placed = placeBlock(n, *data, *updates, ids, k))
    return *placed ? n.setOutput(0, *placed) : failure();
  std::vector<int64_t> source(rows);
  for (int64_t r = 0; r < rows; ++r)
    source[r] = r;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t row = 0;
    for (int64_t d = 0; d < k; ++d)
      row = row * dataType.getDimSize(d) + ids[t * k + d];
    source[row] = rows + t;
  }
  SmallVector<int64_t> dataRows{rows}, updateRows{tuples};
  dataRows.append(rest);
  updateRows.append(rest);
  FailureOr<Value> flatData = n.reshape(*data, dataRows);
  FailureOr<Value> flatUpdates = n.reshape(*updates, updateRows);
  if (failed(flatData) || failed(flatUpdates))
    return failure();
  SmallVector<int64_t> both{rows + tuples};
  both.append(rest);
  Value joined = n.b.create<nn::ConcatOp>(n.loc, dataType.clone(both),
                                          ValueRange{*flatData, *flatUpdates},
                                          n.b.getI64IntegerAttr(0));
  Value index = n.constant(
      elementsFromInts(RankedTensorType::get({rows}, n.b.getI64Type()), source));
  FailureOr<Value> gathered = n.inferred<nn::GatherOp>(joined, index, n.b.getI64IntegerAttr(0));
  if (failed(gathered))
    return failure();
  FailureOr<Value> result = n.reshape(*gathered, dataType.getShape());
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

} // namespace

void addRoutingOps(OpTable &table) {
  table["TopK"] = importTopK;
  table["OneHot"] = importOneHot;
  table["ArgMax"] = importArgBest;
  table["ArgMin"] = importArgBest;
  table["GatherElements"] = importGatherElements;
  table["ScatterElements"] = importScatterElements;
  table["ScatterND"] = importScatterND;
}

} // namespace loom::onnx_import
