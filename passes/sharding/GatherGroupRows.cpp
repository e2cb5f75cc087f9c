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

/// The block `grouped` works on, moving along exactly `axes` (any order):
/// one rank offset of its first group.
std::optional<Block> blockOf(nn::GroupedRowsOpInterface grouped, ArrayRef<StringRef> axes) {
  FailureOr<SmallVector<dist::RankOffset>> offsets = dist::getRankOffsets(grouped);
  if (failed(offsets) || offsets->size() != 1 || (*offsets)[0].attr != "group_start" ||
      (*offsets)[0].element != -1 || (*offsets)[0].axes.size() != axes.size())
    return std::nullopt;
  for (StringRef axis : axes)
    if (!llvm::is_contained((*offsets)[0].axes, axis))
      return std::nullopt;
  return Block{grouped.getGroupOffsets(), grouped.getFirstGroup(), grouped.getGroupCount(),
               (*offsets)[0].stride,
               SmallVector<std::string>((*offsets)[0].axes.begin(), (*offsets)[0].axes.end())};
}

/// Whether `v` is zero at every row outside `block`'s (for any rank): a
/// grouped op's result that says so, or a product with one.
bool zeroOutside(Value v, const Block &block, ArrayRef<StringRef> axes, int depth = 4) {
  if (auto grouped = v.getDefiningOp<nn::GroupedRowsOpInterface>()) {
    std::optional<Block> mine = blockOf(grouped, axes);
    return grouped.writesOnlyGroupRows() && mine && mine->offsets == block.offsets &&
           mine->first == block.first && mine->count == block.count &&
           mine->stride == block.stride && mine->axes == block.axes;
  }
  auto mul = v.getDefiningOp<nn::MulOp>();
  return mul && depth > 0 &&
         ((mul.getLhs().getType() == mul.getType() &&
           zeroOutside(mul.getLhs(), block, axes, depth - 1)) ||
          (mul.getRhs().getType() == mul.getType() &&
           zeroOutside(mul.getRhs(), block, axes, depth - 1)));
}

/// Whether only `rows`' rows in each rank's block reach anything: every
/// reader reads only its block's rows (`GroupedRowsOpInterface`, all of one
/// block, returned in `block`), or multiplies it by a value zero outside
/// the block, or multiplies it row by row into a value of which the same
/// holds.
bool onlyBlockRowsRead(Value rows, ArrayRef<StringRef> axes, std::optional<Block> &block,
                       Operation *&firstReader, int depth = 4) {
  SmallVector<nn::MulOp> products;
  for (OpOperand &use : rows.getUses()) {
    if (auto grouped = dyn_cast<nn::GroupedRowsOpInterface>(use.getOwner())) {
      if (!grouped.readsOnlyGroupRows(use.getOperandNumber()))
        return false;
      std::optional<Block> mine = blockOf(grouped, axes);
      if (!mine)
        return false;
      if (!block) {
        block = mine;
        firstReader = grouped;
      } else if (block->offsets != mine->offsets || block->first != mine->first ||
                 block->count != mine->count ||
                 firstReader->getAttr(dist::kRankOffsetsAttrName) !=
                     grouped->getAttr(dist::kRankOffsetsAttrName)) {
        return false;
      }
      continue;
    }
    auto mul = dyn_cast<nn::MulOp>(use.getOwner());
    auto rowsType = cast<RankedTensorType>(rows.getType());
    if (!mul || cast<RankedTensorType>(mul.getType()).getRank() != rowsType.getRank() ||
        cast<RankedTensorType>(mul.getType()).getDimSize(0) != rowsType.getDimSize(0))
      return false;
    products.push_back(mul);
  }
  // Products last, those by a full-size factor (which may be zero outside
  // the block, and that needs the block known) after the rest.
  std::stable_partition(products.begin(), products.end(), [&](nn::MulOp mul) {
    Value other = mul.getLhs() == rows ? mul.getRhs() : mul.getLhs();
    return other.getType() != mul.getType();
  });
  for (nn::MulOp mul : products) {
    Value other = mul.getLhs() == rows ? mul.getRhs() : mul.getLhs();
    if (block && other.getType() == mul.getType() && zeroOutside(other, *block, axes))
      continue;
    if (depth <= 0 || !onlyBlockRowsRead(mul.getResult(), axes, block, firstReader, depth - 1))
      return false;
  }
  return block.has_value();
}

