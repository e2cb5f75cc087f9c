#include "passes/sharding/FactorSharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace loom;
using namespace loom::sharding;

Layout Layout::from(dist::ShardingAttr attr) {
  Layout l;
  for (unsigned d = 0; d < attr.getDims().size(); ++d)
    l.dims.push_back(attr.dimAxes(d));
  l.partial = attr.partialAxes();
  return l;
}

dist::ShardingAttr Layout::toAttr(MLIRContext *ctx) const {
  return dist::ShardingAttr::get(ctx, dims, partial);
}

bool Layout::isSplit() const {
  return !partial.empty() || llvm::any_of(dims, [](const Axes &a) { return !a.empty(); });
}

std::optional<Layout> sharding::getAnnotation(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    if (!func)
      return std::nullopt;
    if (dist::ShardingAttr attr = dist::getArgSharding(func, arg.getArgNumber()))
      return Layout::from(attr);
    return std::nullopt;
  }
  Operation *op = v.getDefiningOp();
  ArrayAttr all = dist::getResultShardings(op);
  unsigned i = cast<OpResult>(v).getResultNumber();
  if (!all || i >= all.size())
    return std::nullopt;
  if (auto attr = dyn_cast<dist::ShardingAttr>(all[i]))
    return Layout::from(attr);
  return std::nullopt; // a unit placeholder: not decided yet
}

void sharding::setAnnotation(Value v, const Layout &layout) {
  MLIRContext *ctx = v.getContext();
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      dist::setArgSharding(func, arg.getArgNumber(), layout.toAttr(ctx));
    return;
  }
  Operation *op = v.getDefiningOp();
  SmallVector<Attribute> all;
  if (ArrayAttr existing = dist::getResultShardings(op))
    all.assign(existing.begin(), existing.end());
  all.resize(op->getNumResults(), UnitAttr::get(ctx));
  all[cast<OpResult>(v).getResultNumber()] = layout.toAttr(ctx);
  dist::setResultShardings(op, all);
}

FactorAxes sharding::assignFactors(
    const nn::ShardingRule &rule,
    ArrayRef<std::pair<const SmallVector<SmallVector<int>> *, const Layout *>> sources,
    dist::MeshAttr mesh, SmallVectorImpl<IndivisibleSplit> *indivisible) {
  FactorAxes assignment(rule.factors.size());
  llvm::StringSet<> used;
  for (auto [source, entry] : llvm::enumerate(sources)) {
    auto [dimFactors, layout] = entry;
    if (!layout || layout->dims.size() != dimFactors->size())
      continue;
    for (auto [dim, pair] : llvm::enumerate(llvm::zip(*dimFactors, layout->dims))) {
      auto &[factors, axes] = pair;
      if (axes.empty() || factors.empty())
        continue;
      int f = factors.front();
      const nn::ShardingRule::Factor &factor = rule.factors[f];
      if (factor.kind == nn::FactorKind::Blocked || !assignment[f].empty())
        continue;
      if (llvm::any_of(axes, [&](StringRef a) { return used.contains(a); }))
        continue;
      int64_t n = mesh ? mesh.groupSize(axes) : 1;
      if (factor.size > 0 && factor.size % n != 0) {
        if (indivisible)
          indivisible->push_back({unsigned(source), unsigned(dim), factor.size, n});
        continue;
      }
      assignment[f] = axes;
      for (StringRef a : axes)
        used.insert(a);
    }
  }
  makeRepresentable(rule, assignment);
  return assignment;
}

void sharding::makeRepresentable(const nn::ShardingRule &rule, FactorAxes &assignment) {
  auto check = [&](const SmallVector<SmallVector<int>> &dims) {
    for (const SmallVector<int> &factors : dims)
      for (size_t i = 1; i < factors.size(); ++i)
        assignment[factors[i]].clear();
  };
  for (const auto &dims : rule.operandDims)
    check(dims);
  for (const auto &dims : rule.resultDims)
    check(dims);
}

Layout sharding::layoutOf(const SmallVector<SmallVector<int>> &dimFactors,
                          const FactorAxes &assignment) {
  Layout l = Layout::replicated(dimFactors.size());
  for (auto [d, factors] : llvm::enumerate(dimFactors))
    if (!factors.empty())
      l.dims[d] = assignment[factors.front()];
  return l;
}

Axes sharding::reductionAxes(const nn::ShardingRule &rule, const FactorAxes &assignment) {
  Axes axes;
  for (auto [f, factor] : llvm::enumerate(rule.factors))
    if (factor.kind == nn::FactorKind::Reduction)
      axes.append(assignment[f].begin(), assignment[f].end());
  return axes;
}

std::string sharding::describe(const Layout &layout) {
  std::string s = "[";
  for (auto [i, axes] : llvm::enumerate(layout.dims)) {
    if (i)
      s += ", ";
    s += "[";
    for (auto [j, a] : llvm::enumerate(axes))
      s += (j ? "," : "") + a.str();
    s += "]";
  }
  s += "]";
  if (!layout.partial.empty()) {
    s += " partial ";
    for (auto [j, a] : llvm::enumerate(layout.partial))
      s += (j ? "," : "") + a.str();
  }
  return s;
}

bool sharding::ruleFits(Operation *op, const nn::ShardingRule &rule) {
  auto fits = [&](ValueRange values, const SmallVector<SmallVector<SmallVector<int>>> &dims) {
    if (values.size() != dims.size())
      return false;
    for (auto [v, d] : llvm::zip(values, dims)) {
      auto t = dyn_cast<RankedTensorType>(v.getType());
      if (!t || t.getRank() != int64_t(d.size()))
        return false;
      for (const SmallVector<int> &factors : d)
        for (int f : factors)
          if (f < 0 || f >= int(rule.factors.size()))
            return false;
    }
    return true;
  };
  return fits(op->getOperands(), rule.operandDims) && fits(op->getResults(), rule.resultDims);
}
