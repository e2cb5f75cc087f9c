#include "dialects/nn/NNOps.h"

#include "dialects/nn/KernelAttributes.h"
#include "runtime/abi/Fp8Tiling.h"
#include "runtime/abi/LinearCrossEntropy.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/SmallString.h"

#include <cmath>

using namespace mlir;
using namespace loom::nn;

//===----------------------------------------------------------------------===//
// Shape helpers
//===----------------------------------------------------------------------===//

FailureOr<SmallVector<int64_t>>
loom::nn::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return failure();
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool loom::nn::isBroadcastableTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i])
      return false;
  return true;
}

static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleave(shape, os, "x");
  os << "]";
  return s;
}

/// A double as diagnostics should show it: the shortest form that reads back
/// exactly ("0.5", "-1", "1.0E-5", "NaN"), not printf's "5.000000e-01".
static std::string num(double value) {
  SmallString<16> s;
  llvm::APFloat(value).toString(s);
  return std::string(s);
}

/// A list of integers that is not a shape (a permutation, dims): "[1, 0, 2]".
static std::string listString(ArrayRef<int64_t> values) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleave(values, os, ", ");
  os << "]";
  return s;
}

static RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Checks `dim` against `rank`, with an error naming `what`.
static LogicalResult checkDim(std::optional<Location> loc, int64_t dim,
                              int64_t rank, StringRef what) {
  if (dim < 0 || dim >= rank)
    return emitOptionalError(loc, what, " ", dim,
                             " is out of range for a tensor of rank ", rank);
  return success();
}

//===----------------------------------------------------------------------===//
// Constants and parameters
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

static ParseResult parseParamInit(OpAsmParser &parser, InitKindAttr &init,
                                  FloatAttr &scale) {
  Builder &b = parser.getBuilder();
  if (failed(parser.parseOptionalKeyword("init")))
    return success();
  StringRef kindName;
  double scaleValue = 0.0;
  SMLoc kindLoc = parser.getCurrentLocation();
  if (parser.parseLParen() || parser.parseKeyword(&kindName))
    return failure();
  std::optional<InitKind> kind = symbolizeInitKind(kindName);
  if (!kind)
    return parser.emitError(kindLoc, "unknown initializer '")
           << kindName << "' (expected zeros, ones, normal or uniform)";
  if (succeeded(parser.parseOptionalComma()) && parser.parseFloat(scaleValue))
    return failure();
  if (parser.parseRParen())
    return failure();
  init = InitKindAttr::get(b.getContext(), *kind);
  scale = b.getF64FloatAttr(scaleValue);
  return success();
}

static void printParamInit(OpAsmPrinter &p, ParameterOp, InitKindAttr init,
                           FloatAttr scale) {
  bool defaultInit = !init || init.getValue() == InitKind::zeros;
  bool defaultScale = !scale || scale.getValueAsDouble() == 0.0;
  if (defaultInit && defaultScale)
    return;
  p << " init(" << stringifyInitKind(init ? init.getValue() : InitKind::zeros);
  if (!defaultScale) {
    // printFloat prints the shortest form that parses back to the same value;
    // `<< double` would print six significant digits and lose precision.
    p << ", ";
    p.printFloat(scale.getValue());
  }
  p << ")";
}

LogicalResult ParameterOp::verify() {
  if (getName().empty())
    return emitOpError("needs a non-empty name");
  double scale = getInitScale().convertToDouble();
  if (!(scale >= 0) || std::isinf(scale))
    return emitOpError("init scale must be finite and non-negative, got ")
           << num(scale);
  if (std::optional<ElementsAttr> value = getValue()) {
    // A shard of a split parameter keeps the whole value; the runtime cuts it.
    Type whole = getType();
    if (auto global = (*this)->getAttrOfType<TypeAttr>("dist.global_type"))
      whole = global.getValue();
    if (value->getType() != whole)
      return emitOpError("value of type ")
             << value->getType() << " does not match the parameter's type "
             << getType();
  }
  return success();
}

LogicalResult IotaOp::verify() {
  if (failed(checkDim(getLoc(), getDim(), getType().getRank(), "dim")))
    return failure();
  double start = getStart().convertToDouble(), step = getStep().convertToDouble();
  if (!std::isfinite(start) || !std::isfinite(step))
    return emitOpError("start and step must be finite, got start ")
           << num(start) << " and step " << num(step);
  if (isa<IntegerType>(getType().getElementType()) &&
      (std::trunc(start) != start || std::trunc(step) != step))
    return emitOpError("start and step of an integer iota must be whole "
                       "numbers, got start ")
           << num(start) << " and step " << num(step);
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

template <typename Adaptor>
static LogicalResult inferBinary(std::optional<Location> loc, Adaptor adaptor,
                                 SmallVectorImpl<Type> &results) {
  auto lhs = cast<RankedTensorType>(adaptor.getLhs().getType());
  auto rhs = cast<RankedTensorType>(adaptor.getRhs().getType());
  auto shape = broadcastShapes(lhs.getShape(), rhs.getShape());
  if (failed(shape))
    return emitOptionalError(loc, "operand shapes ", shapeString(lhs.getShape()),
                             " and ", shapeString(rhs.getShape()),
                             " are not broadcast-compatible");
  results.push_back(RankedTensorType::get(*shape, lhs.getElementType()));
  return success();
}

#define LOOM_NN_BINARY_INFER(OP)                                               \
  LogicalResult OP::inferReturnTypes(MLIRContext *,                           \
                                     std::optional<Location> loc,             \
                                     Adaptor adaptor,                         \
                                     SmallVectorImpl<Type> &results) {        \
    return inferBinary(loc, adaptor, results);                                \
  }
LOOM_NN_BINARY_INFER(AddOp)
LOOM_NN_BINARY_INFER(SubOp)
LOOM_NN_BINARY_INFER(MulOp)
LOOM_NN_BINARY_INFER(DivOp)
LOOM_NN_BINARY_INFER(PowOp)
LOOM_NN_BINARY_INFER(MaximumOp)
LOOM_NN_BINARY_INFER(MinimumOp)
#undef LOOM_NN_BINARY_INFER

LogicalResult CompareOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &results) {
  SmallVector<Type> broadcast;
  if (failed(inferBinary(loc, adaptor, broadcast)))
    return failure();
  results.push_back(RankedTensorType::get(
      cast<RankedTensorType>(broadcast[0]).getShape(), IntegerType::get(ctx, 1)));
  return success();
}

LogicalResult WhereOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &results) {
  auto cond = tensorOf(adaptor.getCondition());
  auto lhs = tensorOf(adaptor.getLhs());
  auto rhs = tensorOf(adaptor.getRhs());
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(loc, "branches have different element types ",
                             lhs.getElementType(), " and ",
                             rhs.getElementType());
  auto shape = broadcastShapes(lhs.getShape(), rhs.getShape());
  if (succeeded(shape))
    shape = broadcastShapes(cond.getShape(), *shape);
  if (failed(shape))
    return emitOptionalError(loc, "condition ", shapeString(cond.getShape()),
                             " and branches ", shapeString(lhs.getShape()),
                             ", ", shapeString(rhs.getShape()),
                             " are not broadcast-compatible");
  results.push_back(RankedTensorType::get(*shape, lhs.getElementType()));
  return success();
}

LogicalResult CastOp::verify() {
  if (getInput().getType().getShape() != getType().getShape())
    return emitOpError("changes the shape from ")
           << shapeString(getInput().getType().getShape()) << " to "
           << shapeString(getType().getShape()) << "; a cast keeps the shape";
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// Contractions and reductions
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  auto lhs = tensorOf(adaptor.getLhs());
  auto rhs = tensorOf(adaptor.getRhs());
  if (lhs.getRank() < 2 || rhs.getRank() < 2)
    return emitOptionalError(loc, "operands must have rank >= 2, got ranks ",
                             lhs.getRank(), " and ", rhs.getRank());
  ArrayRef<int64_t> ls = lhs.getShape(), rs = rhs.getShape();
  int64_t m = adaptor.getTransposeLhs() ? ls.back() : ls[ls.size() - 2];
  int64_t kl = adaptor.getTransposeLhs() ? ls[ls.size() - 2] : ls.back();
  int64_t kr = adaptor.getTransposeRhs() ? rs.back() : rs[rs.size() - 2];
  int64_t n = adaptor.getTransposeRhs() ? rs[rs.size() - 2] : rs.back();
  if (kl != kr)
    return emitOptionalError(loc, "contracting dimensions differ: lhs ",
                             shapeString(ls), " has K=", kl, ", rhs ",
                             shapeString(rs), " has K=", kr);
  auto batch = broadcastShapes(ls.drop_back(2), rs.drop_back(2));
  if (failed(batch))
    return emitOptionalError(loc, "batch dimensions ",
                             shapeString(ls.drop_back(2)), " and ",
                             shapeString(rs.drop_back(2)),
                             " are not broadcast-compatible");
  SmallVector<int64_t> shape = *batch;
  shape.push_back(m);
  shape.push_back(n);
  results.push_back(RankedTensorType::get(shape, lhs.getElementType()));
  return success();
}

bool MatmulOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  if (inferred.size() != 1 || actual.size() != 1)
    return false;
  auto want = dyn_cast<RankedTensorType>(inferred.front());
  auto have = dyn_cast<RankedTensorType>(actual.front());
  if (!want || !have || want.getShape() != have.getShape())
    return false;
  return want.getElementType() == have.getElementType() ||
         (want.getElementType().isBF16() || want.getElementType().isF16()) &&
             have.getElementType().isF32();
}

