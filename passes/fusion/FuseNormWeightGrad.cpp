// --loom-fuse-norm-weight-grad: a norm's weight gradient -- the norm again
// without its weight, times the incoming gradient, summed over the rows,
// often cast to the parameter's f32 -- becomes one nn.norm_weight_grad call.
// See Passes.td.

#include "passes/fusion/Passes.h"
#include "passes/fusion/RtBuffers.h"
#include "runtime/abi/NormWeightGrad.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

namespace loom {
#define GEN_PASS_DEF_FUSENORMWEIGHTGRAD
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

using fusion::eraseDeadBuffers;
using fusion::rootOf;
using fusion::usedOnlyBy;
using fusion::writerOf;

struct Match {
  rt::KernelOp norm, product, sum, cast; // cast may be null
  Value x, dy, result;
};

bool isFloat(Type t) { return t.isF32() || t.isBF16() || t.isF16(); }

/// The weight gradient ending at `sum`, if it is one: sum = reduce_sum over
/// every dim but the last of product = dy * norm(x), norm an rms_norm or
/// layer_norm with neither weight nor bias; each intermediate read by the
/// next kernel only, all on one stream, and neither x nor dy written in
/// between.
std::optional<Match> match(rt::KernelOp sum) {
  if (sum.getKernelId() != KernelId::ReduceSum || sum.getInputs().size() != 1 ||
      sum.getOutputs().size() != 1)
    return std::nullopt;
  auto inType = cast<MemRefType>(sum.getInputs()[0].getType());
  auto outType = cast<MemRefType>(sum.getOutputs()[0].getType());
  if (inType.getRank() < 2 || outType.getRank() != 1 ||
      outType.getDimSize(0) != inType.getShape().back())
    return std::nullopt;
  rt::KernelOp product = writerOf(sum.getInputs()[0]);
  if (!product || product.getKernelId() != KernelId::Mul || product.getInputs().size() != 2 ||
      product.getOutputs().size() != 1)
    return std::nullopt;
  for (int side : {0, 1}) {
    rt::KernelOp norm = writerOf(product.getInputs()[side]);
    if (!norm || (norm.getKernelId() != KernelId::RmsNorm &&
                  norm.getKernelId() != KernelId::LayerNorm) ||
        norm.getInputs().size() != 1 || norm.getOutputs().size() != 1)
      continue;
    Match m{norm, product, sum, nullptr, norm.getInputs()[0], product.getInputs()[1 - side],
            sum.getOutputs()[0]};
    auto xType = cast<MemRefType>(m.x.getType());
    if (xType != m.dy.getType() || xType.getShape() != inType.getShape() ||
        !isFloat(xType.getElementType()))
      return std::nullopt;
    Value normalized = rootOf(norm.getOutputs()[0]), product0 = rootOf(product.getOutputs()[0]);
    if (!normalized.getDefiningOp<rt::AllocOp>() || !product0.getDefiningOp<rt::AllocOp>() ||
        !usedOnlyBy(normalized, {norm, product}) || !usedOnlyBy(product0, {product, sum}))
      return std::nullopt;
    if (norm.getStreamAttr() != sum.getStreamAttr() ||
        product.getStreamAttr() != sum.getStreamAttr() || !norm->isBeforeInBlock(product) ||
        !product->isBeforeInBlock(sum))
      return std::nullopt;
    // The fused call reads x and dy where the sum was.
    Value xRoot = rootOf(m.x), dyRoot = rootOf(m.dy);
    for (Operation *op = norm->getNextNode(); op != sum.getOperation(); op = op->getNextNode())
      if (auto kernel = dyn_cast<rt::KernelOp>(op))
        for (Value out : kernel.getOutputs())
          if (rootOf(out) == xRoot || rootOf(out) == dyRoot)
            return std::nullopt;
    // A cast of the gradient (to the f32 master weight's type) is written
    // by the call itself.
    Value result = rootOf(m.result);
    if (result == m.result && result.getDefiningOp<rt::AllocOp>())
      if (rt::KernelOp user = [&]() -> rt::KernelOp {
            rt::KernelOp only;
            for (Operation *u : result.getUsers())
              if (u != sum.getOperation()) {
                if (only || !isa<rt::KernelOp>(u))
                  return nullptr;
                only = cast<rt::KernelOp>(u);
              }
            return only;
          }();
          user && user.getKernelId() == KernelId::Cast && user.getInputs().size() == 1 &&
          user.getOutputs().size() == 1 && user.getStreamAttr() == sum.getStreamAttr() &&
          isFloat(cast<MemRefType>(user.getOutputs()[0].getType()).getElementType())) {
        // Its result buffer must exist where the sum was (an alloc can move).
        Operation *def = user.getOutputs()[0].getDefiningOp();
        if (!def || isa<rt::AllocOp>(def) || def->isBeforeInBlock(sum))
          m.cast = user;
      }
    return m;
  }
  return std::nullopt;
}

void fuse(Match &m) {
  OpBuilder b(m.sum);
  Location loc = m.sum.getLoc();
  auto xType = cast<MemRefType>(m.x.getType());
  const int64_t cols = xType.getShape().back();
  const int64_t rows = cols == 0 ? 0 : xType.getNumElements() / cols;
  Value scratch = b.create<rt::AllocOp>(
      loc, MemRefType::get({normWeightGradScratch(rows, cols)}, b.getF32Type()), IntegerAttr(),
      b.getStringAttr("norm_weight_grad.scratch"));
  SmallVector<NamedAttribute> attrs{b.getNamedAttr("epsilon", m.norm.getAttrs().get("epsilon"))};
  if (m.norm.getKernelId() == KernelId::LayerNorm)
    attrs.push_back(b.getNamedAttr("centered", b.getI64IntegerAttr(1)));
  Value dw = m.cast ? m.cast.getOutputs()[0] : m.result;
  if (Operation *def = dw.getDefiningOp(); def && isa<rt::AllocOp>(def) && !def->isBeforeInBlock(m.sum))
    def->moveBefore(scratch.getDefiningOp());
  b.create<rt::KernelOp>(loc, b.getStringAttr("nn.norm_weight_grad"), ValueRange{m.x, m.dy},
                         ValueRange{dw, scratch}, b.getDictionaryAttr(attrs),
                         m.sum.getStreamAttr());
  SmallVector<Value> dead{m.sum.getInputs()[0], m.product.getInputs()[0],
                          m.product.getInputs()[1], m.norm.getOutputs()[0]};
  if (m.cast) {
    dead.push_back(m.result);
    m.cast.erase();
  }
  m.sum.erase();
  m.product.erase();
  m.norm.erase();
  eraseDeadBuffers(dead);
}

struct FuseNormWeightGradPass : impl::FuseNormWeightGradBase<FuseNormWeightGradPass> {
  void runOnOperation() override {
    getOperation().walk([](rt::ProgramOp program) {
      SmallVector<Match> matches;
      for (Operation &op : program.getBlock())
        if (auto kernel = dyn_cast<rt::KernelOp>(op))
          if (std::optional<Match> m = match(kernel))
            matches.push_back(*m);
      for (Match &m : matches)
        fuse(m);
    });
  }
};

} // namespace
} // namespace loom
