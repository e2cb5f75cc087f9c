// Host-side operand validation shared by every backend (see OperandChecks.h).
// The CPU kernels (kernels/cpu) and the CUDA launchers (kernels/cuda) call
// these before they compute; the messages are the ones the tests assert.

#include "kernels/cpu/OperandChecks.h"
#include "runtime/abi/Fp8Tiling.h"
#include "runtime/abi/NormWeightGrad.h"
#include "runtime/abi/SumSquares.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <system_error>

namespace loom::cpu {

using namespace detail;

//===----------------------------------------------------------------------===//
// Tensor and KernelAttrs
//===----------------------------------------------------------------------===//

int64_t Tensor::numElements() const { return product(shape); }

size_t Tensor::sizeInBytes() const {
  return static_cast<size_t>(numElements()) * dtypeSize(dtype);
}

KernelAttrs::KernelAttrs(std::vector<NamedAttr> attrs) : attrs_(std::move(attrs)) {}

KernelAttrs &KernelAttrs::set(std::string name, AttrValue value) {
  for (NamedAttr &attr : attrs_) {
    if (attr.name == name) {
      attr.value = std::move(value);
      return *this;
    }
  }
  attrs_.push_back({std::move(name), std::move(value)});
  return *this;
}

const AttrValue *KernelAttrs::find(std::string_view name) const {
  for (const NamedAttr &attr : attrs_)
    if (attr.name == name)
      return &attr.value;
  return nullptr;
}

namespace {

const char *attrTypeName(const AttrValue &value) {
  switch (value.index()) {
  case 0:
    return "int";
  case 1:
    return "f64";
  case 2:
    return "string";
  case 3:
    return "int list";
  default:
    return "f64 list";
  }
}

/// The shared lookup of the typed getters.
template <typename T>
llvm::Expected<T> getTyped(const KernelAttrs &attrs, std::string_view name,
                           const std::optional<T> &dflt, const char *wanted) {
  const AttrValue *value = attrs.find(name);
  if (!value) {
    if (dflt)
      return *dflt;
    return kernelError("missing attribute '" + llvm::Twine(name) + "'");
  }
  if (const T *typed = std::get_if<T>(value))
    return *typed;
  if constexpr (std::is_same_v<T, double>)
    if (const int64_t *integer = std::get_if<int64_t>(value))
      return static_cast<double>(*integer);
  return kernelError("attribute '" + llvm::Twine(name) + "' is " +
                     attrTypeName(*value) + ", expected " + wanted);
}

} // namespace

llvm::Expected<int64_t> KernelAttrs::getInt(std::string_view name,
                                            std::optional<int64_t> dflt) const {
  return getTyped<int64_t>(*this, name, dflt, "int");
}

llvm::Expected<bool> KernelAttrs::getBool(std::string_view name,
                                          std::optional<bool> dflt) const {
  std::optional<int64_t> intDefault;
  if (dflt)
    intDefault = *dflt ? 1 : 0;
  llvm::Expected<int64_t> value = getTyped<int64_t>(*this, name, intDefault, "int");
  if (!value)
    return value.takeError();
  if (*value != 0 && *value != 1)
    return kernelError("attribute '" + llvm::Twine(name) + "' is " +
                       llvm::Twine(*value) + ", expected 0 or 1");
  return *value == 1;
}

llvm::Expected<double> KernelAttrs::getF64(std::string_view name,
                                           std::optional<double> dflt) const {
  return getTyped<double>(*this, name, dflt, "f64");
}

llvm::Expected<std::string> KernelAttrs::getStr(std::string_view name,
                                                std::optional<std::string> dflt) const {
  return getTyped<std::string>(*this, name, dflt, "string");
}

llvm::Expected<std::vector<int64_t>>
KernelAttrs::getInts(std::string_view name,
                     std::optional<std::vector<int64_t>> dflt) const {
  return getTyped<std::vector<int64_t>>(*this, name, dflt, "int list");
}

llvm::Expected<std::vector<double>>
KernelAttrs::getF64List(std::string_view name,
                        std::optional<std::vector<double>> dflt) const {
  return getTyped<std::vector<double>>(*this, name, dflt, "float list");
}

namespace detail {

llvm::Error kernelError(const llvm::Twine &message) {
  return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                 message);
}

std::string shapeToString(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

int64_t product(llvm::ArrayRef<int64_t> dims) {
  int64_t result = 1;
  for (int64_t dim : dims)
    result *= dim;
  return result;
}

std::vector<int64_t> contiguousStrides(llvm::ArrayRef<int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

llvm::Error checkTensor(const Tensor &tensor, const char *role) {
  int64_t count = 1;
  for (int64_t dim : tensor.shape) {
    if (dim < 0)
      return kernelError(llvm::Twine(role) + " shape " +
                         shapeToString(tensor.shape) + " has a negative dim");
    if (__builtin_mul_overflow(count, dim, &count) ||
        count > std::numeric_limits<int64_t>::max() / 8)
      return kernelError(llvm::Twine(role) + " shape " +
                         shapeToString(tensor.shape) + " is too large");
  }
  if (static_cast<uint8_t>(tensor.dtype) >= kNumDTypes)
    return kernelError(llvm::Twine(role) + " has an invalid dtype");
  if (count > 0 && !tensor.data)
    return kernelError(llvm::Twine(role) + " has no data");
  return llvm::Error::success();
}

llvm::Error checkSameShape(const Tensor &a, const char *aRole, const Tensor &b,
                           const char *bRole) {
  if (a.shape != b.shape)
    return kernelError(llvm::Twine(aRole) + " shape " + shapeToString(a.shape) +
                       " differs from " + bRole + " shape " +
                       shapeToString(b.shape));
  return llvm::Error::success();
}

llvm::Error checkSameDType(const Tensor &a, const char *aRole, const Tensor &b,
                           const char *bRole) {
  if (a.dtype != b.dtype)
    return kernelError(llvm::Twine(aRole) + " dtype " + dtypeName(a.dtype) +
                       " differs from " + bRole + " dtype " + dtypeName(b.dtype));
  return llvm::Error::success();
}

llvm::Error checkRank(const Tensor &tensor, const char *role, size_t rank) {
  if (tensor.shape.size() != rank)
    return kernelError(llvm::Twine(role) + " must have rank " + llvm::Twine(rank) +
                       ", got shape " + shapeToString(tensor.shape));
  return llvm::Error::success();
}

llvm::Expected<int64_t> normalizeDim(int64_t dim, int64_t rank, const char *what) {
  if (dim < -rank || dim >= rank)
    return kernelError(llvm::Twine(what) + " " + llvm::Twine(dim) +
                       " is out of range for rank " + llvm::Twine(rank));
  return dim < 0 ? dim + rank : dim;
}

llvm::Expected<std::vector<int64_t>>
broadcastStrides(llvm::ArrayRef<int64_t> inShape, llvm::ArrayRef<int64_t> outShape,
                 const char *role) {
  auto mismatch = [&] {
    return kernelError(llvm::Twine(role) + " shape " + shapeToString(inShape) +
                       " does not broadcast to output shape " +
                       shapeToString(outShape));
  };
  if (inShape.size() > outShape.size())
    return mismatch();
  std::vector<int64_t> inStrides = contiguousStrides(inShape);
  std::vector<int64_t> strides(outShape.size(), 0);
  const size_t lead = outShape.size() - inShape.size();
  for (size_t d = 0; d < inShape.size(); ++d) {
    if (inShape[d] == outShape[lead + d])
      strides[lead + d] = inShape[d] == 1 ? 0 : inStrides[d];
    else if (inShape[d] == 1)
      strides[lead + d] = 0;
    else
      return mismatch();
  }
  return strides;
}

llvm::Error checkIndexDType(const Tensor &indices, const char *role) {
  if (indices.dtype != DType::I32 && indices.dtype != DType::I64)
    return kernelError(llvm::Twine(role) + " dtype is " + dtypeName(indices.dtype) +
                       ", expected i32 or i64");
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

namespace {

/// 'approximate' of nn.gelu and nn.gelu_grad: false for "none", true for
/// "tanh".
llvm::Expected<bool> geluIsTanh(const KernelAttrs &attrs) {
  LOOM_ASSIGN_OR_RETURN(std::string approximate,
                        attrs.getStr("approximate", std::string("none")));
  if (approximate == "tanh")
    return true;
  if (approximate != "none")
    return kernelError("attribute 'approximate' is '" + approximate +
                       "', expected 'none' or 'tanh'");
  return false;
}

/// The value paired with `key` in `table`, if any.
template <typename T, size_t N>
std::optional<T> lookup(const std::pair<std::string_view, T> (&table)[N], std::string_view key) {
  for (const auto &[name, value] : table)
    if (name == key)
      return value;
  return std::nullopt;
}

} // namespace

llvm::Expected<UnaryOp> checkUnary(KernelId id, const Tensor &in, const Tensor &out,
                                   const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameShape(in, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  std::optional<UnaryOp> op;
  switch (id) {
  case KernelId::Neg: op = UnaryOp::Neg; break;
  case KernelId::Abs: op = UnaryOp::Abs; break;
  case KernelId::Exp: op = UnaryOp::Exp; break;
  case KernelId::Log: op = UnaryOp::Log; break;
  case KernelId::Sqrt: op = UnaryOp::Sqrt; break;
  case KernelId::Rsqrt: op = UnaryOp::Rsqrt; break;
  case KernelId::Reciprocal: op = UnaryOp::Reciprocal; break;
  case KernelId::Tanh: op = UnaryOp::Tanh; break;
  case KernelId::Erf: op = UnaryOp::Erf; break;
  case KernelId::Sigmoid: op = UnaryOp::Sigmoid; break;
  case KernelId::Silu: op = UnaryOp::Silu; break;
  case KernelId::Relu: op = UnaryOp::Relu; break;
  case KernelId::Gelu: op = UnaryOp::GeluErf; break;
  default: return kernelError("not a unary kernel");
  }
  if (*op == UnaryOp::GeluErf) {
    LOOM_ASSIGN_OR_RETURN(bool tanh, geluIsTanh(attrs));
    if (tanh)
      op = UnaryOp::GeluTanh;
  }
  return *op;
}

llvm::Expected<BinaryPlan> checkBinary(KernelId id, const Tensor &a, const Tensor &b,
                                       const Tensor &out) {
  LOOM_RETURN_IF_ERROR(checkSameDType(a, "lhs", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(b, "rhs", out, "output"));
  BinaryPlan plan;
  LOOM_ASSIGN_OR_RETURN(plan.lhsStrides, broadcastStrides(a.shape, out.shape, "lhs"));
  LOOM_ASSIGN_OR_RETURN(plan.rhsStrides, broadcastStrides(b.shape, out.shape, "rhs"));
  switch (id) {
  case KernelId::Add: plan.op = BinaryOp::Add; break;
  case KernelId::Sub: plan.op = BinaryOp::Sub; break;
  case KernelId::Mul: plan.op = BinaryOp::Mul; break;
  case KernelId::Div: plan.op = BinaryOp::Div; break;
  case KernelId::Pow: plan.op = BinaryOp::Pow; break;
  case KernelId::Maximum: plan.op = BinaryOp::Maximum; break;
  case KernelId::Minimum: plan.op = BinaryOp::Minimum; break;
  default: return kernelError("not a binary kernel");
  }
  if ((out.dtype == DType::I64 || out.dtype == DType::I32) && plan.op == BinaryOp::Pow)
    return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(out.dtype) +
                       " (a float type is required)");
  return plan;
}

llvm::Expected<ComparePlan> checkCompare(const Tensor &a, const Tensor &b, const Tensor &out,
                                         const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameDType(a, "lhs", b, "rhs"));
  if (out.dtype != DType::I1)
    return kernelError(llvm::Twine("output dtype is ") + dtypeName(out.dtype) +
                       ", expected i1");
  ComparePlan plan;
  LOOM_ASSIGN_OR_RETURN(plan.lhsStrides, broadcastStrides(a.shape, out.shape, "lhs"));
  LOOM_ASSIGN_OR_RETURN(plan.rhsStrides, broadcastStrides(b.shape, out.shape, "rhs"));
  LOOM_ASSIGN_OR_RETURN(std::string predicate, attrs.getStr("predicate"));
  static const std::pair<std::string_view, ComparePred> kPreds[] = {
      {"eq", ComparePred::Eq}, {"ne", ComparePred::Ne}, {"lt", ComparePred::Lt},
      {"le", ComparePred::Le}, {"gt", ComparePred::Gt}, {"ge", ComparePred::Ge}};
  std::optional<ComparePred> pred = lookup(kPreds, predicate);
  if (!pred)
    return kernelError("attribute 'predicate' is '" + predicate +
                       "', expected eq, ne, lt, le, gt or ge");
  plan.pred = *pred;
  return plan;
}

llvm::Expected<std::array<std::vector<int64_t>, 3>>
checkWhere(const Tensor &cond, const Tensor &a, const Tensor &b, const Tensor &out) {
  if (cond.dtype != DType::I1)
    return kernelError(llvm::Twine("condition dtype is ") + dtypeName(cond.dtype) +
                       ", expected i1");
  LOOM_RETURN_IF_ERROR(checkSameDType(a, "lhs", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(b, "rhs", out, "output"));
  std::array<std::vector<int64_t>, 3> strides;
  LOOM_ASSIGN_OR_RETURN(strides[0], broadcastStrides(cond.shape, out.shape, "condition"));
  LOOM_ASSIGN_OR_RETURN(strides[1], broadcastStrides(a.shape, out.shape, "lhs"));
  LOOM_ASSIGN_OR_RETURN(strides[2], broadcastStrides(b.shape, out.shape, "rhs"));
  return strides;
}

llvm::Expected<DropoutParams> checkDropout(const Tensor &in, const Tensor &out,
                                           const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameShape(in, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  DropoutParams params;
  LOOM_ASSIGN_OR_RETURN(params.p, attrs.getF64("p"));
  LOOM_ASSIGN_OR_RETURN(params.seed, attrs.getInt("seed"));
  if (!(params.p >= 0.0 && params.p <= 1.0))
    return kernelError("attribute 'p' is " + std::to_string(params.p) + ", expected [0, 1]");
  return params;
}

llvm::Expected<GroupedMatmulPlan> checkGroupedMatmul(const Tensor &input, const Tensor &weight,
                                                     const Tensor &out,
                                                     const KernelAttrs &attrs) {
  GroupedMatmulPlan plan;
  LOOM_ASSIGN_OR_RETURN(plan.transposed, attrs.getBool("transpose_weight", false));
  const size_t kDim = plan.transposed ? 2 : 1, nDim = plan.transposed ? 1 : 2;
  if (input.shape.size() != 2 || weight.shape.size() != 3 ||
      input.shape[1] != weight.shape[kDim] || input.dtype != weight.dtype ||
      out.dtype != input.dtype ||
      out.shape != std::vector<int64_t>{input.shape[0], weight.shape[nDim]})
    return kernelError("nn.grouped_matmul: takes input [S, K], weight [E, K, N] ([E, N, K] "
                       "with transpose_weight) and gives [S, N], one float dtype; got " +
                       shapeToString(input.shape) + ", " + shapeToString(weight.shape) + " -> " +
                       shapeToString(out.shape));
  plan.rows = input.shape[0];
  plan.k = input.shape[1];
  plan.groups = weight.shape[0];
  plan.n = weight.shape[nDim];
  return plan;
}

llvm::Expected<IotaPlan> checkIota(const Tensor &out, const KernelAttrs &attrs) {
  IotaPlan plan;
  LOOM_ASSIGN_OR_RETURN(int64_t rawDim, attrs.getInt("dim"));
  LOOM_ASSIGN_OR_RETURN(plan.start, attrs.getF64("start", 0.0));
  LOOM_ASSIGN_OR_RETURN(plan.step, attrs.getF64("step", 1.0));
  const int64_t rank = static_cast<int64_t>(out.shape.size());
  if (rank == 0)
    return kernelError("output must have rank >= 1");
  LOOM_ASSIGN_OR_RETURN(int64_t dim, normalizeDim(rawDim, rank, "attribute 'dim'"));
  plan.size = out.shape[dim];
  plan.inner = contiguousStrides(out.shape)[dim];
  return plan;
}

llvm::Expected<Activation> checkActivationGrad(KernelId id, const Tensor &x,
                                               const Tensor &dy, const Tensor &out,
                                               const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", dy, "grad"));
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", dy, "grad"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", out, "output"));
  if (id != KernelId::GeluGrad)
    return Activation::Silu;
  LOOM_ASSIGN_OR_RETURN(bool tanh, geluIsTanh(attrs));
  return tanh ? Activation::GeluTanh : Activation::GeluErf;
}

//===----------------------------------------------------------------------===//
// Reductions and softmax
//===----------------------------------------------------------------------===//

llvm::Expected<ReducePlan> checkReduce(KernelId id, const Tensor &in,
                                       const Tensor &out, const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> rawDims, attrs.getInts("dims"));
  LOOM_ASSIGN_OR_RETURN(bool keepDim, attrs.getBool("keepdim", false));
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
  if (id == KernelId::ReduceSum) {
    plan.op = ReduceOp::Sum;
  } else if (id == KernelId::ReduceMean) {
    plan.op = ReduceOp::Mean;
  } else {
    plan.op = ReduceOp::Max;
    if (plan.reduceCount == 0)
      return kernelError("cannot take the maximum of an empty set (a reduced dim "
                         "has size 0)");
  }
  return plan;
}

llvm::Expected<SoftmaxPlan> checkSoftmax(KernelId id, const Tensor &in,
                                         const Tensor &out, const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameShape(in, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  SoftmaxPlan plan;
  plan.log = id == KernelId::LogSoftmax;
  LOOM_ASSIGN_OR_RETURN(int64_t rawDim, attrs.getInt("dim"));
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  if (rank == 0)
    return kernelError("input must have rank >= 1");
  LOOM_ASSIGN_OR_RETURN(int64_t dim, normalizeDim(rawDim, rank, "attribute 'dim'"));
  plan.length = in.shape[dim];
  plan.inner = contiguousStrides(in.shape)[dim];
  plan.lines = plan.length == 0 ? 0 : in.numElements() / plan.length;
  return plan;
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

namespace {

/// Checks an optional per-feature parameter: shape [D], the input's dtype.
llvm::Error checkFeatureParam(const Tensor &param, const char *role, const Tensor &x,
                              int64_t features) {
  LOOM_RETURN_IF_ERROR(checkSameDType(param, role, x, "input"));
  if (param.shape != std::vector<int64_t>{features})
    return kernelError(llvm::Twine(role) + " shape " + shapeToString(param.shape) +
                       " should be [" + llvm::Twine(features) + "]");
  return llvm::Error::success();
}

} // namespace

llvm::Expected<NormPlan> checkNorm(KernelId id, llvm::ArrayRef<Tensor> inputs,
                                   const Tensor &out, const KernelAttrs &attrs) {
  const Tensor &x = inputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", out, "output"));
  if (x.shape.empty())
    return kernelError("input must have rank >= 1");
  NormPlan plan;
  plan.layerNorm = id == KernelId::LayerNorm;
  plan.features = x.shape.back();
  const size_t numInputs = inputs.size();
  bool hasWeight, hasBias = false;
  if (plan.layerNorm) {
    LOOM_ASSIGN_OR_RETURN(hasWeight, attrs.getBool("has_weight", numInputs >= 2));
    LOOM_ASSIGN_OR_RETURN(hasBias, attrs.getBool("has_bias", numInputs == 3));
    LOOM_ASSIGN_OR_RETURN(plan.epsilon, attrs.getF64("epsilon", 1e-5));
    if (size_t(1) + hasWeight + hasBias != numInputs)
      return kernelError("has_weight=" + llvm::Twine(hasWeight) + " and has_bias=" +
                         llvm::Twine(hasBias) + " disagree with " +
                         llvm::Twine(numInputs) + " inputs");
  } else {
    LOOM_ASSIGN_OR_RETURN(hasWeight, attrs.getBool("has_weight", numInputs == 2));
    LOOM_ASSIGN_OR_RETURN(plan.epsilon, attrs.getF64("epsilon", 1e-6));
    if (size_t(1) + hasWeight != numInputs)
      return kernelError("has_weight=" + llvm::Twine(hasWeight) + " disagrees with " +
                         llvm::Twine(numInputs) + " inputs");
  }
  plan.weight = hasWeight ? &inputs[1] : nullptr;
  plan.bias = hasBias ? &inputs[hasWeight ? 2 : 1] : nullptr;
  if (plan.weight)
    LOOM_RETURN_IF_ERROR(checkFeatureParam(*plan.weight, "weight", x, plan.features));
  if (plan.bias)
    LOOM_RETURN_IF_ERROR(checkFeatureParam(*plan.bias, "bias", x, plan.features));
  plan.rows = plan.features == 0 ? 0 : x.numElements() / plan.features;
  return plan;
}

llvm::Expected<NormPlan> checkNormGrad(KernelId id, llvm::ArrayRef<Tensor> inputs,
                                       const Tensor &out, const KernelAttrs &attrs) {
  const Tensor &x = inputs[0], &dy = inputs[1];
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", dy, "grad"));
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", dy, "grad"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", out, "output"));
  if (x.shape.empty())
    return kernelError("input must have rank >= 1");
  NormPlan plan;
  plan.layerNorm = id == KernelId::LayerNormGrad;
  plan.features = x.shape.back();
  const size_t numInputs = inputs.size();
  LOOM_ASSIGN_OR_RETURN(bool hasAddend, attrs.getBool("has_addend", false));
  LOOM_ASSIGN_OR_RETURN(bool hasWeight,
                        attrs.getBool("has_weight", numInputs == size_t(3) + hasAddend));
  LOOM_ASSIGN_OR_RETURN(plan.epsilon, attrs.getF64("epsilon", plan.layerNorm ? 1e-5 : 1e-6));
  if (size_t(2) + hasWeight + hasAddend != numInputs)
    return kernelError("has_weight=" + llvm::Twine(hasWeight) + " and has_addend=" +
                       llvm::Twine(hasAddend) + " disagree with " + llvm::Twine(numInputs) +
                       " inputs");
  plan.weight = hasWeight ? &inputs[2] : nullptr;
  plan.addend = hasAddend ? &inputs.back() : nullptr;
  if (plan.addend) {
    LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", *plan.addend, "addend"));
    LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", *plan.addend, "addend"));
  }
  if (plan.weight)
    LOOM_RETURN_IF_ERROR(checkFeatureParam(*plan.weight, "weight", x, plan.features));
  plan.rows = plan.features == 0 ? 0 : x.numElements() / plan.features;
  return plan;
}

//===----------------------------------------------------------------------===//
// Rope and attention
//===----------------------------------------------------------------------===//

llvm::Expected<RopePlan> checkRope(const Tensor &x, const Tensor &cosT, const Tensor &sinT,
                                   const Tensor &out, const KernelAttrs &attrs) {
  RopePlan plan;
  LOOM_ASSIGN_OR_RETURN(std::string transpose, attrs.getStr("transpose", "none"));
  if (transpose == "input")
    plan.transpose = 1;
  else if (transpose == "result")
    plan.transpose = 2;
  else if (transpose != "none")
    return kernelError("unknown transpose '" + transpose + "' (none, input, result)");
  const size_t rank = x.shape.size();
  if (plan.transpose == 0) {
    LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", out, "output"));
  } else {
    if (rank < 3)
      return kernelError("transpose '" + transpose + "' needs an input of rank >= 3, got " +
                         shapeToString(x.shape));
    std::vector<int64_t> swapped(x.shape.begin(), x.shape.end());
    std::swap(swapped[rank - 3], swapped[rank - 2]);
    if (out.shape != swapped)
      return kernelError("with transpose '" + transpose + "' the output must be " +
                         shapeToString(swapped) + ", got " + shapeToString(out.shape));
  }
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(cosT, "cos", x, "input"));
  LOOM_RETURN_IF_ERROR(checkSameDType(sinT, "sin", x, "input"));
  LOOM_ASSIGN_OR_RETURN(plan.interleaved, attrs.getBool("interleaved", false));
  if (rank < 2)
    return kernelError("input must be [..., S, D], got " + shapeToString(x.shape));
  // The untransposed ([.., H, S, D]) side's positions and heads.
  const Tensor &plain = plan.transpose == 1 ? out : x;
  plan.seq = plain.shape[rank - 2];
  plan.dim = plain.shape[rank - 1];
  if (plan.transpose != 0)
    plan.heads = plain.shape[rank - 3];
  if (plan.dim % 2 != 0)
    return kernelError("head dim " + llvm::Twine(plan.dim) + " must be even");
  const std::vector<int64_t> tableShape = {plan.seq, plan.dim};
  if (cosT.shape != tableShape || sinT.shape != tableShape)
    return kernelError("cos " + shapeToString(cosT.shape) + " and sin " +
                       shapeToString(sinT.shape) + " must both be " +
                       shapeToString(tableShape));
  return plan;
}

namespace {

/// The shapes of q, k and v (already of rank 4) and the attributes.
llvm::Expected<AttentionShape> attentionShape(const Tensor &q, const Tensor &k,
                                              const Tensor &v) {
  AttentionShape s;
  s.batch = q.shape[0];
  s.qHeads = q.shape[1];
  s.seq = q.shape[2];
  s.headDim = q.shape[3];
  s.kvHeads = k.shape[1];
  s.kvSeq = k.shape[2];
  s.valueDim = v.shape[3];
  if (k.shape[0] != s.batch || k.shape[3] != s.headDim)
    return kernelError("key shape " + shapeToString(k.shape) +
                       " does not match query shape " + shapeToString(q.shape));
  if (v.shape[0] != s.batch || v.shape[1] != s.kvHeads || v.shape[2] != s.kvSeq)
    return kernelError("value shape " + shapeToString(v.shape) +
                       " does not match key shape " + shapeToString(k.shape));
  if (s.kvHeads == 0 || s.qHeads % s.kvHeads != 0)
    return kernelError("query heads (" + llvm::Twine(s.qHeads) +
                       ") must be a multiple of key/value heads (" +
                       llvm::Twine(s.kvHeads) + ")");
  return s;
}

llvm::Error readAttentionAttrs(AttentionShape &s, const KernelAttrs &attrs) {
  LOOM_ASSIGN_OR_RETURN(s.causal, attrs.getBool("causal", false));
  LOOM_ASSIGN_OR_RETURN(s.window, attrs.getInt("window", 0));
  if (s.window < 0 || (s.window > 0 && !s.causal))
    return kernelError("window " + llvm::Twine(s.window) +
                       ": a sliding window is positive and needs causal attention");
  // A window as long as the keys hides none of them.
  if (s.window >= s.kvSeq)
    s.window = 0;
  const double defaultScale = s.headDim > 0 ? 1.0 / std::sqrt(double(s.headDim)) : 1.0;
  LOOM_ASSIGN_OR_RETURN(s.scale, attrs.getF64("scale", defaultScale));
  return llvm::Error::success();
}

using Role = AttentionRole;
/// The call's tensors (inputs, then outputs) by role; nullopt for the
/// statistics, which have one layout only.
using RoleTable = llvm::ArrayRef<std::optional<Role>>;

/// `seq_major` (bit i: the call's tensor i is [B, S, H, D]) as role bits.
llvm::Expected<unsigned> readSeqMajor(const KernelAttrs &attrs, RoleTable roles) {
  LOOM_ASSIGN_OR_RETURN(int64_t mask, attrs.getInt("seq_major", 0));
  if (mask < 0 || mask >> roles.size() != 0)
    return kernelError("seq_major " + llvm::Twine(mask) + " names a tensor past the call's " +
                       llvm::Twine(roles.size()));
  unsigned bits = 0;
  for (size_t i = 0; i < roles.size(); ++i) {
    if (!(mask >> i & 1))
      continue;
    if (!roles[i])
      return kernelError("seq_major marks tensor " + llvm::Twine(i) +
                         ", the statistics, which have no sequence-major layout");
    bits |= 1u << int(*roles[i]);
  }
  return bits;
}

/// `t` as its logical [B, H, S, D] shape: dims 1 and 2 swapped when the
/// tensor of role `r` is stored sequence-major.
Tensor logical(const Tensor &t, unsigned seqMajorRoles, Role r) {
  Tensor view = t;
  if (seqMajorRoles >> int(r) & 1 && view.shape.size() == 4)
    std::swap(view.shape[1], view.shape[2]);
  return view;
}

llvm::Expected<AttentionShape> checkAttentionImpl(const Tensor &qIn, const Tensor &kIn,
                                                  const Tensor &vIn, const Tensor &outIn,
                                                  const KernelAttrs &attrs, RoleTable roles) {
  LOOM_ASSIGN_OR_RETURN(unsigned seqMajor, readSeqMajor(attrs, roles));
  const Tensor q = logical(qIn, seqMajor, Role::Q), k = logical(kIn, seqMajor, Role::K);
  const Tensor v = logical(vIn, seqMajor, Role::V), out = logical(outIn, seqMajor, Role::Out);
  LOOM_RETURN_IF_ERROR(checkSameDType(q, "query", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(k, "key", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(v, "value", out, "output"));
  LOOM_RETURN_IF_ERROR(checkRank(q, "query", 4));
  LOOM_RETURN_IF_ERROR(checkRank(k, "key", 4));
  LOOM_RETURN_IF_ERROR(checkRank(v, "value", 4));
  LOOM_ASSIGN_OR_RETURN(AttentionShape s, attentionShape(q, k, v));
  const std::vector<int64_t> expected = s.outShape();
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  LOOM_RETURN_IF_ERROR(readAttentionAttrs(s, attrs));
  s.seqMajorRoles = seqMajor;
  return s;
}

llvm::Expected<AttentionShape> checkAttentionGradImpl(const Tensor *in[4], const Tensor *res[3],
                                                      const KernelAttrs &attrs, RoleTable roles) {
  LOOM_ASSIGN_OR_RETURN(unsigned seqMajor, readSeqMajor(attrs, roles));
  const Tensor q = logical(*in[0], seqMajor, Role::Q), k = logical(*in[1], seqMajor, Role::K);
  const Tensor v = logical(*in[2], seqMajor, Role::V);
  const Tensor dOut = logical(*in[3], seqMajor, Role::Grad);
  const Tensor dq = logical(*res[0], seqMajor, Role::DQ), dk = logical(*res[1], seqMajor, Role::DK);
  const Tensor dv = logical(*res[2], seqMajor, Role::DV);
  LOOM_RETURN_IF_ERROR(checkRank(q, "query", 4));
  LOOM_RETURN_IF_ERROR(checkRank(k, "key", 4));
  LOOM_RETURN_IF_ERROR(checkRank(v, "value", 4));
  for (const auto &[tensor, role] :
       {std::pair<const Tensor *, const char *>{&k, "key"}, {&v, "value"},
        {&dOut, "grad"}, {&dq, "query grad"}, {&dk, "key grad"}, {&dv, "value grad"}})
    LOOM_RETURN_IF_ERROR(checkSameDType(*tensor, role, q, "query"));
  LOOM_ASSIGN_OR_RETURN(AttentionShape s, attentionShape(q, k, v));
  const std::vector<int64_t> outShape = s.outShape();
  if (dOut.shape != outShape)
    return kernelError("grad shape " + shapeToString(dOut.shape) + " should be " +
                       shapeToString(outShape) + ", the attention output's");
  LOOM_RETURN_IF_ERROR(checkSameShape(dq, "query grad", q, "query"));
  LOOM_RETURN_IF_ERROR(checkSameShape(dk, "key grad", k, "key"));
  LOOM_RETURN_IF_ERROR(checkSameShape(dv, "value grad", v, "value"));
  LOOM_RETURN_IF_ERROR(readAttentionAttrs(s, attrs));
  s.seqMajorRoles = seqMajor;
  return s;
}

/// lse [B, H, S] f32: the statistics of attention of shape `s`.
llvm::Error checkAttentionStats(const Tensor &lse, const AttentionShape &s) {
  if (lse.dtype != DType::F32)
    return kernelError(llvm::Twine("lse dtype is ") + dtypeName(lse.dtype) +
                       ", expected f32");
  const std::vector<int64_t> expected = {s.batch, s.qHeads, s.seq};
  if (lse.shape != expected)
    return kernelError("lse shape " + shapeToString(lse.shape) + " should be " +
                       shapeToString(expected));
  return llvm::Error::success();
}

} // namespace

llvm::Expected<AttentionShape> checkAttention(const Tensor &q, const Tensor &k,
                                              const Tensor &v, const Tensor &out,
                                              const KernelAttrs &attrs) {
  static const std::optional<Role> roles[] = {Role::Q, Role::K, Role::V, Role::Out};
  return checkAttentionImpl(q, k, v, out, attrs, roles);
}

llvm::Expected<AttentionShape> checkAttentionGrad(llvm::ArrayRef<Tensor> inputs,
                                                  llvm::ArrayRef<Tensor> outputs,
                                                  const KernelAttrs &attrs) {
  static const std::optional<Role> roles[] = {Role::Q,    Role::K,  Role::V, Role::Grad,
                                              Role::DQ,   Role::DK, Role::DV};
  const Tensor *in[4] = {&inputs[0], &inputs[1], &inputs[2], &inputs[3]};
  const Tensor *res[3] = {&outputs[0], &outputs[1], &outputs[2]};
  return checkAttentionGradImpl(in, res, attrs, roles);
}

llvm::Expected<AttentionShape> checkAttentionWithStats(llvm::ArrayRef<Tensor> inputs,
                                                       llvm::ArrayRef<Tensor> outputs,
                                                       const KernelAttrs &attrs) {
  static const std::optional<Role> roles[] = {Role::Q, Role::K, Role::V, Role::Out,
                                              std::nullopt};
  LOOM_ASSIGN_OR_RETURN(AttentionShape s, checkAttentionImpl(inputs[0], inputs[1], inputs[2],
                                                             outputs[0], attrs, roles));
  LOOM_RETURN_IF_ERROR(checkAttentionStats(outputs[1], s));
  return s;
}

llvm::Expected<AttentionShape> checkAttentionGradWithStats(llvm::ArrayRef<Tensor> inputs,
                                                           llvm::ArrayRef<Tensor> outputs,
                                                           const KernelAttrs &attrs) {
  static const std::optional<Role> roles[] = {Role::Q,    Role::K,  Role::V,  Role::Out,
                                              std::nullopt, Role::Grad, Role::DQ, Role::DK,
                                              Role::DV};
  const Tensor *in[4] = {&inputs[0], &inputs[1], &inputs[2], &inputs[5]};
  const Tensor *res[3] = {&outputs[0], &outputs[1], &outputs[2]};
  LOOM_ASSIGN_OR_RETURN(AttentionShape s, checkAttentionGradImpl(in, res, attrs, roles));
  const Tensor out = logical(inputs[3], s.seqMajorRoles, Role::Out);
  const Tensor &lse = inputs[4];
  LOOM_RETURN_IF_ERROR(checkSameDType(out, "output", inputs[0], "query"));
  if (out.shape != s.outShape())
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(s.outShape()) + ", the attention output's");
  LOOM_RETURN_IF_ERROR(checkAttentionStats(lse, s));
  return s;
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

const char *lossReductionName(LossReduction reduction) {
  return reduction == LossReduction::None  ? "none"
         : reduction == LossReduction::Sum ? "sum"
                                           : "mean";
}

namespace {

llvm::Error checkLabelsDType(const Tensor &labels) {
  if (labels.dtype != DType::I32 && labels.dtype != DType::I64)
    return kernelError(llvm::Twine("labels dtype is ") + dtypeName(labels.dtype) +
                       ", expected i32 or i64");
  return llvm::Error::success();
}

/// labels [N] of i32 or i64 for a block loss of N rows.
llvm::Error checkBlockLabels(const Tensor &labels, int64_t rows) {
  LOOM_RETURN_IF_ERROR(checkRank(labels, "labels", 1));
  LOOM_RETURN_IF_ERROR(checkLabelsDType(labels));
  if (labels.shape[0] != rows)
    return kernelError("labels shape " + shapeToString(labels.shape) + " does not match " +
                       llvm::Twine(rows) + " rows");
  return llvm::Error::success();
}

/// stats [N, 3B] f32: the blocks' statistics of each row. Returns B.
llvm::Expected<int64_t> checkBlockStats(const Tensor &stats, int64_t rows) {
  LOOM_RETURN_IF_ERROR(checkRank(stats, "stats", 2));
  if (stats.dtype != DType::F32)
    return kernelError(llvm::Twine("stats dtype is ") + dtypeName(stats.dtype) +
                       ", expected f32");
  if (stats.shape[0] != rows || stats.shape[1] == 0 || stats.shape[1] % 3 != 0)
    return kernelError("stats shape " + shapeToString(stats.shape) + " should be [" +
                       llvm::Twine(rows) + ", 3 * blocks]");
  return stats.shape[1] / 3;
}

llvm::Expected<LossReduction> readReduction(const KernelAttrs &attrs) {
  LOOM_ASSIGN_OR_RETURN(std::string reduction, attrs.getStr("reduction", std::string("mean")));
  if (reduction == "mean")
    return LossReduction::Mean;
  if (reduction == "sum")
    return LossReduction::Sum;
  if (reduction == "none")
    return LossReduction::None;
  return kernelError("attribute 'reduction' is '" + reduction +
                     "', expected mean, sum or none");
}

/// ignore_index and reduction.
llvm::Error readLossAttrs(CrossEntropyShape &s, const KernelAttrs &attrs) {
  LOOM_ASSIGN_OR_RETURN(s.ignoreIndex, attrs.getInt("ignore_index", -100));
  LOOM_ASSIGN_OR_RETURN(s.reduction, readReduction(attrs));
  return llvm::Error::success();
}

/// The loss gradient a cross-entropy's backward reads: f32, the loss's shape.
llvm::Error checkLossGradShape(const Tensor &lossGrad, const CrossEntropyShape &s) {
  const std::vector<int64_t> expected = s.lossShape();
  if (lossGrad.shape != expected)
    return kernelError("loss gradient shape " + shapeToString(lossGrad.shape) +
                       " should be " + shapeToString(expected) + " for reduction '" +
                       lossReductionName(s.reduction) + "'");
  return llvm::Error::success();
}

llvm::Error checkLossGradDType(const Tensor &lossGrad) {
  if (lossGrad.dtype != DType::F32)
    return kernelError(llvm::Twine("loss gradient dtype is ") +
                       dtypeName(lossGrad.dtype) + ", expected f32");
  return llvm::Error::success();
}

/// logits [N, C] and labels [N].
llvm::Error checkLabelRows(const Tensor &logits, const Tensor &labels) {
  if (labels.shape[0] != logits.shape[0])
    return kernelError("labels shape " + shapeToString(labels.shape) +
                       " does not match logits shape " + shapeToString(logits.shape));
  return llvm::Error::success();
}

} // namespace

llvm::Expected<CrossEntropyShape> checkCrossEntropy(const Tensor &logits, const Tensor &labels,
                                                    const Tensor &out,
                                                    const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkRank(logits, "logits", 2));
  LOOM_RETURN_IF_ERROR(checkRank(labels, "labels", 1));
  LOOM_RETURN_IF_ERROR(checkLabelsDType(labels));
  if (out.dtype != DType::F32)
    return kernelError(llvm::Twine("output dtype is ") + dtypeName(out.dtype) +
                       ", expected f32");
  CrossEntropyShape s;
  s.rows = logits.shape[0];
  s.classes = logits.shape[1];
  LOOM_RETURN_IF_ERROR(checkLabelRows(logits, labels));
  LOOM_RETURN_IF_ERROR(readLossAttrs(s, attrs));
  const std::vector<int64_t> expected = s.lossShape();
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected) + " for reduction '" +
                       lossReductionName(s.reduction) + "'");
  return s;
}

llvm::Expected<CrossEntropyShape> checkCrossEntropyGrad(const Tensor &logits,
                                                        const Tensor &labels,
                                                        const Tensor &lossGrad,
                                                        const Tensor &out,
                                                        const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkRank(logits, "logits", 2));
  LOOM_RETURN_IF_ERROR(checkRank(labels, "labels", 1));
  LOOM_RETURN_IF_ERROR(checkSameShape(logits, "logits", out, "output"));
  // The gradient may be written in another float type than the logits'
  // (--loom-fold-result-casts: bf16 from f32 logits, no cast kernel).
  if (out.dtype != DType::F32 && out.dtype != DType::BF16 && out.dtype != DType::F16 &&
      out.dtype != DType::F64)
    return kernelError("output must be a float type; got " + std::string(dtypeName(out.dtype)));
  LOOM_RETURN_IF_ERROR(checkLabelsDType(labels));
  LOOM_RETURN_IF_ERROR(checkLossGradDType(lossGrad));
  CrossEntropyShape s;
  s.rows = logits.shape[0];
  s.classes = logits.shape[1];
  LOOM_RETURN_IF_ERROR(checkLabelRows(logits, labels));
  LOOM_RETURN_IF_ERROR(readLossAttrs(s, attrs));
  LOOM_RETURN_IF_ERROR(checkLossGradShape(lossGrad, s));
  return s;
}

