// --loom-fuse-matmul-epilogue: a bias add (and a tanh-GELU after it) that
// only consumes a GEMM's result becomes the GEMM's epilogue, and so does an
// add of a tensor of the result's own shape (a residual, a sum of
// gradients): the GEMM adds it (cuBLASLt's beta = 1).

#include "passes/fusion/Passes.h"
#include "passes/fusion/RtBuffers.h"

#include "llvm/ADT/DenseMap.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

namespace loom {
#define GEN_PASS_DEF_FUSEMATMULEPILOGUE
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

/// The users of `buffer` other than `writer` (kernels name their outputs as
/// operands too).
SmallVector<Operation *> readersOf(Value buffer, Operation *writer) {
  SmallVector<Operation *> readers;
  for (Operation *user : buffer.getUsers())
    if (user != writer)
      readers.push_back(user);
  return readers;
}

/// The one kernel besides `writer` that uses `buffer`, if there is one.
rt::KernelOp soleReader(Value buffer, Operation *writer) {
  SmallVector<Operation *> readers = readersOf(buffer, writer);
  if (readers.size() != 1)
    return nullptr;
  return dyn_cast<rt::KernelOp>(readers.front());
}

bool isScratch(Value buffer) { return buffer.getDefiningOp<rt::AllocOp>() != nullptr; }

/// matmul -> add(bias): the add's bias operand when it is a [N] vector of the
/// result's element type added to every row.
Value biasOf(rt::KernelOp add, Value product) {
  if (add.getKernelId() != KernelId::Add || add.getInputs().size() != 2 ||
      add.getOutputs().size() != 1)
    return {};
  Value bias = add.getInputs()[0] == product ? add.getInputs()[1] : add.getInputs()[0];
  auto productType = cast<MemRefType>(product.getType());
  auto biasType = dyn_cast<MemRefType>(bias.getType());
  if (bias == product || !biasType || biasType.getRank() != 1 ||
      biasType.getElementType() != productType.getElementType() ||
      biasType.getDimSize(0) != productType.getShape().back() ||
      add.getOutputs()[0].getType() != product.getType())
    return {};
  return bias;
}

/// matmul -> add(other): `other` when it has the product's type (a residual,
/// or a running sum the GEMM continues), added whole.
Value addendOf(rt::KernelOp add, Value product) {
  if (add.getKernelId() != KernelId::Add || add.getInputs().size() != 2 ||
      add.getOutputs().size() != 1)
    return {};
  Value other = add.getInputs()[0] == product ? add.getInputs()[1] : add.getInputs()[0];
  if (other == product || other.getType() != product.getType() ||
      add.getOutputs()[0].getType() != product.getType())
    return {};
  return other;
}

/// Whether an op strictly between `from` and `to` (one block) writes one of
/// `buffers` (compared through aliases).
bool writtenBetween(Operation *from, Operation *to, ArrayRef<Value> buffers) {
  SmallVector<Value> roots;
  for (Value v : buffers)
    roots.push_back(fusion::rootOf(v));
  for (Operation *op = from->getNextNode(); op && op != to; op = op->getNextNode()) {
    SmallVector<Value> written;
    if (auto kernel = dyn_cast<rt::KernelOp>(op))
      written.append(kernel.getOutputs().begin(), kernel.getOutputs().end());
    else if (auto copy = dyn_cast<rt::CopyOp>(op))
      written.push_back(copy.getTarget());
    else if (op->getNumRegions() > 0 || !isa<rt::AllocOp, rt::AliasOp>(op))
      return true; // anything else (a collective, a send): assume it may
    for (Value w : written)
      if (llvm::is_contained(roots, fusion::rootOf(w)))
        return true;
  }
  return false;
}

bool isTanhGelu(rt::KernelOp op) {
  auto approximate = dyn_cast_or_null<StringAttr>(op.getAttrs().get("approximate"));
  return op.getKernelId() == KernelId::Gelu && approximate && approximate.getValue() == "tanh";
}

struct FuseMatmulEpiloguePass : impl::FuseMatmulEpilogueBase<FuseMatmulEpiloguePass> {
  /// Each op's position in its block, numbered once: MLIR's own order
  /// (isBeforeInBlock) is renumbered after every insertion, which made the
  /// pass quadratic in a step of thousands of microbatches. An op this pass
  /// creates takes the number of the op it stands for.
  llvm::DenseMap<Operation *, int64_t> order_;
  bool before(Operation *a, Operation *b) const { return order_.lookup(a) < order_.lookup(b); }

  void runOnOperation() override {
    getOperation().walk([&](Block *block) {
      int64_t i = 0;
      for (Operation &op : *block)
        order_[&op] = i++;
    });
    SmallVector<rt::KernelOp> matmuls;
    getOperation().walk([&](rt::KernelOp op) {
      if (op.getKernelId() == KernelId::Matmul && op.getInputs().size() == 2 &&
          !op.getAttrs().get("epilogue"))
        matmuls.push_back(op);
    });
    for (rt::KernelOp matmul : matmuls)
      fuse(matmul);
    // A norm's input gradient plus the residual's gradient: the norm
    // gradient kernel adds it (has_addend).
    SmallVector<rt::KernelOp> normGrads;
    getOperation().walk([&](rt::KernelOp op) {
      if ((op.getKernelId() == KernelId::RmsNormGrad ||
           op.getKernelId() == KernelId::LayerNormGrad) &&
          op.getOutputs().size() == 1 && !op.getAttrs().get("has_addend"))
        normGrads.push_back(op);
    });
    OpBuilder b(&getContext());
    for (rt::KernelOp grad : normGrads) {
      Value result = grad.getOutputs()[0];
      if (!isScratch(result))
        continue;
      if (rt::KernelOp add = soleReader(result, grad))
        fuseAddend(grad, add, result, b.getNamedAttr("has_addend", b.getI64IntegerAttr(1)));
    }
  }

