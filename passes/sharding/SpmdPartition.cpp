// --loom-spmd-partition: from the sharded global program to the program each
// rank runs, with dist collectives where layouts change (see Passes.td).

#include "passes/sharding/FactorSharding.h"
#include "passes/sharding/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"

namespace loom {
#define GEN_PASS_DEF_SPMDPARTITION
#include "passes/sharding/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;
using namespace loom::sharding;

namespace {

using DimFactors = SmallVector<SmallVector<int>>;

RankedTensorType tensorType(Value v) { return dyn_cast<RankedTensorType>(v.getType()); }

/// The name a diagnostic gives a value: its parameter or argument name, or
/// the op that makes it.
std::string nameOf(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      if (StringAttr n = loom::getArgName(func, arg.getArgNumber()))
        return "argument '" + n.str() + "'";
    return "argument #" + std::to_string(arg.getArgNumber());
  }
  if (auto p = v.getDefiningOp<nn::ParameterOp>())
    return "parameter '" + p.getName().str() + "'";
  return "result of '" + v.getDefiningOp()->getName().getStringRef().str() + "'";
}

Axes inMeshOrder(dist::MeshAttr mesh, const Axes &axes) {
  Axes out;
  for (StringAttr n : mesh.getNames())
    if (llvm::is_contained(axes, n.getValue()))
      out.push_back(n.getValue());
  return out;
}

struct Partitioner {
  dist::MeshAttr mesh;
  OpBuilder builder;
  llvm::DenseMap<Value, Value> local;    // global value -> this rank's value
  llvm::DenseMap<Value, Layout> actual;  // global value -> layout of its local value
  std::map<std::pair<void *, std::string>, Value> converted;
  // A loss's gathered block statistics, by its local (logits, labels).
  std::map<std::pair<void *, void *>, Value> blockStats;
  // Rules and argument types as they were before any type became local.
  llvm::DenseMap<Operation *, nn::ShardingRule> rules;
  llvm::DenseMap<Value, RankedTensorType> argTypes;
  // Whether each op's results were partial sums when the function was
  // partitioned before (by op position, then result): a guess at the
  // layouts of values not yet partitioned, for a reader of two float values
  // deciding whether it carries a partial sum (empty: no guess).
  std::vector<SmallVector<bool>> earlierPartial;
  llvm::DenseMap<Value, bool> guessedPartial;
  // Whether a decision assumed the worst of an operand not yet partitioned,
  // which a run with earlierPartial could decide otherwise.
  bool assumedPartial = false;
  // The partial flags of this run, for a later one.
  std::vector<SmallVector<bool>> finalPartial;

  RankedTensorType globalType(Value v) {
    if (auto it = argTypes.find(v); it != argTypes.end())
      return it->second;
    return tensorType(v);
  }

  Partitioner(dist::MeshAttr mesh, MLIRContext *ctx) : mesh(mesh), builder(ctx) {}

  ArrayAttr axesAttr(ArrayRef<StringRef> axes) {
    SmallVector<Attribute> names;
    for (StringRef a : axes)
      names.push_back(builder.getStringAttr(a));
    return builder.getArrayAttr(names);
  }

  FailureOr<RankedTensorType> localTypeOf(Value global, const Layout &layout, Operation *at) {
    std::string error;
    auto type = dist::localType(globalType(global), layout.toAttr(builder.getContext()), mesh,
                                &error);
    if (failed(type))
      return at->emitError("cannot split ") << nameOf(global) << " " << globalType(global)
                                            << " as " << describe(layout) << ": " << error;
    return type;
  }