llvm::Expected<LinearCrossEntropyShape> checkLinearCrossEntropy(llvm::ArrayRef<Tensor> in,
                                                                llvm::ArrayRef<Tensor> out,
                                                                const KernelAttrs &attrs) {
  if (in.size() != 4 || out.size() != 4)
    return kernelError("takes x, w, labels and the loss gradient, and writes the loss, dx, dw "
                       "and a scratch; got " + llvm::Twine(in.size()) + " inputs and " +
                       llvm::Twine(out.size()) + " outputs");
  const Tensor &x = in[0], &w = in[1], &labels = in[2], &lossGrad = in[3];
  const Tensor &loss = out[0], &dx = out[1], &dw = out[2], &scratch = out[3];
  LOOM_RETURN_IF_ERROR(checkRank(x, "x", 2));
  LOOM_RETURN_IF_ERROR(checkRank(w, "w", 2));
  LOOM_RETURN_IF_ERROR(checkRank(labels, "labels", 1));
  LOOM_RETURN_IF_ERROR(checkLabelsDType(labels));
  LOOM_RETURN_IF_ERROR(checkLossGradDType(lossGrad));
  if (x.dtype != DType::F32 && x.dtype != DType::BF16 && x.dtype != DType::F16)
    return kernelError(llvm::Twine("x dtype is ") + dtypeName(x.dtype) +
                       ", expected f32, bf16 or f16");
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "x", w, "w"));
  LinearCrossEntropyShape s;
  s.ce.rows = x.shape[0];
  s.features = x.shape[1];
  s.ce.classes = w.shape[0];
  if (w.shape[1] != s.features || labels.shape[0] != s.ce.rows)
    return kernelError("x " + shapeToString(x.shape) + ", w " + shapeToString(w.shape) +
                       " and labels " + shapeToString(labels.shape) +
                       " should be [N, H], [V, H] and [N]");
  LOOM_RETURN_IF_ERROR(readLossAttrs(s.ce, attrs));
  if (s.ce.reduction == LossReduction::None)
    return kernelError("attribute 'reduction' must be mean or sum");
  LOOM_RETURN_IF_ERROR(checkLossGradShape(lossGrad, s.ce));
  LOOM_ASSIGN_OR_RETURN(s.chunk, attrs.getInt("chunk"));
  if (s.chunk < 1)
    return kernelError("attribute 'chunk' must be at least 1, got " + llvm::Twine(s.chunk));
  if (loss.dtype != DType::F32 || !loss.shape.empty())
    return kernelError("the loss must be an f32 scalar");
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "x", dx, "dx"));
  if (dx.shape != x.shape)
    return kernelError("dx shape " + shapeToString(dx.shape) + " should be x's " +
                       shapeToString(x.shape));
  if (dw.shape != w.shape || (dw.dtype != w.dtype && dw.dtype != DType::F32))
    return kernelError("dw must be w's shape " + shapeToString(w.shape) +
                       " in w's dtype or f32, got " + shapeToString(dw.shape) + " " +
                       std::string(dtypeName(dw.dtype)));
  s.scratch = linearCrossEntropyScratch(s.ce.rows, s.features, s.ce.classes, s.chunk,
                                        int64_t(dtypeSize(x.dtype)), dw.dtype == DType::F32);
  if (scratch.dtype != DType::F32 || scratch.numElements() < s.scratch.words)
    return kernelError("the scratch must be at least " + llvm::Twine(s.scratch.words) +
                       " f32 elements, got " + shapeToString(scratch.shape) + " " +
                       std::string(dtypeName(scratch.dtype)));
  return s;
}

