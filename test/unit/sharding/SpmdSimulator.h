#ifndef LOOM_TEST_UNIT_SHARDING_SPMDSIMULATOR_H
#define LOOM_TEST_UNIT_SHARDING_SPMDSIMULATOR_H

// Runs a partitioned training step (the output of --loom-spmd-partition) on
// every rank of its mesh in one process, op by op in lockstep: nn ops with
// the CPU reference kernels, dist collectives over the ranks' values. It
// holds the parameters whole between steps, cutting each rank's shard before
// a step and putting the shards written by nn.assign back after it, so a
// partitioned step can be compared with the single-rank step it came from.
// A test tool for the compiler half of sharding, independent of the
// runtime's communicators.

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace loom::test {

/// A whole (global) tensor as doubles (exact for f32 and small integers).
struct HostTensor {
  mlir::RankedTensorType type;
  std::vector<double> data;
};

class SpmdSimulator {
public:
  /// `module` holds `@main`; its `dist.mesh` (if any) gives the ranks.
  explicit SpmdSimulator(mlir::ModuleOp module);

  /// Runs one step with the given whole arguments (in order); returns the
  /// whole results. Results must agree on every rank.
  llvm::Expected<std::vector<HostTensor>> step(const std::vector<HostTensor> &arguments);

  /// The whole value of a parameter after the last step.
  const HostTensor *parameter(const std::string &name) const;
  std::vector<std::string> parameterNames() const;
  int64_t numRanks() const { return numRanks_; }

private:
  mlir::ModuleOp module_;
  std::vector<std::string> axisNames_;
  std::vector<int64_t> axisSizes_;
  int64_t numRanks_ = 1;
  std::map<std::string, HostTensor> parameters_;
};

} // namespace loom::test

#endif