  /// This rank's value of `global` laid out as `required`, by collectives.
  FailureOr<Value> convert(Value global, const Layout &required, Operation *at) {
    Layout cur = actual.lookup(global);
    Value v = local.lookup(global);
    if (cur == required)
      return v;
    auto key = std::make_pair(global.getAsOpaquePointer(), describe(required));
    if (auto it = converted.find(key); it != converted.end())
      return it->second;
    Location loc = at->getLoc();
    auto resized = [&](Value x, int64_t dim, int64_t num, int64_t den) {
      auto t = tensorType(x);
      SmallVector<int64_t> shape(t.getShape());
      shape[dim] = shape[dim] * num / den;
      return RankedTensorType::get(shape, t.getElementType());
    };
    auto check = [&](Value x, int64_t dim, int64_t n) -> LogicalResult {
      if (tensorType(x).getDimSize(dim) % n != 0)
        return at->emitError("cannot split dim ")
               << dim << " of " << nameOf(global) << " " << globalType(global) << ": local size "
               << tensorType(x).getDimSize(dim) << " is not divisible by " << n;
      return success();
    };
    // Settle a partial sum into this rank's block of dim d along `axis`.
    auto reduceToBlock = [&](Value x, int64_t d, StringRef axis) -> FailureOr<Value> {
      int64_t n = *mesh.axisSize(axis);
      if (failed(check(x, d, n)))
        return failure();
      return builder
          .create<dist::ReduceScatterOp>(loc, TypeRange{resized(x, d, 1, n)}, ValueRange{x},
                                         axesAttr({axis}), builder.getI64IntegerAttr(d),
                                         dist::ReduceKindAttr::get(builder.getContext(),
                                                                   dist::ReduceKind::Sum))
          .getResult(0);
    };
    // Take this rank's block of dim d along `axis` of a value every rank of
    // the group holds alike: a local slice, no communication. Its start is
    // the rank's block index times the block (a rank offset).
    auto sliceBlock = [&](Value x, int64_t d, StringRef axis) -> FailureOr<Value> {
      int64_t n = *mesh.axisSize(axis);
      if (failed(check(x, d, n)))
        return failure();
      ArrayRef<int64_t> shape = tensorType(x).getShape();
      int64_t block = shape[d] / n;
      SmallVector<int64_t> starts(shape.size(), 0), limits(shape), strides(shape.size(), 1);
      limits[d] = block;
      auto slice = builder.create<nn::SliceOp>(loc, resized(x, d, 1, n), x,
                                               builder.getDenseI64ArrayAttr(starts),
                                               builder.getDenseI64ArrayAttr(limits),
                                               builder.getDenseI64ArrayAttr(strides));
      dist::addRankOffset(slice, "starts", d, {axis}, block);
      dist::addRankOffset(slice, "limits", d, {axis}, block);
      return slice.getResult();
    };

    // 0. A split moving from one dim to another over the same axis is one
    //    all-to-all (each rank keeps its block of the new dim and receives
    //    the others' blocks of the old one), not a gather and a cut.
    for (bool moved = true; moved;) {
      moved = false;
      for (unsigned src = 0; src < cur.dims.size() && !moved; ++src) {
        if (cur.dims[src].empty())
          continue;
        StringRef axis = cur.dims[src].back();
        const Axes &keep = required.dims[src];
        if (keep.size() >= cur.dims[src].size() &&
            llvm::equal(cur.dims[src], ArrayRef<StringRef>(keep).take_front(cur.dims[src].size())))
          continue; // the target keeps this split
        for (unsigned dst = 0; dst < cur.dims.size(); ++dst) {
          const Axes &want = required.dims[dst];
          size_t have = cur.dims[dst].size();
          if (dst == src || have >= want.size() || want[have] != axis ||
              !llvm::equal(cur.dims[dst], ArrayRef<StringRef>(want).take_front(have)))
            continue;
          int64_t n = *mesh.axisSize(axis);
          if (failed(check(v, dst, n)))
            return failure();
          auto t = tensorType(v);
          SmallVector<int64_t> shape(t.getShape());
          shape[dst] /= n;
          shape[src] *= n;
          v = builder.create<dist::AllToAllOp>(
              loc, RankedTensorType::get(shape, t.getElementType()), v, axesAttr({axis}),
              builder.getI64IntegerAttr(dst), builder.getI64IntegerAttr(src));
          cur.dims[src].pop_back();
          cur.dims[dst].push_back(axis);
          moved = true;
          break;
        }
      }
    }

    // 1. Gather the minor axes of every dim that the target does not split
    //    that way (a partial sum gathers as it is: gathering is linear).
    for (unsigned d = 0; d < cur.dims.size(); ++d) {
      const Axes &want = required.dims[d];
      auto isPrefix = [&]() {
        return cur.dims[d].size() <= want.size() &&
               llvm::equal(cur.dims[d], ArrayRef<StringRef>(want).take_front(cur.dims[d].size()));
      };
      while (!isPrefix()) {
        StringRef axis = cur.dims[d].back();
        int64_t n = *mesh.axisSize(axis);
        v = builder.create<dist::AllGatherOp>(loc, resized(v, d, n, 1), v, axesAttr({axis}),
                                              builder.getI64IntegerAttr(d));
        cur.dims[d].pop_back();
      }
    }
    auto splitsSomeDim = [&](StringRef axis) {
      return llvm::any_of(cur.dims, [&](const Axes &a) { return llvm::is_contained(a, axis); });
    };

    // 2. Settle partial sums: into a split where the target splits a dim
    //    further by a partial axis no dim uses yet, else by all-reduce.
    Axes pending;
    for (StringRef a : cur.partial)
      if (!llvm::is_contained(required.partial, a))
        pending.push_back(a);
    for (unsigned d = 0; d < cur.dims.size() && !pending.empty(); ++d) {
      const Axes &want = required.dims[d];
      while (cur.dims[d].size() < want.size() &&
             llvm::is_contained(pending, want[cur.dims[d].size()]) &&
             !splitsSomeDim(want[cur.dims[d].size()])) {
        StringRef axis = want[cur.dims[d].size()];
        FailureOr<Value> next = reduceToBlock(v, d, axis);
        if (failed(next))
          return failure();
        v = *next;
        cur.dims[d].push_back(axis);
        llvm::erase(pending, axis);
      }
    }
    if (!pending.empty()) {
      v = builder
              .create<dist::AllReduceOp>(loc, ValueRange{v}, axesAttr(inMeshOrder(mesh, pending)),
                                         dist::ReduceKindAttr::get(builder.getContext(),
                                                                   dist::ReduceKind::Sum))
              .getResult(0);
      // Settled in place: every later reader takes the settled value rather
      // than settling (or carrying through a linear op and settling) again.
      if (required.partial.empty() && cur.dims == actual.lookup(global).dims) {
        Layout settled = cur;
        settled.partial.clear();
        actual[global] = settled;
        local[global] = v;
      }
    }
    cur.partial = required.partial;

    // 3. Take this rank's blocks for the axes the target adds.
    for (unsigned d = 0; d < cur.dims.size(); ++d) {
      const Axes &want = required.dims[d];
      while (cur.dims[d].size() < want.size()) {
        StringRef axis = want[cur.dims[d].size()];
        FailureOr<Value> next = sliceBlock(v, d, axis);
        if (failed(next))
          return failure();
        v = *next;
        cur.dims[d].push_back(axis);
      }
    }
    converted[key] = v;
    return v;
  }

