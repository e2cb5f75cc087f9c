// --loom-fuse-swiglu: the SwiGLU product (silu of the gate times the up
// projection) and its gradients (two products and silu's gradient) become
// one nn.swiglu and one nn.swiglu_grad call. See Passes.td.

#include "passes/fusion/Passes.h"
#include "passes/fusion/RtBuffers.h"

#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseMap.h"

namespace loom {
#define GEN_PASS_DEF_FUSESWIGLU
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

using fusion::rootOf;
using fusion::usedOnlyBy;
using fusion::writerOf;

bool isKernel(rt::KernelOp k, KernelId id, size_t inputs) {
  return k && k.getKernelId() == id && k.getInputs().size() == inputs &&
         k.getOutputs().size() == 1 && (!k.getAttrs() || k.getAttrs().empty());
}

/// The kernels reading `buffer` (or a view of it), other than its writer.
SmallVector<rt::KernelOp> readersOf(Value buffer) {
  SmallVector<rt::KernelOp> readers;
  SmallVector<Value> views{rootOf(buffer)};
  while (!views.empty()) {
    Value v = views.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (auto alias = dyn_cast<rt::AliasOp>(user))
        views.push_back(alias.getResult());
      else if (auto k = dyn_cast<rt::KernelOp>(user);
               k && llvm::is_contained(k.getInputs(), v) && !llvm::is_contained(readers, k))
        readers.push_back(k);
    }
  }
  return readers;
}

struct FuseSwigluPass : impl::FuseSwigluBase<FuseSwigluPass> {
  llvm::DenseMap<Operation *, int64_t> order;

  int64_t at(Operation *op) const { return order.lookup(op); }
  /// Whether `buffer` holds its value by the time `op` runs: written by a
  /// kernel before it, or by none (an input, a parameter).
  bool readyBefore(Value buffer, Operation *op) const {
    rt::KernelOp w = writerOf(buffer);
    return !w || (w->getBlock() == op->getBlock() && at(w) < at(op));
  }
  bool sameShapeAndType(ArrayRef<Value> values) const {
    for (Value v : values)
      if (v.getType() != values.front().getType())
        return false;
    return true;
  }
  /// Moves the buffer `out` is declared by (and its views) before `op`.
  void declareBefore(Value out, Operation *op) {
    Operation *def = rootOf(out).getDefiningOp();
    if (def && def->getBlock() == op->getBlock() && at(def) > at(op)) {
      def->moveBefore(op);
      order[def] = at(op) - 1;
    }
    if (auto alias = out.getDefiningOp<rt::AliasOp>(); alias && at(alias) > at(op)) {
      alias->moveBefore(op);
      order[alias] = at(op) - 1;
    }
  }

  void runOnOperation() override {
    getOperation().walk([&](Block *block) {
      int64_t i = 0;
      for (Operation &op : *block)
        order[&op] = 2 * i++; // even: room for moved declarations
    });
    SmallVector<rt::KernelOp> siluGrads, silus;
    getOperation().walk([&](rt::KernelOp k) {
      if (isKernel(k, KernelId::SiluGrad, 2))
        siluGrads.push_back(k);
      if (isKernel(k, KernelId::Silu, 1))
        silus.push_back(k);
    });
    // The gradients first: they find s as silu's own output.
    for (rt::KernelOp k : siluGrads)
      fuseGradient(k);
    for (rt::KernelOp k : silus)
      fuseForward(k);
  }