llvm::Expected<BlockLossShape> checkCrossEntropyStats(const Tensor &logits,
                                                      const Tensor &labels, const Tensor &out,
                                                      const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkRank(logits, "logits", 2));
  BlockLossShape b;
  b.ce.rows = logits.shape[0];
  b.ce.classes = logits.shape[1];
  b.ce.reduction = LossReduction::None;
  LOOM_RETURN_IF_ERROR(checkBlockLabels(labels, b.ce.rows));
  if (out.dtype != DType::F32 || out.shape != std::vector<int64_t>{b.ce.rows, 3})
    return kernelError("output should be f32 [" + llvm::Twine(b.ce.rows) + ", 3], got " +
                       dtypeName(out.dtype) + " " + shapeToString(out.shape));
  if (b.ce.classes == 0)
    return kernelError("logits have no classes");
  LOOM_ASSIGN_OR_RETURN(b.vocabStart, attrs.getInt("vocab_start", 0));
  LOOM_ASSIGN_OR_RETURN(b.ce.ignoreIndex, attrs.getInt("ignore_index", -100));
  return b;
}

llvm::Expected<BlockLossShape> checkCrossEntropyCombine(const Tensor &stats,
                                                        const Tensor &labels,
                                                        const Tensor &out,
                                                        const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkRank(stats, "stats", 2));
  BlockLossShape b;
  b.ce.rows = stats.shape[0];
  LOOM_ASSIGN_OR_RETURN(b.blocks, checkBlockStats(stats, b.ce.rows));
  b.ce.classes = stats.shape[1];
  LOOM_RETURN_IF_ERROR(checkBlockLabels(labels, b.ce.rows));
  LOOM_RETURN_IF_ERROR(readLossAttrs(b.ce, attrs));
  const std::vector<int64_t> expected = b.ce.lossShape();
  if (out.dtype != DType::F32 || out.shape != expected)
    return kernelError(llvm::Twine("output should be f32 ") + shapeToString(expected) +
                       " for reduction '" + lossReductionName(b.ce.reduction) + "', got " +
                       dtypeName(out.dtype) + " " + shapeToString(out.shape));
  LOOM_ASSIGN_OR_RETURN(b.numClasses, attrs.getInt("num_classes", INT64_MAX));
  return b;
}