  /// Bytes-ish cost of converting `global` from its layout to `required`.
  int64_t conversionCost(Value global, const Layout &required) {
    const Layout &cur = actual.lookup(global);
    if (cur == required)
      return 0;
    return globalType(global).getNumElements();
  }

  LogicalResult partitionArgs(func::FuncOp func) {
    for (BlockArgument arg : func.getArguments()) {
      auto type = tensorType(arg);
      Layout layout = getAnnotation(arg).value_or(Layout::replicated(type ? type.getRank() : 0));
      local[arg] = arg;
      actual[arg] = layout;
      if (!type || !layout.isSplit())
        continue;
      FailureOr<RankedTensorType> lt = localTypeOf(arg, layout, func);
      if (failed(lt))
        return failure();
      dist::setArgGlobalType(func, arg.getArgNumber(), type);
      argTypes[arg] = type;
      arg.setType(*lt);
    }
    return success();
  }

  /// Gives `clone`'s result i the local type of `op`'s result i under `l`,
  /// and records both.
  LogicalResult bindResult(Operation *op, Operation *clone, unsigned i, const Layout &l) {
    Value r = op->getResult(i);
    FailureOr<RankedTensorType> lt = localTypeOf(r, l, op);
    if (failed(lt))
      return failure();
    clone->getResult(i).setType(*lt);
    actual[r] = l;
    local[r] = clone->getResult(i);
    return success();
  }

  /// A pipeline's own collectives (--loom-pipeline-split: transfers between
  /// pipeline ranks, the gradient norm's sum and the loss's broadcast over
  /// "pp") run on every rank's local values: operands as annotated (a
  /// transfer's agreed layout) or replicated, partial sums reduced first.
  LogicalResult partitionPipelineCollective(Operation *op) {
    auto layoutFor = [&](Value v) {
      Layout l = getAnnotation(v).value_or(Layout::replicated(tensorType(v).getRank()));
      l.partial.clear();
      return l;
    };
    IRMapping mapping;
    for (Value v : op->getOperands()) {
      FailureOr<Value> lv = convert(v, layoutFor(v), op);
      if (failed(lv))
        return failure();
      mapping.map(v, *lv);
    }
    Operation *clone = builder.clone(*op, mapping);
    SmallVector<Attribute> layouts;
    // A sum or broadcast over the pipeline keeps its operand's layout (a
    // vocabulary-split gradient stays split); propagation does not cross it.
    const bool sameLayout = isa<dist::AllReduceOp, dist::BroadcastOp>(op);
    for (auto [i, r] : llvm::enumerate(op->getResults())) {
      Layout l = sameLayout ? layoutFor(op->getOperand(i)) : layoutFor(r);
      if (failed(bindResult(op, clone, i, l)))
        return failure();
      layouts.push_back(l.toAttr(builder.getContext()));
    }
    if (!layouts.empty())
      clone->setAttr(dist::kShardingAttrName, builder.getArrayAttr(layouts));
    return success();
  }

