#ifndef LOOM_RUNTIME_EXECUTABLE_EXECUTABLELISTING_H
#define LOOM_RUNTIME_EXECUTABLE_EXECUTABLELISTING_H

// Human-readable and JSON listings of an executable (`loom-inspect`), and the
// spellings they share with the verifier's error messages.

#include "runtime/executable/Executable.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>

namespace loom {

/// Model, mode, flags, the parameter table, the fused kernels (each body
/// once; a call names its fK), then per rank: signature, parameter bindings,
/// buffers, memory plan, streams and instructions.
/// A pipelined executable's header has a `schedule:` line: `scheduleSummary`
/// when the caller gives one ("dualpipev, 2 ranks, 4 stages, 4
/// microbatches": parsing the CSV takes the pipeline library, which this one
/// does not link), else the CSV's size.
void printExecutable(const Executable &exe, llvm::raw_ostream &os,
                     llvm::StringRef scheduleSummary = "");

/// The same content as printExecutable, machine-readable; `scheduleCsv` is
/// the stored schedule's text, null when there is none.
llvm::json::Value executableToJson(const Executable &exe);

/// The distinct bodies of an executable's nn.fused calls (fusion groups the
/// CUDA backend runs as one generated kernel each), numbered f0, f1, ... in
/// the order of their first call, rank by rank; `calls` counts every call.
struct FusedKernelUse {
  std::string body;
  size_t calls = 0;
};
std::vector<FusedKernelUse> listFusedKernels(const Executable &exe);

/// Memory a rank's plan uses. Buffers sharing an arena offset and size (views
/// such as reshapes) are one allocation and count once.
struct MemoryPlanSummary {
  uint64_t persistentArenaBytes = 0;
  uint64_t scratchArenaBytes = 0;       // the planned peak
  uint64_t scratchWithoutReuseBytes = 0; // every scratch allocation side by side
  size_t scratchAllocations = 0;
};
MemoryPlanSummary summarizeMemoryPlan(const RankProgram &program);

/// What a rank's memory holds. Persistent: the parameters by role. Scratch:
/// the buffers live at the instruction where the most bytes are (liveness
/// as the memory planner counts it: first to last use in program order,
/// inputs from the start, outputs to the end), by what they hold
/// (BufferDesc::category), activations by microbatch.
struct MemoryBreakdown {
  uint64_t trainableBytes = 0; // trainable parameters (f32 master weights)
  uint64_t updatedBytes = 0;   // other state the step writes (optimizer moments, copies)
  uint64_t constantBytes = 0;  // never written
  int64_t peakInstruction = -1;
  uint64_t liveAtPeak = 0;
  /// The most activation bytes live at once, and all scratch live then.
  uint64_t activationPeak = 0, liveAtActivationPeak = 0;
  std::map<MemoryCategory, uint64_t> byCategory;
  std::map<int32_t, uint64_t> activationsByMicrobatch;
};
MemoryBreakdown summarizeMemory(const Executable &exe, const RankProgram &program);
/// summarizeMemory as loom-inspect prints it ("  memory by what it holds:").
void printMemoryBreakdown(const Executable &exe, const RankProgram &program,
                          llvm::raw_ostream &os);

/// What a rank holds on a GPU beyond the CUDA context, predicted from its
/// plan: the arenas (each a cudaMalloc, in 2 MiB pages), cuBLASLt's
/// workspace, the kernel images and library handles loaded at the first step
/// (measured), and the stream-ordered pool's peak, which cuDNN's attention
/// draws on for its statistics and workspace. docs/memory.md has the
/// measurements behind the constants.
struct DeviceMemoryPrediction {
  uint64_t arenaBytes = 0;
  uint64_t workspaceBytes = 0;    // cuBLASLt's, fixed
  uint64_t librariesBytes = 0;    // kernel images, cuBLASLt and cuDNN handles
  uint64_t poolBytes = 0;         // attention scratch from the stream-ordered pool
  uint64_t communicationBytes = 0; // NCCL's buffers, on a rank that communicates
  uint64_t contextBytes = 0;      // the CUDA context, before any of the above
  uint64_t hostBytes = 0;         // the host arena (offloaded activations), pinned
  uint64_t total() const {
    return arenaBytes + workspaceBytes + librariesBytes + poolBytes + communicationBytes;
  }
};
DeviceMemoryPrediction predictCudaMemory(const RankProgram &program);

/// "f32[4, 8]", "i1[]"; an out-of-range dtype prints as "dtype(N)".
std::string formatTensorType(DType dtype, const std::vector<int64_t> &shape);
std::string dtypeSpelling(DType dtype);
/// "persistent", "scratch"; "compute", "copy", "record_event", ...
std::string arenaKindName(ArenaKind kind);
std::string instrKindName(InstrKind kind);
std::string initKindName(InitKind kind);

} // namespace loom

#endif
