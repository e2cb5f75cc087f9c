#ifndef LOOM_PASSES_PLANNING_PLANNER_H
#define LOOM_PASSES_PLANNING_PLANNER_H

// loom-plan's search: every layout Loom can compile for a cluster (TP with
// sequence parallelism, PP with its schedules and virtual stages, DP with
// ZeRO-1, microbatches, recompute), each costed from the model's profile:
// op times from a calibration, collectives by an alpha-beta model per link,
// pipeline bubbles from the schedule analysis, memory from the memory
// planner's probes. docs/planning.md describes the model and the files.

#include "passes/planning/Profile.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace loom::planning {

struct Link {
  double bandwidthGBps = 0; // per GPU, one direction, as a collective sees it
  double latencyUs = 0;
};

/// A cluster of identical nodes (cluster JSON, schema "loom-cluster/1").
struct Cluster {
  std::string name;
  int64_t gpusPerNode = 0;
  int64_t nodes = 0;
  double gpuMemoryGiB = 0;
  double peakTflops = 0;   // the GPU's dense bf16 peak, for MFU
  double gemmTflops = 0;   // measured GEMM rate
  double memoryGBps = 0;   // measured elementwise-kernel bandwidth
  double hostCopyGBps = 0; // measured pinned host <-> device copy rate
  /// What the runtime holds per GPU beyond the planner's arenas: the CUDA
  /// context, workspaces, kernel images (optional "runtime_gib"; default
  /// predictCudaMemory's measured figures, 0.66 GiB).
  double runtimeGiB = 0.65625;
  Link intraNode, interNode;
  int64_t gpus() const { return gpusPerNode * nodes; }
};

/// Per-op rates measured by `loom-kernel-bench --calibration-out` (schema
/// "loom-calibration/1"); absent ones come from the cluster.
/// A compute-bound kernel's time as a fixed part (the tail of a GPU that a
/// small kernel does not fill, its prologue) plus its FLOPs at a rate:
/// seconds = fixedUs * 1e-6 + flops / (tflops * 1e12). Fitted by least
/// squares to a calibration's points of several sizes; with one size only,
/// fixedUs is 0.
struct RateCurve {
  double tflops = 0;
  double fixedUs = 0;
  double seconds(double flops) const { return fixedUs * 1e-6 + flops / (tflops * 1e12); }
  /// (flops, tflops) pairs; `fallback` when they do not give a positive rate.
  static RateCurve fit(const std::vector<std::pair<double, double>> &points, double fallback);
};

struct Calibration {
  std::string device;
  double gemmTflopsBf16 = 0, gemmTflopsF32 = 0;
  double attentionForwardTflops = 0, attentionBackwardTflops = 0;
  /// Fitted from gemm_points and attention_points where the file has them;
  /// otherwise the rates above with no fixed part.
  RateCurve gemmBf16, attentionForward, attentionBackward;
  double memoryGBps = 0;
  double launchUs = 0;      // a kernel launched on its own
  /// A kernel of a replayed CUDA graph (loom-run captures each step); 1 us
  /// when the calibration does not say.
  double graphLaunchUs = 1.0;
};

/// The built-in cluster: one node of eight H200s.
Cluster defaultCluster();
/// The built-in calibration: loom-kernel-bench on an H200.
Calibration defaultCalibration();
/// Each error names the file and the missing or bad field.
llvm::Expected<Cluster> parseCluster(llvm::StringRef text, llvm::StringRef path);
llvm::Expected<Calibration> parseCalibration(llvm::StringRef text, llvm::StringRef path);

struct Layout {
  int64_t tp = 1, pp = 1, dp = 1, vpp = 1;
  /// Expert-parallel ranks (--ep): a mixture-of-experts layer's experts
  /// split over them; they split the batch as data-parallel ranks do.
  int64_t ep = 1;
  std::string schedule; // empty without a pipeline
  int64_t microbatches = 1;
  int64_t microbatchSize = 1; // sequences
  std::string recompute = "none";
  bool offload = false; // --offload-activations=all
  /// Empty layer slots when the layers do not divide into the pipeline's
  /// stages: every stage gets as many slots, the empty ones last, then
  /// first (--pp-layout even).
  int64_t paddingLayers = 0;
  bool sp() const { return tp > 1; }
  bool zero1() const { return dp * ep > 1; }
  std::string describe() const;
};

struct PlanResult {
  Layout layout;
  double stepSeconds = 0;
  double tokensPerSecond = 0;
  double mfu = 0;
  double peakMemoryBytes = 0; // the largest rank's predicted device memory (the estimate)
  /// The same from the plan compiled through the memory planner (--verify).
  std::optional<double> compiledMemoryBytes;
  /// The factor loom-plan applied to the estimate after compiling a plan of
  /// the same kind (1: none).
  double correction = 1.0;
  double memoryBytes() const { return compiledMemoryBytes.value_or(peakMemoryBytes); }
  double bubble = 0;          // the largest rank's idle fraction of the step
  double computeSeconds = 0, tpCommSeconds = 0, dpCommSeconds = 0, optimizerSeconds = 0;
  /// Expert parallelism's dispatch and combine (in the pipeline's time).
  double epCommSeconds = 0;
  /// DualPipe: each weight gradient's two copies exchanged and summed.
  double copiesSeconds = 0;
  bool fits = true;
};

struct SearchOptions {
  int64_t globalBatch = 0;
  std::string precision = "bf16";
  std::string target = "cuda"; // loom-compile's --target in the flags
  // Fixed parts of the layout (0 / empty: searched).
  int64_t tp = 0, pp = 0, dp = 0, vpp = 0, microbatches = 0, ep = 0;
  std::string schedule, recompute;
  std::string offload; // "none" or "all"; empty: both
  int64_t maxMicrobatches = 256;
  /// Tensor-parallel degrees the model does not shard over (probeTensorParallel).
  std::vector<int64_t> excludedTp;
};

struct SearchResult {
  std::vector<PlanResult> plans;    // those that fit, fastest first
  std::vector<PlanResult> rejected; // those that do not, fastest first
  int64_t searched = 0;
  double seconds = 0;
};

/// loom-compile's flags for a layout.
std::string compileFlags(const Layout &layout, const SearchOptions &options);

llvm::Expected<SearchResult> search(const ModelProfile &profile, const Cluster &cluster,
                                    const Calibration &calibration, const SearchOptions &options);

} // namespace loom::planning

#endif