/// The block every reader of `rows` works on (onlyBlockRowsRead).
std::optional<Block> readersBlock(Value rows, ArrayRef<StringRef> axes) {
  std::optional<Block> block;
  Operation *firstReader = nullptr;
  if (!onlyBlockRowsRead(rows, axes, block, firstReader))
    return std::nullopt;
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
    SmallVector<dist::ReduceScatterOp> scatters;
    module.walk([&](dist::ReduceScatterOp scatter) { scatters.push_back(scatter); });
    for (dist::ReduceScatterOp scatter : scatters)
      if (!scatter->use_empty())
        rewriteCombine(scatter, mesh);
  }

  /// Tags a new op as replicated, in `like`'s microbatch and backward.
  void tag(Operation *op, Operation *like) {
    MLIRContext *ctx = op->getContext();
    SmallVector<Attribute> shardings;
    for (Value result : op->getResults())
      shardings.push_back(dist::ShardingAttr::replicated(
          ctx, cast<RankedTensorType>(result.getType()).getRank()));
    op->setAttr(dist::kShardingAttrName, ArrayAttr::get(ctx, shardings));
    if (std::optional<int64_t> mb = loom::getMicrobatch(like))
      loom::setMicrobatch(op, *mb);
    if (std::optional<BackwardKind> backward = loom::getBackwardKind(like))
      loom::setBackwardKind(op, *backward);
  }

  /// The ranges [members, 2] of the group over `axes` (row-major): member
  /// m's block of `block`'s groups, from [0, offsets...]; none where a
  /// block would lie past the groups.
  Value rangesFor(OpBuilder &b, Location loc, const Block &block, ArrayRef<StringRef> axes,
                  dist::MeshAttr mesh, Operation *like) {
    auto offsetsType = cast<RankedTensorType>(block.offsets.getType());
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
      for (const std::string &axis : block.axes)
        index = index * *mesh.axisSize(axis) + coordinate[axis];
      return index;
    };
    SmallVector<int64_t> at;
    for (int64_t m = 0; m < members; ++m) {
      const int64_t first = block.first + blockOf(m) * block.stride;
      if (first < 0 || first + block.count > groups)
        return {};
      at.push_back(first);
      at.push_back(first + block.count);
    }
    Type element = offsetsType.getElementType();
    auto zero = b.create<nn::ConstantOp>(
        loc, DenseElementsAttr::get(RankedTensorType::get({1}, element),
                                    b.getIntegerAttr(element, 0)));
    tag(zero, like);
    auto bounds = b.create<nn::ConcatOp>(loc, RankedTensorType::get({groups + 1}, element),
                                         ValueRange{zero.getResult(), block.offsets},
                                         b.getI64IntegerAttr(0));
    tag(bounds, like);
    auto atType = RankedTensorType::get({members, 2}, b.getI64Type());
    auto where = b.create<nn::ConstantOp>(loc, DenseElementsAttr::get(atType, ArrayRef(at)));
    tag(where, like);
    auto ranges = b.create<nn::GatherOp>(loc, RankedTensorType::get({members, 2}, element),
                                         bounds.getResult(), where.getResult(),
                                         b.getI64IntegerAttr(0));
    tag(ranges, like);
    return ranges.getResult();
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
    // Before its first reader, after the offsets (which a reader takes,
    // maybe computed after the gather); the rows' operands come before it.
    Operation *first = nullptr;
    for (Operation *user : gather->getUsers()) {
      if (user->getBlock() != gather->getBlock())
        return;
      if (!first || user->isBeforeInBlock(first))
        first = user;
    }
    if (!first)
      return;
    Operation *offsetsDef = block->offsets.getDefiningOp();
    if (offsetsDef && offsetsDef->getBlock() == first->getBlock() &&
        !offsetsDef->isBeforeInBlock(first)) {
      // The offsets come after the first reader: the ranges could not be
      // computed before it, so the all-gather stays.
      return;
    }
    OpBuilder b(first);
    Location loc = gather.getLoc();
    Value ranges = rangesFor(b, loc, *block, axes, mesh, gather);
    if (!ranges)
      return;
    auto rows = b.create<dist::GatherRowsOp>(loc, gather.getType(), x, gather.getIndices(),
                                             ranges, b.getStrArrayAttr(axes));
    gather.getResult().replaceAllUsesWith(rows.getResult());
    gather.erase();
    for (dist::AllGatherOp all : chain)
      if (all->use_empty())
        all.erase();
  }

  /// The combine: the experts' rows (zero outside each rank's block),
  /// unsorted by the inverse of the sort's positions p, summed over each
  /// token's k rows and reduce-scattered onto the tokens' holders, becomes
  /// one dist.scatter_rows of the rows by their tokens (p / k).
  void rewriteCombine(dist::ReduceScatterOp last, dist::MeshAttr mesh) {
    // The reduce-scatters along dim 0 (over one axis, then another),
    // outermost first: the row-major order of the tokens' holders.
    SmallVector<dist::ReduceScatterOp> chain{last};
    while (true) {
      auto prev = chain.back().getInputs()[0].getDefiningOp<dist::ReduceScatterOp>();
      if (!prev || !prev->hasOneUse())
        break;
      chain.push_back(prev);
    }
    std::reverse(chain.begin(), chain.end());
    SmallVector<StringRef> axes;
    for (dist::ReduceScatterOp rs : chain) {
      if (rs.getInputs().size() != 1 || rs.getDim() != 0 ||
          rs.getReduce() != dist::ReduceKind::Sum)
        return;
      for (Attribute axis : rs.getAxes())
        axes.push_back(cast<StringAttr>(axis).getValue());
    }
    // [tokens, ...] <- sum over k <- [tokens, k, ...] <- unsorting gather.
    Value v = chain.front().getInputs()[0];
    auto flat = v.getDefiningOp<nn::ReshapeOp>();
    auto sum = flat ? flat.getInput().getDefiningOp<nn::ReduceSumOp>()
                    : v.getDefiningOp<nn::ReduceSumOp>();
    if (!sum || sum.getDims().size() != 1 || sum.getDims()[0] != 1 || sum.getKeepdim())
      return;
    auto split = sum.getInput().getDefiningOp<nn::ReshapeOp>();
    auto unsort = split ? split.getInput().getDefiningOp<nn::GatherOp>() : nullptr;
    if (!unsort || unsort.getAxis() != 0)
      return;
    auto splitType = cast<RankedTensorType>(split.getType());
    auto rowsType = cast<RankedTensorType>(unsort.getType());
    if (splitType.getRank() != rowsType.getRank() + 1 ||
        splitType.getShape().drop_front(2) != rowsType.getShape().drop_front() ||
        splitType.getDimSize(0) * splitType.getDimSize(1) != rowsType.getDimSize(0))
      return;
    const int64_t tokens = splitType.getDimSize(0), k = splitType.getDimSize(1);
    // The unsorting indices: the positions that sort p, a permutation.
    auto inverse = dyn_cast<OpResult>(unsort.getIndices());
    auto sortP = inverse ? dyn_cast<nn::SortOp>(inverse.getOwner()) : nullptr;
    if (!sortP || inverse.getResultNumber() != 1 || sortP.getDescending())
      return;
    Value p = sortP.getInput();
    auto pResult = dyn_cast<OpResult>(p);
    auto sortIds = pResult ? dyn_cast<nn::SortOp>(pResult.getOwner()) : nullptr;
    auto pType = cast<RankedTensorType>(p.getType());
    if (!sortIds || pResult.getResultNumber() != 1 || pType.getRank() != 1 ||
        pType.getDimSize(0) != rowsType.getDimSize(0))
      return;
    // The rows: a grouped GEMM's (zero outside its block), or those scaled
    // row by row (the routing weights).
    Value y = unsort.getData();
    Operation *writer = y.getDefiningOp();
    if (auto mul = dyn_cast_or_null<nn::MulOp>(writer)) {
      Value rows = mul.getLhs().getDefiningOp<nn::GroupedRowsOpInterface>() ? mul.getLhs()
                                                                            : mul.getRhs();
      if (rows.getType() != mul.getType())
        return;
      writer = rows.getDefiningOp();
    }
    auto grouped = dyn_cast_or_null<nn::GroupedRowsOpInterface>(writer);
    if (!grouped || !grouped.writesOnlyGroupRows() ||
        writer->getResult(0).getType() != y.getType())
      return;
    std::optional<Block> block = blockOf(grouped, axes);
    if (!block)
      return;
    // The reshape to the reduce-scatters' input keeps the rows whole: its
    // dim 0 splits the tokens.
    auto lastType = cast<RankedTensorType>(last.getResults()[0].getType());
    auto inType = cast<RankedTensorType>(v.getType());
    const int64_t members = mesh.groupSize(axes);
    if (inType.getNumElements() != cast<RankedTensorType>(sum.getType()).getNumElements() ||
        tokens % members != 0 || inType.getDimSize(0) % members != 0 ||
        (tokens / inType.getDimSize(0)) * inType.getDimSize(0) != tokens)
      return;
    OpBuilder b(last);
    Location loc = last.getLoc();
    Value ranges = rangesFor(b, loc, *block, axes, mesh, unsort);
    if (!ranges)
      return;
    auto kConst = b.create<nn::ConstantOp>(
        loc, DenseElementsAttr::get(RankedTensorType::get({}, pType.getElementType()),
                                    b.getIntegerAttr(pType.getElementType(), k)));
    tag(kConst, unsort);
    auto tok = b.create<nn::DivOp>(loc, pType, p, kConst.getResult());
    tag(tok, unsort);
    SmallVector<int64_t> localShape(rowsType.getShape());
    localShape[0] = tokens / members;
    auto scattered = b.create<dist::ScatterRowsOp>(
        loc, RankedTensorType::get(localShape, rowsType.getElementType()), y, tok.getResult(),
        ranges, b.getStrArrayAttr(axes));
    auto back = b.create<nn::ReshapeOp>(loc, lastType, scattered.getResult());
    tag(back, unsort);
    last.getResults()[0].replaceAllUsesWith(back.getResult());
    // The chain, now unread.
    SmallVector<Operation *> dead;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it)
      dead.push_back(*it);
    if (flat)
      dead.push_back(flat);
    dead.append({sum, split, unsort});
    for (Operation *op : dead)
      if (op->use_empty())
        op->erase();
  }

};

} // namespace