llvm::Expected<BlockLossShape>
checkCrossEntropyBlockGrad(const Tensor &logits, const Tensor &labels, const Tensor &lossGrad,
                           const Tensor &stats, const Tensor &out, const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkRank(logits, "logits", 2));
  LOOM_RETURN_IF_ERROR(checkSameShape(logits, "logits", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(logits, "logits", out, "output"));
  BlockLossShape b;
  b.ce.rows = logits.shape[0];
  b.ce.classes = logits.shape[1];
  LOOM_RETURN_IF_ERROR(checkBlockLabels(labels, b.ce.rows));
  LOOM_ASSIGN_OR_RETURN(b.blocks, checkBlockStats(stats, b.ce.rows));
  LOOM_ASSIGN_OR_RETURN(b.vocabStart, attrs.getInt("vocab_start", 0));
  LOOM_RETURN_IF_ERROR(readLossAttrs(b.ce, attrs));
  LOOM_RETURN_IF_ERROR(checkLossGradDType(lossGrad));
  LOOM_RETURN_IF_ERROR(checkLossGradShape(lossGrad, b.ce));
  return b;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

llvm::Expected<StridedRead> checkTranspose(const Tensor &in, const Tensor &out,
                                           const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> permutation, attrs.getInts("permutation"));
  const size_t rank = in.shape.size();
  std::vector<bool> seen(rank, false);
  bool valid = permutation.size() == rank;
  for (size_t i = 0; valid && i < rank; ++i) {
    valid = permutation[i] >= 0 && permutation[i] < static_cast<int64_t>(rank) &&
            !seen[permutation[i]];
    if (valid)
      seen[permutation[i]] = true;
  }
  if (!valid)
    return kernelError("attribute 'permutation' " + shapeToString(permutation) +
                       " is not a permutation of " + llvm::Twine(rank) + " dims");
  const std::vector<int64_t> inStrides = contiguousStrides(in.shape);
  std::vector<int64_t> expected(rank);
  StridedRead read;
  read.strides.resize(rank);
  for (size_t i = 0; i < rank; ++i) {
    expected[i] = in.shape[permutation[i]];
    read.strides[i] = inStrides[permutation[i]];
  }
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  return read;
}

