#ifndef LOOM_PASSES_SHARDING_FACTORSHARDING_H
#define LOOM_PASSES_SHARDING_FACTORSHARDING_H

// What the sharding passes share: reading and writing a value's sharding
// annotation, and mapping shardings to an op's factors and back through its
// ShardingRule.

#include "dialects/dist/DistDialect.h"
#include "dialects/nn/NNOps.h"

namespace loom::sharding {

using Axes = llvm::SmallVector<llvm::StringRef>;

/// A tensor's layout in plain form: axes per dim (major first), partial axes.
struct Layout {
  llvm::SmallVector<Axes> dims;
  Axes partial;

  static Layout replicated(unsigned rank) { return Layout{llvm::SmallVector<Axes>(rank), {}}; }
  static Layout from(dist::ShardingAttr attr);
  dist::ShardingAttr toAttr(mlir::MLIRContext *ctx) const;
  bool sameDims(const Layout &other) const { return dims == other.dims; }
  bool operator==(const Layout &other) const {
    return dims == other.dims && partial == other.partial;
  }
  bool isSplit() const;
};

/// The annotation on `v` (its defining op's `dist.sharding`, or its
/// function argument attribute), if any.
std::optional<Layout> getAnnotation(mlir::Value v);
void setAnnotation(mlir::Value v, const Layout &layout);

/// Axes assigned to each factor of a rule.
using FactorAxes = llvm::SmallVector<Axes>;

/// A split that could not go to its factor because the factor's size does
/// not divide by the ranks of its axes.
struct IndivisibleSplit {
  unsigned source, dim;
  int64_t factorSize, ranks;
};

/// Assigns axes to factors from `sources` in order (first come first
/// served): each source is the factors of a value's dims and the layout it
/// has. A dim's axes go to its major factor unless that factor is kept
/// whole, does not divide by them (recorded in `indivisible`), or an axis
/// is already taken.
FactorAxes assignFactors(const nn::ShardingRule &rule,
                         llvm::ArrayRef<std::pair<const llvm::SmallVector<llvm::SmallVector<int>> *,
                                                  const Layout *>>
                             sources,
                         dist::MeshAttr mesh,
                         llvm::SmallVectorImpl<IndivisibleSplit> *indivisible = nullptr);

/// The layout of a value whose dims are made of `dimFactors` under the
/// assignment (a dim whose minor factor is split cannot be shown: the
/// assignment must have been made consistent first).
Layout layoutOf(const llvm::SmallVector<llvm::SmallVector<int>> &dimFactors,
                const FactorAxes &assignment);

/// Drops splits of factors that some dim holds as a minor factor, so every
/// split is a block split of its dims.
void makeRepresentable(const nn::ShardingRule &rule, FactorAxes &assignment);

/// The axes of split reduction factors: partial sums in the results.
Axes reductionAxes(const nn::ShardingRule &rule, const FactorAxes &assignment);

std::string describe(const Layout &layout);

/// Whether the rule fits the op: one dims list per operand and result, of
/// their ranks, naming existing factors.
bool ruleFits(mlir::Operation *op, const nn::ShardingRule &rule);

} // namespace loom::sharding

#endif