bool CrossEntropyGradOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  if (inferred.size() != 1 || actual.size() != 1)
    return false;
  auto want = dyn_cast<RankedTensorType>(inferred.front());
  auto have = dyn_cast<RankedTensorType>(actual.front());
  // The logits' type, or a narrower float (a folded cast of the gradient).
  auto wantFloat = want ? dyn_cast<FloatType>(want.getElementType()) : FloatType();
  auto haveFloat = have ? dyn_cast<FloatType>(have.getElementType()) : FloatType();
  return wantFloat && haveFloat && want.getShape() == have.getShape() &&
         (wantFloat == haveFloat || haveFloat.getWidth() < wantFloat.getWidth());
}

bool CrossEntropyGradOp::canWidenResult(unsigned, Type) { return false; }

bool CrossEntropyGradOp::canNarrowResult(unsigned index, Type elementType) {
  auto current = dyn_cast<FloatType>(getResult().getType().getElementType());
  auto to = dyn_cast<FloatType>(elementType);
  return index == 0 && current && to && (to.isBF16() || to.isF16()) &&
         to.getWidth() < current.getWidth();
}

bool MatmulOp::canWidenResult(unsigned index, Type elementType) {
  Type current = getResult().getType().getElementType();
  return index == 0 && elementType.isF32() && (current.isBF16() || current.isF16());
}

template <typename Adaptor>
static LogicalResult inferReduce(std::optional<Location> loc, Adaptor adaptor,
                                 SmallVectorImpl<Type> &results) {
  auto input = tensorOf(adaptor.getInput());
  llvm::SmallSet<int64_t, 4> seen;
  for (int64_t d : adaptor.getDims()) {
    if (failed(checkDim(loc, d, input.getRank(), "reduction dim")))
      return failure();
    if (!seen.insert(d).second)
      return emitOptionalError(loc, "reduction dim ", d, " is repeated");
  }
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < input.getRank(); ++i) {
    if (!seen.contains(i))
      shape.push_back(input.getDimSize(i));
    else if (adaptor.getKeepdim())
      shape.push_back(1);
  }
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

#define LOOM_NN_REDUCE(OP)                                                     \
  LogicalResult OP::inferReturnTypes(MLIRContext *,                           \
                                     std::optional<Location> loc,             \
                                     Adaptor adaptor,                         \
                                     SmallVectorImpl<Type> &results) {        \
    return inferReduce(loc, adaptor, results);                                \
  }                                                                            \
  OpFoldResult OP::fold(FoldAdaptor) {                                         \
    if (getDims().empty())                                                     \
      return getInput();                                                       \
    return {};                                                                 \
  }
LOOM_NN_REDUCE(ReduceSumOp)
LOOM_NN_REDUCE(ReduceMeanOp)
LOOM_NN_REDUCE(ReduceMaxOp)
#undef LOOM_NN_REDUCE

LogicalResult SoftmaxOp::verify() {
  return checkDim(getLoc(), getDim(), getType().getRank(), "dim");
}
LogicalResult LogSoftmaxOp::verify() {
  return checkDim(getLoc(), getDim(), getType().getRank(), "dim");
}

//===----------------------------------------------------------------------===//
// Transformer layers
//===----------------------------------------------------------------------===//

/// Checks an optional per-feature operand (norm weight or bias): shape [D]
/// where D is the input's last dim, same element type.
static LogicalResult verifyFeatureOperand(Operation *op, Value operand,
                                          RankedTensorType input,
                                          StringRef what) {
  if (!operand)
    return success();
  auto type = tensorOf(operand);
  if (type.getRank() != 1 || type.getDimSize(0) != input.getShape().back())
    return op->emitOpError()
           << what << " must have shape [" << input.getShape().back()
           << "] (the input's last dim), got " << shapeString(type.getShape());
  if (type.getElementType() != input.getElementType())
    return op->emitOpError()
           << what << " element type " << type.getElementType()
           << " differs from the input's " << input.getElementType();
  return success();
}

static LogicalResult verifySameAsInput(Operation *op, Type input, Type result) {
  if (input != result)
    return op->emitOpError("result type ")
           << result << " must equal the input type " << input;
  return success();
}

/// `(, weight %w)? (, bias %b)?`: layer_norm's optional affine operands.
/// A declarative format cannot express this (both optional groups would start
/// with `,`, so a bias without a weight would not parse).
static ParseResult
parseNormAffine(OpAsmParser &parser,
                std::optional<OpAsmParser::UnresolvedOperand> &weight,
                std::optional<OpAsmParser::UnresolvedOperand> &bias) {
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc loc = parser.getCurrentLocation();
    StringRef keyword;
    if (parser.parseKeyword(&keyword))
      return failure();
    std::optional<OpAsmParser::UnresolvedOperand> *slot = nullptr;
    if (keyword == "weight" && !weight && !bias)
      slot = &weight;
    else if (keyword == "bias" && !bias)
      slot = &bias;
    else
      return parser.emitError(loc, "expected 'weight' or 'bias' (in that "
                                   "order, each at most once), got '")
             << keyword << "'";
    OpAsmParser::UnresolvedOperand operand;
    if (parser.parseOperand(operand))
      return failure();
    *slot = operand;
  }
  return success();
}

static void printNormAffine(OpAsmPrinter &p, LayerNormOp, Value weight,
                            Value bias) {
  if (weight)
    p << ", weight " << weight;
  if (bias)
    p << ", bias " << bias;
}

/// Norms normalize over the last dim, so the input needs one; epsilon must be
/// a non-negative finite number.
static LogicalResult verifyNormInput(Operation *op, RankedTensorType input,
                                     llvm::APFloat epsilon) {
  if (input.getRank() < 1)
    return op->emitOpError("input must have rank >= 1 (it is normalized over "
                           "its last dim), got a rank-0 tensor");
  double eps = epsilon.convertToDouble();
  if (!(eps >= 0) || std::isinf(eps))
    return op->emitOpError("epsilon must be finite and non-negative, got ")
           << num(eps);
  return success();
}

LogicalResult LayerNormOp::verify() {
  auto input = getInput().getType();
  if (failed(verifyNormInput(*this, input, getEpsilon())) ||
      failed(verifyFeatureOperand(*this, getWeight(), input, "weight")) ||
      failed(verifyFeatureOperand(*this, getBias(), input, "bias")) ||
      failed(verifySameAsInput(*this, input, getType())))
    return failure();
  return success();
}

LogicalResult RmsNormOp::verify() {
  auto input = getInput().getType();
  if (failed(verifyNormInput(*this, input, getEpsilon())) ||
      failed(verifyFeatureOperand(*this, getWeight(), input, "weight")) ||
      failed(verifySameAsInput(*this, input, getType())))
    return failure();
  return success();
}

LogicalResult RopeOp::verify() {
  auto input = getInput().getType();
  if (input.getRank() < 2)
    return emitOpError("input must be [..., S, D], got rank ")
           << input.getRank();
  RopeTranspose transpose = getTranspose();
  if (transpose != RopeTranspose::none) {
    int64_t rank = input.getRank();
    if (rank < 3)
      return emitOpError("transpose = ") << stringifyRopeTranspose(transpose)
                                         << " needs an input of rank >= 3, got " << rank;
    SmallVector<int64_t> swapped(input.getShape());
    std::swap(swapped[rank - 3], swapped[rank - 2]);
    if (getType().getShape() != ArrayRef<int64_t>(swapped) ||
        getType().getElementType() != input.getElementType())
      return emitOpError("with transpose = ")
             << stringifyRopeTranspose(transpose) << " the result must be "
             << RankedTensorType::get(swapped, input.getElementType()) << ", got "
             << getType();
  }
  // The positions: dim -2 of the untransposed side.
  auto untransposed = transpose == RopeTranspose::input ? getType() : input;
  int64_t s = untransposed.getDimSize(untransposed.getRank() - 2);
  int64_t d = input.getShape().back();
  if (d % 2 != 0)
    return emitOpError("head dim ") << d << " must be even";
  for (auto [name, v] : {std::pair<StringRef, Value>{"cos", getCos()},
                         std::pair<StringRef, Value>{"sin", getSin()}}) {
    auto t = tensorOf(v);
    if (t.getShape() != ArrayRef<int64_t>{s, d})
      return emitOpError() << name << " must have shape [" << s << "x" << d
                           << "] to match the input, got "
                           << shapeString(t.getShape());
    if (t.getElementType() != input.getElementType())
      return emitOpError() << name << " element type " << t.getElementType()
                           << " differs from the input's "
                           << input.getElementType();
  }
  if (transpose != RopeTranspose::none)
    return success();
  return verifySameAsInput(*this, input, getType());
}

/// Whether `permutation` swaps dims -3 and -2 and keeps the others.
static bool swapsHeadsAndPositions(ArrayRef<int64_t> permutation) {
  int64_t rank = permutation.size();
  if (rank < 3)
    return false;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t want = d == rank - 3 ? rank - 2 : d == rank - 2 ? rank - 3 : d;
    if (permutation[d] != want)
      return false;
  }
  return true;
}

bool RopeOp::canAbsorbTranspose(int index, ArrayRef<int64_t> permutation) {
  // The input before the op, or the result after it; the tables never.
  return (index == 0 || index == -1) && getTranspose() == RopeTranspose::none &&
         swapsHeadsAndPositions(permutation);
}

Operation *RopeOp::absorbTranspose(OpBuilder &b, int index, Value source, Type resultType) {
  bool input = index == 0;
  auto transpose = RopeTransposeAttr::get(
      getContext(), input ? RopeTranspose::input : RopeTranspose::result);
  auto rope = b.create<RopeOp>(getLoc(), input ? getType() : resultType,
                               input ? source : getInput(), getCos(), getSin(),
                               getInterleavedAttr(), transpose);
  rope->setDiscardableAttrs(getOperation()->getDiscardableAttrDictionary());
  return rope;
}