  /// The float values `user` reads besides `v`, constants aside.
  static SmallVector<Value> otherFloatValues(Operation *user, Value v) {
    SmallVector<Value> others;
    for (Value operand : user->getOperands()) {
      auto t = tensorType(operand);
      if (operand != v && t && isa<FloatType>(t.getElementType()) &&
          !operand.getDefiningOp<nn::ConstantOp>())
        others.push_back(operand);
    }
    return others;
  }

  /// The fewest elements along `v` and the chain of its sole readers that
  /// are linear in it and read no other float value: where a partial sum
  /// carried from `v` could be settled most cheaply.
  int64_t smallestAlongLinearReaders(Value v) {
    int64_t smallest = globalType(v).getNumElements();
    while (v.hasOneUse()) {
      Operation *user = *v.getUsers().begin();
      auto it = rules.find(user);
      if (it == rules.end() || !it->second.linear || user->getNumResults() != 1)
        break;
      auto t = tensorType(user->getResult(0));
      if (!otherFloatValues(user, v).empty() || !t)
        break;
      v = user->getResult(0);
      smallest = std::min(smallest, t.getNumElements());
    }
    return smallest;
  }

  /// A partial operand is carried on unless other readers of it cannot
  /// carry it and would each settle a result at least as large: then
  /// settling it once here, in place, is cheaper than this op carrying it
  /// to a later settlement while those readers settle theirs (the
  /// experts' partial rows read by the routing weights' product and by
  /// the backward's product with the output gradient).
  bool everyReaderCarries(Operation *op, ArrayRef<unsigned> partialOperands) {
    return llvm::all_of(partialOperands, [&](unsigned i) {
      Value v = op->getOperand(i);
      int64_t settledElsewhere = 0;
      for (Operation *user : v.getUsers()) {
        if (user == op)
          continue;
        auto r = dyn_cast<nn::ShardingRuleOpInterface>(user);
        bool carries = false;
        if (r) {
          nn::ShardingRule other = r.getShardingRule();
          // Linear in each operand separately carries the partial sum
          // only while no other float operand is one too: certain where
          // it reads one float value (the rest constants), else as the
          // other operands are (partitioned already) or were when the
          // function was partitioned before (the forward's partial
          // expert rows times the backward's gathered output gradient).
          SmallVector<Value> others = otherFloatValues(user, v);
          bool othersWhole = true;
          for (Value operand : others) {
            if (auto it = actual.find(operand); it != actual.end()) {
              othersWhole &= it->second.partial.empty();
            } else if (auto g = guessedPartial.find(operand); g != guessedPartial.end()) {
              othersWhole &= !g->second;
            } else {
              assumedPartial = true;
              othersWhole = false;
            }
          }
          carries = other.additive || (other.linear && othersWhole);
          // Such a reader settles its own product later, at the smallest
          // point of its linear chain (the routing weights' gradient, summed
          // over the hidden dim); two products of one partial value would
          // settle twice what settling it once here does.
          if (carries && !others.empty() && !other.additive && user->getNumResults() == 1)
            settledElsewhere += smallestAlongLinearReaders(user->getResult(0));
        }
        if (!carries && user->getNumResults() > 0)
          if (auto t = tensorType(user->getResult(0)))
            settledElsewhere += t.getNumElements();
      }
      return settledElsewhere == 0 || tensorType(v).getNumElements() > settledElsewhere;
    });
  }

  LogicalResult partitionOp(Operation *op) {
    if (isa<dist::ExchangeOp, dist::AllReduceOp, dist::BroadcastOp>(op))
      return partitionPipelineCollective(op);
    auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op);
    if (!ruleOp)
      return op->emitOpError("has no sharding rule; cannot partition it");
    const nn::ShardingRule &rule = rules.find(op)->second;
    SmallVector<Layout> targets;
    for (Value r : op->getResults()) {
      Layout t = getAnnotation(r).value_or(Layout::replicated(tensorType(r).getRank()));
      t.partial.clear();
      targets.push_back(t);
    }
    SmallVector<Layout> operandLayouts;
    for (Value v : op->getOperands())
      operandLayouts.push_back(actual.lookup(v));

