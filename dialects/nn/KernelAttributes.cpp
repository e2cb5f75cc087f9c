// The attributes each nn op's kernel reads, and constants in the runtime's
// form: what --loom-lower-to-rt writes into rt.kernel calls and what the
// constant evaluator passes to the CPU kernels at compile time.

#include "dialects/nn/KernelAttributes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

#include <cstring>

using namespace mlir;
using namespace loom;

namespace {

/// What the generated functions write a call's attributes through: the
/// kinds runtime/abi/KernelAttrs.h carries (integers, floats, strings, lists).
class KernelAttrWriter {
public:
  explicit KernelAttrWriter(MLIRContext *context) : b(context) {}
  void set(StringRef name, int64_t v) { attrs.set(name, b.getI64IntegerAttr(v)); }
  void set(StringRef name, double v) { attrs.set(name, b.getF64FloatAttr(v)); }
  void set(StringRef name, const std::string &v) { attrs.set(name, b.getStringAttr(v)); }
  void set(StringRef name, ArrayRef<int64_t> v) { attrs.set(name, b.getDenseI64ArrayAttr(v)); }
  void set(StringRef name, ArrayRef<double> v) { attrs.set(name, b.getDenseF64ArrayAttr(v)); }
  DictionaryAttr get() { return attrs.getDictionary(b.getContext()); }

private:
  Builder b;
  NamedAttrList attrs;
};

struct KernelAttrsEntry {
  StringRef kernel;
  void (*write)(Operation *, KernelAttrWriter &);
};

#include "dialects/nn/NNKernels.cpp.inc"

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
  static const llvm::StringMap<void (*)(Operation *, KernelAttrWriter &)> writers = [] {
    llvm::StringMap<void (*)(Operation *, KernelAttrWriter &)> m;
    for (const KernelAttrsEntry &e : kKernelAttrsEntries)
      m[e.kernel] = e.write;
    return m;
  }();
  KernelAttrWriter w(op->getContext());
  auto it = writers.find(op->getName().getStringRef());
  if (it != writers.end())
    it->second(op, w);
  return w.get();
}