//===----------------------------------------------------------------------===//
// Attention layouts: `seq_major` bit i stores the op's tensor i (operands,
// then results) as [B, S, H, D] instead of [B, H, S, D].
//===----------------------------------------------------------------------===//

/// `t` with dims 1 and 2 swapped when bit `position` of `mask` is set.
static RankedTensorType seqMajorSwap(RankedTensorType t, int64_t mask, unsigned position) {
  if (!(mask >> position & 1) || t.getRank() != 4)
    return t;
  SmallVector<int64_t> shape(t.getShape());
  std::swap(shape[1], shape[2]);
  return RankedTensorType::get(shape, t.getElementType());
}

/// The mask names only tensors of the op, and never the statistics (at
/// `statsPosition`, if the op has them).
static LogicalResult verifySeqMajor(std::optional<Location> loc, int64_t mask,
                                    unsigned numTensors, std::optional<unsigned> statsPosition) {
  if (mask < 0 || (numTensors < 63 && mask >> numTensors != 0))
    return emitOptionalError(loc, "seq_major ", mask, " names a tensor past the op's ",
                             numTensors);
  if (statsPosition && mask >> *statsPosition & 1)
    return emitOptionalError(loc, "seq_major marks the statistics (tensor ", *statsPosition,
                             "), which have one layout only");
  return success();
}

/// Whether the tensor at `index` (an operand, or result -1 - index) of an
/// attention op can take the transpose `permutation`: a swap of heads and
/// sequence of a rank-4 tensor (the statistics, rank 3, cannot).
static bool attentionCanAbsorb(Operation *op, int index, ArrayRef<int64_t> permutation) {
  Value v = index >= 0 ? op->getOperand(index) : op->getResult(-1 - index);
  static const int64_t swap[] = {0, 2, 1, 3};
  return cast<RankedTensorType>(v.getType()).getRank() == 4 &&
         permutation == ArrayRef<int64_t>(swap);
}

/// The op with the tensor at `index` in the other layout: reading `source`,
/// or writing `resultType`.
static Operation *attentionAbsorb(Operation *op, OpBuilder &b, int index, Value source,
                                  Type resultType) {
  Operation *now = b.clone(*op);
  unsigned position = index >= 0 ? unsigned(index) : op->getNumOperands() + unsigned(-1 - index);
  int64_t mask = cast<IntegerAttr>(op->getAttr("seq_major")).getInt();
  now->setAttr("seq_major", b.getI64IntegerAttr(mask ^ (int64_t(1) << position)));
  if (index >= 0)
    now->setOperand(index, source);
  else
    now->getResult(-1 - index).setType(resultType);
  return now;
}

#define LOOM_ATTENTION_ABSORBS_TRANSPOSES(Op)                                                  \
  bool Op::canAbsorbTranspose(int index, ArrayRef<int64_t> permutation) {                      \
    return attentionCanAbsorb(*this, index, permutation);                                      \
  }                                                                                            \
  Operation *Op::absorbTranspose(OpBuilder &b, int index, Value source, Type resultType) {     \
    return attentionAbsorb(*this, b, index, source, resultType);                               \
  }
LOOM_ATTENTION_ABSORBS_TRANSPOSES(AttentionOp)
LOOM_ATTENTION_ABSORBS_TRANSPOSES(AttentionWithStatsOp)
LOOM_ATTENTION_ABSORBS_TRANSPOSES(AttentionGradOp)
LOOM_ATTENTION_ABSORBS_TRANSPOSES(AttentionGradWithStatsOp)
#undef LOOM_ATTENTION_ABSORBS_TRANSPOSES

/// An attention op's window attribute as a number: 0 when absent.
static int64_t windowOf(IntegerAttr window) { return window ? window.getInt() : 0; }

/// The result type of attention over q, k, v: shared by nn.attention and
/// nn.attention_grad, which must accept exactly the same operands.
static LogicalResult inferAttention(std::optional<Location> loc,
                                    RankedTensorType q, RankedTensorType k,
                                    RankedTensorType v, bool causal, int64_t window,
                                    std::optional<llvm::APFloat> scale,
                                    SmallVectorImpl<Type> &results) {
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return emitOptionalError(
        loc, "query, key and value must be rank 4 [batch, heads, seq, "
             "head_dim], got ranks ",
        q.getRank(), ", ", k.getRank(), " and ", v.getRank());
  ArrayRef<int64_t> qs = q.getShape(), ks = k.getShape(), vs = v.getShape();
  if (qs[0] != ks[0] || qs[0] != vs[0])
    return emitOptionalError(loc, "batch sizes differ: query ", qs[0],
                             ", key ", ks[0], ", value ", vs[0]);
  if (ks[1] != vs[1] || ks[2] != vs[2])
    return emitOptionalError(loc, "key ", shapeString(ks), " and value ",
                             shapeString(vs),
                             " must agree in heads and sequence length");
  if (ks[1] == 0 || qs[1] % ks[1] != 0)
    return emitOptionalError(loc, "query heads (", qs[1],
                             ") must be a multiple of key/value heads (",
                             ks[1], ")");
  if (qs[3] != ks[3])
    return emitOptionalError(loc, "query head dim ", qs[3],
                             " differs from key head dim ", ks[3]);
  if (causal && qs[2] > ks[2])
    return emitOptionalError(loc, "causal attention needs at least as many "
                                  "keys as queries, got ",
                             qs[2], " queries and ", ks[2], " keys");
  if (window < 0)
    return emitOptionalError(loc, "window must be positive (or 0 for none), got ", window);
  if (window > 0 && !causal)
    return emitOptionalError(loc, "a sliding window (window = ", window,
                             ") needs causal attention");
  if (scale) {
    double value = scale->convertToDouble();
    if (!(value > 0) || std::isinf(value))
      return emitOptionalError(loc, "scale must be finite and positive, got ",
                               num(value));
  }
  results.push_back(RankedTensorType::get({qs[0], qs[1], qs[2], vs[3]},
                                          q.getElementType()));
  return success();
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  const int64_t mask = adaptor.getSeqMajor();
  if (failed(verifySeqMajor(loc, mask, 4, std::nullopt)) ||
      failed(inferAttention(loc, seqMajorSwap(tensorOf(adaptor.getQuery()), mask, 0),
                            seqMajorSwap(tensorOf(adaptor.getKey()), mask, 1),
                            seqMajorSwap(tensorOf(adaptor.getValue()), mask, 2),
                            adaptor.getCausal(), windowOf(adaptor.getWindowAttr()), adaptor.getScale(), results)))
    return failure();
  results[0] = seqMajorSwap(cast<RankedTensorType>(results[0]), mask, 3);
  return success();
}

/// `scale`, or 1/sqrt(head dim) of `query`: the scale every attention op applies.
static double effectiveAttentionScale(std::optional<llvm::APFloat> scale, Value query) {
  if (scale)
    return scale->convertToDouble();
  return 1.0 / std::sqrt(static_cast<double>(tensorOf(query).getShape().back()));
}

double AttentionOp::getEffectiveScale() {
  return effectiveAttentionScale(getScale(), getQuery());
}

/// lse [B, Hq, S] f32 of attention whose output is `out` [B, Hq, S, Dv].
static RankedTensorType attentionStatsType(Type out) {
  auto o = cast<RankedTensorType>(out);
  return RankedTensorType::get(o.getShape().drop_back(),
                               Float32Type::get(o.getContext()));
}

LogicalResult AttentionWithStatsOp::inferReturnTypes(MLIRContext *,
                                                     std::optional<Location> loc,
                                                     Adaptor adaptor,
                                                     SmallVectorImpl<Type> &results) {
  const int64_t mask = adaptor.getSeqMajor();
  if (failed(verifySeqMajor(loc, mask, 5, 4)) ||
      failed(inferAttention(loc, seqMajorSwap(tensorOf(adaptor.getQuery()), mask, 0),
                            seqMajorSwap(tensorOf(adaptor.getKey()), mask, 1),
                            seqMajorSwap(tensorOf(adaptor.getValue()), mask, 2),
                            adaptor.getCausal(), windowOf(adaptor.getWindowAttr()), adaptor.getScale(), results)))
    return failure();
  results.push_back(attentionStatsType(results.front()));
  results[0] = seqMajorSwap(cast<RankedTensorType>(results[0]), mask, 3);
  return success();
}

double AttentionWithStatsOp::getEffectiveScale() {
  return effectiveAttentionScale(getScale(), getQuery());
}

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  auto table = tensorOf(adaptor.getTable());
  auto ids = tensorOf(adaptor.getIds());
  if (table.getRank() != 2)
    return emitOptionalError(loc, "table must be [vocab, dim], got ",
                             shapeString(table.getShape()));
  SmallVector<int64_t> shape(ids.getShape());
  shape.push_back(table.getDimSize(1));
  results.push_back(RankedTensorType::get(shape, table.getElementType()));
  return success();
}

/// The loss type of cross_entropy: shared by nn.cross_entropy and
/// nn.cross_entropy_grad, whose `grad` has this type.
static LogicalResult inferCrossEntropyLoss(MLIRContext *ctx,
                                           std::optional<Location> loc,
                                           RankedTensorType logits,
                                           RankedTensorType labels,
                                           LossReduction reduction,
                                           SmallVectorImpl<Type> &results) {
  if (logits.getRank() != 2 || labels.getRank() != 1)
    return emitOptionalError(loc, "logits must be [N, C] and labels [N], got ",
                             shapeString(logits.getShape()), " and ",
                             shapeString(labels.getShape()));
  if (logits.getDimSize(0) != labels.getDimSize(0))
    return emitOptionalError(loc, "logits have ", logits.getDimSize(0),
                             " rows but labels have ", labels.getDimSize(0));
  SmallVector<int64_t> shape;
  if (reduction == LossReduction::none)
    shape.push_back(labels.getDimSize(0));
  results.push_back(RankedTensorType::get(shape, Float32Type::get(ctx)));
  return success();
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *ctx,
                                               std::optional<Location> loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &results) {
  return inferCrossEntropyLoss(ctx, loc, tensorOf(adaptor.getLogits()),
                               tensorOf(adaptor.getLabels()),
                               adaptor.getReduction(), results);
}