llvm::Expected<StridedRead> checkBroadcast(const Tensor &in, const Tensor &out) {
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  StridedRead read;
  LOOM_ASSIGN_OR_RETURN(read.strides, broadcastStrides(in.shape, out.shape, "input"));
  return read;
}

llvm::Expected<StridedRead> checkSlice(const Tensor &in, const Tensor &out,
                                       const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  const size_t rank = in.shape.size();
  if (out.shape.size() != rank)
    return kernelError("output rank " + llvm::Twine(out.shape.size()) +
                       " differs from input rank " + llvm::Twine(rank));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> starts, attrs.getInts("starts"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> steps,
                        attrs.getInts("strides", std::vector<int64_t>(rank, 1)));
  std::optional<std::vector<int64_t>> limits;
  if (attrs.has("limits")) {
    LOOM_ASSIGN_OR_RETURN(limits, attrs.getInts("limits"));
  }
  if (starts.size() != rank || steps.size() != rank || (limits && limits->size() != rank))
    return kernelError("'starts', 'strides' and 'limits' need one entry per dim (" +
                       llvm::Twine(rank) + ")");
  const std::vector<int64_t> inStrides = contiguousStrides(in.shape);
  StridedRead read;
  read.strides.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t size = out.shape[d], start = starts[d], step = steps[d];
    if (step < 1)
      return kernelError("stride " + llvm::Twine(step) + " of dim " + llvm::Twine(d) +
                         " must be >= 1");
    if (limits) {
      const int64_t limit = (*limits)[d];
      if (start < 0 || limit > in.shape[d] || limit < start)
        return kernelError("dim " + llvm::Twine(d) + ": [" + llvm::Twine(start) + ", " +
                           llvm::Twine(limit) + ") is not within [0, " +
                           llvm::Twine(in.shape[d]) + "]");
      if ((limit - start + step - 1) / step != size)
        return kernelError("dim " + llvm::Twine(d) + ": [" + llvm::Twine(start) + ", " +
                           llvm::Twine(limit) + ") step " + llvm::Twine(step) +
                           " does not give output size " + llvm::Twine(size));
    }
    if (size > 0 && (start < 0 || start >= in.shape[d] ||
                     (size - 1) > (in.shape[d] - 1 - start) / step))
      return kernelError("dim " + llvm::Twine(d) + ": " + llvm::Twine(size) +
                         " elements from " + llvm::Twine(start) + " step " +
                         llvm::Twine(step) + " leave the input's size " +
                         llvm::Twine(in.shape[d]));
    read.strides[d] = inStrides[d] * step;
    if (size > 0)
      read.base += start * inStrides[d];
  }
  return read;
}

