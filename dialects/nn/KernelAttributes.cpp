// The attributes each nn op's kernel reads, and constants in the runtime's
// form: what --loom-lower-to-rt writes into rt.kernel calls and what the
// constant evaluator passes to the CPU kernels at compile time.

#include "dialects/nn/KernelAttributes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cstring>

using namespace mlir;
using namespace loom;

namespace {

/// Converts an nn attribute into the kinds kernels read (Kernels.def):
/// integers, floats, strings and i64 arrays. Returns null for attributes
/// kernels do not see (parameter values, initializers).
Attribute toKernelAttr(Builder &b, Attribute attr) {
  if (isa<UnitAttr>(attr))
    return b.getI64IntegerAttr(1);
  if (auto v = dyn_cast<BoolAttr>(attr))
    return b.getI64IntegerAttr(v.getValue());
  if (auto v = dyn_cast<IntegerAttr>(attr))
    return b.getI64IntegerAttr(v.getInt());
  if (auto v = dyn_cast<FloatAttr>(attr))
    return b.getF64FloatAttr(v.getValueAsDouble());
  if (isa<DenseI64ArrayAttr, StringAttr>(attr))
    return attr;
  if (auto v = dyn_cast<nn::GeluApproximationAttr>(attr))
    return b.getStringAttr(nn::stringifyGeluApproximation(v.getValue()));
  if (auto v = dyn_cast<nn::ComparePredicateAttr>(attr))
    return b.getStringAttr(nn::stringifyComparePredicate(v.getValue()));
  if (auto v = dyn_cast<nn::LossReductionAttr>(attr))
    return b.getStringAttr(nn::stringifyLossReduction(v.getValue()));
  return {};
}

} // namespace

std::optional<DType> loom::runtimeDType(Type t) {
  if (t.isF32()) return DType::F32;
  if (t.isF16()) return DType::F16;
  if (t.isBF16()) return DType::BF16;
  if (t.isF64()) return DType::F64;
  if (t.isFloat8E4M3FN()) return DType::F8E4M3FN;
  if (t.isFloat8E5M2()) return DType::F8E5M2;
  if (t.isInteger(64)) return DType::I64;
  if (t.isInteger(32)) return DType::I32;
  if (t.isInteger(1)) return DType::I1;
  return std::nullopt;
}

std::vector<uint8_t> loom::runtimeBytes(DenseElementsAttr value, DType dtype) {
  int64_t n = value.getNumElements();
  std::vector<uint8_t> bytes;
  if (dtype == DType::I1) {
    for (bool v : value.getValues<bool>())
      bytes.push_back(v);
    return bytes;
  }
  size_t size = dtypeSize(dtype);
  ArrayRef<char> raw = value.getRawData();
  bytes.resize(n * size);
  if (value.isSplat()) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(bytes.data() + i * size, raw.data(), size);
  } else {
    std::memcpy(bytes.data(), raw.data(), bytes.size());
  }
  return bytes;
}

DictionaryAttr loom::kernelAttrsFor(Operation *op) {
  Builder b(op->getContext());
  NamedAttrList attrs;
  for (NamedAttribute attr : op->getAttrDictionary())
    if (Attribute converted = toKernelAttr(b, attr.getValue()))
      attrs.set(attr.getName(), converted);
  auto flag = [&](StringRef name, bool value) {
    attrs.set(name, b.getI64IntegerAttr(value));
  };
  auto f64 = [&](StringRef name, double value) {
    attrs.set(name, b.getF64FloatAttr(value));
  };
  auto str = [&](StringRef name, StringRef value) {
    attrs.set(name, b.getStringAttr(value));
  };
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](nn::MatmulOp m) {
        attrs.erase("transpose_lhs");
        attrs.erase("transpose_rhs");
        flag("transpose_a", m.getTransposeLhs());
        flag("transpose_b", m.getTransposeRhs());
      })
      .Case([&](nn::GeluOp g) {
        str("approximate", nn::stringifyGeluApproximation(g.getApproximate()));
      })
      .Case([&](nn::CrossEntropyOp c) {
        str("reduction", nn::stringifyLossReduction(c.getReduction()));
        attrs.set("ignore_index", b.getI64IntegerAttr(c.getIgnoreIndex()));
      })
      .Case([&](nn::LayerNormOp n) {
        f64("epsilon", n.getEpsilon().convertToDouble());
        flag("has_weight", static_cast<bool>(n.getWeight()));
        flag("has_bias", static_cast<bool>(n.getBias()));
      })
      .Case([&](nn::RmsNormOp n) {
        f64("epsilon", n.getEpsilon().convertToDouble());
        flag("has_weight", static_cast<bool>(n.getWeight()));
      })
      .Case([&](nn::AttentionOp a) {
        f64("scale", a.getEffectiveScale());
        flag("causal", a.getCausal());
      })
      .Case([&](nn::RopeOp r) { flag("interleaved", r.getInterleaved()); })
      .Case([&](nn::IotaOp i) {
        f64("start", i.getStart().convertToDouble());
        f64("step", i.getStep().convertToDouble());
      })
      .Case<nn::ReduceSumOp, nn::ReduceMeanOp, nn::ReduceMaxOp>(
          [&](auto r) { flag("keepdim", r.getKeepdim()); })
      // Backward ops: the same attributes as the forward op they undo.
      .Case([&](nn::GeluGradOp g) {
        str("approximate", nn::stringifyGeluApproximation(g.getApproximate()));
      })
      .Case([&](nn::CrossEntropyGradOp c) {
        str("reduction", nn::stringifyLossReduction(c.getReduction()));
        attrs.set("ignore_index", b.getI64IntegerAttr(c.getIgnoreIndex()));
      })
      .Case([&](nn::CrossEntropyStatsOp c) {
        attrs.set("vocab_start", b.getI64IntegerAttr(c.getVocabStart()));
        attrs.set("ignore_index", b.getI64IntegerAttr(c.getIgnoreIndex()));
      })
      .Case([&](nn::CrossEntropyCombineOp c) {
        if (std::optional<int64_t> classes = c.getNumClasses())
          attrs.set("num_classes", b.getI64IntegerAttr(*classes));
        str("reduction", nn::stringifyLossReduction(c.getReduction()));
        attrs.set("ignore_index", b.getI64IntegerAttr(c.getIgnoreIndex()));
      })
      .Case([&](nn::CrossEntropyBlockGradOp c) {
        str("reduction", nn::stringifyLossReduction(c.getReduction()));
        attrs.set("ignore_index", b.getI64IntegerAttr(c.getIgnoreIndex()));
        attrs.set("vocab_start", b.getI64IntegerAttr(c.getVocabStart()));
      })
      .Case([&](nn::LayerNormGradOp n) {
        f64("epsilon", n.getEpsilon().convertToDouble());
        flag("has_weight", static_cast<bool>(n.getWeight()));
      })
      .Case([&](nn::RmsNormGradOp n) {
        f64("epsilon", n.getEpsilon().convertToDouble());
        flag("has_weight", static_cast<bool>(n.getWeight()));
      })
      .Case([&](nn::AttentionGradOp a) {
        f64("scale", a.getEffectiveScale());
        flag("causal", a.getCausal());
      })
      .Case([&](nn::PadOp p) { f64("value", p.getValue().convertToDouble()); });
  return attrs.getDictionary(op->getContext());
}
