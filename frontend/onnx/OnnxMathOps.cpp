// ONNX contractions, normalizations and reductions: MatMul, Gemm, Softmax,
// LogSoftmax, Attention, LayerNormalization, RMSNormalization, ReduceSum/ReduceMean/ReduceMax/ReduceLogSumExp,
// Conv (1-D).

#include "frontend/onnx/OnnxNodeImporter.h"

#include "frontend/common/Compositions.h"

#include "llvm/ADT/SmallSet.h"

using namespace mlir;

namespace loom::onnx_import {
namespace {

/// MatMul follows numpy.matmul: a 1-D lhs is a row [1, K], a 1-D rhs a
/// column [K, 1], and the added dim is dropped from the result.
LogicalResult importMatMul(NodeImporter &n) {
  FailureOr<Value> lhs = n.input(0), rhs = n.input(1);
  if (failed(lhs) || failed(rhs) || failed(n.requireSameElementType(*lhs, *rhs)))
    return failure();
  ArrayRef<int64_t> lhsShape = NodeImporter::typeOf(*lhs).getShape();
  ArrayRef<int64_t> rhsShape = NodeImporter::typeOf(*rhs).getShape();
  if (lhsShape.empty() || rhsShape.empty())
    return n.fail("operands must have rank >= 1");
  bool lhsVector = lhsShape.size() == 1, rhsVector = rhsShape.size() == 1;
  if (lhsVector)
    lhs = n.reshape(*lhs, {1, lhsShape[0]});
  if (rhsVector)
    rhs = n.reshape(*rhs, {rhsShape[0], 1});
  if (failed(lhs) || failed(rhs))
    return failure();
  FailureOr<Value> product =
      n.inferred<nn::MatmulOp>(*lhs, *rhs, UnitAttr(), UnitAttr());
  if (failed(product))
    return failure();
  SmallVector<int64_t> shape(NodeImporter::typeOf(*product).getShape());
  if (rhsVector)
    shape.erase(shape.end() - 1);
  if (lhsVector)
    shape.erase(shape.end() - 1 - (rhsVector ? 0 : 1));
  FailureOr<Value> result = n.reshape(*product, shape);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// Gemm: alpha * op(A) op(B) + beta * C, op() transposing per transA/transB.
LogicalResult importGemm(NodeImporter &n) {
  FailureOr<Value> a = n.input(0), bMatrix = n.input(1);
  FailureOr<int64_t> transA = n.intAttr("transA", 0), transB = n.intAttr("transB", 0);
  FailureOr<float> alpha = n.floatAttr("alpha", 1.0f), beta = n.floatAttr("beta", 1.0f);
  if (failed(a) || failed(bMatrix) || failed(transA) || failed(transB) ||
      failed(alpha) || failed(beta) || failed(n.requireSameElementType(*a, *bMatrix)))
    return failure();
  if (NodeImporter::typeOf(*a).getRank() != 2 || NodeImporter::typeOf(*bMatrix).getRank() != 2)
    return n.fail("A and B must be 2-D");
  UnitAttr unit = n.b.getUnitAttr();
  FailureOr<Value> result = n.inferred<nn::MatmulOp>(
      *a, *bMatrix, *transA ? unit : UnitAttr(), *transB ? unit : UnitAttr());
  if (failed(result))
    return failure();
  Type elementType = NodeImporter::typeOf(*result).getElementType();
  if (*alpha != 1.0f)
    result = n.inferred<nn::MulOp>(*result, n.scalar(elementType, *alpha));
  if (failed(result))
    return failure();
  if (n.hasInput(2) && *beta != 0.0f) {
    FailureOr<Value> c = n.input(2);
    if (failed(c) || failed(n.requireSameElementType(*result, *c)))
      return failure();
    if (*beta != 1.0f)
      c = n.inferred<nn::MulOp>(*c, n.scalar(elementType, *beta));
    if (failed(c))
      return failure();
    ArrayRef<int64_t> resultShape = NodeImporter::typeOf(*result).getShape();
    if (!nn::isBroadcastableTo(NodeImporter::typeOf(*c).getShape(), resultShape))
      return n.fail("C does not broadcast to the product's shape");
    result = n.inferred<nn::AddOp>(*result, *c);
    if (failed(result))
      return failure();
  }
  return n.setOutput(0, *result);
}

template <typename OpTy>
LogicalResult importSoftmax(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  FailureOr<int64_t> axisAttr = n.intAttr("axis", -1);
  if (failed(x) || failed(axisAttr))
    return failure();
  FailureOr<int64_t> axis =
      n.normalizeAxis(*axisAttr, NodeImporter::typeOf(*x).getRank(), "axis");
  if (failed(axis))
    return failure();
  return n.setOutput(
      0, n.b.create<OpTy>(n.loc, x->getType(), *x, n.b.getI64IntegerAttr(*axis)).getResult());
}

/// A normalization's input X and its epsilon, once its `axis` is checked to
/// be the last (Loom's norms normalize over the last dim only).
FailureOr<std::pair<Value, float>> lastAxisNormInput(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  FailureOr<int64_t> axisAttr = n.intAttr("axis", -1);
  FailureOr<float> epsilon = n.floatAttr("epsilon", 1e-5f);
  if (failed(x) || failed(axisAttr) || failed(epsilon))
    return failure();
  int64_t rank = NodeImporter::typeOf(*x).getRank();
  FailureOr<int64_t> axis = n.normalizeAxis(*axisAttr, rank, "axis");
  if (failed(axis))
    return failure();
  if (*axis != rank - 1)
    return n.fail("axis = " + Twine(*axisAttr) +
                  " is unsupported: Loom normalizes over the last dimension only");
  return std::make_pair(*x, *epsilon);
}

LogicalResult importLayerNorm(NodeImporter &n) {
  FailureOr<std::pair<Value, float>> in = lastAxisNormInput(n);
  if (failed(in))
    return failure();
  auto [x, epsilon] = *in;
  if (n.wantsOutput(1) || n.wantsOutput(2))
    return n.fail("the Mean and InvStdDev outputs are unsupported");
  Value scale, bias;
  if (n.hasInput(1)) {
    FailureOr<Value> v = n.input(1);
    if (failed(v))
      return failure();
    scale = *v;
  }
  if (n.hasInput(2)) {
    FailureOr<Value> v = n.input(2);
    if (failed(v))
      return failure();
    bias = *v;
  }
  auto norm = n.b.create<nn::LayerNormOp>(n.loc, x.getType(), x, scale, bias,
                                          n.b.getF64FloatAttr(epsilon));
  return n.setOutput(0, norm.getResult());
}

/// RMSNormalization (opset 23): X / sqrt(mean(X^2) + epsilon) * scale over
/// the last dim (Loom's norms normalize over the last dim only).
LogicalResult importRmsNorm(NodeImporter &n) {
  FailureOr<std::pair<Value, float>> in = lastAxisNormInput(n);
  if (failed(in))
    return failure();
  auto [x, epsilon] = *in;
  Value scale;
  if (n.hasInput(1)) {
    FailureOr<Value> v = n.input(1);
    if (failed(v) || failed(n.requireSameElementType(x, *v)))
      return failure();
    scale = *v;
  }
  auto norm = n.b.create<nn::RmsNormOp>(n.loc, x.getType(), x, scale,
                                        n.b.getF64FloatAttr(epsilon));
  return n.setOutput(0, norm.getResult());
}

/// Attention (opset 23; what the dynamo exporter writes for
/// scaled_dot_product_attention from that opset) over rank-4 [batch, heads,
/// seq, head_dim] inputs, fewer key/value heads than query heads allowed: with
/// no mask, nn.attention (causal or open); under a mask, as torch's math
/// backend computes it (buildMaskedAttention), which --loom-raise-attention
/// raises back to nn.attention when the mask is a causal or sliding-window
/// constant. No KV cache (past_key/past_value) and no softcap.
LogicalResult importAttention(NodeImporter &n) {
  FailureOr<Value> q = n.input(0), k = n.input(1), v = n.input(2);
  FailureOr<int64_t> isCausal = n.intAttr("is_causal", 0);
  FailureOr<float> softcap = n.floatAttr("softcap", 0.0f);
  if (failed(q) || failed(k) || failed(v) || failed(isCausal) || failed(softcap))
    return failure();
  if (n.hasInput(4) || n.hasInput(5) || n.hasInput(6))
    return n.fail("past_key, past_value and nonpad_kv_seqlen (a KV cache) are not supported");
  if (*softcap != 0.0f)
    return n.fail("softcap is not supported");
  if (n.wantsOutput(3))
    return n.fail("the qk_matmul_output output is not supported");
  if (NodeImporter::typeOf(*q).getRank() != 4 || NodeImporter::typeOf(*k).getRank() != 4 ||
      NodeImporter::typeOf(*v).getRank() != 4)
    return n.fail("only rank-4 [batch, heads, seq, head_dim] query, key and value are "
                  "supported (not the 3-D form with q_num_heads)");
  if (failed(n.requireSameElementType(*q, *k)) || failed(n.requireSameElementType(*q, *v)))
    return failure();
  std::optional<double> scale;
  if (n.attribute("scale")) {
    FailureOr<float> given = n.floatAttr("scale", 1.0f);
    if (failed(given))
      return failure();
    scale = *given;
  }
  int64_t queries = NodeImporter::typeOf(*q).getDimSize(2);
  int64_t keys = NodeImporter::typeOf(*k).getDimSize(2);
  Value result;
  if (n.hasInput(3)) {
    if (*isCausal)
      return n.fail("is_causal together with attn_mask is not supported");
    FailureOr<Value> mask = n.input(3);
    if (failed(mask))
      return failure();
    std::string why;
    FailureOr<Value> out =
        buildMaskedAttention(n.b, n.loc, *q, *k, *v, *mask, scale, why);
    if (failed(out))
      return n.fail(why);
    result = *out;
  } else {
    // The operator aligns is_causal to the top left; nn.attention to the
    // bottom right: the same only for as many queries as keys.
    if (*isCausal && queries != keys)
      return n.fail("is_causal with " + Twine(queries) + " queries over " + Twine(keys) +
                    " keys is not supported");
    FailureOr<Value> out = n.inferred<nn::AttentionOp>(
        *q, *k, *v, *isCausal ? n.b.getUnitAttr() : UnitAttr(),
        scale ? n.b.getF64FloatAttr(*scale) : FloatAttr(), n.b.getI64IntegerAttr(0),
        IntegerAttr());
    if (failed(out))
      return failure();
    result = *out;
  }
  if (failed(n.setOutput(0, result)))
    return failure();
  // With no cache, the present key and value are this call's.
  if (n.wantsOutput(1) && failed(n.setOutput(1, *k)))
    return failure();
  return n.wantsOutput(2) ? n.setOutput(2, *v) : success();
}

/// ReduceSum (opset 13+) and the others from opset 18 take axes as an input;
/// before that, as an attribute. No axes reduce everything, unless
/// noop_with_empty_axes.
/// The dims a Reduce* node reduces, sorted; nullopt when it is the
/// identity (no axes with noop_with_empty_axes).
FailureOr<std::optional<SmallVector<int64_t>>> reducedDims(NodeImporter &n, Value x) {
  FailureOr<int64_t> noopWithEmptyAxes = n.intAttr("noop_with_empty_axes", 0);
  if (failed(noopWithEmptyAxes))
    return failure();
  int64_t rank = NodeImporter::typeOf(x).getRank();
  bool axesAsInput = n.node.op_type() == "ReduceSum" || n.opset >= 18;
  std::vector<int64_t> axes;
  if (axesAsInput) {
    if (n.hasInput(1)) {
      FailureOr<std::vector<int64_t>> given = n.constantInts(1, "axes");
      if (failed(given))
        return failure();
      axes = *given;
    }
  } else {
    FailureOr<std::optional<std::vector<int64_t>>> given = n.intsAttr("axes");
    if (failed(given))
      return failure();
    if (*given)
      axes = **given;
  }
  if (axes.empty()) {
    if (*noopWithEmptyAxes)
      return std::optional<SmallVector<int64_t>>();
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  }
  SmallVector<int64_t> dims;
  llvm::SmallSet<int64_t, 4> seen;
  for (int64_t axis : axes) {
    FailureOr<int64_t> d = n.normalizeAxis(axis, rank, "axis");
    if (failed(d))
      return failure();
    if (!seen.insert(*d).second)
      return n.fail("axis " + Twine(axis) + " is repeated");
    dims.push_back(*d);
  }
  llvm::sort(dims);
  return std::optional<SmallVector<int64_t>>(dims);
}

template <typename OpTy>
LogicalResult importReduce(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  FailureOr<int64_t> keepdims = n.intAttr("keepdims", 1);
  if (failed(x) || failed(keepdims))
    return failure();
  FailureOr<std::optional<SmallVector<int64_t>>> dims = reducedDims(n, *x);
  if (failed(dims))
    return failure();
  if (!*dims)
    return n.setOutput(0, *x);
  FailureOr<Value> result = n.inferred<OpTy>(*x, n.b.getDenseI64ArrayAttr(**dims),
                                             *keepdims ? n.b.getUnitAttr() : UnitAttr());
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// ReduceLogSumExp: the maximum taken out before the exponent (Granite's
/// logsumexp, as PyTorch's exporter writes it).
LogicalResult importReduceLogSumExp(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  FailureOr<int64_t> keepdims = n.intAttr("keepdims", 1);
  if (failed(x) || failed(keepdims))
    return failure();
  if (!isa<FloatType>(NodeImporter::typeOf(*x).getElementType()))
    return n.fail("data must be a float tensor");
  FailureOr<std::optional<SmallVector<int64_t>>> dims = reducedDims(n, *x);
  if (failed(dims))
    return failure();
  if (!*dims)
    return n.setOutput(0, *x);
  return n.setOutput(0, buildLogSumExp(n.b, n.loc, *x, **dims, *keepdims != 0));
}

/// Conv over one spatial dim (X [N, C, L], W [M, C / group, K], B [M]):
/// groups 1 or depthwise, as buildConv1d builds them; explicit pads or
/// auto_pad VALID.
LogicalResult importConv(NodeImporter &n) {
  FailureOr<Value> x = n.input(0), w = n.input(1);
  FailureOr<int64_t> group = n.intAttr("group", 1);
  FailureOr<std::string> autoPad = n.stringAttr("auto_pad", "NOTSET");
  FailureOr<std::optional<std::vector<int64_t>>> pads = n.intsAttr("pads"),
                                                 strides = n.intsAttr("strides"),
                                                 dilations = n.intsAttr("dilations");
  if (failed(x) || failed(w) || failed(group) || failed(autoPad) || failed(pads) ||
      failed(strides) || failed(dilations))
    return failure();
  if (NodeImporter::typeOf(*x).getRank() != 3)
    return n.fail("only 1-D convolutions (X of rank 3) are supported");
  if (*autoPad != "NOTSET" && *autoPad != "VALID")
    return n.fail("auto_pad '" + *autoPad + "' is not supported (NOTSET or VALID)");
  Conv1dShape shape;
  shape.groups = *group;
  auto one = [&](const std::optional<std::vector<int64_t>> &v, size_t count, int64_t &first,
                 int64_t *second, llvm::StringRef what) -> LogicalResult {
    if (!v)
      return success();
    if (v->size() != count)
      return n.fail(what + " must have " + Twine(count) + " values for a 1-D convolution");
    first = (*v)[0];
    if (second)
      *second = (*v)[1];
    return success();
  };
  if (failed(one(*strides, 1, shape.stride, nullptr, "strides")) ||
      failed(one(*dilations, 1, shape.dilation, nullptr, "dilations")) ||
      (*autoPad == "NOTSET" && failed(one(*pads, 2, shape.padLow, &shape.padHigh, "pads"))))
    return failure();
  Value bias;
  if (n.hasInput(2)) {
    FailureOr<Value> b = n.input(2);
    if (failed(b))
      return failure();
    bias = *b;
  }
  std::string why;
  FailureOr<Value> out = buildConv1d(n.b, n.loc, *x, *w, bias, shape, why);
  if (failed(out))
    return n.fail(why);
  return n.setOutput(0, *out);
}

} // namespace

void addMathOps(OpTable &table) {
  table["MatMul"] = importMatMul;
  table["Gemm"] = importGemm;
  table["Softmax"] = importSoftmax<nn::SoftmaxOp>;
  table["LogSoftmax"] = importSoftmax<nn::LogSoftmaxOp>;
  table["LayerNormalization"] = importLayerNorm;
  table["RMSNormalization"] = importRmsNorm;
  table["Attention"] = importAttention;
  table["ReduceSum"] = importReduce<nn::ReduceSumOp>;
  table["ReduceMean"] = importReduce<nn::ReduceMeanOp>;
  table["ReduceMax"] = importReduce<nn::ReduceMaxOp>;
  table["ReduceLogSumExp"] = importReduceLogSumExp;
  table["Conv"] = importConv;
}

} // namespace loom::onnx_import