  void fuse(rt::KernelOp matmul) {
    Value product = matmul.getOutputs()[0];
    if (!isScratch(product))
      return;
    rt::KernelOp add = soleReader(product, matmul);
    Value bias = add ? biasOf(add, product) : Value();
    if (!bias && add) {
      Builder b(&getContext());
      return fuseAddend(matmul, add, product,
                        b.getNamedAttr("epilogue", b.getStringAttr("add")));
    }
    if (!bias || !isScratch(add.getOutputs()[0]))
      return;
    // The bias must exist where the GEMM runs.
    if (Operation *def = bias.getDefiningOp())
      if (def->getBlock() != matmul->getBlock() || !before(def, matmul))
        return;
    Value result = add.getOutputs()[0];
    std::string epilogue = "bias";
    Operation *gelu = nullptr;
    // A tanh-GELU reading the biased product (directly or through a reshape)
    // and nothing else reading it: the GEMM writes the activation instead.
    Value geluInput = result;
    rt::AliasOp reshape;
    SmallVector<Operation *> resultReaders = readersOf(result, add);
    if (resultReaders.size() == 1)
      reshape = dyn_cast<rt::AliasOp>(resultReaders.front());
    if (reshape)
      geluInput = reshape.getResult();
    if (rt::KernelOp g = soleReader(geluInput, reshape ? nullptr : add.getOperation());
        g && isTanhGelu(g) && g.getInputs().size() == 1 && g.getOutputs().size() == 1 &&
        isScratch(g.getOutputs()[0])) {
      gelu = g;
      epilogue = "bias_gelu";
    }

    OpBuilder b(matmul);
    Value target = result;
    if (gelu) {
      Value activation = gelu->getOperand(1);
      // Its buffer is declared before the GEMM that now writes it.
      activation.getDefiningOp()->moveBefore(matmul);
      target = activation;
      if (reshape)
        target = b.create<rt::AliasOp>(matmul.getLoc(), product.getType(), activation);
    } else {
      result.getDefiningOp()->moveBefore(matmul);
    }
    SmallVector<NamedAttribute> attrs(matmul.getAttrs().getValue());
    attrs.push_back(b.getNamedAttr("epilogue", b.getStringAttr(epilogue)));
    auto fused = b.create<rt::KernelOp>(
        matmul.getLoc(), matmul.getKernelAttr(),
        ValueRange{matmul.getInputs()[0], matmul.getInputs()[1], bias}, ValueRange{target},
        b.getDictionaryAttr(attrs), matmul.getStreamAttr());
    order_[fused] = order_.lookup(matmul);
    if (gelu) {
      gelu->erase();
      if (reshape)
        reshape.erase();
    }
    order_.erase(add);
    order_.erase(matmul);
    add.erase();
    matmul.erase();
    if (result.use_empty())
      result.getDefiningOp()->erase();
    if (product.use_empty())
      product.getDefiningOp()->erase();
  }

  /// kernel -> add(product, other) of one shape and type: one call writing
  /// the add's result, `other` its last input (the GEMM's C, a norm
  /// gradient's residual) and `marker` saying so. It runs where the kernel
  /// ran when `other` is ready by then, else where the add ran (nothing in
  /// between writing the kernel's inputs).
  void fuseAddend(rt::KernelOp matmul, rt::KernelOp add, Value product, NamedAttribute marker) {
    Value other = addendOf(add, product);
    Value result = add ? add.getOutputs()[0] : Value();
    if (!other || !isScratch(result) || matmul.getStreamAttr() != add.getStreamAttr() ||
        matmul->getBlock() != add->getBlock())
      return;
    Operation *at = matmul;
    rt::KernelOp otherWriter = fusion::writerOf(other);
    if (otherWriter && otherWriter->getBlock() == matmul->getBlock() &&
        !before(otherWriter, matmul)) {
      if (writtenBetween(matmul, add, SmallVector<Value>(matmul.getInputs())))
        return;
      at = add;
    } else if (writtenBetween(matmul, add, {other})) {
      return;
    }
    if (at == matmul.getOperation())
      result.getDefiningOp()->moveBefore(matmul);
    OpBuilder b(at);
    SmallVector<NamedAttribute> attrs(matmul.getAttrs().getValue());
    attrs.push_back(marker);
    SmallVector<Value> inputs(matmul.getInputs());
    inputs.push_back(other);
    auto fused = b.create<rt::KernelOp>(matmul.getLoc(), matmul.getKernelAttr(), inputs,
                                        ValueRange{result}, b.getDictionaryAttr(attrs),
                                        matmul.getStreamAttr());
    order_[fused] = order_.lookup(at);
    if (at == matmul.getOperation())
      order_[result.getDefiningOp()] = order_.lookup(at) - 1;
    order_.erase(add);
    order_.erase(matmul);
    add.erase();
    matmul.erase();
    if (product.use_empty())
      product.getDefiningOp()->erase();
  }
};

} // namespace
} // namespace loom
