#include "GradientCheck.h"

#include "frontend/common/ConstantEvaluator.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Verifier.h"

#include <cmath>
#include <random>

using namespace mlir;

namespace loom::nn::test {

namespace {

std::vector<double> toDoubles(DenseElementsAttr attr) {
  std::vector<double> values;
  Type element = attr.getElementType();
  if (isa<FloatType>(element)) {
    for (APFloat v : attr.getValues<APFloat>()) {
      bool lost = false;
      v.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
      values.push_back(v.convertToDouble());
    }
  } else if (element.isInteger(1)) {
    for (bool v : attr.getValues<bool>())
      values.push_back(v);
  } else {
    for (APInt v : attr.getValues<APInt>())
      values.push_back(static_cast<double>(v.getSExtValue()));
  }
  return values;
}

DenseElementsAttr fromDoubles(RankedTensorType type, const std::vector<double> &values) {
  Type element = type.getElementType();
  if (auto floatType = dyn_cast<FloatType>(element)) {
    SmallVector<APFloat> floats;
    for (double v : values) {
      APFloat f(v);
      bool lost = false;
      f.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      floats.push_back(f);
    }
    return DenseElementsAttr::get(type, floats);
  }
  if (element.isInteger(1)) {
    SmallVector<bool> bits;
    for (double v : values)
      bits.push_back(v != 0);
    return DenseElementsAttr::get(type, bits);
  }
  SmallVector<APInt> ints;
  for (double v : values)
    ints.push_back(APInt(element.getIntOrFloatBitWidth(), static_cast<int64_t>(v),
                         /*isSigned=*/true));
  return DenseElementsAttr::get(type, ints);
}

bool isFloatValue(Value v) {
  return isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType());
}

} // namespace

GradientCheck::GradientCheck() : builder_(&context_) {
  context_.loadDialect<NNDialect, func::FuncDialect>();
  module_ = ModuleOp::create(builder_.getUnknownLoc());
  builder_.setInsertionPointToEnd(module_->getBody());
  auto func = builder_.create<func::FuncOp>(builder_.getUnknownLoc(), "gradients",
                                            builder_.getFunctionType({}, {}));
  Block *body = func.addEntryBlock();
  builder_.setInsertionPointToEnd(body);
  auto ret = builder_.create<func::ReturnOp>(builder_.getUnknownLoc());
  builder_.setInsertionPoint(ret);
}

RankedTensorType GradientCheck::tensor(llvm::ArrayRef<int64_t> shape, Type element) {
  return RankedTensorType::get(shape, element ? element : f64());
}

Value GradientCheck::constant(RankedTensorType type, const std::vector<double> &values) {
  EXPECT_EQ(static_cast<int64_t>(values.size()), type.getNumElements());
  return builder_.create<ConstantOp>(loc(), fromDoubles(type, values));
}

Value GradientCheck::random(llvm::ArrayRef<int64_t> shape, double lo, double hi,
                            Type element) {
  RankedTensorType type = tensor(shape, element);
  std::mt19937_64 rng(nextSeed_++);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values;
  while (static_cast<int64_t>(values.size()) < type.getNumElements()) {
    double v = dist(rng);
    if (std::fabs(v) >= 0.1)
      values.push_back(v);
  }
  return constant(type, values);
}

Value GradientCheck::ints(llvm::ArrayRef<int64_t> shape, const std::vector<double> &values,
                          unsigned width) {
  return constant(tensor(shape, builder_.getIntegerType(width)), values);
}

Value GradientCheck::bools(llvm::ArrayRef<int64_t> shape, const std::vector<double> &values) {
  return constant(tensor(shape, builder_.getI1Type()), values);
}

std::vector<double> GradientCheck::evaluate(Value value) {
  FailureOr<DenseElementsAttr> attr = evaluateConstant(value);
  EXPECT_TRUE(succeeded(attr)) << "the CPU kernels could not evaluate the value";
  if (failed(attr))
    return {};
  return toDoubles(*attr);
}

