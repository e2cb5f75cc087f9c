// --loom-fuse-casts: a run of consecutive nn.cast calls with one source and
// one destination type becomes one nn.cast_multi call. See Passes.td.

#include "passes/fusion/Passes.h"
#include "passes/fusion/RtBuffers.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/DenseSet.h"

namespace loom {
#define GEN_PASS_DEF_FUSECASTS
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

using fusion::rootOf;

Type elementOf(Value v) { return cast<MemRefType>(v.getType()).getElementType(); }

bool isPlainCast(rt::KernelOp kernel) {
  return kernel.getKernelId() == KernelId::Cast && kernel.getInputs().size() == 1 &&
         kernel.getOutputs().size() == 1 &&
         elementOf(kernel.getInputs()[0]) != elementOf(kernel.getOutputs()[0]);
}

/// Whether `next` may join a run that began with `first`: the same types and
/// stream, and it reads nothing the run writes.
bool joins(rt::KernelOp first, rt::KernelOp next, const llvm::DenseSet<Value> &written) {
  return elementOf(first.getInputs()[0]) == elementOf(next.getInputs()[0]) &&
         elementOf(first.getOutputs()[0]) == elementOf(next.getOutputs()[0]) &&
         first.getStreamAttr() == next.getStreamAttr() &&
         !written.contains(rootOf(next.getInputs()[0])) &&
         !written.contains(rootOf(next.getOutputs()[0]));
}

void fuse(SmallVector<rt::KernelOp> &run) {
  if (run.size() >= 2) {
    // At the last cast: every input is written before it and every output
    // declared; nothing but buffer declarations lies between the casts.
    rt::KernelOp last = run.back();
    OpBuilder b(last);
    SmallVector<Value> inputs, outputs;
    for (rt::KernelOp c : run) {
      inputs.push_back(c.getInputs()[0]);
      outputs.push_back(c.getOutputs()[0]);
    }
    b.create<rt::KernelOp>(last.getLoc(), b.getStringAttr("nn.cast_multi"), inputs, outputs,
                           b.getDictionaryAttr({}), last.getStreamAttr());
    for (rt::KernelOp c : run)
      c.erase();
  }
  run.clear();
}

struct FuseCastsPass : impl::FuseCastsBase<FuseCastsPass> {
  void runOnOperation() override {
    getOperation().walk([](rt::ProgramOp program) {
      SmallVector<rt::KernelOp> run;
      llvm::DenseSet<Value> written;
      for (Operation &op : llvm::make_early_inc_range(program.getBlock())) {
        if (isa<rt::AllocOp, rt::ParamOp, rt::AliasOp, rt::InputOp>(op))
          continue;
        auto kernel = dyn_cast<rt::KernelOp>(op);
        if (kernel && isPlainCast(kernel)) {
          if (!run.empty() && !joins(run.front(), kernel, written)) {
            fuse(run);
            written.clear();
          }
          run.push_back(kernel);
          written.insert(rootOf(kernel.getOutputs()[0]));
          continue;
        }
        fuse(run);
        written.clear();
      }
      fuse(run);
    });
  }
};

} // namespace
} // namespace loom