    // Two candidate splits of the op's factors: as its results should be,
    // or as its operands are. Keep the one that converts fewer elements.
    using Source = std::pair<const DimFactors *, const Layout *>;
    SmallVector<Source> resultFirst, operandFirst;
    for (unsigned i = 0; i < targets.size(); ++i)
      resultFirst.push_back({&rule.resultDims[i], &targets[i]});
    for (unsigned i = 0; i < operandLayouts.size(); ++i) {
      resultFirst.push_back({&rule.operandDims[i], &operandLayouts[i]});
      operandFirst.push_back({&rule.operandDims[i], &operandLayouts[i]});
    }
    for (unsigned i = 0; i < targets.size(); ++i)
      operandFirst.push_back({&rule.resultDims[i], &targets[i]});
    FactorAxes best;
    int64_t bestCost = -1;
    SmallVector<FactorAxes> candidates;
    for (ArrayRef<Source> sources : {ArrayRef<Source>(resultFirst), ArrayRef<Source>(operandFirst)})
      candidates.push_back(assignFactors(rule, sources, mesh));
    if (rule.partialResultCosted) {
      // A third candidate: the reduction factors whole, the operands
      // gathered, the result whole rather than a partial sum to settle.
      FactorAxes whole = candidates.back();
      for (auto [f, factor] : llvm::enumerate(rule.factors))
        if (factor.kind == nn::FactorKind::Reduction)
          whole[f].clear();
      candidates.push_back(whole);
    }
    for (const FactorAxes &assignment : candidates) {
      // A factor split in an operand's required layout that the operand
      // does not have must be cut locally: allowed, but costed.
      int64_t cost = 0;
      for (auto [i, v] : llvm::enumerate(op->getOperands())) {
        Layout req = layoutOf(rule.operandDims[i], assignment);
        req.partial = operandLayouts[i].partial; // partial sums are costed alike
        cost += conversionCost(v, req);
      }
      for (auto [i, r] : llvm::enumerate(op->getResults()))
        if (!layoutOf(rule.resultDims[i], assignment).sameDims(targets[i]))
          cost += tensorType(r).getNumElements();
      // Its settlement, later: an all-reduce moves twice what gathering the
      // same elements does.
      if (rule.partialResultCosted && !reductionAxes(rule, assignment).empty())
        for (Value r : op->getResults())
          cost += 2 * tensorType(r).getNumElements();
      if (bestCost < 0 || cost < bestCost) {
        bestCost = cost;
        best = assignment;
      }
    }

    SmallVector<unsigned> partialOperands;
    for (auto [i, l] : llvm::enumerate(operandLayouts))
      if (!l.partial.empty())
        partialOperands.push_back(i);
    auto floatOperand = [&](unsigned i) {
      auto t = tensorType(op->getOperand(i));
      return t && isa<FloatType>(t.getElementType());
    };
    // A linear op whose best split would settle its partial operand now
    // may instead run whole over the partial axes and carry the partial
    // sum on, to be settled where the chain of linear readers after it is
    // smallest: the combine's routed rows, weighted, unsorted and summed
    // over the k choices, reduce-scattered as the tokens' outputs rather
    // than all-reduced as the routed rows (k times larger).
    if (rule.linear && partialOperands.size() == 1 && floatOperand(partialOperands.front()) &&
        op->getNumResults() == 1) {
      unsigned p = partialOperands.front();
      const Axes &axes = operandLayouts[p].partial;
      auto onPartialAxis = [&](StringRef a) { return llvm::is_contained(axes, a); };
      if (llvm::any_of(best, [&](const Axes &f) { return llvm::any_of(f, onPartialAxis); })) {
        FactorAxes whole = best;
        for (Axes &f : whole)
          llvm::erase_if(f, onPartialAxis);
        Layout req = layoutOf(rule.operandDims[p], best);
        bool scatters = false;
        for (auto [want, have] : llvm::zip(req.dims, operandLayouts[p].dims))
          for (StringRef a : want)
            scatters |= onPartialAxis(a) && !llvm::is_contained(have, a);
        int64_t now = bestCost + (scatters ? 1 : 2) * globalType(op->getOperand(p)).getNumElements();
        int64_t later = smallestAlongLinearReaders(op->getResult(0));
        for (auto [i, v] : llvm::enumerate(op->getOperands())) {
          if (i == p)
            continue;
          Layout r = layoutOf(rule.operandDims[i], whole);
          r.partial = operandLayouts[i].partial;
          later += conversionCost(v, r);
        }
        if (later < now && everyReaderCarries(op, partialOperands))
          best = whole;
      }
    }

