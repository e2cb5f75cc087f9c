#ifndef LOOM_PASSES_PIPELINE_SCHEDULE_H
#define LOOM_PASSES_PIPELINE_SCHEDULE_H

// A pipeline schedule as data: per-rank ordered lists of actions, in the
// vocabulary of PyTorch's torch.distributed.pipelining (`0F1`, `1I0`, `2W3`,
// `0SEND_F1`, `(0F3;3B1)OVERLAP_F_B`), so schedules can be exchanged as CSV.
// Plain C++ (LLVM Support only): the `pipe` dialect, loom-compile and the
// runtime-side loom-inspect all use it.

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace loom::pipeline {

enum class ActionKind {
  F,         // forward of one microbatch through one stage
  B,         // full backward (input and weight gradients together)
  I,         // backward, input gradient only (the weight gradient comes later as W)
  W,         // backward, weight gradient only
  SendF,     // send this stage's forward output to the next stage's rank
  RecvF,     // receive this stage's forward input from the previous stage's rank
  SendB,     // send this stage's input gradient to the previous stage's rank
  RecvB,     // receive this stage's output gradient from the next stage's rank
  OverlapFB, // F of (stage, mb) and B of (bStage, bMb), run overlapped
};

/// The PyTorch spelling of a kind: "F", "SEND_F", "OVERLAP_F_B", ...
llvm::StringRef actionKindName(ActionKind kind);
bool isCompute(ActionKind kind);
bool isComm(ActionKind kind);

/// The largest stage or microbatch index a schedule may name: a CSV's
/// indices beyond it are errors, never wrapped or truncated.
constexpr int kMaxScheduleIndex = (1 << 20) - 1;

struct Action {
  ActionKind kind;
  int stage = 0;
  int mb = 0;
  // OverlapFB only: the backward half (the forward half is stage/mb).
  int bStage = -1;
  int bMb = -1;

  static Action make(ActionKind kind, int stage, int mb) { return {kind, stage, mb, -1, -1}; }
  static Action overlap(int fStage, int fMb, int bStage, int bMb) {
    return {ActionKind::OverlapFB, fStage, fMb, bStage, bMb};
  }
  bool operator==(const Action &o) const {
    return kind == o.kind && stage == o.stage && mb == o.mb && bStage == o.bStage && bMb == o.bMb;
  }
  bool operator!=(const Action &o) const { return !(*this == o); }
  /// PyTorch's notation: `0F1`, `3SEND_B0`, `(0F3;3B1)OVERLAP_F_B`.
  std::string str() const;
  static llvm::Expected<Action> parse(llvm::StringRef text);
};

enum class ScheduleKind { OneFOneB, Interleaved, ZBH1, DualPipe, DualPipeV, Custom };
llvm::StringRef scheduleKindName(ScheduleKind kind); // "1f1b", "zb-h1", ...
llvm::Expected<ScheduleKind> parseScheduleKind(llvm::StringRef name);

/// Stages are numbered 0..numStages-1. They form `numChains` chains of equal
/// length (the model's pieces, in order): chain c is stages
/// [c*L, (c+1)*L) with L = numStages/numChains, and each microbatch
/// 0..microbatchesPerChain()-1 goes through every stage of every chain.
/// DualPipe has two chains (its two directions, each a full copy of the
/// model); every other schedule has one.
struct Schedule {
  ScheduleKind kind = ScheduleKind::Custom;
  int numRanks = 0;
  int numStages = 0;
  int numMicrobatches = 0; // over all chains
  int numChains = 1;
  std::vector<int> stageRank;             // stage -> the rank that runs it
  std::vector<std::vector<Action>> ranks; // per rank, in execution order

  int chainLength() const { return numStages / numChains; }
  int microbatchesPerChain() const { return numMicrobatches / numChains; }
  bool isFirstInChain(int stage) const { return stage % chainLength() == 0; }
  bool isLastInChain(int stage) const { return stage % chainLength() == chainLength() - 1; }
  /// The model piece a stage holds (stages of different chains may share one).
  int stageChunk(int stage) const { return stage % chainLength(); }
  /// Copies of the model's parameters the whole pipeline holds.
  int parameterCopies() const { return numChains; }
};

/// Adds SEND_F/RECV_F/SEND_B/RECV_B to a compute-only schedule (transfers
/// between stages of one rank stay local). Every transfer gets a key: when
/// its tensor is produced when the compute is timed with the default
/// ScheduleCosts, then the producer's rank and position. Each rank posts its
/// transfers in key order, a send right after its producer and a receive
/// before the first compute that starts once the tensor exists; one global
/// order means no cycle of blocking waits can form (see ScheduleVerifier.h)
/// and two ranks see their transfers in the same order.
llvm::Error insertCommunication(Schedule &schedule);
/// Drops all communication actions.
void removeCommunication(Schedule &schedule);

/// PyTorch pipelining's CSV: one row per rank, one action per cell. A first
/// line `# loom-schedule kind=... ranks=... stages=... microbatches=...
/// chains=...` is written when the shape cannot be inferred from the actions
/// (two chains: DualPipe), or always when asked (to keep the kind, as
/// executables do), and read when present.
enum class CsvHeader { WhenNeeded, Always };
std::string exportCsv(const Schedule &schedule, CsvHeader header = CsvHeader::WhenNeeded);
/// Parses, infers the shape (ranks = rows, stages and microbatches from the
/// largest indices, each stage's rank from where its compute runs), and runs
/// the verifier. FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD) are skipped.
llvm::Expected<Schedule> importCsv(llvm::StringRef text);

/// importCsv on a file's text; errors name the file.
llvm::Expected<Schedule> readScheduleFile(llvm::StringRef path);

/// A table, one line per rank, of the actions (for printing and remarks).
std::string formatScheduleTable(const Schedule &schedule, bool withComm = false);

} // namespace loom::pipeline

#endif
