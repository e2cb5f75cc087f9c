// --loom-plan-memory: static, liveness-based arena offsets with reuse (see
// Passes.td for before/after IR).

#include "passes/memory/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

namespace loom {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/memory/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

struct Lifetime {
  int64_t first = INT64_MAX; // program position of the first use
  int64_t last = -1;         // ... and of the last use (inclusive)
  int64_t bytes = 0;         // aligned size
  int64_t offset = -1;
};

int64_t alignUp(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

struct PlanMemoryPass : public loom::impl::PlanMemoryBase<PlanMemoryPass> {
  using PlanMemoryBase::PlanMemoryBase;

  void runOnOperation() override {
    // Read the option's value: streamed as is, the option prints as a char.
    int64_t align = alignment;
    if (align <= 0 || (align & (align - 1)) != 0) {
      getOperation().emitError("alignment must be a power of two, got ")
          << align;
      return signalPassFailure();
    }
    getOperation().walk([&](rt::ProgramOp program) { plan(program); });
  }

  void plan(rt::ProgramOp program) {
    Block &block = program.getBlock();
    int64_t end = static_cast<int64_t>(block.getOperations().size());
    int64_t persistentBytes = 0;
    llvm::MapVector<Value, Lifetime> scratch;

    // Persistent buffers (parameters, then state kept across steps): one
    // after another, in program order.
    for (Operation &op : block)
      if (auto param = dyn_cast<rt::ParamOp>(op)) {
        rt::setPlannedOffset(param.getResult(), persistentBytes);
        persistentBytes += alignUp(
            std::max<int64_t>(rt::bufferBytes(param.getType()), 1), alignment);
      }
    for (Operation &op : block)
      if (auto alloc = dyn_cast<rt::AllocOp>(op); alloc && alloc.getPersistent()) {
        rt::setPlannedOffset(alloc.getResult(), persistentBytes);
        persistentBytes += alignUp(
            std::max<int64_t>(rt::bufferBytes(alloc.getType()), 1), alignment);
      }

    // Host buffers (offloaded activations) get an arena of their own,
    // planned the same way.
    llvm::MapVector<Value, Lifetime> host;
    int64_t position = 0;
    for (Operation &op : block) {
      if (isa<rt::InputOp, rt::AllocOp>(op) && !rt::isPersistent(op.getResult(0))) {
        Lifetime &life = (rt::isHost(op.getResult(0)) ? host : scratch)[op.getResult(0)];
        life.bytes = alignUp(
            std::max<int64_t>(rt::bufferBytes(cast<MemRefType>(op.getResult(0).getType())), 1),
            alignment);
        if (isa<rt::InputOp>(op))
          life.first = 0; // filled by the caller before the step
      }
      for (Value operand : op.getOperands()) {
        Value root = rt::rootBuffer(operand);
        auto it = scratch.find(root);
        if (it == scratch.end()) {
          it = host.find(root);
          if (it == host.end())
            continue;
        }
        it->second.first = std::min(it->second.first, position);
        it->second.last = std::max(it->second.last, position);
        if (isa<rt::OutputOp>(op))
          it->second.last = end; // read by the caller after the step
      }
      ++position;
    }
    int64_t unplanned = 0;
    int64_t peak = place(scratch, end, unplanned);
    int64_t hostUnplanned = 0;
    int64_t hostPeak = place(host, end, hostUnplanned);

    Builder b(program.getContext());
    if (host.empty())
      program.setArenaSizesAttr(b.getDenseI64ArrayAttr({persistentBytes, peak}));
    else
      program.setArenaSizesAttr(b.getDenseI64ArrayAttr({persistentBytes, peak, hostPeak}));
    program.setScratchUnplannedBytesAttr(b.getI64IntegerAttr(unplanned));
  }

  /// Places `buffers` in one arena: returns its size, and adds every
  /// buffer's bytes to `unplanned` (what they would take side by side).
  int64_t place(llvm::MapVector<Value, Lifetime> &scratch, int64_t end, int64_t &unplanned) {

    // Greedy by size: the largest buffers first, each at the lowest offset
    // free of every already-placed buffer whose lifetime overlaps.
    SmallVector<Lifetime *> order;
    int64_t peak = 0;
    for (auto &entry : scratch) {
      Lifetime &life = entry.second;
      unplanned += life.bytes;
      if (life.last < 0 && !entry.first.getDefiningOp<rt::InputOp>()) {
        // An alloc nothing reads or writes: its bytes may be anyone's. It
        // still needs an offset inside the arena, but must not push live
        // buffers aside (the caller does write unused inputs, so those keep
        // a lifetime at the start).
        life.offset = 0;
        peak = std::max(peak, life.bytes);
        continue;
      }
      if (life.last < 0) // an input nothing reads
        life.first = life.last = 0;
      life.first = std::min(life.first, life.last);
      order.push_back(&life);
    }
    llvm::stable_sort(order, [](const Lifetime *a, const Lifetime *b) {
      return a->bytes > b->bytes;
    });
    // Placed buffers are indexed by the windows of kWindow program
    // positions their lifetimes touch, so that finding the ones that overlap
    // a lifetime looks only at its own windows: with unrolled microbatches
    // most buffers live inside one microbatch, and planning stays linear in
    // their number rather than quadratic.
    constexpr int64_t kWindow = 64;
    SmallVector<SmallVector<int32_t>> windows(end / kWindow + 2);
    SmallVector<Lifetime *> placed;
    SmallVector<int32_t> seenAt; // per placed buffer: the last query that saw it
    for (Lifetime *life : order) {
      SmallVector<std::pair<int64_t, int64_t>> busy; // [offset, end)
      int32_t query = static_cast<int32_t>(placed.size());
      for (int64_t w = life->first / kWindow; w <= life->last / kWindow; ++w)
        for (int32_t index : windows[w]) {
          Lifetime *other = placed[index];
          if (seenAt[index] == query)
            continue;
          seenAt[index] = query;
          if (other->first <= life->last && life->first <= other->last)
            busy.push_back({other->offset, other->offset + other->bytes});
        }
      llvm::sort(busy);
      int64_t offset = 0;
      for (auto [begin, stop] : busy) {
        if (offset + life->bytes <= begin)
          break;
        offset = std::max(offset, stop);
      }
      life->offset = offset;
      peak = std::max(peak, offset + life->bytes);
      for (int64_t w = life->first / kWindow; w <= life->last / kWindow; ++w)
        windows[w].push_back(static_cast<int32_t>(placed.size()));
      seenAt.push_back(-1);
      placed.push_back(life);
    }
    for (auto &entry : scratch)
      rt::setPlannedOffset(entry.first, entry.second.offset);
    return peak;
  }
};

} // namespace
