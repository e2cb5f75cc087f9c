// --loom-gather-group-rows: expert parallelism's dispatch as a
// data-dependent all-to-all (see Passes.td).

#include "passes/sharding/Passes.h"

#include "dialects/dist/DistDialect.h"
#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"

namespace loom {
#define GEN_PASS_DEF_GATHERGROUPROWS
#include "passes/sharding/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// The block every reader of `rows` works on, where each reads `rows`
/// only at its block's rows and all agree (one offsets value, first group,
/// count and rank offsets), with the block moving along exactly `axes` by
/// `stride` groups a member.
struct Block {
  Value offsets;
  int64_t first = 0, count = 0, stride = 0;
  /// The axes whose row-major index moves the block (rank offsets').
  SmallVector<std::string> axes;
};

std::optional<Block> readersBlock(Value rows, ArrayRef<StringRef> axes) {
  std::optional<Block> block;
  Attribute rankOffsets;
  for (OpOperand &use : rows.getUses()) {
    auto grouped = dyn_cast<nn::GroupedRowsOpInterface>(use.getOwner());
    if (!grouped || !grouped.readsOnlyGroupRows(use.getOperandNumber()))
      return std::nullopt;
    FailureOr<SmallVector<dist::RankOffset>> offsets = dist::getRankOffsets(grouped);
    if (failed(offsets) || offsets->size() != 1 || (*offsets)[0].attr != "group_start" ||
        (*offsets)[0].element != -1 || (*offsets)[0].axes.size() != axes.size())
      return std::nullopt;
    for (StringRef axis : axes)
      if (!llvm::is_contained((*offsets)[0].axes, axis))
        return std::nullopt;
    Block mine{grouped.getGroupOffsets(), grouped.getFirstGroup(), grouped.getGroupCount(),
               (*offsets)[0].stride,
               SmallVector<std::string>((*offsets)[0].axes.begin(), (*offsets)[0].axes.end())};
    if (!block) {
      block = mine;
      rankOffsets = grouped->getAttr(dist::kRankOffsetsAttrName);
    } else if (block->offsets != mine.offsets || block->first != mine.first ||
               block->count != mine.count ||
               rankOffsets != grouped->getAttr(dist::kRankOffsetsAttrName)) {
      return std::nullopt;
    }
  }
  return block;
}

struct GatherGroupRowsPass : public loom::impl::GatherGroupRowsBase<GatherGroupRowsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module->getAttrOfType<dist::MeshAttr>(dist::kMeshAttrName);
    if (!mesh)
      return;
    SmallVector<nn::GatherOp> gathers;
    module.walk([&](nn::GatherOp gather) { gathers.push_back(gather); });
    for (nn::GatherOp gather : gathers)
      rewrite(gather, mesh);
  }

  void rewrite(nn::GatherOp gather, dist::MeshAttr mesh) {
    auto indices = cast<RankedTensorType>(gather.getIndices().getType());
    if (gather.getAxis() != 0 || indices.getRank() != 1)
      return;
    // The all-gathers along dim 0 that make the whole (the tokens may be
    // gathered over one axis, then another): their axes, outermost first,
    // are the row-major order of the rows' holders.
    SmallVector<dist::AllGatherOp> chain;
    Value x = gather.getData();
    while (auto all = x.getDefiningOp<dist::AllGatherOp>()) {
      if (all.getDim() != 0 || (!chain.empty() && !all->hasOneUse()))
        break;
      chain.push_back(all);
      x = all.getInput();
    }
    if (chain.empty())
      return;
    SmallVector<StringRef> axes;
    for (dist::AllGatherOp all : chain)
      for (Attribute axis : all.getAxes())
        axes.push_back(cast<StringAttr>(axis).getValue());
    std::optional<Block> block = readersBlock(gather.getResult(), axes);
    if (!block)
      return;
    auto offsetsType = cast<RankedTensorType>(block->offsets.getType());
    const int64_t groups = offsetsType.getDimSize(0);
    const int64_t members = mesh.groupSize(axes);
    // Member m's coordinates (row-major over `axes`), then its block's index
    // (row-major over the rank offsets' axes).
    auto blockOf = [&](int64_t m) {
      llvm::StringMap<int64_t> coordinate;
      for (size_t i = axes.size(); i-- > 0;) {
        const int64_t size = *mesh.axisSize(axes[i]);
        coordinate[axes[i]] = m % size;
        m /= size;
      }
      int64_t index = 0;
      for (const std::string &axis : block->axes)
        index = index * *mesh.axisSize(axis) + coordinate[axis];
      return index;
    };
    // Every member's block must lie within the groups.
    for (int64_t m = 0; m < members; ++m)
      if (block->first < 0 || block->first + blockOf(m) * block->stride + block->count > groups)
        return;
    // Before its first reader, where the offsets (which the readers take)
    // are computed; the rows' operands come before the gather.
    Operation *first = nullptr;
    for (Operation *user : gather->getUsers()) {
      if (user->getBlock() != gather->getBlock())
        return;
      if (!first || user->isBeforeInBlock(first))
        first = user;
    }
    if (!first)
      return;
    OpBuilder b(first);
    Location loc = gather.getLoc();
    MLIRContext *ctx = b.getContext();
    auto replicated = [&](Operation *op) {
      op->setAttr(dist::kShardingAttrName,
                  b.getArrayAttr({dist::ShardingAttr::replicated(
                      ctx, cast<RankedTensorType>(op->getResult(0).getType()).getRank())}));
      if (std::optional<int64_t> mb = loom::getMicrobatch(gather))
        loom::setMicrobatch(op, *mb);
      if (std::optional<BackwardKind> backward = loom::getBackwardKind(gather))
        loom::setBackwardKind(op, *backward);
    };
    // ranges[p] = (bounds[first + p * stride], bounds[first + p * stride +
    // count]) with bounds = [0, offsets...]: each member's rows.
    Type element = offsetsType.getElementType();
    auto zeroType = RankedTensorType::get({1}, element);
    auto zero = b.create<nn::ConstantOp>(
        loc, DenseElementsAttr::get(zeroType, b.getIntegerAttr(element, 0)));
    replicated(zero);
    auto bounds = b.create<nn::ConcatOp>(
        loc, RankedTensorType::get({groups + 1}, element),
        ValueRange{zero.getResult(), block->offsets}, b.getI64IntegerAttr(0));
    replicated(bounds);
    SmallVector<int64_t> at;
    for (int64_t m = 0; m < members; ++m) {
      at.push_back(block->first + blockOf(m) * block->stride);
      at.push_back(block->first + blockOf(m) * block->stride + block->count);
    }
    auto atType = RankedTensorType::get({members, 2}, b.getI64Type());
    auto where = b.create<nn::ConstantOp>(loc, DenseElementsAttr::get(atType, ArrayRef(at)));
    replicated(where);
    auto ranges = b.create<nn::GatherOp>(loc, RankedTensorType::get({members, 2}, element),
                                         bounds.getResult(), where.getResult(),
                                         b.getI64IntegerAttr(0));
    replicated(ranges);
    auto rows = b.create<dist::GatherRowsOp>(loc, gather.getType(), x, gather.getIndices(),
                                             ranges.getResult(), b.getStrArrayAttr(axes));
    gather.getResult().replaceAllUsesWith(rows.getResult());
    gather.erase();
    for (dist::AllGatherOp all : chain)
      if (all->use_empty())
        all.erase();
  }
};

} // namespace