    // Partial sums may pass through additive and linear ops.
    Axes reduced = reductionAxes(rule, best);
    // A loss whose classes are split (the LM head's vocabulary-parallel
    // logits): each rank's block, never the gathered logits.
    Axes classAxes;
    if (auto loss = dyn_cast<nn::ClassParallelLossOpInterface>(op))
      classAxes = best[loss.getClassFactor(rule)];
    llvm::erase_if(reduced, [&](StringRef a) { return llvm::is_contained(classAxes, a); });
    Axes kept;
    if (!partialOperands.empty()) {
      const Axes &first = operandLayouts[partialOperands.front()].partial;
      bool disjoint = llvm::none_of(first, [&](StringRef a) {
        return llvm::is_contained(reduced, a) ||
               llvm::any_of(best, [&](const Axes &f) { return llvm::is_contained(f, a); });
      });
      bool allFloatsSame = llvm::all_of(llvm::seq<unsigned>(0, op->getNumOperands()), [&](unsigned i) {
        return !floatOperand(i) || operandLayouts[i].partial == first;
      });
      if (disjoint && rule.additive && allFloatsSame && everyReaderCarries(op, partialOperands))
        kept = first;
      else if (disjoint && rule.linear && partialOperands.size() == 1 &&
               floatOperand(partialOperands.front()) && everyReaderCarries(op, partialOperands))
        kept = first;
    }

    IRMapping mapping;
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      Layout req = layoutOf(rule.operandDims[i], best);
      if (!kept.empty() && operandLayouts[i].partial == kept)
        req.partial = kept;
      FailureOr<Value> lv = convert(v, req, op);
      if (failed(lv))
        return failure();
      mapping.map(v, *lv);
    }

    // What an op rewriting itself for its rank's shard is told: which
    // factors are split, global types, and where to record rank offsets
    // (over the axes of the factor they follow).
    auto isSplit = [&](int factor) { return !best[factor].empty(); };
    auto global = [this](Value v) { return globalType(v); };
    auto rankOffset = [&](Operation *made, StringRef attr, int64_t element, int factor,
                          int64_t stride) {
      dist::addRankOffset(made, attr, element, best[factor], stride);
    };
    nn::ShardContext shard{rule, isSplit, global, rankOffset};
    Operation *clone = classAxes.empty() ? builder.clone(*op, mapping)
                                         : buildBlockLoss(op, mapping, classAxes, shard);
    for (unsigned i = 0; i < op->getNumResults(); ++i) {
      Layout l = layoutOf(rule.resultDims[i], best);
      l.partial = reduced;
      l.partial.append(kept.begin(), kept.end());
      if (failed(bindResult(op, clone, i, l)))
        return failure();
    }
    // A partial maximum (nn.amax over a split dim) is settled here, by an
    // all-reduce max: no rule passes a maximum on as a sum.
    if (rule.reducesByMax && !reduced.empty()) {
      builder.setInsertionPointAfter(clone);
      for (Value r : op->getResults()) {
        Layout l = actual[r];
        auto settled = builder.create<dist::AllReduceOp>(
            op->getLoc(), ValueRange{local[r]}, axesAttr(inMeshOrder(mesh, reduced)),
            dist::ReduceKindAttr::get(builder.getContext(), dist::ReduceKind::Max));
        l.partial.clear();
        actual[r] = l;
        local[r] = settled.getResult(0);
      }
      builder.setInsertionPoint(op);
    }
    if (failed(localizeAttributes(op, clone, shard)))
      return failure();
    SmallVector<Attribute> layouts;
    for (Value r : op->getResults())
      layouts.push_back(actual[r].toAttr(builder.getContext()));
    if (!layouts.empty())
      clone->setAttr(dist::kShardingAttrName, builder.getArrayAttr(layouts));