LogicalResult DropoutOp::verify() {
  double p = getP().convertToDouble();
  if (!(p >= 0.0 && p < 1.0))
    return emitOpError("probability p must be in [0, 1), got ") << num(p);
  return success();
}

OpFoldResult DropoutOp::fold(FoldAdaptor) {
  if (getP().convertToDouble() == 0.0)
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReloadOp::verify() {
  if (!getInput().getDefiningOp<OffloadOp>())
    return emitOpError("reads an nn.offload's result (the host copy it brings back)");
  return success();
}

LogicalResult ReshapeOp::verify() {
  if (getInput().getType().getNumElements() != getType().getNumElements())
    return emitOpError("cannot reshape ")
           << shapeString(getInput().getType().getShape()) << " ("
           << getInput().getType().getNumElements() << " elements) to "
           << shapeString(getType().getShape()) << " ("
           << getType().getNumElements() << " elements)";
  return success();
}

OpFoldResult StopGradientOp::fold(FoldAdaptor adaptor) {
  // A constant has no gradient to stop; anything else stays until autodiff.
  if (auto dense = dyn_cast_if_present<DenseElementsAttr>(adaptor.getInput()))
    return dense;
  return {};
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  // reshape(reshape(x)) is one reshape of x.
  if (auto inner = getInput().getDefiningOp<ReshapeOp>()) {
    getInputMutable().assign(inner.getInput());
    return getResult();
  }
  if (auto dense = dyn_cast_if_present<DenseElementsAttr>(adaptor.getInput()))
    return dense.reshape(getType());
  return {};
}

static bool isPermutation(ArrayRef<int64_t> perm) {
  SmallVector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[p])
      return false;
    seen[p] = true;
  }
  return true;
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  auto input = tensorOf(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if (static_cast<int64_t>(perm.size()) != input.getRank() ||
      !isPermutation(perm))
    return emitOptionalError(loc, "permutation ", listString(perm),
                             " is not a permutation of the ", input.getRank(),
                             " dims of the input");
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(input.getDimSize(p));
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  ArrayRef<int64_t> perm = getPermutation();
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    return getInput();
  // transpose(transpose(x, p1), p2) is transpose(x, p1 o p2).
  if (auto inner = getInput().getDefiningOp<TransposeOp>()) {
    ArrayRef<int64_t> innerPerm = inner.getPermutation();
    SmallVector<int64_t> composed;
    for (int64_t p : perm)
      composed.push_back(innerPerm[p]);
    getInputMutable().assign(inner.getInput());
    setPermutation(composed);
    if (llvm::equal(composed, llvm::seq<int64_t>(0, composed.size())))
      return getInput();
    return getResult();
  }
  return {};
}

namespace {
/// transpose(grouped_matmul_weight_grad(x, g), [0, 2, 1]) is
/// grouped_matmul_weight_grad(g, x): the same sums of the same products,
/// each product's factors swapped, with no pass over the result. Autodiff
/// makes the pattern wherever a model transposes its experts' weights
/// before the grouped GEMM (transformers stores them [E, N, K]).
struct TransposeOfGroupedWeightGrad : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op, PatternRewriter &rewriter) const override {
    ArrayRef<int64_t> perm = op.getPermutation();
    if (!llvm::equal(perm, ArrayRef<int64_t>{0, 2, 1}))
      return failure();
    auto grad = op.getInput().getDefiningOp<GroupedMatmulWeightGradOp>();
    if (!grad || !grad->hasOneUse())
      return failure();
    auto swapped = rewriter.create<GroupedMatmulWeightGradOp>(
        grad.getLoc(), op.getType(), grad.getGrad(), grad.getInput(), grad.getOffsets(),
        grad.getGroupStartAttr());
    swapped->setDiscardableAttrs(grad->getDiscardableAttrDictionary());
    rewriter.replaceOp(op, swapped.getResult());
    rewriter.eraseOp(grad);
    return success();
  }
};
} // namespace

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *context) {
  patterns.add<TransposeOfGroupedWeightGrad>(context);
}

LogicalResult BroadcastOp::verify() {
  if (!isBroadcastableTo(getInput().getType().getShape(), getType().getShape()))
    return emitOpError("cannot broadcast ")
           << shapeString(getInput().getType().getShape()) << " to "
           << shapeString(getType().getShape());
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto dense = dyn_cast_if_present<DenseElementsAttr>(adaptor.getInput()))
    if (dense.isSplat())
      return SplatElementsAttr::get(getType(), dense.getSplatValue<Attribute>());
  return {};
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &results) {
  auto input = tensorOf(adaptor.getInput());
  ArrayRef<int64_t> starts = adaptor.getStarts(), limits = adaptor.getLimits(),
                    strides = adaptor.getStrides();
  int64_t rank = input.getRank();
  if (static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(limits.size()) != rank ||
      static_cast<int64_t>(strides.size()) != rank)
    return emitOptionalError(loc, "starts, limits and strides need one entry "
                                  "per input dim (",
                             rank, "), got ", starts.size(), ", ",
                             limits.size(), ", ", strides.size());
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (strides[i] <= 0)
      return emitOptionalError(loc, "stride of dim ", i, " must be positive, got ",
                               strides[i]);
    if (starts[i] < 0 || starts[i] > limits[i] || limits[i] > input.getDimSize(i))
      return emitOptionalError(loc, "dim ", i, ": range [", starts[i], ", ",
                               limits[i], ") is not within [0, ",
                               input.getDimSize(i), "]");
    shape.push_back((limits[i] - starts[i] + strides[i] - 1) / strides[i]);
  }
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

OpFoldResult SliceOp::fold(FoldAdaptor) {
  if (!llvm::all_of(getStrides(), [](int64_t s) { return s == 1; }))
    return {};
  if (getInput().getType() == getType())
    return getInput();
  // Exactly one operand of a concat: that operand (a slice assignment's
  // join, read back where it was written).
  if (auto concat = getInput().getDefiningOp<ConcatOp>()) {
    int64_t rank = getType().getRank(), dim = int64_t(concat.getDim());
    if (dim < 0)
      dim += rank;
    ArrayRef<int64_t> starts = getStarts(), limits = getLimits();
    ArrayRef<int64_t> whole = getInput().getType().getShape();
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && (starts[d] != 0 || limits[d] != whole[d]))
        return {};
    int64_t offset = 0;
    for (Value piece : concat.getInputs()) {
      int64_t size = cast<RankedTensorType>(piece.getType()).getDimSize(dim);
      if (starts[dim] == offset && limits[dim] == offset + size && piece.getType() == getType())
        return piece;
      offset += size;
    }
  }
  return {};
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "needs at least one input");
  auto first = tensorOf(adaptor.getInputs().front());
  int64_t dim = adaptor.getDim();
  if (failed(checkDim(loc, dim, first.getRank(), "dim")))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  for (auto [i, v] : llvm::enumerate(adaptor.getInputs().drop_front())) {
    auto t = tensorOf(v);
    if (t.getRank() != first.getRank())
      return emitOptionalError(loc, "input ", i + 1, " has rank ", t.getRank(),
                               ", input 0 has rank ", first.getRank());
    for (int64_t d = 0; d < t.getRank(); ++d) {
      if (d == dim)
        continue;
      if (t.getDimSize(d) != first.getDimSize(d))
        return emitOptionalError(loc, "input ", i + 1, " ",
                                 shapeString(t.getShape()),
                                 " differs from input 0 ",
                                 shapeString(first.getShape()),
                                 " outside the concatenated dim ", dim);
    }
    shape[dim] += t.getDimSize(dim);
  }
  results.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

OpFoldResult ConcatOp::fold(FoldAdaptor) {
  if (getInputs().size() == 1)
    return getInputs().front();
  return {};
}