  /// silu(g) -> s; mul(s, u) -> h  ==>  swiglu(g, u) -> (s, h), where the
  /// product ran (u is made after silu in a Llama MLP).
  void fuseForward(rt::KernelOp silu) {
    Value g = silu.getInputs()[0], s = silu.getOutputs()[0];
    rt::KernelOp mul;
    for (rt::KernelOp r : readersOf(s)) {
      if (!isKernel(r, KernelId::Mul, 2) || r->getBlock() != silu->getBlock() ||
          r.getStreamAttr() != silu.getStreamAttr())
        continue;
      if (!mul || at(r) < at(mul))
        mul = r; // the first product reading s: the forward's
    }
    if (!mul || at(mul) < at(silu))
      return;
    Value u = mul.getInputs()[0] == s ? mul.getInputs()[1] : mul.getInputs()[0];
    Value h = mul.getOutputs()[0];
    if (u == s || !sameShapeAndType({g, s, u, h}) || !readyBefore(u, mul))
      return;
    // Nothing between silu and the product may read s (it is written later
    // now), and g must still hold its value there.
    for (rt::KernelOp r : readersOf(s))
      if (r != mul && at(r) < at(mul))
        return;
    if (rt::KernelOp w = writerOf(g); w && at(w) > at(silu))
      return;
    declareBefore(s, mul);
    OpBuilder b(mul);
    auto fused = b.create<rt::KernelOp>(mul.getLoc(), b.getStringAttr(kernelName(KernelId::Swiglu)),
                                        ValueRange{g, u}, ValueRange{s, h},
                                        b.getDictionaryAttr({}), mul.getStreamAttr());
    order[fused] = at(mul);
    order.erase(silu);
    order.erase(mul);
    silu.erase();
    mul.erase();
  }

  /// mul(dy, u) -> a; mul(dy, s) -> du; silu_grad(g, a) -> dg, s = silu(g)
  ///   ==>  swiglu_grad(g, u, s, dy) -> (dg, du), where the first product ran.
  void fuseGradient(rt::KernelOp siluGrad) {
    Value g = siluGrad.getInputs()[0], a = siluGrad.getInputs()[1];
    Value dg = siluGrad.getOutputs()[0];
    rt::KernelOp first = writerOf(a);
    if (!isKernel(first, KernelId::Mul, 2) || !rootOf(a).getDefiningOp<rt::AllocOp>() ||
        !usedOnlyBy(rootOf(a), {first, siluGrad}))
      return;
    // s: the silu of g.
    Value s;
    for (rt::KernelOp r : readersOf(g))
      if (isKernel(r, KernelId::Silu, 1))
        s = r.getOutputs()[0];
    if (!s)
      return;
    // The other product reads dy and s; dy is one of the first's operands.
    rt::KernelOp second;
    Value dy, u;
    for (int i = 0; i < 2 && !second; ++i) {
      Value d = first.getInputs()[i];
      for (rt::KernelOp r : readersOf(d))
        if (r != first && isKernel(r, KernelId::Mul, 2) &&
            ((r.getInputs()[0] == d && r.getInputs()[1] == s) ||
             (r.getInputs()[1] == d && r.getInputs()[0] == s))) {
          second = r;
          dy = d;
          u = first.getInputs()[1 - i];
        }
    }
    if (!second)
      return;
    Value du = second.getOutputs()[0];
    for (rt::KernelOp k : {first, second})
      if (k->getBlock() != siluGrad->getBlock() || k.getStreamAttr() != siluGrad.getStreamAttr())
        return;
    if (!sameShapeAndType({g, u, s, dy, dg, du, a}))
      return;
    rt::KernelOp place = at(first) < at(second) ? first : second;
    for (Value in : {g, u, s, dy})
      if (!readyBefore(in, place))
        return;
    // The outputs are written earlier now: nothing before their old writers
    // (and after `place`) may read or write them.
    for (Value out : {dg, du})
      for (rt::KernelOp r : readersOf(out))
        if (at(r) < at(place))
          return;
    declareBefore(dg, place);
    declareBefore(du, place);
    OpBuilder b(place);
    auto fused = b.create<rt::KernelOp>(
        place.getLoc(), b.getStringAttr(kernelName(KernelId::SwigluGrad)),
        ValueRange{g, u, s, dy}, ValueRange{dg, du}, b.getDictionaryAttr({}),
        place.getStreamAttr());
    order[fused] = at(place);
    Value aRoot = rootOf(a);
    for (rt::KernelOp k : {first, second, siluGrad}) {
      order.erase(k);
      k.erase();
    }
    SmallVector<Value> dead{a, aRoot};
    fusion::eraseDeadBuffers(dead);
  }
};

} // namespace
} // namespace loom