llvm::Expected<PadPlan> checkPad(const Tensor &in, const Tensor &out, const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  const size_t rank = in.shape.size();
  PadPlan plan;
  LOOM_ASSIGN_OR_RETURN(plan.low, attrs.getInts("low"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> high, attrs.getInts("high"));
  LOOM_ASSIGN_OR_RETURN(plan.interior,
                        attrs.getInts("interior", std::vector<int64_t>(rank, 0)));
  LOOM_ASSIGN_OR_RETURN(plan.value, attrs.getF64("value", 0.0));
  if (plan.low.size() != rank || high.size() != rank || plan.interior.size() != rank)
    return kernelError("'low', 'high' and 'interior' need one entry per dim (" +
                       llvm::Twine(rank) + ")");
  std::vector<int64_t> expected(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (plan.low[d] < 0 || high[d] < 0 || plan.interior[d] < 0)
      return kernelError("dim " + llvm::Twine(d) + ": padding must be non-negative");
    const int64_t n = in.shape[d];
    expected[d] = plan.low[d] + high[d] + n + std::max<int64_t>(n - 1, 0) * plan.interior[d];
  }
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  return plan;
}

namespace {

/// The extents of a concat/split: every piece must match `whole` except
/// along `dim`, and the pieces' sizes along `dim` must add up.
llvm::Expected<PiecesPlan> checkPieces(const Tensor &whole, const char *wholeRole,
                                    llvm::ArrayRef<Tensor> pieces, const char *pieceRole,
                                    const KernelAttrs &attrs) {
  LOOM_ASSIGN_OR_RETURN(int64_t rawDim, attrs.getInt("dim"));
  LOOM_ASSIGN_OR_RETURN(int64_t dim,
                        normalizeDim(rawDim, whole.shape.size(), "attribute 'dim'"));
  int64_t total = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    const Tensor &piece = pieces[p];
    LOOM_RETURN_IF_ERROR(checkSameDType(piece, pieceRole, whole, wholeRole));
    bool matches = piece.shape.size() == whole.shape.size();
    for (size_t d = 0; matches && d < whole.shape.size(); ++d)
      matches = static_cast<int64_t>(d) == dim || piece.shape[d] == whole.shape[d];
    if (!matches)
      return kernelError(llvm::Twine(pieceRole) + " " + llvm::Twine(p) + " shape " +
                         shapeToString(piece.shape) + " does not fit " + wholeRole +
                         " shape " + shapeToString(whole.shape) + " along dim " +
                         llvm::Twine(dim));
    total += piece.shape[dim];
  }
  if (total != whole.shape[dim])
    return kernelError(llvm::Twine(pieceRole) + " sizes along dim " + llvm::Twine(dim) +
                       " add up to " + llvm::Twine(total) + ", " + wholeRole +
                       " has " + llvm::Twine(whole.shape[dim]));
  const llvm::ArrayRef<int64_t> shape = whole.shape;
  return PiecesPlan{dim, product(shape.take_front(dim)), product(shape.drop_front(dim + 1))};
}

/// 'axis' of a gather (default 0) in [0, rank).
llvm::Expected<int64_t> gatherAxis(const KernelAttrs &attrs, size_t rank) {
  LOOM_ASSIGN_OR_RETURN(int64_t rawAxis, attrs.getInt("axis", 0));
  return normalizeDim(rawAxis, rank, "attribute 'axis'");
}

/// Checks that `gathered` (role `role`) is `shape` with dim `axis` replaced
/// by the dims of `indices`.
llvm::Error checkGatheredShape(const Tensor &gathered, const char *role,
                               llvm::ArrayRef<int64_t> shape, int64_t axis,
                               llvm::ArrayRef<int64_t> indices) {
  std::vector<int64_t> expected(shape.begin(), shape.begin() + axis);
  expected.insert(expected.end(), indices.begin(), indices.end());
  expected.insert(expected.end(), shape.begin() + axis + 1, shape.end());
  if (gathered.shape != expected)
    return kernelError(llvm::Twine(role) + " shape " + shapeToString(gathered.shape) +
                       " should be " + shapeToString(expected));
  return llvm::Error::success();
}

GatherPlan gatherPlan(llvm::ArrayRef<int64_t> shape, int64_t axis) {
  return {axis, product(shape.take_front(axis)), shape[axis], product(shape.drop_front(axis + 1))};
}

/// 'vocab_start' and 'vocab_size' of an embedding (or its gradient); a
/// block checks ids against the whole table (vocab_size) when given.
llvm::Error readVocabBlock(EmbeddingPlan &plan, const KernelAttrs &attrs, int64_t wholeDefault) {
  plan.block = attrs.has("vocab_start");
  LOOM_ASSIGN_OR_RETURN(plan.vocabStart, attrs.getInt("vocab_start", 0));
  LOOM_ASSIGN_OR_RETURN(plan.bound,
                        attrs.getInt("vocab_size", plan.block ? INT64_MAX : wholeDefault));
  return llvm::Error::success();
}

} // namespace

llvm::Expected<PiecesPlan> checkConcat(llvm::ArrayRef<Tensor> inputs, const Tensor &out,
                                    const KernelAttrs &attrs) {
  return checkPieces(out, "output", inputs, "input", attrs);
}

llvm::Expected<PiecesPlan> checkSplit(const Tensor &in, llvm::ArrayRef<Tensor> outputs,
                                   const KernelAttrs &attrs) {
  return checkPieces(in, "input", outputs, "output", attrs);
}

llvm::Expected<GatherPlan> checkGather(const Tensor &data, const Tensor &indices,
                                       const Tensor &out, const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameDType(data, "data", out, "output"));
  LOOM_RETURN_IF_ERROR(checkIndexDType(indices, "indices"));
  LOOM_ASSIGN_OR_RETURN(int64_t axis, gatherAxis(attrs, data.shape.size()));
  LOOM_RETURN_IF_ERROR(checkGatheredShape(out, "output", data.shape, axis, indices.shape));
  return gatherPlan(data.shape, axis);
}

llvm::Expected<GatherPlan> checkGatherGrad(const Tensor &indices, const Tensor &grad,
                                           const Tensor &out, const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkIndexDType(indices, "indices"));
  LOOM_ASSIGN_OR_RETURN(int64_t axis, gatherAxis(attrs, out.shape.size()));
  const int64_t axisSize = out.shape[axis];
  if (attrs.has("axis_size")) {
    LOOM_ASSIGN_OR_RETURN(int64_t size, attrs.getInt("axis_size"));
    if (size != axisSize)
      return kernelError("attribute 'axis_size' is " + llvm::Twine(size) +
                         ", the output has " + llvm::Twine(axisSize) + " along axis " +
                         llvm::Twine(axis));
  }
  LOOM_RETURN_IF_ERROR(checkGatheredShape(grad, "grad", out.shape, axis, indices.shape));
  return gatherPlan(out.shape, axis);
}

llvm::Expected<EmbeddingPlan> checkEmbedding(const Tensor &table, const Tensor &ids,
                                             const Tensor &out, const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkSameDType(table, "table", out, "output"));
  LOOM_RETURN_IF_ERROR(checkRank(table, "table", 2));
  LOOM_RETURN_IF_ERROR(checkIndexDType(ids, "ids"));
  EmbeddingPlan plan;
  plan.vocab = table.shape[0];
  plan.width = table.shape[1];
  std::vector<int64_t> expected = ids.shape;
  expected.push_back(plan.width);
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  LOOM_RETURN_IF_ERROR(readVocabBlock(plan, attrs, plan.vocab));
  return plan;
}

llvm::Expected<EmbeddingPlan> checkEmbeddingGrad(const Tensor &ids, const Tensor &grad,
                                                 const Tensor &out, const KernelAttrs &attrs) {
  LOOM_RETURN_IF_ERROR(checkIndexDType(ids, "ids"));
  LOOM_RETURN_IF_ERROR(checkRank(out, "output", 2));
  EmbeddingPlan plan;
  plan.vocab = out.shape[0];
  plan.width = out.shape[1];
  std::vector<int64_t> expected = ids.shape;
  expected.push_back(plan.width);
  if (grad.shape != expected)
    return kernelError("grad shape " + shapeToString(grad.shape) + " should be " +
                       shapeToString(expected) + " (the ids' shape and the row width)");
  if (attrs.has("num_embeddings")) {
    LOOM_ASSIGN_OR_RETURN(int64_t rows, attrs.getInt("num_embeddings"));
    if (rows != plan.vocab)
      return kernelError("attribute 'num_embeddings' is " + llvm::Twine(rows) +
                         ", the output has " + llvm::Twine(plan.vocab) + " rows");
  }
  LOOM_RETURN_IF_ERROR(readVocabBlock(plan, attrs, INT64_MAX));
  return plan;
}

