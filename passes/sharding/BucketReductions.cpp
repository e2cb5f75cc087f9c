// --loom-bucket-reductions: groups the data-parallel gradient reductions
// into buckets of about `bucket-bytes`, each one collective issued right
// after the last of its gradients is produced (see Passes.td).

#include "passes/sharding/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace loom {
#define GEN_PASS_DEF_BUCKETREDUCTIONS
#include "passes/sharding/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// What reductions must share to go into one bucket: the op (all_reduce or
/// reduce_scatter), its group, its reduction, the element type and, for a
/// reduce_scatter, the scattered dim.
struct BucketKey {
  OperationName name;
  Attribute axes, reduce, dim;
  Type elementType;
  bool operator<(const BucketKey &o) const {
    auto tuple = [](const BucketKey &k) {
      return std::make_tuple(k.name.getAsOpaquePointer(), k.axes.getAsOpaquePointer(),
                             k.reduce.getAsOpaquePointer(), k.dim.getAsOpaquePointer(),
                             k.elementType.getAsOpaquePointer());
    };
    return tuple(*this) < tuple(o);
  }
};

/// The reductions gathered so far for one key, in program order.
struct OpenBucket {
  SmallVector<Operation *> members;
  int64_t bytes = 0;
  /// The first op (in the block) that reads a member's result: the bucket
  /// must be issued before it.
  Operation *firstReader = nullptr;
};

int64_t tensorBytes(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  int64_t bits = tensor.getElementTypeBitWidth();
  return tensor.getNumElements() * std::max<int64_t>(bits / 8, 1);
}

struct BucketReductionsPass
    : public loom::impl::BucketReductionsBase<BucketReductionsPass> {
  using BucketReductionsBase::BucketReductionsBase;

  void runOnOperation() override {
    if (bucketBytes <= 0)
      return;
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        for (Block &block : func.getBody())
          bucketBlock(block);
  }

  /// A data-parallel gradient reduction: a one-input sum or mean over a
  /// group that includes `axis`. (A `max` reduce_scatter only takes this
  /// rank's block of a replicated value; it is not a gradient.)
  std::optional<BucketKey> keyOf(Operation *op) const {
    ArrayAttr axes;
    dist::ReduceKindAttr reduce;
    Attribute dim;
    if (auto ar = dyn_cast<dist::AllReduceOp>(op)) {
      axes = ar.getAxesAttr();
      reduce = ar.getReduceAttr();
    } else if (auto rs = dyn_cast<dist::ReduceScatterOp>(op)) {
      axes = rs.getAxesAttr();
      reduce = rs.getReduceAttr();
      dim = rs.getDimAttr();
    } else {
      return std::nullopt;
    }
    if (op->getNumOperands() != 1 ||
        (reduce.getValue() != dist::ReduceKind::Sum &&
         reduce.getValue() != dist::ReduceKind::Mean) ||
        !llvm::any_of(axes, [&](Attribute a) { return cast<StringAttr>(a).getValue() == axis; }))
      return std::nullopt;
    return BucketKey{op->getName(), axes, reduce, dim,
                     cast<RankedTensorType>(op->getOperand(0).getType()).getElementType()};
  }

  void bucketBlock(Block &block) {
    std::map<BucketKey, OpenBucket> open;
    SmallVector<Operation *> candidates;
    for (Operation &op : block)
      if (keyOf(&op))
        candidates.push_back(&op);
    for (Operation *op : candidates) {
      BucketKey key = *keyOf(op);
      OpenBucket &bucket = open[key];
      // A member read before `op` cannot wait for it: close the bucket first.
      if (bucket.firstReader && bucket.firstReader->isBeforeInBlock(op))
        close(bucket);
      bucket.members.push_back(op);
      bucket.bytes += tensorBytes(op->getOperand(0).getType());
      for (Operation *reader : op->getResult(0).getUsers()) {
        Operation *inBlock = block.findAncestorOpInBlock(*reader);
        if (inBlock && (!bucket.firstReader || inBlock->isBeforeInBlock(bucket.firstReader)))
          bucket.firstReader = inBlock;
      }
      if (bucket.bytes >= bucketBytes)
        close(bucket);
    }
    for (auto &[key, bucket] : open)
      close(bucket);
  }

  /// Replaces the bucket's reductions by one collective with all their
  /// inputs, where the last of them was (right after its producer).
  void close(OpenBucket &bucket) {
    if (bucket.members.size() > 1) {
      Operation *last = bucket.members.back();
      SmallVector<Value> inputs;
      SmallVector<Type> types;
      SmallVector<Attribute> shardings;
      bool allSharded = true;
      for (Operation *member : bucket.members) {
        inputs.push_back(member->getOperand(0));
        types.push_back(member->getResult(0).getType());
        ArrayAttr sharding = dist::getResultShardings(member);
        if (sharding && sharding.size() == 1)
          shardings.push_back(sharding[0]);
        else
          allSharded = false;
      }
      OpBuilder b(last);
      OperationState state(last->getLoc(), last->getName());
      state.addOperands(inputs);
      state.addTypes(types);
      state.addAttributes(last->getAttrs());
      Operation *grouped = b.create(state);
      if (allSharded)
        dist::setResultShardings(grouped, shardings);
      else
        grouped->removeAttr(dist::kShardingAttrName);
      for (auto [i, member] : llvm::enumerate(bucket.members)) {
        member->getResult(0).replaceAllUsesWith(grouped->getResult(i));
        member->erase();
      }
      ++numBuckets;
      numReductions += bucket.members.size();
    }
    bucket = OpenBucket();
  }
};

} // namespace
