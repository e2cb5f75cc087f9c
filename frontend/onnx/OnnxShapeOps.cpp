// ONNX data-movement operators: Reshape, Flatten, Squeeze, Unsqueeze,
// Transpose, Concat, Split, Slice, Expand, Gather, Pad (constant). Shape operands (Reshape's
// shape, Slice's bounds, axes) must be constants: Loom compiles static shapes.

#include "frontend/onnx/OnnxNodeImporter.h"

#include "frontend/common/Compositions.h"

#include "llvm/ADT/SmallSet.h"

#include <algorithm>
#include <limits>

using namespace mlir;

namespace loom::onnx_import {
namespace {

LogicalResult importReshape(NodeImporter &n) {
  FailureOr<Value> data = n.input(0);
  FailureOr<std::vector<int64_t>> requested = n.constantInts(1, "shape");
  FailureOr<int64_t> allowZero = n.intAttr("allowzero", 0);
  if (failed(data) || failed(requested) || failed(allowZero))
    return failure();
  ArrayRef<int64_t> inputShape = NodeImporter::typeOf(*data).getShape();
  int64_t total = NodeImporter::typeOf(*data).getNumElements();
  SmallVector<int64_t> shape;
  int inferredDim = -1;
  int64_t known = 1;
  for (auto [i, d] : llvm::enumerate(*requested)) {
    if (d == 0 && !*allowZero) {
      // 0 copies the input's dim (unless allowzero).
      if (i >= inputShape.size())
        return n.fail("shape entry " + Twine(i) + " is 0 but the input has rank " +
                      Twine(inputShape.size()));
      d = inputShape[i];
    }
    if (d == -1) {
      if (inferredDim >= 0)
        return n.fail("shape has more than one -1");
      inferredDim = i;
      shape.push_back(1);
      continue;
    }
    if (d < 0)
      return n.fail("shape entry " + Twine(i) + " is " + Twine(d));
    if (d > 0 && known > std::numeric_limits<int64_t>::max() / d)
      return n.fail("shape entry " + Twine(i) + " (" + Twine(d) +
                    ") makes the element count overflow 64 bits");
    shape.push_back(d);
    known *= d;
  }
  if (inferredDim >= 0) {
    if (known == 0 || total % known != 0)
      return n.fail("cannot infer the -1 entry: " + Twine(total) +
                    " elements do not divide by " + Twine(known));
    shape[inferredDim] = total / known;
  }
  FailureOr<Value> result = n.reshape(*data, shape);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

LogicalResult importFlatten(NodeImporter &n) {
  FailureOr<Value> data = n.input(0);
  FailureOr<int64_t> axisAttr = n.intAttr("axis", 1);
  if (failed(data) || failed(axisAttr))
    return failure();
  ArrayRef<int64_t> shape = NodeImporter::typeOf(*data).getShape();
  FailureOr<int64_t> axis = n.normalizeAxis(*axisAttr, shape.size(), "axis",
                                            /*inclusiveEnd=*/true);
  if (failed(axis))
    return failure();
  int64_t outer = 1, inner = 1;
  for (auto [i, d] : llvm::enumerate(shape))
    (static_cast<int64_t>(i) < *axis ? outer : inner) *= d;
  FailureOr<Value> result = n.reshape(*data, {outer, inner});
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// Axes from the `axes` input (opset 13+), normalized against `rank`.
FailureOr<SmallVector<int64_t>> axesInput(NodeImporter &n, int index, int64_t rank) {
  FailureOr<std::vector<int64_t>> axes = n.constantInts(index, "axes");
  if (failed(axes))
    return failure();
  SmallVector<int64_t> normalized;
  llvm::SmallSet<int64_t, 4> seen;
  for (int64_t axis : *axes) {
    FailureOr<int64_t> a = n.normalizeAxis(axis, rank, "axis");
    if (failed(a))
      return failure();
    if (!seen.insert(*a).second)
      return n.fail("axis " + Twine(axis) + " is repeated");
    normalized.push_back(*a);
  }
  return normalized;
}

LogicalResult importSqueeze(NodeImporter &n) {
  FailureOr<Value> data = n.input(0);
  if (failed(data))
    return failure();
  ArrayRef<int64_t> shape = NodeImporter::typeOf(*data).getShape();
  SmallVector<int64_t> axes;
  if (n.hasInput(1)) {
    FailureOr<SmallVector<int64_t>> given = axesInput(n, 1, shape.size());
    if (failed(given))
      return failure();
    axes = *given;
    for (int64_t a : axes)
      if (shape[a] != 1)
        return n.fail("cannot squeeze dim " + Twine(a) + " of size " + Twine(shape[a]));
  } else {
    for (auto [i, d] : llvm::enumerate(shape))
      if (d == 1)
        axes.push_back(i);
  }
  SmallVector<int64_t> result;
  for (auto [i, d] : llvm::enumerate(shape))
    if (!llvm::is_contained(axes, static_cast<int64_t>(i)))
      result.push_back(d);
  FailureOr<Value> squeezed = n.reshape(*data, result);
  if (failed(squeezed))
    return failure();
  return n.setOutput(0, *squeezed);
}

LogicalResult importUnsqueeze(NodeImporter &n) {
  FailureOr<Value> data = n.input(0);
  if (failed(data))
    return failure();
  ArrayRef<int64_t> shape = NodeImporter::typeOf(*data).getShape();
  FailureOr<std::vector<int64_t>> count = n.constantInts(1, "axes");
  if (failed(count))
    return failure();
  int64_t rank = shape.size() + count->size();
  FailureOr<SmallVector<int64_t>> axes = axesInput(n, 1, rank);
  if (failed(axes))
    return failure();
  SmallVector<int64_t> result;
  const int64_t *next = shape.begin();
  for (int64_t i = 0; i < rank; ++i)
    result.push_back(llvm::is_contained(*axes, i) ? 1 : *next++);
  FailureOr<Value> unsqueezed = n.reshape(*data, result);
  if (failed(unsqueezed))
    return failure();
  return n.setOutput(0, *unsqueezed);
}

LogicalResult importTranspose(NodeImporter &n) {
  FailureOr<Value> data = n.input(0);
  FailureOr<std::optional<std::vector<int64_t>>> perm = n.intsAttr("perm");
  if (failed(data) || failed(perm))
    return failure();
  int64_t rank = NodeImporter::typeOf(*data).getRank();
  SmallVector<int64_t> permutation;
  if (*perm) {
    // Negative entries count from the end, as torch's permute reads them:
    // the TorchScript exporter writes x.permute(0, -2, -1, 1) (Mamba-2's
    // scan) as it stands, which the ONNX operator does not allow.
    for (int64_t p : **perm)
      permutation.push_back(p < 0 && p >= -rank ? p + rank : p);
  } else
    for (int64_t i = rank - 1; i >= 0; --i)
      permutation.push_back(i);
  FailureOr<Value> result =
      n.inferred<nn::TransposeOp>(*data, n.b.getDenseI64ArrayAttr(permutation));
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

LogicalResult importConcat(NodeImporter &n) {
  FailureOr<int64_t> axisAttr = n.intAttr("axis", std::numeric_limits<int64_t>::min());
  if (failed(axisAttr))
    return failure();
  if (*axisAttr == std::numeric_limits<int64_t>::min())
    return n.fail("attribute 'axis' is required");
  SmallVector<Value> inputs;
  for (int i = 0; i < n.numInputs(); ++i) {
    FailureOr<Value> v = n.input(i);
    if (failed(v) || (!inputs.empty() && failed(n.requireSameElementType(inputs[0], *v))))
      return failure();
    inputs.push_back(*v);
  }
  if (inputs.empty())
    return n.fail("needs at least one input");
  FailureOr<int64_t> axis =
      n.normalizeAxis(*axisAttr, NodeImporter::typeOf(inputs[0]).getRank(), "axis");
  if (failed(axis))
    return failure();
  FailureOr<Value> result =
      n.inferred<nn::ConcatOp>(ValueRange(inputs), n.b.getI64IntegerAttr(*axis));
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

LogicalResult importSplit(NodeImporter &n) {
  FailureOr<Value> data = n.input(0);
  FailureOr<int64_t> axisAttr = n.intAttr("axis", 0);
  FailureOr<int64_t> numOutputsAttr = n.intAttr("num_outputs", 0);
  if (failed(data) || failed(axisAttr) || failed(numOutputsAttr))
    return failure();
  RankedTensorType type = NodeImporter::typeOf(*data);
  FailureOr<int64_t> axis = n.normalizeAxis(*axisAttr, type.getRank(), "axis");
  if (failed(axis))
    return failure();
  int64_t dim = type.getDimSize(*axis);
  int64_t outputs = n.numOutputs();
  SmallVector<int64_t> sizes;
  if (n.hasInput(1)) {
    FailureOr<std::vector<int64_t>> split = n.constantInts(1, "split");
    if (failed(split))
      return failure();
    sizes.assign(split->begin(), split->end());
    if (static_cast<int64_t>(sizes.size()) != outputs)
      return n.fail("split has " + Twine(sizes.size()) + " sizes for " +
                    Twine(outputs) + " outputs");
  } else {
    int64_t parts = *numOutputsAttr > 0 ? *numOutputsAttr : outputs;
    if (parts != outputs || parts <= 0)
      return n.fail("num_outputs = " + Twine(parts) + " but the node has " +
                    Twine(outputs) + " outputs");
    // Equal parts; with num_outputs (opset 18) the last may be smaller.
    if (*numOutputsAttr == 0 && dim % parts != 0)
      return n.fail("dim " + Twine(dim) + " does not split into " + Twine(parts) +
                    " equal parts");
    int64_t chunk = (dim + parts - 1) / parts;
    for (int64_t i = 0, left = dim; i < parts; ++i) {
      sizes.push_back(std::min(chunk, left));
      left -= sizes.back();
    }
  }
  int64_t total = 0;
  SmallVector<Type> resultTypes;
  for (int64_t size : sizes) {
    if (size < 0)
      return n.fail("split size " + Twine(size) + " is negative");
    total += size;
    SmallVector<int64_t> shape(type.getShape());
    shape[*axis] = size;
    resultTypes.push_back(RankedTensorType::get(shape, type.getElementType()));
  }
  if (total != dim)
    return n.fail("split sizes add up to " + Twine(total) + ", the dim has " + Twine(dim));
  auto split = n.b.create<nn::SplitOp>(n.loc, resultTypes, *data,
                                       n.b.getI64IntegerAttr(*axis));
  for (int64_t i = 0; i < outputs; ++i)
    (void)n.setOutput(i, split.getResult(i));
  return success();
}

LogicalResult importSlice(NodeImporter &n) {
  FailureOr<Value> data = n.input(0);
  FailureOr<std::vector<int64_t>> starts = n.constantInts(1, "starts");
  FailureOr<std::vector<int64_t>> ends = n.constantInts(2, "ends");
  if (failed(data) || failed(starts) || failed(ends))
    return failure();
  RankedTensorType type = NodeImporter::typeOf(*data);
  int64_t rank = type.getRank();
  if (starts->size() != ends->size())
    return n.fail("starts and ends differ in length");
  std::vector<int64_t> axes, steps(starts->size(), 1);
  if (n.hasInput(3)) {
    FailureOr<std::vector<int64_t>> given = n.constantInts(3, "axes");
    if (failed(given))
      return failure();
    axes = *given;
  } else {
    for (size_t i = 0; i < starts->size(); ++i)
      axes.push_back(i);
  }
  if (n.hasInput(4)) {
    FailureOr<std::vector<int64_t>> given = n.constantInts(4, "steps");
    if (failed(given))
      return failure();
    steps = *given;
  }
  if (axes.size() != starts->size() || steps.size() != starts->size())
    return n.fail("starts, ends, axes and steps differ in length");

  SmallVector<int64_t> lo(rank, 0), hi(type.getShape()), stride(rank, 1);
  llvm::SmallSet<int64_t, 4> seen;
  SmallVector<std::pair<int64_t, SmallVector<int64_t>>> backwards;
  for (size_t i = 0; i < axes.size(); ++i) {
    FailureOr<int64_t> axis = n.normalizeAxis(axes[i], rank, "axis");
    if (failed(axis))
      return failure();
    if (!seen.insert(*axis).second)
      return n.fail("axis " + Twine(axes[i]) + " is repeated");
    if (steps[i] == 0)
      return n.fail("step 0 on axis " + Twine(axes[i]));
    int64_t dim = type.getDimSize(*axis);
    if (steps[i] < 0) {
      // Backwards (x[::-1]): start clamps to [0, dim - 1] and end to
      // [-1, dim - 1]; the positions start, start + step, ... above end,
      // gathered after the slice of the other axes.
      auto bound = [dim](int64_t index, int64_t low) {
        if (index < 0)
          index += dim;
        return std::clamp(index, low, dim - 1);
      };
      int64_t end = bound((*ends)[i], -1);
      SmallVector<int64_t> picked;
      for (int64_t at = bound((*starts)[i], 0); at > end && dim > 0; at += steps[i])
        picked.push_back(at);
      backwards.emplace_back(*axis, std::move(picked));
      continue;
    }
    // Negative indices count from the end; both bounds clamp to [0, dim].
    auto clampIndex = [dim](int64_t index) {
      if (index < 0)
        index = index < -dim ? 0 : index + dim;
      return std::min(index, dim);
    };
    int64_t start = clampIndex((*starts)[i]);
    int64_t end = clampIndex((*ends)[i]);
    lo[*axis] = start;
    hi[*axis] = std::max(start, end);
    stride[*axis] = steps[i];
  }
  FailureOr<Value> result = n.inferred<nn::SliceOp>(
      *data, n.b.getDenseI64ArrayAttr(lo), n.b.getDenseI64ArrayAttr(hi),
      n.b.getDenseI64ArrayAttr(stride));
  for (auto &[axis, picked] : backwards) {
    if (failed(result))
      return failure();
    auto indexType =
        RankedTensorType::get({int64_t(picked.size())}, n.b.getI64Type());
    Value index = n.constant(DenseElementsAttr::get(indexType, ArrayRef<int64_t>(picked)));
    result = n.inferred<nn::GatherOp>(*result, index, n.b.getI64IntegerAttr(axis));
  }
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// Expand broadcasts both ways: a 1 in `shape` keeps the input's dim.
LogicalResult importExpand(NodeImporter &n) {
  FailureOr<Value> data = n.input(0);
  FailureOr<std::vector<int64_t>> shape = n.constantInts(1, "shape");
  if (failed(data) || failed(shape))
    return failure();
  ArrayRef<int64_t> inputShape = NodeImporter::typeOf(*data).getShape();
  FailureOr<SmallVector<int64_t>> target = nn::broadcastShapes(inputShape, *shape);
  if (failed(target) || llvm::any_of(*shape, [](int64_t d) { return d < 0; }))
    return n.fail("the input does not broadcast to the requested shape");
  FailureOr<Value> result = n.broadcastTo(*data, *target);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// Tile(input, repeats): the input copied repeats[i] times along dim i, the
/// copy outer: each dim of size d becomes [r, d] (broadcast from [1, d]),
/// then merged.
LogicalResult importTile(NodeImporter &n) {
  FailureOr<Value> data = n.input(0);
  FailureOr<std::vector<int64_t>> repeats = n.constantInts(1, "repeats");
  if (failed(data) || failed(repeats))
    return failure();
  ArrayRef<int64_t> shape = NodeImporter::typeOf(*data).getShape();
  if (repeats->size() != shape.size())
    return n.fail("repeats has " + Twine(repeats->size()) + " entries for a tensor of rank " +
                  Twine(shape.size()));
  SmallVector<int64_t> split, tiled, merged;
  for (auto [r, d] : llvm::zip(*repeats, shape)) {
    if (r < 0)
      return n.fail("repeats must be >= 0, got " + Twine(r));
    split.append({1, d});
    tiled.append({r, d});
    merged.push_back(r * d);
  }
  FailureOr<Value> result = n.reshape(*data, split);
  if (succeeded(result))
    result = n.broadcastTo(*result, tiled);
  if (succeeded(result))
    result = n.reshape(*result, merged);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// Gather(data, indices, axis): an embedding lookup when it selects rows of a
/// 2-D float table, else nn.gather. Constant indices may be negative (from
/// the end).
LogicalResult importGather(NodeImporter &n) {
  FailureOr<Value> data = n.input(0), indices = n.input(1);
  FailureOr<int64_t> axisAttr = n.intAttr("axis", 0);
  if (failed(data) || failed(indices) || failed(axisAttr))
    return failure();
  RankedTensorType dataType = NodeImporter::typeOf(*data);
  RankedTensorType indexType = NodeImporter::typeOf(*indices);
  FailureOr<int64_t> axis = n.normalizeAxis(*axisAttr, dataType.getRank(), "axis");
  if (failed(axis))
    return failure();
  if (!indexType.getElementType().isInteger(64) && !indexType.getElementType().isInteger(32))
    return n.fail("indices must be int32 or int64");
  if (n.isConstantInput(1)) {
    FailureOr<DenseElementsAttr> given = n.constantInput(1, "indices");
    if (failed(given))
      return failure();
    int64_t dim = dataType.getDimSize(*axis);
    std::vector<int64_t> ids = elementsAsInts(*given);
    for (int64_t &id : ids) {
      if (id < -dim || id >= dim)
        return n.fail("index " + Twine(id) + " is out of range for a dim of size " +
                      Twine(dim));
      if (id < 0)
        id += dim;
    }
    indices = n.constant(elementsFromInts(indexType, ids));
  }
  FailureOr<Value> result;
  if (*axis == 0 && dataType.getRank() == 2 && isa<FloatType>(dataType.getElementType()))
    result = n.inferred<nn::EmbeddingOp>(*data, *indices, mlir::IntegerAttr(), mlir::IntegerAttr());
  else
    result = n.inferred<nn::GatherOp>(*data, *indices, n.b.getI64IntegerAttr(*axis));
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// GatherND (batch_dims 0): out[i...] = data[indices[i..., 0], ...,
/// indices[i..., K-1], :]. The K leading dims of data are flattened into one
/// and each index tuple into its row there (negative indices counted from
/// the end), so the node is one Gather along axis 0.
LogicalResult importGatherND(NodeImporter &n) {
  FailureOr<Value> data = n.input(0), indices = n.input(1);
  FailureOr<int64_t> batchDims = n.intAttr("batch_dims", 0);
  if (failed(data) || failed(indices) || failed(batchDims))
    return failure();
  if (*batchDims != 0)
    return n.fail("batch_dims " + Twine(*batchDims) + " is not supported (only 0)");
  RankedTensorType dataType = NodeImporter::typeOf(*data);
  RankedTensorType indexType = NodeImporter::typeOf(*indices);
  if (!indexType.getElementType().isInteger(64))
    return n.fail("indices must be int64");
  int64_t q = indexType.getRank();
  int64_t k = q ? indexType.getDimSize(q - 1) : 0;
  if (q < 1 || k < 1 || k > dataType.getRank())
    return n.fail("the indices' last dim (" + Twine(k) + ") must be in [1, " +
                  Twine(dataType.getRank()) + "], the data's rank");
  Type i64 = indexType.getElementType();
  Value row;
  int64_t stride = 1;
  for (int64_t i = k - 1; i >= 0; --i) {
    int64_t dim = dataType.getDimSize(i);
    // indices[..., i] (a rank-0 index drops the axis).
    FailureOr<Value> part = n.inferred<nn::GatherOp>(
        *indices, n.constant(elementsFromInts(RankedTensorType::get({}, i64), {i})),
        n.b.getI64IntegerAttr(q - 1));
    if (failed(part))
      return failure();
    FailureOr<Value> negative =
        n.inferred<nn::CompareOp>(nn::ComparePredicate::lt, *part, n.scalar(i64, 0));
    FailureOr<Value> wrapped = n.inferred<nn::AddOp>(*part, n.scalar(i64, dim));
    if (failed(negative) || failed(wrapped))
      return failure();
    FailureOr<Value> index = n.inferred<nn::WhereOp>(*negative, *wrapped, *part);
    if (failed(index))
      return failure();
    if (stride != 1) {
      index = n.inferred<nn::MulOp>(*index, n.scalar(i64, stride));
      if (failed(index))
        return failure();
    }
    if (row) {
      index = n.inferred<nn::AddOp>(row, *index);
      if (failed(index))
        return failure();
    }
    row = *index;
    stride *= dim;
  }
  llvm::SmallVector<int64_t> flat{stride};
  llvm::append_range(flat, dataType.getShape().drop_front(k));
  FailureOr<Value> rows = n.reshape(*data, flat);
  if (failed(rows))
    return failure();
  FailureOr<Value> result = n.inferred<nn::GatherOp>(*rows, row, n.b.getI64IntegerAttr(0));
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// Pad (opset 11+, mode constant): pads [begins..., ends...] over `axes`
/// (all dims when absent), constant_value a constant scalar; negative
/// amounts crop.
LogicalResult importPad(NodeImporter &n) {
  if (n.opset < 11)
    return n.fail("Pad before opset 11 (pads as an attribute) is not supported");
  FailureOr<Value> data = n.input(0);
  FailureOr<std::string> mode = n.stringAttr("mode", "constant");
  FailureOr<std::vector<int64_t>> pads = n.constantInts(1, "pads");
  if (failed(data) || failed(mode) || failed(pads))
    return failure();
  if (*mode != "constant")
    return n.fail("mode '" + *mode + "' is not supported (only constant)");
  const int64_t rank = NodeImporter::typeOf(*data).getRank();
  std::vector<int64_t> axes;
  if (n.hasInput(3)) {
    FailureOr<std::vector<int64_t>> given = n.constantInts(3, "axes");
    if (failed(given))
      return failure();
    for (int64_t axis : *given) {
      FailureOr<int64_t> d = n.normalizeAxis(axis, rank, "axis");
      if (failed(d))
        return failure();
      if (llvm::is_contained(axes, *d))
        return n.fail("axis " + Twine(axis) + " is repeated");
      axes.push_back(*d);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  if (pads->size() != 2 * axes.size())
    return n.fail("pads has " + Twine(pads->size()) + " values for " + Twine(axes.size()) +
                  " axes");
  double value = 0;
  if (n.hasInput(2)) {
    FailureOr<DenseElementsAttr> c = n.constantInput(2, "constant_value");
    if (failed(c))
      return failure();
    std::vector<double> values = elementsAsDoubles(*c);
    if (values.size() != 1)
      return n.fail("constant_value must be one value");
    value = values[0];
  }
  SmallVector<int64_t> before(rank, 0), after(rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    before[axes[i]] += (*pads)[i];
    after[axes[i]] += (*pads)[axes.size() + i];
  }
  std::string why;
  FailureOr<Value> out = buildConstantPad(n.b, n.loc, *data, before, after, value, why);
  if (failed(out))
    return n.fail(why);
  return n.setOutput(0, *out);
}

} // namespace

void addShapeOps(OpTable &table) {
  table["Reshape"] = importReshape;
  table["Pad"] = importPad;
  table["Flatten"] = importFlatten;
  table["Squeeze"] = importSqueeze;
  table["Unsqueeze"] = importUnsqueeze;
  table["Transpose"] = importTranspose;
  table["Concat"] = importConcat;
  table["Split"] = importSplit;
  table["Slice"] = importSlice;
  table["Expand"] = importExpand;
  table["Tile"] = importTile;
  table["Gather"] = importGather;
  table["GatherND"] = importGatherND;
}

} // namespace loom::onnx_import
