#include "frontend/common/ConstantEvaluator.h"

#include "dialects/nn/NNOps.h"
#include "kernels/cpu/CpuKernels.h"
#include "dialects/nn/KernelAttributes.h"
#include "runtime/abi/DType.h"

#include "llvm/ADT/DenseMap.h"

using namespace mlir;

namespace loom {
namespace {

DenseElementsAttr attrOf(RankedTensorType type, DType dtype,
                         const std::vector<uint8_t> &bytes) {
  if (dtype == DType::I1) {
    SmallVector<bool> values(bytes.begin(), bytes.end());
    return DenseElementsAttr::get(type, ArrayRef<bool>(values));
  }
  return DenseElementsAttr::getFromRawBuffer(
      type, ArrayRef<char>(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
}

cpu::KernelAttrs toKernelAttrs(DictionaryAttr dict) {
  cpu::KernelAttrs attrs;
  for (NamedAttribute attr : dict) {
    Attribute v = attr.getValue();
    if (auto i = dyn_cast<IntegerAttr>(v))
      attrs.set(attr.getName().str(), i.getInt());
    else if (auto f = dyn_cast<FloatAttr>(v))
      attrs.set(attr.getName().str(), f.getValueAsDouble());
    else if (auto s = dyn_cast<StringAttr>(v))
      attrs.set(attr.getName().str(), s.str());
    else if (auto a = dyn_cast<DenseI64ArrayAttr>(v))
      attrs.set(attr.getName().str(),
                std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end()));
  }
  return attrs;
}

} // namespace

FailureOr<SmallVector<DenseElementsAttr>>
evaluateOp(Operation *op, ArrayRef<DenseElementsAttr> operands) {
  if (!op->getDialect() || op->getDialect()->getNamespace() != "nn" ||
      isa<nn::ParameterOp>(op))
    return failure();
  if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
    auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (!dense)
      return failure();
    return SmallVector<DenseElementsAttr>{dense};
  }
  if (isa<nn::StopGradientOp>(op))
    return SmallVector<DenseElementsAttr>{operands[0]};
  if (auto reshape = dyn_cast<nn::ReshapeOp>(op))
    return SmallVector<DenseElementsAttr>{
        DenseElementsAttr(operands[0]).reshape(reshape.getType())};
  std::string kernel = op->getName().getStringRef().str();
  if (!cpu::hasKernel(kernel))
    return failure();

  std::vector<std::vector<uint8_t>> inputBytes, outputBytes;
  std::vector<cpu::Tensor> inputs, outputs;
  inputBytes.reserve(operands.size());
  for (DenseElementsAttr operand : operands) {
    auto type = cast<RankedTensorType>(operand.getType());
    std::optional<DType> dtype = runtimeDType(type.getElementType());
    if (!dtype)
      return failure();
    inputBytes.push_back(runtimeBytes(operand, *dtype));
    inputs.push_back({inputBytes.back().data(), *dtype,
                      std::vector<int64_t>(type.getShape().begin(), type.getShape().end())});
  }
  outputBytes.reserve(op->getNumResults());
  for (Value result : op->getResults()) {
    auto type = cast<RankedTensorType>(result.getType());
    std::optional<DType> dtype = runtimeDType(type.getElementType());
    if (!dtype || type.getNumElements() > kMaxFoldedElements)
      return failure();
    outputBytes.emplace_back(type.getNumElements() * dtypeSize(*dtype));
    outputs.push_back({outputBytes.back().data(), *dtype,
                       std::vector<int64_t>(type.getShape().begin(), type.getShape().end())});
  }
  if (llvm::Error err = cpu::runKernel(kernel, inputs, outputs,
                                       toKernelAttrs(kernelAttrsFor(op)))) {
    llvm::consumeError(std::move(err));
    return failure();
  }
  SmallVector<DenseElementsAttr> results;
  for (auto [result, tensor, bytes] :
       llvm::zip(op->getResults(), outputs, outputBytes))
    results.push_back(attrOf(cast<RankedTensorType>(result.getType()), tensor.dtype, bytes));
  return results;
}

FailureOr<DenseElementsAttr> evaluateConstant(Value v) {
  // Iterative post-order over the defining ops, memoizing every result.
  llvm::DenseMap<Value, DenseElementsAttr> known;
  SmallVector<Value> stack{v};
  while (!stack.empty()) {
    Value top = stack.back();
    if (known.count(top)) {
      stack.pop_back();
      continue;
    }
    Operation *def = top.getDefiningOp();
    if (!def || isa<nn::ParameterOp>(def))
      return failure();
    bool ready = true;
    for (Value operand : def->getOperands())
      if (!known.count(operand)) {
        ready = false;
        stack.push_back(operand);
      }
    if (!ready)
      continue;
    SmallVector<DenseElementsAttr> operands;
    for (Value operand : def->getOperands())
      operands.push_back(known.lookup(operand));
    FailureOr<SmallVector<DenseElementsAttr>> results = evaluateOp(def, operands);
    if (failed(results))
      return failure();
    for (auto [result, value] : llvm::zip(def->getResults(), *results))
      known[result] = value;
    stack.pop_back();
  }
  return known.lookup(v);
}

} // namespace loom
