// --loom-fuse-sum-squares: the gradient norm's sums of squares -- per
// gradient a square, a row sum and a sum of the rows -- become one
// nn.sum_squares_multi call per run. See Passes.td.

#include "passes/fusion/Passes.h"
#include "passes/fusion/RtBuffers.h"
#include "runtime/abi/SumSquares.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/DenseSet.h"

namespace loom {
#define GEN_PASS_DEF_FUSESUMSQUARES
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

using fusion::eraseDeadBuffers;
using fusion::rootOf;
using fusion::usedOnlyBy;
using fusion::writerOf;

bool isF32Scalar(Value buffer) {
  auto type = dyn_cast<MemRefType>(buffer.getType());
  return type && type.getElementType().isF32() && type.getRank() == 0;
}

/// One sum of squares: square = x * x, [rows = reduce_sum(square)],
/// sum = reduce_sum(rows or square) to an f32 scalar. Two reductions in a
/// row always sum everything, whichever dims the first one takes.
struct Chain {
  rt::KernelOp square, rows, sum; // rows may be null
  Value x, result;
};

std::optional<Chain> asChainEnd(rt::KernelOp sum) {
  if (sum.getKernelId() != KernelId::ReduceSum || sum.getInputs().size() != 1 ||
      sum.getOutputs().size() != 1 || !isF32Scalar(sum.getOutputs()[0]))
    return std::nullopt;
  Chain chain{nullptr, nullptr, sum, nullptr, sum.getOutputs()[0]};
  rt::KernelOp producer = writerOf(sum.getInputs()[0]);
  if (producer && producer.getKernelId() == KernelId::ReduceSum &&
      producer.getInputs().size() == 1 && producer.getOutputs().size() == 1) {
    chain.rows = producer;
    producer = writerOf(producer.getInputs()[0]);
  }
  if (!producer || producer.getKernelId() != KernelId::Mul || producer.getInputs().size() != 2 ||
      producer.getOutputs().size() != 1 || producer.getInputs()[0] != producer.getInputs()[1])
    return std::nullopt;
  chain.square = producer;
  chain.x = producer.getInputs()[0];
  auto xType = cast<MemRefType>(chain.x.getType());
  if (!xType.getElementType().isF32() && !xType.getElementType().isBF16() &&
      !xType.getElementType().isF16())
    return std::nullopt;
  // The square and the row sums feed nothing else, and every kernel of the
  // chain shares a stream.
  SmallVector<Operation *> members{chain.square, chain.sum};
  if (chain.rows)
    members.push_back(chain.rows);
  Value squared = rootOf(chain.square.getOutputs()[0]);
  if (!squared.getDefiningOp<rt::AllocOp>() || !usedOnlyBy(squared, members))
    return std::nullopt;
  if (chain.rows) {
    Value rows = rootOf(chain.rows.getOutputs()[0]);
    if (!rows.getDefiningOp<rt::AllocOp>() || !usedOnlyBy(rows, members))
      return std::nullopt;
  }
  for (Operation *member : members)
    if (cast<rt::KernelOp>(member).getStreamAttr() != sum.getStreamAttr())
      return std::nullopt;
  if (!chain.square->isBeforeInBlock(chain.rows ? chain.rows : sum) ||
      (chain.rows && !chain.rows->isBeforeInBlock(sum)))
    return std::nullopt;
  return chain;
}

bool isScalarAdd(rt::KernelOp kernel) {
  return kernel.getKernelId() == KernelId::Add && kernel.getOutputs().size() == 1 &&
         isF32Scalar(kernel.getOutputs()[0]) &&
         llvm::all_of(kernel.getInputs(), [](Value v) { return isF32Scalar(v); });
}

/// A run: chains whose kernels move to one fused call, and the scalar adds
/// (the norm's running total) that move after it. Nothing between their
/// places and the call touches what they read or write.
struct Run {
  SmallVector<Chain> chains;
  SmallVector<rt::KernelOp> adds;
  llvm::DenseSet<Value> produced; // written by moved kernels: read by none in between
  llvm::DenseSet<Value> read;     // read by moved kernels: written by none in between
  StringAttr stream;
};

void addValues(llvm::DenseSet<Value> &set, ValueRange values) {
  for (Value v : values)
    set.insert(rootOf(v));
}

bool touches(Operation *op, const Run &run) {
  auto kernel = dyn_cast<rt::KernelOp>(op);
  if (!kernel) {
    // Collectives and copies: by their buffers (any may be written).
    // Outputs end the run.
    if (isa<rt::OutputOp>(op))
      return true;
    return llvm::any_of(op->getOperands(), [&](Value v) {
      return run.produced.contains(rootOf(v)) || run.read.contains(rootOf(v));
    });
  }
  if (kernel.getStreamAttr() != run.stream)
    return true;
  for (Value v : kernel.getInputs())
    if (run.produced.contains(rootOf(v)))
      return true;
  for (Value v : kernel.getOutputs())
    if (run.produced.contains(rootOf(v)) || run.read.contains(rootOf(v)))
      return true;
  return false;
}

/// The adds of the run, if they are exactly a running total of its sums
/// (((s1 + s2) + s3) + ...), each partial total read by the next add only:
/// the last add's result.
Value runningTotal(const Run &run) {
  if (run.chains.size() < 2 || run.adds.size() != run.chains.size() - 1)
    return nullptr;
  // Each sum and partial total: its writer and one reader.
  auto twoUses = [](Value v) { return llvm::range_size(v.getUsers()) == 2; };
  llvm::DenseSet<Value> sums;
  for (const Chain &c : run.chains)
    if (!twoUses(c.result) || !sums.insert(c.result).second)
      return nullptr;
  Value acc;
  for (rt::KernelOp add : run.adds) {
    Value a = add.getInputs()[0], b = add.getInputs()[1];
    if (acc && b == acc)
      std::swap(a, b);
    bool ok = acc ? a == acc && sums.erase(b) : sums.erase(a) && sums.erase(b);
    if (!ok || (acc && !twoUses(acc)))
      return nullptr;
    acc = add.getOutputs()[0];
  }
  return sums.empty() ? acc : nullptr;
}

void fuse(Run &run, Operation *before, Block &block) {
  if (run.chains.empty())
    return;
  OpBuilder b(block.getParentOp()->getContext());
  if (before)
    b.setInsertionPoint(before);
  else
    b.setInsertionPointToEnd(&block);
  Location loc = run.chains.back().sum.getLoc();
  SmallVector<int64_t> sizes;
  SmallVector<Value> inputs, outputs;
  for (const Chain &c : run.chains) {
    inputs.push_back(c.x);
    outputs.push_back(c.result);
    sizes.push_back(cast<MemRefType>(c.x.getType()).getNumElements());
  }
  // A running total of the sums is the call's one result; its adds go.
  Value total = runningTotal(run);
  if (total)
    outputs.assign({total});
  Value scratch = b.create<rt::AllocOp>(
      loc, MemRefType::get({sumSquaresScratch(sizes)}, b.getF64Type()), IntegerAttr(),
      b.getStringAttr("sum_squares.partials"));
  outputs.push_back(scratch);
  SmallVector<NamedAttribute> attrs;
  if (total)
    attrs.push_back(b.getNamedAttr("total", b.getI64IntegerAttr(1)));
  b.create<rt::KernelOp>(loc, b.getStringAttr("nn.sum_squares_multi"), inputs, outputs,
                         b.getDictionaryAttr(attrs), run.stream);
  SmallVector<Value> dead;
  for (rt::KernelOp add : run.adds) {
    if (total) {
      llvm::append_range(dead, add.getInputs());
      add.erase();
    } else {
      add->moveBefore(b.getInsertionBlock(), b.getInsertionPoint());
    }
  }
  for (Chain &c : run.chains) {
    // The square's and row sums' buffers and their views go with them.
    dead.append({c.sum.getInputs()[0], c.square.getOutputs()[0]});
    if (c.rows)
      dead.append({c.rows.getInputs()[0], c.rows.getOutputs()[0]});
    c.sum.erase();
    if (c.rows)
      c.rows.erase();
    c.square.erase();
  }
  eraseDeadBuffers(dead);
  run = Run();
}

struct FuseSumSquaresPass : impl::FuseSumSquaresBase<FuseSumSquaresPass> {
  void runOnOperation() override {
    getOperation().walk([](rt::ProgramOp program) {
      Block &block = program.getBlock();
      // The chains, found from their ends; their first kernels mark where
      // each begins.
      llvm::DenseMap<Operation *, Chain> chainOf; // by any member
      for (Operation &op : block)
        if (auto kernel = dyn_cast<rt::KernelOp>(op))
          if (std::optional<Chain> chain = asChainEnd(kernel)) {
            chainOf[chain->square] = *chain;
            if (chain->rows)
              chainOf[chain->rows] = *chain;
            chainOf[chain->sum] = *chain;
          }
      if (chainOf.empty())
        return;
      // Walk in order. A chain joins the run at its sum, once each of its
      // kernels could move there (an open chain is dropped when something
      // between its kernels touches its buffers); a fused call goes before
      // the first op that touches what the run moves.
      Run run;
      llvm::DenseSet<Operation *> open, dropped;
      auto openTouched = [&](Operation *op) {
        for (Operation *first : open) {
          Chain &c = chainOf[first];
          Run probe;
          probe.stream = c.sum.getStreamAttr();
          addValues(probe.produced, c.square.getOutputs());
          if (c.rows)
            addValues(probe.produced, c.rows.getOutputs());
          addValues(probe.read, c.square.getInputs());
          if (touches(op, probe))
            dropped.insert(first);
        }
      };
      for (Operation &op : llvm::make_early_inc_range(block)) {
        if (isa<rt::AllocOp, rt::ParamOp, rt::AliasOp, rt::InputOp>(op))
          continue;
        auto kernel = dyn_cast<rt::KernelOp>(op);
        if (auto it = chainOf.find(&op); kernel && it != chainOf.end()) {
          Chain c = it->second;
          if (kernel == c.square) {
            open.insert(c.square);
            continue;
          }
          if (kernel == c.rows)
            continue;
          // The chain's sum: it joins the run if nothing dropped it.
          open.erase(c.square);
          if (dropped.contains(c.square))
            continue;
          if (!run.chains.empty() && run.stream != c.sum.getStreamAttr())
            fuse(run, &op, block);
          run.stream = c.sum.getStreamAttr();
          run.chains.push_back(c);
          addValues(run.produced, c.sum.getOutputs());
          addValues(run.read, c.square.getInputs());
          continue;
        }
        if (kernel && !run.chains.empty() && isScalarAdd(kernel) && !touchesWrites(kernel, run)) {
          run.adds.push_back(kernel);
          addValues(run.produced, kernel.getOutputs());
          addValues(run.read, kernel.getInputs());
          openTouched(&op);
          continue;
        }
        openTouched(&op);
        if (!run.chains.empty() && touches(&op, run))
          fuse(run, &op, block);
      }
      fuse(run, nullptr, block);
    });
  }

  /// An add may join the run unless it overwrites what the run reads or
  /// has produced (it reads the run's sums: that is why it moves along).
  static bool touchesWrites(rt::KernelOp add, const Run &run) {
    for (Value v : add.getOutputs())
      if (run.produced.contains(rootOf(v)) || run.read.contains(rootOf(v)))
        return true;
    return add.getStreamAttr() != run.stream;
  }
};

} // namespace
} // namespace loom