    // A mean over (or a normalization by) a split factor: each rank's share
    // is g times too large.
    int64_t scale = 1;
    for (auto [f, factor] : llvm::enumerate(rule.factors))
      if (factor.meanScaled && !best[f].empty())
        scale *= mesh.groupSize(best[f]);
    if (scale > 1) {
      builder.setInsertionPointAfter(clone);
      for (Value r : op->getResults()) {
        Value lr = local[r];
        auto t = tensorType(lr);
        auto scalarType = RankedTensorType::get({}, t.getElementType());
        Value c = builder.create<nn::ConstantOp>(
            op->getLoc(), DenseElementsAttr::get(scalarType, builder.getFloatAttr(
                                                                 t.getElementType(), 1.0 / scale)));
        auto mul = builder.create<nn::MulOp>(op->getLoc(), t, lr, c);
        mul->setAttr(dist::kShardingAttrName,
                     builder.getArrayAttr({actual[r].toAttr(builder.getContext())}));
        local[r] = mul;
      }
      builder.setInsertionPoint(op);
    }
    return success();
  }

  /// The vocabulary-parallel loss (Megatron's) for a loss, or its gradient,
  /// whose logits are split by classes over `classAxes`
  /// (ClassParallelLossOpInterface): each rank's statistics of its block,
  /// all-gathered along their last dim, then the loss, or the block's
  /// gradient, from them. The forward's gathered statistics serve its
  /// gradient too.
  Operation *buildBlockLoss(Operation *op, IRMapping &mapping, const Axes &classAxes,
                            const nn::ShardContext &shard) {
    auto loss = cast<nn::ClassParallelLossOpInterface>(op);
    Location loc = op->getLoc();
    Value logits = mapping.lookup(loss.getLogits());
    Value labels = mapping.lookup(loss.getLabels());
    // The original op's discardable attributes, less its layout, beside
    // those the new op was given (its rank offsets).
    auto tagged = [&](Operation *made) {
      NamedAttrList attrs(op->getDiscardableAttrDictionary());
      attrs.erase(dist::kShardingAttrName);
      for (NamedAttribute a : made->getDiscardableAttrs())
        attrs.set(a.getName(), a.getValue());
      made->setDiscardableAttrs(attrs.getDictionary(op->getContext()));
      return made;
    };
    // By the local values: a gradient that split the logits otherwise than
    // the forward did computes its own statistics.
    auto key = std::make_pair(logits.getAsOpaquePointer(), labels.getAsOpaquePointer());
    auto found = blockStats.find(key);
    Value stats = found == blockStats.end() ? Value() : found->second;
    if (!stats) {
      Operation *local = tagged(loss.buildBlockStatistics(builder, logits, labels, shard));
      auto t = tensorType(local->getResult(0));
      SmallVector<int64_t> gatheredShape(t.getShape());
      int64_t last = t.getRank() - 1;
      gatheredShape[last] *= mesh.groupSize(classAxes);
      stats = builder.create<dist::AllGatherOp>(
          loc, RankedTensorType::get(gatheredShape, t.getElementType()), local->getResult(0),
          axesAttr(classAxes), builder.getI64IntegerAttr(last));
      blockStats[key] = stats;
    }
    return tagged(loss.buildFromBlockStatistics(builder, mapping, stats, shard));
  }

  /// Attributes that speak of global sizes, rewritten for the local shard
  /// by the op itself (SpmdLocalizeOpInterface); ops that work on their
  /// rank's block of a split vocabulary learn where it starts (rank
  /// offsets).
  LogicalResult localizeAttributes(Operation *op, Operation *clone, const nn::ShardContext &shard) {
    if (auto localized = dyn_cast<nn::SpmdLocalizeOpInterface>(clone))
      if (failed(localized.localizeAttributes(op, shard)))
        return failure();
    // The partitioner's own record (dist.global_type) of a parameter's
    // global type, which checkpoints and weight loading read.
    if (auto param = dyn_cast<nn::ParameterOp>(clone)) {
      if (param.getType() != op->getResult(0).getType())
        dist::setGlobalType(param, op->getResult(0).getType());
    }
    return success();
  }

  LogicalResult run(func::FuncOp func) {
    for (Operation &op : func.getBody().front()) {
      auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(op);
      if (!ruleOp)
        continue;
      nn::ShardingRule rule = ruleOp.getShardingRule();
      if (!ruleFits(&op, rule))
        return op.emitOpError("has a sharding rule that does not fit its operands and results");
      rules.try_emplace(&op, std::move(rule));
    }
    if (failed(partitionArgs(func)))
      return failure();
    Block &body = func.getBody().front();
    SmallVector<Operation *> original;
    for (Operation &op : body)
      original.push_back(&op);
    if (earlierPartial.size() == original.size())
      for (auto [op, flags] : llvm::zip(original, earlierPartial))
        if (op->getNumResults() == flags.size())
          for (auto [r, partial] : llvm::zip(op->getResults(), flags))
            guessedPartial[r] = partial;
    for (Operation *op : original) {
      builder.setInsertionPoint(op);
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        SmallVector<Value> results;
        for (Value v : ret.getOperands()) {
          FailureOr<Value> lv = convert(v, Layout::replicated(tensorType(v).getRank()), op);
          if (failed(lv))
            return failure();
          results.push_back(*lv);
        }
        builder.create<func::ReturnOp>(ret.getLoc(), results);
        continue;
      }
      if (failed(partitionOp(op)))
        return failure();
    }
    for (Operation *op : original) {
      SmallVector<bool> flags;
      for (Value r : op->getResults()) {
        auto it = actual.find(r);
        flags.push_back(it != actual.end() && !it->second.partial.empty());
      }
      finalPartial.push_back(std::move(flags));
    }
    for (Operation *op : llvm::reverse(original)) {
      op->dropAllUses();
      op->erase();
    }
    func.setFunctionType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                           body.getTerminator()->getOperandTypes()));
    return success();
  }
};