LogicalResult SplitOp::verify() {
  auto input = getInput().getType();
  int64_t dim = getDim();
  if (failed(checkDim(getLoc(), dim, input.getRank(), "dim")))
    return failure();
  if (getResults().empty())
    return emitOpError("needs at least one result");
  int64_t total = 0;
  for (auto [i, r] : llvm::enumerate(getResults())) {
    auto t = tensorOf(r);
    if (t.getRank() != input.getRank())
      return emitOpError("result ") << i << " has rank " << t.getRank()
                                    << ", the input has " << input.getRank();
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != dim && t.getDimSize(d) != input.getDimSize(d))
        return emitOpError("result ")
               << i << " " << shapeString(t.getShape())
               << " differs from the input " << shapeString(input.getShape())
               << " outside the split dim " << dim;
    total += t.getDimSize(dim);
  }
  if (total != input.getDimSize(dim))
    return emitOpError("result sizes along dim ")
           << dim << " add up to " << total << ", the input has "
           << input.getDimSize(dim);
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  auto data = tensorOf(adaptor.getData());
  auto indices = tensorOf(adaptor.getIndices());
  int64_t axis = adaptor.getAxis();
  if (failed(checkDim(loc, axis, data.getRank(), "axis")))
    return failure();
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  results.push_back(RankedTensorType::get(shape, data.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

LogicalResult PadOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &results) {
  auto input = tensorOf(adaptor.getInput());
  ArrayRef<int64_t> low = adaptor.getLow(), high = adaptor.getHigh(),
                    interior = adaptor.getInterior();
  int64_t rank = input.getRank();
  if (static_cast<int64_t>(low.size()) != rank ||
      static_cast<int64_t>(high.size()) != rank ||
      static_cast<int64_t>(interior.size()) != rank)
    return emitOptionalError(loc, "low, high and interior need one entry per "
                                  "input dim (",
                             rank, "), got ", low.size(), ", ", high.size(),
                             ", ", interior.size());
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (low[d] < 0 || high[d] < 0 || interior[d] < 0)
      return emitOptionalError(loc, "dim ", d, ": padding must be non-negative, "
                                    "got low ",
                               low[d], ", high ", high[d], ", interior ",
                               interior[d]);
    int64_t n = input.getDimSize(d);
    shape.push_back(low[d] + high[d] + n + std::max<int64_t>(n - 1, 0) * interior[d]);
  }
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult PadOp::verify() {
  double value = getValue().convertToDouble();
  Type element = getType().getElementType();
  if (element.isInteger(1) ? (value != 0 && value != 1)
      : isa<IntegerType>(element) ? std::trunc(value) != value
                                  : std::isnan(value))
    return emitOpError("padding value ")
           << num(value) << " is not a value of the element type " << element;
  return success();
}

/// The shared checks of layer_norm_grad and rms_norm_grad (input, grad and
/// result types already match).
static LogicalResult verifyNormGrad(Operation *op, RankedTensorType input,
                                    Value weight, llvm::APFloat epsilon) {
  if (failed(verifyNormInput(op, input, epsilon)) ||
      failed(verifyFeatureOperand(op, weight, input, "weight")))
    return failure();
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  return verifyNormGrad(*this, getInput().getType(), getWeight(), getEpsilon());
}

LogicalResult RmsNormGradOp::verify() {
  return verifyNormGrad(*this, getInput().getType(), getWeight(), getEpsilon());
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &results) {
  // The forward op's rules decide which q, k, v are valid, and its result
  // type is the type the gradient must have.
  SmallVector<Type> forward;
  const int64_t mask = adaptor.getSeqMajor();
  if (failed(verifySeqMajor(loc, mask, 7, std::nullopt)))
    return failure();
  auto q = seqMajorSwap(tensorOf(adaptor.getQuery()), mask, 0);
  auto k = seqMajorSwap(tensorOf(adaptor.getKey()), mask, 1);
  auto v = seqMajorSwap(tensorOf(adaptor.getValue()), mask, 2);
  if (failed(inferAttention(loc, q, k, v, adaptor.getCausal(), windowOf(adaptor.getWindowAttr()),
                            adaptor.getScale(), forward)))
    return failure();
  auto grad = seqMajorSwap(tensorOf(adaptor.getGrad()), mask, 3);
  if (grad != forward.front())
    return emitOptionalError(loc, "grad has type ", grad,
                             "; the attention's result, whose gradient it is, "
                             "has type ",
                             forward.front());
  results.append({seqMajorSwap(q, mask, 4), seqMajorSwap(k, mask, 5), seqMajorSwap(v, mask, 6)});
  return success();
}

double AttentionGradOp::getEffectiveScale() {
  return effectiveAttentionScale(getScale(), getQuery());
}

LogicalResult AttentionGradWithStatsOp::inferReturnTypes(MLIRContext *,
                                                         std::optional<Location> loc,
                                                         Adaptor adaptor,
                                                         SmallVectorImpl<Type> &results) {
  // As nn.attention_grad, plus the forward's two results: `out` has the
  // attention's result type (as `grad` does) and `lse` its statistics type.
  SmallVector<Type> forward;
  const int64_t mask = adaptor.getSeqMajor();
  if (failed(verifySeqMajor(loc, mask, 9, 4)))
    return failure();
  auto q = seqMajorSwap(tensorOf(adaptor.getQuery()), mask, 0);
  auto k = seqMajorSwap(tensorOf(adaptor.getKey()), mask, 1);
  auto v = seqMajorSwap(tensorOf(adaptor.getValue()), mask, 2);
  if (k.getElementType() != q.getElementType() || v.getElementType() != q.getElementType())
    return emitOptionalError(loc, "query, key and value must share an element type, got ",
                             q.getElementType(), ", ", k.getElementType(), " and ",
                             v.getElementType());
  if (failed(inferAttention(loc, q, k, v, adaptor.getCausal(), windowOf(adaptor.getWindowAttr()),
                            adaptor.getScale(), forward)))
    return failure();
  for (auto [name, value, position] :
       {std::tuple<StringRef, Value, unsigned>{"out", adaptor.getOut(), 3},
        std::tuple<StringRef, Value, unsigned>{"grad", adaptor.getGrad(), 5}}) {
    auto t = seqMajorSwap(tensorOf(value), mask, position);
    if (t != forward.front())
      return emitOptionalError(loc, name, " has type ", t,
                               "; the attention's result has type ", forward.front());
  }
  auto lse = tensorOf(adaptor.getLse());
  RankedTensorType stats = attentionStatsType(forward.front());
  if (lse != stats)
    return emitOptionalError(loc, "lse has type ", lse,
                             "; the attention's statistics (f32, [batch, heads, seq]) have type ",
                             stats);
  results.append({seqMajorSwap(q, mask, 6), seqMajorSwap(k, mask, 7), seqMajorSwap(v, mask, 8)});
  return success();
}

double AttentionGradWithStatsOp::getEffectiveScale() {
  return effectiveAttentionScale(getScale(), getQuery());
}

LogicalResult EmbeddingGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &results) {
  auto ids = tensorOf(adaptor.getIds());
  auto grad = tensorOf(adaptor.getGrad());
  int64_t rows = adaptor.getNumEmbeddings();
  if (rows <= 0)
    return emitOptionalError(loc, "num_embeddings must be positive, got ", rows);
  if (grad.getRank() != ids.getRank() + 1 ||
      grad.getShape().drop_back() != ids.getShape())
    return emitOptionalError(loc, "grad ", shapeString(grad.getShape()),
                             " must be the ids' shape ",
                             shapeString(ids.getShape()),
                             " followed by the embedding dim");
  results.push_back(RankedTensorType::get({rows, grad.getShape().back()},
                                          grad.getElementType()));
  return success();
}

LogicalResult GatherGradOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &results) {
  auto indices = tensorOf(adaptor.getIndices());
  auto grad = tensorOf(adaptor.getGrad());
  int64_t axis = adaptor.getAxis(), axisSize = adaptor.getAxisSize();
  if (axisSize <= 0)
    return emitOptionalError(loc, "axis_size must be positive, got ", axisSize);
  if (axis < 0 || axis + indices.getRank() > grad.getRank() ||
      grad.getShape().slice(axis, indices.getRank()) != indices.getShape())
    return emitOptionalError(loc, "grad ", shapeString(grad.getShape()),
                             " must hold the indices' shape ",
                             shapeString(indices.getShape()), " at dim ", axis);
  SmallVector<int64_t> shape(grad.getShape().take_front(axis));
  shape.push_back(axisSize);
  llvm::append_range(shape, grad.getShape().drop_front(axis + indices.getRank()));
  results.push_back(RankedTensorType::get(shape, grad.getElementType()));
  return success();
}

/// The logits gradient of a cross-entropy (whole or a block of classes):
/// the logits' type, once `grad` has the loss's type.
static LogicalResult inferCrossEntropyGrad(MLIRContext *ctx, std::optional<Location> loc,
                                           Value logits, Value labels, Value grad,
                                           LossReduction reduction,
                                           SmallVectorImpl<Type> &results) {
  SmallVector<Type> loss;
  if (failed(inferCrossEntropyLoss(ctx, loc, tensorOf(logits), tensorOf(labels), reduction,
                                   loss)))
    return failure();
  if (tensorOf(grad) != loss.front())
    return emitOptionalError(loc, "grad has type ", grad.getType(), "; the loss has type ",
                             loss.front());
  results.push_back(logits.getType());
  return success();
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  return inferCrossEntropyGrad(ctx, loc, adaptor.getLogits(), adaptor.getLabels(),
                               adaptor.getGrad(), adaptor.getReduction(), results);
}

/// Checks `stats` [N, 3 * B] against `labels` [N].
static LogicalResult checkBlockStats(std::optional<Location> loc, RankedTensorType stats,
                                     RankedTensorType labels) {
  if (stats.getRank() != 2 || labels.getRank() != 1 || stats.getDimSize(1) % 3 != 0 ||
      stats.getDimSize(1) == 0)
    return emitOptionalError(loc, "stats must be [N, 3 * blocks] and labels [N], got ",
                             shapeString(stats.getShape()), " and ",
                             shapeString(labels.getShape()));
  if (stats.getDimSize(0) != labels.getDimSize(0))
    return emitOptionalError(loc, "stats have ", stats.getDimSize(0), " rows but labels have ",
                             labels.getDimSize(0));
  return success();
}

LogicalResult CrossEntropyStatsOp::inferReturnTypes(MLIRContext *ctx,
                                                    std::optional<Location> loc,
                                                    Adaptor adaptor,
                                                    SmallVectorImpl<Type> &results) {
  SmallVector<Type> loss;
  auto logits = tensorOf(adaptor.getLogits());
  if (failed(inferCrossEntropyLoss(ctx, loc, logits, tensorOf(adaptor.getLabels()),
                                   LossReduction::none, loss)))
    return failure();
  results.push_back(RankedTensorType::get({logits.getDimSize(0), 3}, Float32Type::get(ctx)));
  return success();
}

LogicalResult CrossEntropyCombineOp::inferReturnTypes(MLIRContext *ctx,
                                                      std::optional<Location> loc,
                                                      Adaptor adaptor,
                                                      SmallVectorImpl<Type> &results) {
  auto stats = tensorOf(adaptor.getStats());
  auto labels = tensorOf(adaptor.getLabels());
  if (failed(checkBlockStats(loc, stats, labels)))
    return failure();
  SmallVector<int64_t> shape;
  if (adaptor.getReduction() == LossReduction::none)
    shape.push_back(labels.getDimSize(0));
  results.push_back(RankedTensorType::get(shape, Float32Type::get(ctx)));
  return success();
}

