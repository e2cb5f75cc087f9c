// --loom-fuse-adamw: runs of in-place nn.adamw calls (with their gradient
// clipping multiplies) become one nn.adamw_multi call.

#include "passes/fusion/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

namespace loom {
#define GEN_PASS_DEF_FUSEADAMW
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

bool isScalarF32(Value buffer) {
  auto type = dyn_cast<MemRefType>(buffer.getType());
  return type && type.getElementType().isF32() && type.getNumElements() == 1;
}

/// One update of the run: the adamw call and the clipping multiply whose
/// result is its gradient, if any.
struct Update {
  rt::KernelOp adamw;
  rt::KernelOp scaleMul; // may be null
  Value grad, scale;     // the unscaled gradient; the scale or null
};

/// The update `adamw` would join a run with, if it can: in place (results
/// are the parameter's and moments' own buffers), f32 scalars for lr/step.
std::optional<Update> asUpdate(rt::KernelOp adamw, rt::KernelOp previous) {
  if (adamw.getKernelId() != KernelId::Adamw || adamw.getInputs().size() != 6 ||
      adamw.getOutputs().size() != 3)
    return std::nullopt;
  ValueRange in = adamw.getInputs(), out = adamw.getOutputs();
  if (out[0] != in[0] || out[1] != in[2] || out[2] != in[3])
    return std::nullopt;
  Update update{adamw, nullptr, in[1], nullptr};
  // `grad = g * scale` written just before and read by nothing else.
  if (previous && previous.getKernelId() == KernelId::Mul && previous.getOutputs().size() == 1 &&
      previous.getOutputs()[0] == in[1] && previous.getInputs().size() == 2 &&
      llvm::all_of(in[1].getUsers(), [&](Operation *user) {
        return user == previous.getOperation() || user == adamw.getOperation();
      })) {
    Value a = previous.getInputs()[0], b = previous.getInputs()[1];
    if (isScalarF32(a) && !isScalarF32(b))
      std::swap(a, b);
    if (isScalarF32(b) && a.getType() == in[1].getType() && in[1].getDefiningOp<rt::AllocOp>()) {
      update.scaleMul = previous;
      update.grad = a;
      update.scale = b;
    }
  }
  return update;
}

/// Whether `b` may join a run that began with `a`.
bool compatible(Update a, Update b) {
  ValueRange ia = a.adamw.getInputs(), ib = b.adamw.getInputs();
  if (ia[4] != ib[4] || ia[5] != ib[5] || a.scale != b.scale ||
      a.adamw.getStreamAttr() != b.adamw.getStreamAttr())
    return false;
  for (const char *name : {"beta1", "beta2", "epsilon"})
    if (a.adamw.getAttrs().get(name) != b.adamw.getAttrs().get(name))
      return false;
  return true;
}

double weightDecay(rt::KernelOp adamw) {
  if (auto f = dyn_cast_or_null<FloatAttr>(adamw.getAttrs().get("weight_decay")))
    return f.getValueAsDouble();
  if (auto i = dyn_cast_or_null<IntegerAttr>(adamw.getAttrs().get("weight_decay")))
    return static_cast<double>(i.getInt());
  return 0.0;
}

void fuse(llvm::MutableArrayRef<Update> run) {
  if (run.size() < 2)
    return;
  rt::KernelOp last = run.back().adamw;
  OpBuilder b(last);
  SmallVector<Value> inputs{last.getInputs()[4], last.getInputs()[5]};
  if (run.front().scale)
    inputs.push_back(run.front().scale);
  SmallVector<Value> outputs;
  SmallVector<double> decays;
  for (Update u : run) {
    ValueRange in = u.adamw.getInputs();
    inputs.append({in[0], u.grad, in[2], in[3]});
    outputs.append({in[0], in[2], in[3]});
    decays.push_back(weightDecay(u.adamw));
  }
  SmallVector<NamedAttribute> attrs;
  for (const char *name : {"beta1", "beta2", "epsilon"})
    if (Attribute value = last.getAttrs().get(name))
      attrs.push_back(b.getNamedAttr(name, value));
  attrs.push_back(b.getNamedAttr("has_scale", b.getI64IntegerAttr(run.front().scale ? 1 : 0)));
  attrs.push_back(b.getNamedAttr("weight_decays", b.getDenseF64ArrayAttr(decays)));
  b.create<rt::KernelOp>(last.getLoc(), b.getStringAttr("nn.adamw_multi"), inputs, outputs,
                         b.getDictionaryAttr(attrs), last.getStreamAttr());
  for (Update u : run) {
    u.adamw.erase();
    if (u.scaleMul) {
      Value scaled = u.scaleMul.getOutputs()[0];
      u.scaleMul.erase();
      if (scaled.use_empty())
        scaled.getDefiningOp()->erase();
    }
  }
}

struct FuseAdamWPass : impl::FuseAdamWBase<FuseAdamWPass> {
  void runOnOperation() override {
    getOperation().walk([](rt::ProgramOp program) {
      // A run is broken by anything but declarations (buffers), the updates
      // and their clipping multiplies: moving an update later is then safe,
      // since nothing in between touches its buffers.
      SmallVector<SmallVector<Update>> runs(1);
      rt::KernelOp previous;
      for (Operation &op : program.getBlock()) {
        if (isa<rt::AllocOp, rt::ParamOp, rt::AliasOp>(op))
          continue;
        auto kernel = dyn_cast<rt::KernelOp>(op);
        std::optional<Update> update;
        if (kernel)
          update = asUpdate(kernel, previous);
        if (update) {
          // A multiply not folded into this update is ordinary work, and a
          // run cannot move across it.
          if (previous && previous.getKernelId() == KernelId::Mul && !update->scaleMul)
            runs.emplace_back();
          if (!runs.back().empty() && !compatible(runs.back().front(), *update))
            runs.emplace_back();
          runs.back().push_back(*update);
          previous = nullptr;
          continue;
        }
        bool pendingMul = kernel && kernel.getKernelId() == KernelId::Mul;
        if (previous || !pendingMul)
          runs.emplace_back(); // `previous` was not an update's multiply
        previous = pendingMul ? kernel : nullptr;
      }
      for (auto &run : runs)
        fuse(run);
    });
  }
};

} // namespace
} // namespace loom
