#ifndef LOOM_PASSES_PLANNING_PROFILE_H
#define LOOM_PASSES_PLANNING_PROFILE_H

// What loom-plan knows of a model before it searches: the work and memory of
// one transformer layer and of the rest of the step, for one sequence per
// microbatch, from compiles of the model cut down to one and to two layers.
// The difference of the two is one layer; the one-layer model less a layer
// is the rest (the embedding, the head, the loss, the optimizer's fixed
// work). Work comes from the training step's ops (FlopCountOpInterface, and
// the bytes each op reads and writes); memory from the memory planner's
// arenas and its breakdown of the scratch peak (loom-inspect's).

#include "passes/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace loom::planning {

/// One op of the training step, as the cost model reads it.
struct OpWork {
  std::string name;   // the op's name: the calibration's per-op rates key on it
  double flops = 0;   // FlopCountOpInterface
  double bytes = 0;   // operands read plus results written
};

/// The work of one phase of a step: forward (F), input gradients (I),
/// weight gradients (W), and the optimizer (once per step).
struct PhaseWork {
  std::vector<OpWork> ops;
  double flops() const;
};

/// A probe: the step of the model cut to `layers` layers, at `batch`
/// sequences in one microbatch, one rank.
struct Probe {
  int64_t layers = 0;
  int64_t batch = 1;
  PhaseWork forward, inputGrad, weightGrad, optimizer;
  // The memory planner's figures (bytes).
  double persistent = 0;     // the persistent arena
  double scratch = 0;        // the scratch arena
  double activations = 0;    // activations live at the scratch peak
  double activationPeak = 0; // the most activations live at once
  double liveAtActivationPeak = 0; // all scratch live then
  double trainableBytes = 0; // f32 master weights
  double updatedBytes = 0;   // optimizer moments, weight copies
};

struct ModelProfile {
  std::string modelName;
  int64_t numLayers = 0;
  int64_t seq = 0;
  int64_t hidden = 0;          // the residual stream's width
  int64_t residualBytes = 0;   // one sequence's residual stream (what a stage sends)
  double parameters = 0;       // the whole model's trainable parameters
  double layerParameters = 0;  // one layer's
  /// Mixture of experts (the forward's nn.grouped_matmul ops): experts per
  /// layer (0: a dense model), the layers that have them, the experts each
  /// token goes to, the elements a routed row carries through a layer's
  /// expert GEMMs (their inputs and results), and the experts' weights
  /// (the whole model's), which --ep splits.
  int64_t experts = 0;
  int64_t moeLayers = 0;
  int64_t topK = 0;
  int64_t routedRowElements = 0;
  double expertParameters = 0;
  /// For each recompute mode ("none", "selective", "full"), probes at
  /// (layers, batch) = (1, 1), (2, 1), (1, 2), (2, 2): any figure f of them
  /// fits f = a + c * layers + d * batch + e * layers * batch exactly.
  std::map<std::string, std::vector<Probe>> probes;
  /// Seconds spent compiling probes.
  double seconds = 0;
};

/// Cuts `func` to its first `keep` transformer layers: the epilogue (final
/// norm, head, loss) reads layer keep-1's output instead of the last
/// layer's, and what no longer feeds it is erased. Fails, saying why, when
/// the layers do not chain through one value of one type.
llvm::Error truncateLayers(mlir::ModuleOp module, llvm::StringRef entry, int64_t keep);

/// Profiles `module` (nn after raising, its forward at batch 1): probes at
/// 1 and 2 layers and 1 and 2 sequences for each of `recomputeModes`, with `base`'s precision and
/// optimizer settings.
llvm::Expected<ModelProfile> profileModel(mlir::ModuleOp module, const PipelineOptions &base,
                                          const PipelineHooks &hooks,
                                          const std::vector<std::string> &recomputeModes);

/// Whether the model shards over `tp` tensor-parallel ranks with sequence
/// parallelism: its one-layer probe compiled through the sharding passes.
/// The error says why not (heads or a dimension that `tp` does not divide).
llvm::Error probeTensorParallel(mlir::ModuleOp module, const PipelineOptions &base,
                                const PipelineHooks &hooks, int64_t tp);

/// Compiles `module` (as profileModel takes it) with `options` (a plan's
/// layout) through the memory planner, and returns each rank's predicted
/// arenas and attention pool scratch on a GPU
/// (predictCudaMemory's; the caller adds the context and workspaces),
/// largest first.
llvm::Expected<std::vector<double>> compiledMemory(mlir::ModuleOp module,
                                                   const PipelineOptions &options,
                                                   const PipelineHooks &hooks);

} // namespace loom::planning

#endif