struct SpmdPartitionPass : public loom::impl::SpmdPartitionBase<SpmdPartitionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module->getAttrOfType<dist::MeshAttr>(dist::kMeshAttrName);
    if (!mesh)
      return;
    if (failed(checkTiedCopies(module)))
      return signalPassFailure();
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    for (func::FuncOp func : funcs) {
      if (func.isExternal())
        continue;
      if (!func.getBody().hasOneBlock()) {
        func.emitError("SPMD partitioning needs a single-block function");
        return signalPassFailure();
      }
      func::FuncOp pristine = func.clone();
      Partitioner partitioner(mesh, module.getContext());
      if (failed(partitioner.run(func))) {
        pristine.erase();
        return signalPassFailure();
      }
      // A reader of two float values was assumed to settle a partial sum
      // because the other value was not partitioned yet: partition again,
      // guessing the layouts from this run, and keep the run that moves
      // less (a partial sum carried through both the forward and the
      // backward, settled once where it is smallest).
      if (partitioner.assumedPartial) {
        Partitioner again(mesh, module.getContext());
        again.earlierPartial = std::move(partitioner.finalPartial);
        LogicalResult ok = success();
        {
          ScopedDiagnosticHandler quiet(module.getContext(), [](Diagnostic &) { return success(); });
          ok = again.run(pristine);
        }
        if (succeeded(ok) && communicated(pristine) < communicated(func)) {
          module.getBody()->getOperations().insert(func->getIterator(), pristine.getOperation());
          func.erase();
          func = pristine;
          pristine = nullptr;
        }
      }
      if (pristine)
        pristine.erase();
      issueReductionsEarly(func);
    }
  }

  /// Elements a function's collectives move, an all-reduce counted twice
  /// (a reduce-scatter and an all-gather).
  static int64_t communicated(func::FuncOp func) {
    int64_t total = 0;
    auto size = [](Value v) {
      auto t = tensorType(v);
      return t ? t.getNumElements() : 0;
    };
    func.walk([&](Operation *op) {
      if (auto ar = dyn_cast<dist::AllReduceOp>(op))
        for (Value v : ar->getOperands())
          total += 2 * size(v);
      else if (isa<dist::AllGatherOp, dist::AllToAllOp>(op))
        total += size(op->getResult(0));
      else if (isa<dist::ReduceScatterOp>(op))
        total += size(op->getOperand(0));
    });
    return total;
  }

  /// The copies of a parameter tied across pipeline ranks (pipe.holders)
  /// sum their gradients over pp and update alike: each rank's function
  /// must split its copy the same way.
  static LogicalResult checkTiedCopies(ModuleOp module) {
    llvm::StringMap<std::pair<nn::ParameterOp, Layout>> first;
    WalkResult result = module.walk([&](nn::ParameterOp param) {
      if (!pipe::hasHolders(param))
        return WalkResult::advance();
      Layout layout =
          getAnnotation(param.getResult()).value_or(Layout::replicated(param.getType().getRank()));
      layout.partial.clear();
      auto [it, inserted] = first.try_emplace(param.getName(), param, layout);
      if (inserted || it->second.second.sameDims(layout))
        return WalkResult::advance();
      param.emitOpError("'") << param.getName()
                             << "' is tied across pipeline ranks but split as "
                             << describe(layout) << " here and as "
                             << describe(it->second.second)
                             << " on another rank; its copies must be split alike";
      return WalkResult::interrupt();
    });
    return failure(result.wasInterrupted());
  }

  /// A gradient's data-parallel reduction is inserted where the gradient is
  /// consumed (the optimizer, after the whole backward); placed right after
  /// the gradient's producer instead, it is issued while the rest of the
  /// backward runs, on its own stream, and overlaps it.
  /// Not one over the pipeline axis: its ranks run different programs, and
  /// --loom-pipeline-split placed it where every one of them reaches it in
  /// the same order relative to the schedule's transfers (moved before a
  /// send, it waits for a rank that waits for that send).
  static void issueReductionsEarly(func::FuncOp func) {
    SmallVector<Operation *> reductions;
    auto overPipeline = [](ArrayAttr axes) {
      return llvm::is_contained(axes.getAsValueRange<StringAttr>(), "pp");
    };
    func.walk([&](Operation *op) {
      if (auto r = dyn_cast<dist::AllReduceOp>(op); r && !overPipeline(r.getAxes()))
        reductions.push_back(op);
      if (auto r = dyn_cast<dist::ReduceScatterOp>(op); r && !overPipeline(r.getAxes()))
        reductions.push_back(op);
    });
    for (Operation *op : reductions) {
      Operation *producer = op->getOperand(0).getDefiningOp();
      if (producer && producer->getBlock() == op->getBlock() &&
          producer->getNextNode() != op)
        op->moveAfter(producer);
    }
  }
};

} // namespace