//===----------------------------------------------------------------------===//
// Matmul and optimizer
//===----------------------------------------------------------------------===//

llvm::Error checkMatmulDTypes(const Tensor &a, const Tensor &b, const Tensor &out) {
  LOOM_RETURN_IF_ERROR(checkSameDType(a, "lhs", b, "rhs"));
  if (out.dtype == a.dtype ||
      (out.dtype == DType::F32 && (a.dtype == DType::BF16 || a.dtype == DType::F16)))
    return llvm::Error::success();
  return kernelError(llvm::Twine("output dtype ") + dtypeName(out.dtype) +
                     " must be the operands' (" + dtypeName(a.dtype) + ")" +
                     (a.dtype == DType::BF16 || a.dtype == DType::F16 ? " or f32" : ""));
}

namespace {
llvm::Error checkFp8Tiling(const Tensor &tensor, const Tensor &tiling, const char *what);
} // namespace

llvm::Error checkScaledMatmul(const Tensor &a, const Tensor &b, const Tensor &scaleA,
                              const Tensor &scaleB, const Tensor &out) {
  auto isF8 = [](DType t) { return t == DType::F8E4M3FN || t == DType::F8E5M2; };
  if (!isF8(a.dtype) || !isF8(b.dtype))
    return kernelError("operands must be f8E4M3FN or f8E5M2, got " +
                       std::string(dtypeName(a.dtype)) + " and " + std::string(dtypeName(b.dtype)));
  if (a.dtype == DType::F8E5M2 && b.dtype == DType::F8E5M2)
    return kernelError("at most one operand may be f8E5M2");
  if (out.dtype != DType::F32 && out.dtype != DType::BF16 && out.dtype != DType::F16)
    return kernelError("result must be f32, bf16 or f16, got " + std::string(dtypeName(out.dtype)));
  if (a.shape.size() != 2 || b.shape.size() != 2 || out.shape.size() != 2 ||
      a.shape[1] != b.shape[1] || out.shape[0] != a.shape[0] || out.shape[1] != b.shape[0])
    return kernelError("expected a [M, K], b [N, K] and result [M, N]; got " +
                       shapeToString(a.shape) + ", " + shapeToString(b.shape) + " and " +
                       shapeToString(out.shape));
  for (const Tensor *s : {&scaleA, &scaleB})
    if (s->dtype != DType::F32)
      return kernelError("scales must be f32, got " + std::string(dtypeName(s->dtype)));
  LOOM_RETURN_IF_ERROR(checkFp8Tiling(a, scaleA, "scale_a"));
  LOOM_RETURN_IF_ERROR(checkFp8Tiling(b, scaleB, "scale_b"));
  const int64_t ka = scaleA.shape.empty() ? 1 : scaleA.shape[1];
  const int64_t kb = scaleB.shape.empty() ? 1 : scaleB.shape[1];
  if (ka != 1 && kb != 1 && ka != kb)
    return kernelError("scale_a has " + llvm::Twine(ka) + " tiles along K, scale_b " +
                       llvm::Twine(kb) + ": they must match, or one be a single tile");
  return llvm::Error::success();
}

llvm::Error checkAdamWGroup(llvm::ArrayRef<Tensor> in, llvm::ArrayRef<Tensor> out) {
  const Tensor &param = in[0];
  for (const Tensor &t : in) {
    LOOM_RETURN_IF_ERROR(checkTensor(t, "operand"));
    LOOM_RETURN_IF_ERROR(checkSameShape(t, "operand", param, "param"));
    if (t.dtype != DType::F32)
      return kernelError("parameter, gradient and moments must be f32");
  }
  for (const Tensor &t : out) {
    LOOM_RETURN_IF_ERROR(checkSameShape(t, "result", param, "param"));
    if (t.dtype != DType::F32)
      return kernelError("results must be f32");
  }
  return llvm::Error::success();
}

llvm::Expected<size_t> adamwMultiFirstGroup(size_t numInputs, size_t numOutputs,
                                            bool hasScale, size_t numCopies) {
  const size_t first = hasScale ? 3 : 2;
  if (numInputs < first || (numInputs - first) % 4 != 0 ||
      numOutputs != 3 * ((numInputs - first) / 4) + numCopies)
    return kernelError("expected lr, step" + std::string(hasScale ? ", scale" : "") +
                       " and 4 inputs (param, grad, exp_avg, exp_avg_sq) per 3 outputs" +
                       (numCopies ? ", then one output per entry of copies (" +
                                        std::to_string(numCopies) + ")"
                                  : std::string()) +
                       "; got " + std::to_string(numInputs) + " inputs and " +
                       std::to_string(numOutputs) + " outputs");
  return first;
}

llvm::Expected<AdamWMultiLayout> checkAdamWMultiLayout(llvm::ArrayRef<Tensor> in,
                                                       llvm::ArrayRef<Tensor> out,
                                                       const KernelAttrs &attrs) {
  AdamWMultiLayout layout;
  LOOM_ASSIGN_OR_RETURN(layout.hasScale, attrs.getBool("has_scale"));
  LOOM_ASSIGN_OR_RETURN(layout.copies, attrs.getInts("copies", std::vector<int64_t>{}));
  LOOM_ASSIGN_OR_RETURN(layout.first, adamwMultiFirstGroup(in.size(), out.size(),
                                                           layout.hasScale,
                                                           layout.copies.size()));
  layout.groups = (in.size() - layout.first) / 4;
  for (size_t j = 0; j < layout.copies.size(); ++j) {
    const int64_t index = layout.copies[j];
    if (index < 0 || static_cast<uint64_t>(index) >= layout.groups)
      return kernelError("copies entry " + std::to_string(index) + " is out of range for " +
                         std::to_string(layout.groups) + " parameters");
    if (j > 0 && index <= layout.copies[j - 1])
      return kernelError("copies must be ascending with no repeats; got " +
                         shapeToString(layout.copies));
  }
  for (size_t j = 0; j < layout.copies.size(); ++j) {
    const size_t index = static_cast<size_t>(layout.copies[j]);
    const Tensor &copy = out[3 * layout.groups + j];
    const Tensor &param = in[layout.first + 4 * index];
    const std::string role = "copy of parameter " + std::to_string(index);
    LOOM_RETURN_IF_ERROR(checkTensor(copy, role.c_str()));
    LOOM_RETURN_IF_ERROR(checkSameShape(copy, role.c_str(), param, "param"));
    if (copy.dtype != DType::F32 && copy.dtype != DType::BF16 && copy.dtype != DType::F16)
      return kernelError(role + " must be f32, bf16 or f16, got " +
                         std::string(dtypeName(copy.dtype)));
  }
  return layout;
}

llvm::Error checkCastMulti(llvm::ArrayRef<Tensor> in, llvm::ArrayRef<Tensor> out) {
  if (in.empty() || in.size() != out.size())
    return kernelError("expected as many results as inputs (at least one); got " +
                       std::to_string(in.size()) + " inputs and " + std::to_string(out.size()) +
                       " outputs");
  for (size_t i = 0; i < in.size(); ++i) {
    LOOM_RETURN_IF_ERROR(checkTensor(in[i], "input"));
    LOOM_RETURN_IF_ERROR(checkTensor(out[i], "output"));
    LOOM_RETURN_IF_ERROR(checkSameShape(in[i], "input", out[i], "output"));
    if (in[i].dtype != in[0].dtype || out[i].dtype != out[0].dtype)
      return kernelError("every input must have one dtype and every output another; pair " +
                         std::to_string(i) + " is " + std::string(dtypeName(in[i].dtype)) +
                         " -> " + std::string(dtypeName(out[i].dtype)));
  }
  return llvm::Error::success();
}

llvm::Expected<NormPlan> checkNormWeightGrad(llvm::ArrayRef<Tensor> in,
                                             llvm::ArrayRef<Tensor> out,
                                             const KernelAttrs &attrs) {
  if (in.size() != 2 || out.size() != 2)
    return kernelError("expected x and dy, and the gradient and the scratch; got " +
                       std::to_string(in.size()) + " inputs and " +
                       std::to_string(out.size()) + " outputs");
  const Tensor &x = in[0], &dy = in[1], &dw = out[0], &scratch = out[1];
  for (const Tensor *t : {&x, &dy, &dw})
    LOOM_RETURN_IF_ERROR(checkTensor(*t, "operand"));
  if (x.shape.empty())
    return kernelError("x must have at least one dim (the features)");
  LOOM_RETURN_IF_ERROR(checkSameShape(dy, "dy", x, "x"));
  for (const Tensor *t : {&x, &dy})
    if (t->dtype != DType::F32 && t->dtype != DType::BF16 && t->dtype != DType::F16)
      return kernelError("x and dy must be f32, bf16 or f16; got " +
                         std::string(dtypeName(t->dtype)));
  if (dy.dtype != x.dtype)
    return kernelError("x and dy must have one dtype");
  NormPlan plan{};
  plan.features = x.shape.back();
  plan.rows = plan.features == 0 ? 0 : x.numElements() / plan.features;
  if (dw.shape != std::vector<int64_t>{plan.features} ||
      (dw.dtype != DType::F32 && dw.dtype != DType::BF16 && dw.dtype != DType::F16))
    return kernelError("the gradient must be a float [" + std::to_string(plan.features) + "]");
  const int64_t slots = normWeightGradScratch(plan.rows, plan.features);
  if (scratch.dtype != DType::F32 || scratch.numElements() < slots)
    return kernelError("the scratch must be f32 with at least " + std::to_string(slots) +
                       " elements");
  LOOM_ASSIGN_OR_RETURN(plan.epsilon, attrs.getF64("epsilon"));
  LOOM_ASSIGN_OR_RETURN(plan.layerNorm, attrs.getBool("centered", false));
  return plan;
}

