// --loom-sharding-propagation: every tensor gets a sharding, derived from the
// annotated ones through the ops' sharding rules (see Passes.td).

#include "passes/sharding/FactorSharding.h"
#include "passes/sharding/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace loom {
#define GEN_PASS_DEF_SHARDINGPROPAGATION
#include "passes/sharding/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;
using namespace loom::sharding;

namespace {

bool isTensor(Value v) { return isa<RankedTensorType>(v.getType()); }

/// Names a value for a diagnostic: a parameter, or the op making it and the
/// parameter it reads, if any.
std::string describeValue(Value v) {
  auto paramName = [](Value x) -> std::string {
    if (auto p = x.getDefiningOp<nn::ParameterOp>())
      return p.getName().str();
    return "";
  };
  if (std::string name = paramName(v); !name.empty())
    return "parameter '" + name + "'";
  Operation *def = v.getDefiningOp();
  if (!def)
    return "an argument";
  std::string text = "the result of '" + def->getName().getStringRef().str() + "'";
  for (Value operand : def->getOperands())
    if (std::string name = paramName(operand); !name.empty())
      return text + " reading '" + name + "'";
  return text;
}
ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

struct ShardingPropagationPass
    : public loom::impl::ShardingPropagationBase<ShardingPropagationPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module->getAttrOfType<dist::MeshAttr>(dist::kMeshAttrName);
    if (!mesh)
      return; // nothing is sharded
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal()) {
        propagate(func, mesh, dist::isZero1(module));
        if (failedRule)
          return signalPassFailure();
      }
  }

  bool failedRule = false;

  void propagate(func::FuncOp func, dist::MeshAttr mesh, bool zero1) {
    llvm::DenseMap<Value, Layout> known;
    for (BlockArgument arg : func.getArguments())
      if (auto l = getAnnotation(arg))
        known[arg] = *l;
    std::vector<std::pair<Operation *, nn::ShardingRule>> ops;
    // A pipeline's sums and broadcasts (--loom-pipeline-split) keep their
    // operand's layout: a split gradient summed over pp stays split.
    SmallVector<Operation *> sameLayout;
    func.walk([&](Operation *op) {
      if (isa<dist::AllReduceOp, dist::BroadcastOp>(op) && op->getNumOperands() == op->getNumResults())
        sameLayout.push_back(op);
      for (Value r : op->getResults())
        if (auto l = getAnnotation(r))
          known[r] = *l;
      if (auto rule = dyn_cast<nn::ShardingRuleOpInterface>(op)) {
        nn::ShardingRule r = rule.getShardingRule();
        if (!ruleFits(op, r)) {
          op->emitOpError("has a sharding rule that does not fit its operands and results");
          failedRule = true;
          return;
        }
        ops.push_back({op, std::move(r)});
      }
    });
    if (failedRule)
      return signalPassFailure();

    auto lookup = [&](Value v) -> const Layout * {
      auto it = known.find(v);
      return it == known.end() ? nullptr : &it->second;
    };
    // Forward and backward over the ops until no value changes; each value
    // is decided once, so this ends.
    for (bool changed = true; changed;) {
      changed = false;
      for (Operation *op : sameLayout)
        for (auto [v, r] : llvm::zip(op->getOperands(), op->getResults())) {
          const Layout *in = lookup(v), *out = lookup(r);
          if (in && !out) {
            Layout l = *in;
            l.partial.clear();
            known[r] = l;
            changed = true;
          } else if (out && !in && isTensor(v)) {
            Layout l = *out;
            l.partial.clear();
            known[v] = l;
            changed = true;
          }
        }
      for (auto &[op, rule] : ops) {
        SmallVector<std::pair<const SmallVector<SmallVector<int>> *, const Layout *>> sources;
        for (auto [i, r] : llvm::enumerate(op->getResults()))
          sources.push_back({&rule.resultDims[i], lookup(r)});
        bool allOperandsKnown = op->getNumOperands() > 0;
        for (auto [i, v] : llvm::enumerate(op->getOperands())) {
          sources.push_back({&rule.operandDims[i], lookup(v)});
          allOperandsKnown &= lookup(v) != nullptr;
        }
        SmallVector<IndivisibleSplit> indivisible;
        FactorAxes assignment = assignFactors(rule, sources, mesh, &indivisible);
        if (!indivisible.empty()) {
          // A split that cannot continue is an impossible layout (heads,
          // hidden size or batch not divisible), not a silent gather.
          const IndivisibleSplit &bad = indivisible.front();
          unsigned numResults = op->getNumResults();
          Value v = bad.source < numResults ? op->getResult(bad.source)
                                            : op->getOperand(bad.source - numResults);
          op->emitOpError("cannot split dim ")
              << bad.dim << " of " << v.getType() << " (" << describeValue(v) << ") over "
              << bad.ranks
              << " ranks: the dim is made of a factor of size " << bad.factorSize
              << ", which is not divisible by " << bad.ranks;
          failedRule = true;
          return;
        }
        bool anySplit = llvm::any_of(assignment, [](const Axes &a) { return !a.empty(); });
        for (auto [i, r] : llvm::enumerate(op->getResults())) {
          if (known.count(r) || !(anySplit || allOperandsKnown))
            continue;
          Layout l = layoutOf(rule.resultDims[i], assignment);
          l.partial = reductionAxes(rule, assignment);
          known[r] = l;
          changed = true;
        }
        if (!anySplit)
          continue;
        for (auto [i, v] : llvm::enumerate(op->getOperands())) {
          if (known.count(v) || !isTensor(v))
            continue;
          Layout l = layoutOf(rule.operandDims[i], assignment);
          if (!l.isSplit())
            continue;
          known[v] = l;
          changed = true;
        }
      }
    }

    if (zero1 && (mesh.axisSize("dp") || mesh.axisSize("ep")))
      for (auto &[op, rule] : ops)
        if (rule.optimizerUpdate)
          splitOptimizerUpdate(op, known, mesh);

    auto write = [&](Value v) {
      if (!isTensor(v))
        return;
      auto it = known.find(v);
      setAnnotation(v, it != known.end() ? it->second
                                         : Layout::replicated(shapeOf(v).size()));
    };
    for (BlockArgument arg : func.getArguments())
      write(arg);
    func.walk([&](Operation *op) {
      for (Value r : op->getResults())
        write(r);
    });
  }

  /// ZeRO-1: an optimizer update and the state it reads and writes are
  /// further split over the data ranks that replicate it (`dp`, and `ep`
  /// for a weight the experts do not split) along the first dim that
  /// divides (over as many of them as one dim takes); the gradient it reads
  /// is then reduce-scattered rather than all-reduced.
  void splitOptimizerUpdate(Operation *op, llvm::DenseMap<Value, Layout> &known,
                            dist::MeshAttr mesh) {
    Value param = op->getOperand(0);
    ArrayRef<int64_t> shape = shapeOf(param);
    Layout layout = known.count(param) ? known[param] : Layout::replicated(shape.size());
    layout.partial.clear();
    Axes free;
    for (StringRef axis : {"dp", "ep"})
      if (mesh.axisSize(axis) &&
          llvm::none_of(layout.dims, [&](const Axes &a) { return llvm::is_contained(a, axis); }))
        free.push_back(axis);
    if (free.empty())
      return;
    // All the free axes on one dim, else the first one alone.
    SmallVector<Axes> choices{free};
    if (free.size() > 1)
      choices.push_back(Axes{free.front()});
    for (const Axes &adding : choices)
      for (unsigned d = 0; d < shape.size(); ++d) {
        if (shape[d] % (mesh.groupSize(layout.dims[d]) * mesh.groupSize(adding)) != 0)
          continue;
        layout.dims[d].append(adding.begin(), adding.end());
        for (Value v : op->getOperands())
          if (isTensor(v) && shapeOf(v) == shape)
            known[v] = layout;
        for (Value r : op->getResults())
          known[r] = layout;
        // The gradient too, back through elementwise ops (clipping) to where
        // it is made, and the elementwise ops reading it (the squares of the
        // gradient norm): the gradient is then reduce-scattered once, and the
        // norm summed over the shards.
        auto elementwiseOn = [&](Operation *user, Value v) {
          return user->getNumResults() == 1 && isTensor(user->getResult(0)) &&
                 shapeOf(user->getResult(0)) == shape &&
                 llvm::all_of(user->getOperands(), [&](Value o) {
                   return !isTensor(o) || shapeOf(o) == shape || shapeOf(o).empty();
                 });
        };
        SmallVector<Value> work{op->getOperand(1)};
        llvm::DenseSet<Value> seen;
        while (!work.empty()) {
          Value g = work.pop_back_val();
          if (!seen.insert(g).second)
            continue;
          known[g] = layout;
          if (Operation *def = g.getDefiningOp(); def && elementwiseOn(def, g))
            for (Value o : def->getOperands())
              if (isTensor(o) && shapeOf(o) == shape && o.getDefiningOp() &&
                  o.getDefiningOp()->getNumOperands() > 0)
                work.push_back(o);
          for (Operation *user : g.getUsers())
            if (user != op && isa<nn::ShardingRuleOpInterface>(user) && elementwiseOn(user, g))
              known[user->getResult(0)] = layout;
        }
        // Writes of the updated values keep the split.
        for (Value r : op->getResults())
          for (Operation *user : r.getUsers())
            for (Value v : user->getOperands())
              if (v != r && isTensor(v) && shapeOf(v) == shape && v.getDefiningOp() &&
                  v.getDefiningOp()->getNumOperands() == 0)
                known[v] = layout;
        return;
      }
  }
};

} // namespace