LogicalResult CrossEntropyBlockGradOp::inferReturnTypes(MLIRContext *ctx,
                                                        std::optional<Location> loc,
                                                        Adaptor adaptor,
                                                        SmallVectorImpl<Type> &results) {
  if (failed(checkBlockStats(loc, tensorOf(adaptor.getStats()), tensorOf(adaptor.getLabels()))))
    return failure();
  return inferCrossEntropyGrad(ctx, loc, adaptor.getLogits(), adaptor.getLabels(),
                               adaptor.getGrad(), adaptor.getReduction(), results);
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

LogicalResult AssignOp::verify() {
  if (!getParameter().getDefiningOp<ParameterOp>())
    return emitOpError("assigns to a value that is not an nn.parameter");
  if (getParameter().getType() != getValue().getType())
    return emitOpError("assigns a value of type ")
           << getValue().getType() << " to a parameter of type "
           << getParameter().getType();
  return success();
}

LogicalResult AdamWOp::verify() {
  auto type = getParam().getType();
  for (auto [name, v] : {std::pair<StringRef, Value>{"gradient", getGrad()},
                         std::pair<StringRef, Value>{"first moment", getExpAvg()},
                         std::pair<StringRef, Value>{"second moment", getExpAvgSq()}})
    if (v.getType() != type)
      return emitOpError() << name << " of type " << v.getType()
                           << " differs from the parameter's " << type;
  if (!type.getElementType().isF32())
    return emitOpError("updates f32 master weights, got ") << type.getElementType();
  for (auto [name, v] : {std::pair<StringRef, Value>{"learning rate", getLr()},
                         std::pair<StringRef, Value>{"step", getStep()}})
    if (cast<RankedTensorType>(v.getType()).getRank() != 0)
      return emitOpError() << name << " must be an f32 scalar (tensor<f32>)";
  for (Type t : getResultTypes())
    if (t != type)
      return emitOpError("results must have the parameter's type ") << type;
  double b1 = getBeta1().convertToDouble(), b2 = getBeta2().convertToDouble();
  if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
    return emitOpError("betas must be in [0, 1), got ") << b1 << " and " << b2;
  if (!(getEpsilon().convertToDouble() > 0) || !(getWeightDecay().convertToDouble() >= 0))
    return emitOpError("epsilon must be positive and weight decay non-negative");
  return success();
}


LogicalResult LinearCrossEntropyOp::verify() {
  auto x = cast<RankedTensorType>(getInput().getType());
  auto w = cast<RankedTensorType>(getWeight().getType());
  auto labels = cast<RankedTensorType>(getLabels().getType());
  if (x.getRank() != 2 || w.getRank() != 2 || labels.getRank() != 1)
    return emitOpError("takes input [N, H], weight [V, H] and labels [N], got ")
           << x << ", " << w << " and " << labels;
  if (!x.hasStaticShape() || !w.hasStaticShape() || !labels.hasStaticShape())
    return emitOpError("needs static shapes");
  if (x.getDimSize(1) != w.getDimSize(1) || labels.getDimSize(0) != x.getDimSize(0))
    return emitOpError("input ") << x << ", weight " << w << " and labels " << labels
                                 << " do not agree on N and H";
  if (x.getElementType() != w.getElementType())
    return emitOpError("input and weight must share an element type, got ")
           << x.getElementType() << " and " << w.getElementType();
  if (cast<RankedTensorType>(getGrad().getType()).getRank() != 0)
    return emitOpError("the loss gradient must be an f32 scalar (tensor<f32>)");
  if (getReduction() == LossReduction::none)
    return emitOpError("reduces its loss: reduction must be mean or sum");
  if (getChunk() < 1)
    return emitOpError("chunk must be at least 1 row, got ") << getChunk();
  if (cast<RankedTensorType>(getLoss().getType()).getRank() != 0)
    return emitOpError("the loss must be an f32 scalar");
  if (getInputGrad().getType() != x)
    return emitOpError("the input gradient must have the input's type ") << x;
  auto dw = cast<RankedTensorType>(getWeightGrad().getType());
  if (dw.getShape() != w.getShape() ||
      (dw.getElementType() != w.getElementType() && !dw.getElementType().isF32()))
    return emitOpError("the weight gradient must be the weight's shape in its type or f32, got ")
           << dw;
  return success();
}

RankedTensorType LinearCrossEntropyOp::getKernelScratchType() {
  auto x = cast<RankedTensorType>(getInput().getType());
  auto w = cast<RankedTensorType>(getWeight().getType());
  const int64_t gradBytes = x.getElementType().getIntOrFloatBitWidth() / 8;
  LinearCrossEntropyScratch s = linearCrossEntropyScratch(
      x.getDimSize(0), x.getDimSize(1), w.getDimSize(0), getChunk(), gradBytes,
      cast<RankedTensorType>(getWeightGrad().getType()).getElementType().isF32());
  return RankedTensorType::get({s.words}, Float32Type::get(getContext()));
}

//===----------------------------------------------------------------------===//
// Fusion (FusibleOpInterface, nn.fused)
//===----------------------------------------------------------------------===//

FusionKind CastOp::getFusionKind() { return FusionKind::Cast; }
FusionKind BroadcastOp::getFusionKind() { return FusionKind::Broadcast; }

FusionKind loom::nn::reductionFusionKind(Operation *op) {
  auto input = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims");
  if (!input || !dims || dims.empty())
    return FusionKind::None;
  int64_t rank = input.getRank();
  SmallVector<int64_t> sorted;
  for (int64_t d : dims.asArrayRef())
    sorted.push_back(d < 0 ? d + rank : d);
  llvm::sort(sorted);
  // The reduced dims must be the innermost ones: rows of contiguous elements.
  for (auto [i, d] : llvm::enumerate(sorted))
    if (d != rank - int64_t(sorted.size()) + int64_t(i))
      return FusionKind::None;
  return FusionKind::RowReduction;
}

LogicalResult FusedOp::verify() {
  Block &block = getBodyBlock();
  if (block.getNumArguments() != getInputs().size())
    return emitOpError("has ") << getInputs().size() << " inputs but its block takes "
                               << block.getNumArguments() << " arguments";
  for (auto [i, pair] : llvm::enumerate(llvm::zip(getInputs(), block.getArguments())))
    if (std::get<0>(pair).getType() != std::get<1>(pair).getType())
      return emitOpError("input ") << i << " has type " << std::get<0>(pair).getType()
                                   << " but block argument " << i << " has type "
                                   << std::get<1>(pair).getType();
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield)
    return emitOpError("body must end with nn.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yields ") << yield.getValues().size()
                                  << " values whose types differ from its results";
  for (Operation &op : block.without_terminator()) {
    if (op.getNumRegions() != 0)
      return op.emitOpError("cannot be inside nn.fused: it has regions");
    if (!isa<FusibleOpInterface>(op))
      return op.emitOpError("is not fusible (FusibleOpInterface) but is inside nn.fused");
  }
  return success();
}

namespace {

llvm::Error fusedBodyError(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument, message.str().c_str());
}

/// A kernel attribute (kernelAttrsFor's kinds) as the runtime carries it.
std::optional<loom::AttrValue> runtimeAttrValue(Attribute v) {
  if (auto i = dyn_cast<IntegerAttr>(v))
    return loom::AttrValue(i.getValue().getSExtValue());
  if (auto f = dyn_cast<FloatAttr>(v))
    return loom::AttrValue(f.getValueAsDouble());
  if (auto s = dyn_cast<StringAttr>(v))
    return loom::AttrValue(s.str());
  if (auto a = dyn_cast<DenseI64ArrayAttr>(v))
    return loom::AttrValue(std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end()));
  if (auto a = dyn_cast<DenseF64ArrayAttr>(v))
    return loom::AttrValue(std::vector<double>(a.asArrayRef().begin(), a.asArrayRef().end()));
  return std::nullopt;
}

} // namespace

llvm::Expected<loom::FusedBody> FusedOp::kernelBody() {
  loom::FusedBody body;
  auto typeOf = [](Type type, const llvm::Twine &what) -> llvm::Expected<loom::FusedTensorType> {
    auto tensor = dyn_cast<RankedTensorType>(type);
    std::string spelled;
    llvm::raw_string_ostream os(spelled);
    os << type;
    if (!tensor || !tensor.hasStaticShape())
      return fusedBodyError(what + " is " + spelled + ": a body needs static shapes");
    std::optional<loom::DType> dtype = loom::runtimeDType(tensor.getElementType());
    if (!dtype)
      return fusedBodyError(what + " is " + spelled + ", an element type the runtime has not");
    return loom::FusedTensorType{*dtype, std::vector<int64_t>(tensor.getShape().begin(),
                                                              tensor.getShape().end())};
  };
  Block &block = getBodyBlock();
  llvm::DenseMap<Value, loom::FusedRef> refs;
  for (BlockArgument arg : block.getArguments()) {
    auto type = typeOf(arg.getType(), "input " + llvm::Twine(arg.getArgNumber()));
    if (!type)
      return type.takeError();
    refs[arg] = {true, static_cast<uint32_t>(body.inputs.size())};
    body.inputs.push_back(std::move(*type));
  }
  for (Operation &op : block.without_terminator()) {
    std::string label = ("member '" + op.getName().getStringRef() + "'").str();
    if (op.getNumResults() != 1)
      return fusedBodyError(label + " has " + llvm::Twine(op.getNumResults()) +
                            " results (a member has one)");
    // An nn op's kernel is named as the op (NN_Kernel).
    std::optional<loom::KernelId> kernel = loom::findKernel(op.getName().getStringRef());
    if (!kernel)
      return fusedBodyError(label + " has no kernel");
    loom::FusedStep step;
    step.kernel = *kernel;
    for (Value operand : op.getOperands()) {
      auto it = refs.find(operand);
      if (it == refs.end())
        return fusedBodyError(label + " reads a value from outside the group");
      step.operands.push_back(it->second);
    }
    for (NamedAttribute attr : loom::kernelAttrsFor(&op)) {
      std::optional<loom::AttrValue> value = runtimeAttrValue(attr.getValue());
      if (!value)
        return fusedBodyError(label + ": kernel attribute '" + attr.getName().getValue() +
                              "' has no runtime form");
      step.attrs.push_back({attr.getName().str(), std::move(*value)});
    }
    auto type = typeOf(op.getResult(0).getType(), label + "'s result");
    if (!type)
      return type.takeError();
    step.result = std::move(*type);
    refs[op.getResult(0)] = {false, static_cast<uint32_t>(body.steps.size())};
    body.steps.push_back(std::move(step));
  }
  for (Value value : cast<YieldOp>(block.getTerminator()).getValues()) {
    loom::FusedRef ref = refs.lookup(value);
    if (ref.isInput)
      return fusedBodyError("the group yields its input " + llvm::Twine(ref.index));
    body.yields.push_back(ref.index);
  }
  if (std::string problem = loom::checkFusedBody(body); !problem.empty())
    return fusedBodyError(problem);
  return body;
}