llvm::Error checkSumSquaresMulti(llvm::ArrayRef<Tensor> in, llvm::ArrayRef<Tensor> out,
                                 bool total) {
  const size_t sums = total ? 1 : in.size();
  if (in.empty() || out.size() != sums + 1)
    return kernelError("expected n tensors and " +
                       std::string(total ? "2 results (the total" : "n + 1 results (a sum per tensor") +
                       ", then the scratch); got " + std::to_string(in.size()) + " inputs and " +
                       std::to_string(out.size()) + " outputs");
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < in.size(); ++i) {
    LOOM_RETURN_IF_ERROR(checkTensor(in[i], "input"));
    if (in[i].dtype != DType::F32 && in[i].dtype != DType::BF16 && in[i].dtype != DType::F16)
      return kernelError("input " + std::to_string(i) + " is " +
                         std::string(dtypeName(in[i].dtype)) + "; expected f32, bf16 or f16");
    sizes.push_back(in[i].numElements());
  }
  for (size_t i = 0; i < sums; ++i)
    if (out[i].dtype != DType::F32 || out[i].numElements() != 1)
      return kernelError("result " + std::to_string(i) + " must be an f32 scalar");
  const Tensor &scratch = out.back();
  const int64_t slots = sumSquaresScratch(sizes);
  if (scratch.dtype != DType::F64 || scratch.numElements() < slots)
    return kernelError("the scratch result must be f64 with at least " + std::to_string(slots) +
                       " elements (one per " + std::to_string(kSumSquaresChunk) +
                       "-element chunk and one per tensor); got " +
                       std::string(dtypeName(scratch.dtype)) + " with " +
                       std::to_string(scratch.numElements()));
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// FP8 quantization
//===----------------------------------------------------------------------===//

namespace {

bool isFp8Type(DType t) { return t == DType::F8E4M3FN || t == DType::F8E5M2; }
bool isWideFloatType(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

llvm::Error checkFp8DType(const Tensor &t, const char *role, bool ok, const char *want) {
  if (!ok)
    return kernelError(llvm::Twine(role) + " dtype is " + dtypeName(t.dtype) + ", expected " +
                       want);
  return llvm::Error::success();
}

llvm::Error checkFp8Tiling(const Tensor &tensor, const Tensor &tiling, const char *what) {
  if (tiling.shape.empty())
    return llvm::Error::success();
  if (tiling.shape.size() != tensor.shape.size())
    return kernelError(llvm::Twine(what) + " shape " + shapeToString(tiling.shape) +
                       " must be a scalar or have the tensor's rank " +
                       llvm::Twine(tensor.shape.size()) + " (tensor " +
                       shapeToString(tensor.shape) + ")");
  for (size_t d = 0; d < tensor.shape.size(); ++d)
    if (fp8TileSize(tensor.shape[d], tiling.shape[d]) == 0)
      return kernelError(llvm::Twine(what) + " shape " + shapeToString(tiling.shape) +
                         " does not tile the tensor " + shapeToString(tensor.shape) +
                         " in dim " + llvm::Twine(d));
  return llvm::Error::success();
}

} // namespace

llvm::Error checkFp8(Fp8Kernel kernel, llvm::ArrayRef<Tensor> inputs,
                     llvm::ArrayRef<Tensor> outputs, const KernelAttrs &attrs) {
  const size_t wantIn = kernel == Fp8Kernel::Quantize || kernel == Fp8Kernel::Dequantize ? 2 : 1;
  // nn.quantize may also write the transposed copy, with its own scale.
  const size_t maxOut = kernel == Fp8Kernel::Quantize ? 2 : 1;
  const size_t maxIn = kernel == Fp8Kernel::Quantize ? 3 : wantIn;
  if (inputs.size() < wantIn || inputs.size() > maxIn || outputs.empty() ||
      outputs.size() > maxOut)
    return kernelError("takes " + llvm::Twine(wantIn) + (maxIn > wantIn ? " or 3" : "") +
                       " inputs and " + (maxOut == 2 ? "1 or 2 outputs" : "1 output") +
                       ", got " + llvm::Twine(inputs.size()) + " and " +
                       llvm::Twine(outputs.size()));
  if (inputs.size() == 3 && outputs.size() != 2)
    return kernelError("a transposed scale needs the transposed copy as a second output");
  if (outputs.size() == 2) {
    const Tensor &x = inputs[0], &t = outputs[1];
    std::vector<int64_t> swapped = x.shape;
    if (swapped.size() >= 2)
      std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
    if (x.shape.size() < 2 || t.shape != swapped)
      return kernelError("transposed copy shape " + shapeToString(t.shape) + " should be " +
                         shapeToString(swapped) + " (input " + shapeToString(x.shape) + ")");
    if (t.dtype != outputs[0].dtype)
      return kernelError(llvm::Twine("transposed copy dtype is ") + dtypeName(t.dtype) +
                         ", the result's " + dtypeName(outputs[0].dtype));
    if (inputs.size() == 3) {
      LOOM_RETURN_IF_ERROR(checkFp8DType(inputs[2], "transposed scale",
                                         inputs[2].dtype == DType::F32, "f32"));
      LOOM_RETURN_IF_ERROR(checkFp8Tiling(t, inputs[2], "transposed scale"));
    } else if (!inputs[1].shape.empty()) {
      return kernelError("a transposed copy of a tiled quantization needs a transposed scale; "
                         "got scale " + shapeToString(inputs[1].shape) + " alone");
    }
  }
  const Tensor &in = inputs[0], &out = outputs[0];
  const char *wide = "f32, bf16 or f16", *fp8 = "f8E4M3FN or f8E5M2";
  switch (kernel) {
  case Fp8Kernel::Quantize:
  case Fp8Kernel::Dequantize: {
    const bool quantize = kernel == Fp8Kernel::Quantize;
    LOOM_RETURN_IF_ERROR(checkFp8DType(in, "input", quantize ? isWideFloatType(in.dtype)
                                                             : isFp8Type(in.dtype),
                                       quantize ? wide : fp8));
    LOOM_RETURN_IF_ERROR(checkFp8DType(inputs[1], "scale", inputs[1].dtype == DType::F32, "f32"));
    LOOM_RETURN_IF_ERROR(checkFp8DType(out, "result", quantize ? isFp8Type(out.dtype)
                                                               : isWideFloatType(out.dtype),
                                       quantize ? fp8 : wide));
    LOOM_RETURN_IF_ERROR(checkSameShape(out, "result", in, "input"));
    return checkFp8Tiling(in, inputs[1], "scale");
  }
  case Fp8Kernel::Amax:
    LOOM_RETURN_IF_ERROR(checkFp8DType(in, "input", isWideFloatType(in.dtype), wide));
    LOOM_RETURN_IF_ERROR(checkFp8DType(out, "result", out.dtype == DType::F32, "f32"));
    return checkFp8Tiling(in, out, "result");
  case Fp8Kernel::Scale: {
    LOOM_RETURN_IF_ERROR(checkFp8DType(in, "amax", in.dtype == DType::F32, "f32"));
    LOOM_RETURN_IF_ERROR(checkFp8DType(out, "result", out.dtype == DType::F32, "f32"));
    LOOM_RETURN_IF_ERROR(checkSameShape(out, "result", in, "amax"));
    LOOM_ASSIGN_OR_RETURN(std::string format, attrs.getStr("format"));
    LOOM_ASSIGN_OR_RETURN(int64_t margin, attrs.getInt("margin", 0));
    if (format != "e4m3" && format != "e5m2")
      return kernelError("format must be \"e4m3\" or \"e5m2\", got \"" + format + "\"");
    if (margin < 0 || margin > 64)
      return kernelError("margin must be in [0, 64], got " + llvm::Twine(margin));
    return llvm::Error::success();
  }
  }
  return llvm::Error::success();
}

llvm::Error checkQuantizeTiles(llvm::ArrayRef<Tensor> inputs, llvm::ArrayRef<Tensor> outputs,
                               const KernelAttrs &attrs) {
  if (inputs.size() != 1 || outputs.size() != 4)
    return kernelError("takes 1 input (x) and 4 outputs (q, qT, scale, scaleT), got " +
                       llvm::Twine(inputs.size()) + " and " + llvm::Twine(outputs.size()));
  const Tensor &x = inputs[0], &q = outputs[0], &qT = outputs[1];
  const Tensor &scale = outputs[2], &scaleT = outputs[3];
  if (x.shape.size() != 2)
    return kernelError("x must be a matrix, got shape " + shapeToString(x.shape));
  // nn.quantize's checks: x and its copy, the scale of each.
  LOOM_RETURN_IF_ERROR(checkFp8(Fp8Kernel::Quantize, {x, scale, scaleT}, {q, qT}, attrs));
  for (const Tensor *s : {&scale, &scaleT})
    if (s->shape.size() != 2)
      return kernelError("scales must be rank-2 tilings, got " + shapeToString(s->shape));
  return checkFp8(Fp8Kernel::Scale, {scale}, {scale}, attrs);
}

llvm::Error checkQuantizeTensor(llvm::ArrayRef<Tensor> inputs, llvm::ArrayRef<Tensor> outputs,
                                const KernelAttrs &attrs) {
  if (inputs.size() != 1 || outputs.size() != 3)
    return kernelError("takes 1 input (x) and 3 outputs (q, qT, scale), got " +
                       llvm::Twine(inputs.size()) + " and " + llvm::Twine(outputs.size()));
  const Tensor &x = inputs[0], &q = outputs[0], &qT = outputs[1], &scale = outputs[2];
  if (x.shape.size() != 2)
    return kernelError("x must be a matrix, got shape " + shapeToString(x.shape));
  if (!scale.shape.empty())
    return kernelError("the scale must be one value (rank 0), got shape " +
                       shapeToString(scale.shape));
  LOOM_RETURN_IF_ERROR(checkFp8(Fp8Kernel::Quantize, {x, scale}, {q, qT}, attrs));
  return checkFp8(Fp8Kernel::Scale, {scale}, {scale}, attrs);
}

} // namespace detail
} // namespace loom::cpu