Value GradientCheck::gradient(Operation *op, unsigned index,
                              llvm::ArrayRef<Value> resultGradients) {
  auto rule = dyn_cast<GradientOpInterface>(op);
  EXPECT_TRUE(rule) << op->getName().getStringRef().str()
                    << " does not implement GradientOpInterface";
  if (!rule)
    return {};
  FailureOr<Value> grad = rule.buildOperandGradient(builder_, index, resultGradients);
  EXPECT_TRUE(succeeded(grad)) << "the rule failed for operand " << index;
  return succeeded(grad) ? *grad : Value();
}

void GradientCheck::check(Operation *op, Tolerance tolerance,
                          std::vector<bool> withCotangent) {
  std::string opName = op->getName().getStringRef().str();
  SCOPED_TRACE(opName);
  // The cotangents R and the constant operands' values.
  SmallVector<Value> cotangents;
  std::vector<std::vector<double>> cotangentValues;
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    bool wanted = withCotangent.empty() || withCotangent[i];
    if (!wanted || !isFloatValue(result)) {
      cotangents.push_back(Value());
      cotangentValues.emplace_back();
      continue;
    }
    auto type = cast<RankedTensorType>(result.getType());
    cotangents.push_back(random(type.getShape(), -1.0, 1.0, type.getElementType()));
    cotangentValues.push_back(evaluate(cotangents.back()));
  }
  SmallVector<DenseElementsAttr> operands;
  for (Value operand : op->getOperands()) {
    FailureOr<DenseElementsAttr> attr = evaluateConstant(operand);
    ASSERT_TRUE(succeeded(attr)) << "operands must be constants";
    operands.push_back(*attr);
  }
  // sum(result * R) at the given operand values.
  auto objective = [&](ArrayRef<DenseElementsAttr> values) {
    FailureOr<SmallVector<DenseElementsAttr>> results = evaluateOp(op, values);
    EXPECT_TRUE(succeeded(results)) << "the forward kernel failed";
    if (failed(results))
      return 0.0;
    double total = 0.0;
    for (auto [k, result] : llvm::enumerate(*results)) {
      if (!cotangents[k])
        continue;
      std::vector<double> y = toDoubles(result);
      for (size_t e = 0; e < y.size(); ++e)
        total += y[e] * cotangentValues[k][e];
    }
    return total;
  };

  int checkedOperands = 0;
  for (unsigned index = 0; index < op->getNumOperands(); ++index) {
    SCOPED_TRACE("operand " + std::to_string(index));
    Value operand = op->getOperand(index);
    Value grad = gradient(op, index, cotangents);
    if (!isFloatValue(operand)) {
      EXPECT_FALSE(grad) << "an integer or bool operand got a gradient";
      continue;
    }
    ASSERT_TRUE(grad) << "a float operand got no gradient";
    ASSERT_EQ(grad.getType(), operand.getType());
    ASSERT_TRUE(succeeded(verify(*module_))) << "the gradient IR does not verify";
    std::vector<double> analytic = evaluate(grad);
    std::vector<double> x = toDoubles(operands[index]);
    ASSERT_EQ(analytic.size(), x.size());
    auto type = cast<RankedTensorType>(operand.getType());
    bool anyNonZero = false;
    for (size_t e = 0; e < x.size(); ++e) {
      SmallVector<DenseElementsAttr> perturbed(operands);
      std::vector<double> shifted = x;
      shifted[e] = x[e] + tolerance.step;
      perturbed[index] = fromDoubles(type, shifted);
      double plus = objective(perturbed);
      shifted[e] = x[e] - tolerance.step;
      perturbed[index] = fromDoubles(type, shifted);
      double minus = objective(perturbed);
      double numeric = (plus - minus) / (2 * tolerance.step);
      EXPECT_NEAR(analytic[e], numeric, tolerance.abs + tolerance.rel * std::fabs(numeric))
          << "element " << e;
      anyNonZero |= analytic[e] != 0.0;
    }
    // An all-zero gradient would make the comparison vacuous.
    EXPECT_TRUE(anyNonZero) << "the gradient is zero everywhere";
    ++checkedOperands;
  }
  EXPECT_GT(checkedOperands, 0) << "no operand had a gradient to check";
}

} // namespace loom::nn::test