//===----------------------------------------------------------------------===//
// FP8 (NNFp8Ops.td)
//===----------------------------------------------------------------------===//

/// A tiling of `tensor` by `scale`'s shape: rank 0 (one scale), or the
/// tensor's rank with each dim cut into power-of-two tiles, the last
/// holding what is left (runtime/abi/Fp8Tiling.h).
static LogicalResult verifyFp8Tiling(Operation *op, RankedTensorType tensor,
                                     RankedTensorType scale, StringRef what) {
  if (scale.getRank() == 0)
    return success();
  if (scale.getRank() != tensor.getRank())
    return op->emitOpError() << what << " " << shapeString(scale.getShape())
                             << " must be a scalar or have the tensor's rank "
                             << tensor.getRank() << " (tensor "
                             << shapeString(tensor.getShape()) << ")";
  for (int64_t d = 0; d < tensor.getRank(); ++d) {
    int64_t x = tensor.getDimSize(d), t = scale.getDimSize(d);
    if (loom::fp8TileSize(x, t) == 0)
      return op->emitOpError() << what << " " << shapeString(scale.getShape())
                               << " does not tile the tensor "
                               << shapeString(tensor.getShape()) << ": dim " << d
                               << " has " << x << " elements, which " << t
                               << " tiles of a power-of-two size do not cover exactly";
  }
  return success();
}

/// FP8 quantization reads or writes f32, bf16 or f16 beside its FP8 values.
static LogicalResult verifyWideFloat(Operation *op, Type element, StringRef what) {
  if (isa<Float32Type, BFloat16Type, Float16Type>(element))
    return success();
  return op->emitOpError() << what << " must be f32, bf16 or f16, got " << element;
}

LogicalResult QuantizeOp::verify() {
  RankedTensorType x = getInput().getType(), q = getResult().getType();
  if (x.getShape() != q.getShape())
    return emitOpError("result shape ") << shapeString(q.getShape())
                                        << " differs from the input's "
                                        << shapeString(x.getShape());
  if (failed(verifyWideFloat(*this, x.getElementType(), "input")))
    return failure();
  if (Value t = getTransposed()) {
    auto tt = cast<RankedTensorType>(t.getType());
    if (x.getRank() < 2)
      return emitOpError("a transposed copy needs an input of rank 2 or more, got ")
             << shapeString(x.getShape());
    SmallVector<int64_t> swapped(x.getShape());
    std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
    if (tt.getShape() != ArrayRef<int64_t>(swapped))
      return emitOpError("transposed copy ") << shapeString(tt.getShape()) << " should be "
                                             << shapeString(swapped);
    if (tt.getElementType() != q.getElementType())
      return emitOpError("transposed copy is ") << tt.getElementType() << ", the result "
                                                << q.getElementType();
    // One scale for the tensor serves both copies; tiles have their own.
    Value ts = getTransposedScale();
    if (getScale().getType().getRank() != 0 && !ts)
      return emitOpError("a transposed copy of a tiled quantization needs a transposed_scale");
    if (ts && failed(verifyFp8Tiling(*this, tt, cast<RankedTensorType>(ts.getType()),
                                     "transposed_scale")))
      return failure();
  } else if (getTransposedScale()) {
    return emitOpError("a transposed_scale needs the transposed copy as a second result");
  }
  return verifyFp8Tiling(*this, x, getScale().getType(), "scale");
}

LogicalResult DequantizeOp::verify() {
  if (getInput().getType().getShape() != getType().getShape())
    return emitOpError("result shape ") << shapeString(getType().getShape())
                                        << " differs from the input's "
                                        << shapeString(getInput().getType().getShape());
  if (failed(verifyWideFloat(*this, getType().getElementType(), "result")))
    return failure();
  return verifyFp8Tiling(*this, getInput().getType(), getScale().getType(), "scale");
}

LogicalResult AmaxOp::verify() {
  if (failed(verifyWideFloat(*this, getInput().getType().getElementType(), "input")))
    return failure();
  return verifyFp8Tiling(*this, getInput().getType(), getType(), "result");
}

LogicalResult ScaledMatmulOp::verify() {
  RankedTensorType a = getLhs().getType(), b = getRhs().getType(), out = getType();
  if (a.getRank() != 2 || b.getRank() != 2 || out.getRank() != 2)
    return emitOpError("takes [M, K] and [N, K] operands and an [M, N] result, got ranks ")
           << a.getRank() << ", " << b.getRank() << " and " << out.getRank();
  if (a.getDimSize(1) != b.getDimSize(1))
    return emitOpError("contracted dims differ: lhs ") << shapeString(a.getShape()) << ", rhs "
                                                       << shapeString(b.getShape());
  if (out.getDimSize(0) != a.getDimSize(0) || out.getDimSize(1) != b.getDimSize(0))
    return emitOpError("result ") << shapeString(out.getShape()) << " should be ["
                                  << a.getDimSize(0) << ", " << b.getDimSize(0) << "]";
  if (failed(verifyWideFloat(*this, out.getElementType(), "result")))
    return failure();
  if (isa<Float8E5M2Type>(a.getElementType()) && isa<Float8E5M2Type>(b.getElementType()))
    return emitOpError("takes at most one f8E5M2 operand (FP8 GEMMs do not multiply two)");
  RankedTensorType sa = getLhsScale().getType(), sb = getRhsScale().getType();
  if (failed(verifyFp8Tiling(*this, a, sa, "lhs_scale")) ||
      failed(verifyFp8Tiling(*this, b, sb, "rhs_scale")))
    return failure();
  // The contracted dim's tiles: one, or the same size in both operands.
  const int64_t k = a.getDimSize(1);
  const int64_t ka = sa.getRank() ? sa.getDimSize(1) : 1, kb = sb.getRank() ? sb.getDimSize(1) : 1;
  if (ka != 1 && kb != 1 && ka != kb)
    return emitOpError("lhs_scale has ") << ka << " tiles along the contracted dim (" << k
                                         << "), rhs_scale " << kb
                                         << ": they must match, or one be a single tile";
  return success();
}

LogicalResult Fp8ScaleOp::verify() {
  if (getFormat() != "e4m3" && getFormat() != "e5m2")
    return emitOpError("format must be \"e4m3\" or \"e5m2\", got \"") << getFormat() << "\"";
  if (getMargin() < 0 || getMargin() > 64)
    return emitOpError("margin must be in [0, 64], got ") << getMargin();
  return success();
}

LogicalResult Fp8PolicyAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                    Fp8Recipe recipe, Fp8Format, int64_t margin,
                                    int64_t history, int64_t gradient) {
  if (margin < 0 || margin > 64)
    return emitError() << "fp8 margin must be in [0, 64], got " << margin;
  if (history < 1)
    return emitError() << "fp8 amax history must be at least 1, got " << history;
  if (history > 1 && recipe != Fp8Recipe::tensorwise_delayed)
    return emitError() << "fp8 amax history " << history << " needs recipe tensorwise_delayed";
  if (gradient < -1 || gradient > 1)
    return emitError() << "fp8 gradient operand must be -1, 0 or 1, got " << gradient;
  return success();
}

//===----------------------------------------------------------------------===//
// Mixture of experts (NNMoeOps.td)
//===----------------------------------------------------------------------===//

/// The results of a row-wise selection along the last dim: `values` with
/// `input`'s element type, `indices` i64, both of `input`'s leading dims
/// and `last` elements along the last one.
static LogicalResult verifyRowSelection(Operation *op, RankedTensorType input,
                                        RankedTensorType values, RankedTensorType indices,
                                        int64_t last) {
  if (input.getRank() < 1)
    return op->emitOpError("takes a tensor of rank 1 or more, got a scalar");
  SmallVector<int64_t> shape(input.getShape());
  shape.back() = last;
  if (values.getShape() != ArrayRef<int64_t>(shape) ||
      indices.getShape() != ArrayRef<int64_t>(shape))
    return op->emitOpError("results should be ")
           << shapeString(shape) << ", got " << shapeString(values.getShape()) << " and "
           << shapeString(indices.getShape());
  if (values.getElementType() != input.getElementType())
    return op->emitOpError("values must have the input's element type");
  if (!indices.getElementType().isInteger(64))
    return op->emitOpError("indices must be i64");
  return success();
}

LogicalResult TopkOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                       Adaptor adaptor, SmallVectorImpl<Type> &results) {
  auto input = tensorOf(adaptor.getInput());
  if (input.getRank() < 1)
    return emitOptionalError(loc, "nn.topk takes a tensor of rank 1 or more");
  SmallVector<int64_t> shape(input.getShape());
  shape.back() = int64_t(adaptor.getK());
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  results.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult RouterOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &results) {
  auto logits = tensorOf(adaptor.getLogits());
  if (logits.getRank() < 1)
    return emitOptionalError(loc, "nn.router takes logits of rank 1 or more");
  SmallVector<int64_t> shape(logits.getShape());
  shape.back() = int64_t(adaptor.getK());
  results.push_back(RankedTensorType::get(shape, logits.getElementType()));
  results.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 64)));
  results.push_back(logits);
  return success();
}

LogicalResult SortOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                       Adaptor adaptor, SmallVectorImpl<Type> &results) {
  auto input = tensorOf(adaptor.getInput());
  if (input.getRank() < 1)
    return emitOptionalError(loc, "nn.sort takes a tensor of rank 1 or more");
  results.push_back(input);
  results.push_back(RankedTensorType::get(input.getShape(), IntegerType::get(ctx, 64)));
  return success();
}

LogicalResult GroupedMatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &results) {
  auto input = tensorOf(adaptor.getInput()), weight = tensorOf(adaptor.getWeight());
  if (input.getRank() != 2 || weight.getRank() != 3)
    return emitOptionalError(loc, "nn.grouped_matmul takes input [S, K] and weight [E, K, N] "
                                  "([E, N, K] with transpose_weight)");
  results.push_back(RankedTensorType::get(
      {input.getDimSize(0), weight.getDimSize(adaptor.getTransposeWeight() ? 1 : 2)},
      input.getElementType()));
  return success();
}

LogicalResult TopkOp::verify() {
  auto input = getInput().getType();
  if (input.getRank() < 1)
    return emitOpError("takes a tensor of rank 1 or more, got a scalar");
  int64_t n = input.getShape().back();
  if (int64_t(getK()) < 1 || int64_t(getK()) > n)
    return emitOpError("k must be in [1, ") << n << "], got " << int64_t(getK());
  return verifyRowSelection(*this, input, getValues().getType(), getIndices().getType(),
                            int64_t(getK()));
}

LogicalResult RouterOp::verify() {
  auto logits = getLogits().getType();
  if (logits.getRank() < 1)
    return emitOpError("takes logits of rank 1 or more, got a scalar");
  const int64_t experts = logits.getShape().back(), k = int64_t(getK());
  if (k < 1 || k > experts)
    return emitOpError("k must be in [1, ") << experts << "], got " << k;
  if (LogicalResult rows = verifyRowSelection(*this, logits, getWeights().getType(),
                                              getIds().getType(), k);
      failed(rows))
    return rows;
  if (getScores().getType() != logits)
    return emitOpError("scores must be the logits' type, got ") << getScores().getType();
  if (Value bias = getBias()) {
    auto type = cast<RankedTensorType>(bias.getType());
    if (type.getRank() != 1 || type.getDimSize(0) != experts ||
        type.getElementType() != logits.getElementType())
      return emitOpError("bias must be [")
             << experts << "], one per expert, of the logits' element type, got " << type;
  }
  const int64_t groups = int64_t(getGroups());
  if (groups < 1 || experts % groups)
    return emitOpError("groups must divide the ") << experts << " experts, got " << groups;
  if (groups > 1) {
    const int64_t size = experts / groups;
    if (int64_t(getGroupK()) < 1 || int64_t(getGroupK()) > groups)
      return emitOpError("group_k must be in [1, ") << groups << "], got " << int64_t(getGroupK());
    if (int64_t(getGroupTop()) < 1 || int64_t(getGroupTop()) > size)
      return emitOpError("group_top must be in [1, ")
             << size << "] (the experts of a group), got " << int64_t(getGroupTop());
  }
  return success();
}

LogicalResult SortOp::verify() {
  auto input = getInput().getType();
  if (input.getRank() < 1)
    return emitOpError("takes a tensor of rank 1 or more, got a scalar");
  return verifyRowSelection(*this, input, getValues().getType(), getIndices().getType(),
                            input.getShape().back());
}

/// input [S, K], weight-like [E, K, N] or grad [S, N], offsets [G]: the E
/// groups from group_start on, of G >= group_start + E (all of them without
/// group_start).
static LogicalResult verifyGrouped(Operation *op, RankedTensorType input, RankedTensorType offsets,
                                   int64_t experts, std::optional<uint64_t> groupStart) {
  if (input.getRank() != 2)
    return op->emitOpError("input must be [rows, K], got ") << shapeString(input.getShape());
  if (!groupStart) {
    if (offsets.getRank() != 1 || offsets.getDimSize(0) != experts)
      return op->emitOpError("offsets must be [")
             << experts << "] (one running row count per group), got "
             << shapeString(offsets.getShape());
    return success();
  }
  if (int64_t(*groupStart) < 0)
    return op->emitOpError("group_start must be >= 0, got ") << int64_t(*groupStart);
  if (offsets.getRank() != 1 || offsets.getDimSize(0) < int64_t(*groupStart) + experts)
    return op->emitOpError("offsets must be [G] with G >= group_start + groups = ")
           << int64_t(*groupStart) + experts << ", got " << shapeString(offsets.getShape());
  return success();
}

// GroupedRowsOpInterface: the grouped GEMM reads its input at its groups'
// rows and writes zeros elsewhere; its weight gradient reads both row
// operands at its groups' rows.
Value GroupedMatmulOp::getGroupOffsets() { return getOffsets(); }
int64_t GroupedMatmulOp::getFirstGroup() { return int64_t(getGroupStart().value_or(0)); }
int64_t GroupedMatmulOp::getGroupCount() { return getWeight().getType().getDimSize(0); }
bool GroupedMatmulOp::readsOnlyGroupRows(unsigned index) { return index == 0; }
bool GroupedMatmulOp::writesOnlyGroupRows() { return true; }

Value GroupedMatmulWeightGradOp::getGroupOffsets() { return getOffsets(); }
int64_t GroupedMatmulWeightGradOp::getFirstGroup() {
  return int64_t(getGroupStart().value_or(0));
}
int64_t GroupedMatmulWeightGradOp::getGroupCount() { return getType().getDimSize(0); }
bool GroupedMatmulWeightGradOp::readsOnlyGroupRows(unsigned index) { return index <= 1; }
bool GroupedMatmulWeightGradOp::writesOnlyGroupRows() { return false; }

LogicalResult GroupedMatmulOp::verify() {
  auto input = getInput().getType(), weight = getWeight().getType(), out = getType();
  if (weight.getRank() != 3)
    return emitOpError("weight must be [groups, K, N] ([groups, N, K] with transpose_weight), "
                       "got ")
           << shapeString(weight.getShape());
  if (failed(verifyGrouped(*this, input, getOffsets().getType(), weight.getDimSize(0),
                           getGroupStart())))
    return failure();
  if (input.getDimSize(1) != weight.getDimSize(getWeightContractedDim()))
    return emitOpError("contracted dims differ: input ")
           << shapeString(input.getShape()) << ", weight " << shapeString(weight.getShape())
           << (getTransposeWeight() ? " (transposed)" : "");
  SmallVector<int64_t> shape{input.getDimSize(0), weight.getDimSize(getWeightFeatureDim())};
  if (out.getShape() != ArrayRef<int64_t>(shape))
    return emitOpError("result should be ") << shapeString(shape) << ", got "
                                            << shapeString(out.getShape());
  if (input.getElementType() != weight.getElementType() ||
      out.getElementType() != input.getElementType())
    return emitOpError("input, weight and result must have one element type");
  return success();
}

/// A weight transposed on its way in ([E, N, K] -> [E, K, N], as
/// transformers' experts are) is read in place instead: the attribute
/// flips, and no pass over the weight is made.
OpFoldResult GroupedMatmulOp::fold(FoldAdaptor) {
  auto t = getWeight().getDefiningOp<TransposeOp>();
  if (!t || !llvm::equal(t.getPermutation(), ArrayRef<int64_t>{0, 2, 1}))
    return {};
  getWeightMutable().assign(t.getInput());
  setTransposeWeight(!getTransposeWeight());
  return getResult();
}

LogicalResult GroupedMatmulWeightGradOp::verify() {
  auto input = getInput().getType(), grad = getGrad().getType(), out = getType();
  if (out.getRank() != 3)
    return emitOpError("result must be [groups, K, N], got ") << shapeString(out.getShape());
  if (failed(verifyGrouped(*this, input, getOffsets().getType(), out.getDimSize(0),
                           getGroupStart())))
    return failure();
  if (grad.getRank() != 2 || grad.getDimSize(0) != input.getDimSize(0))
    return emitOpError("grad must be [") << input.getDimSize(0) << ", N], got "
                                          << shapeString(grad.getShape());
  SmallVector<int64_t> shape{out.getDimSize(0), input.getDimSize(1), grad.getDimSize(1)};
  if (out.getShape() != ArrayRef<int64_t>(shape))
    return emitOpError("result should be ") << shapeString(shape) << ", got "
                                            << shapeString(out.getShape());
  Type element = input.getElementType();
  if (element != grad.getElementType() ||
      (out.getElementType() != element &&
       !(out.getElementType().isF32() && (element.isBF16() || element.isF16()))))
    return emitOpError("input, grad and result must have one element type (or an f32 result "
                       "from bf16 or f16)");
  return success();
}

bool GroupedMatmulWeightGradOp::canWidenResult(unsigned index, Type elementType) {
  Type current = getResult().getType().getElementType();
  return index == 0 && elementType.isF32() && (current.isBF16() || current.isF16());
}

#define GET_OP_CLASSES
#include "dialects/nn/NNOps.cpp.inc"
