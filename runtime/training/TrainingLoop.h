#ifndef LOOM_RUNTIME_TRAINING_TRAININGLOOP_H
#define LOOM_RUNTIME_TRAINING_TRAININGLOOP_H

// The training loop `loom-run --steps N` drives: a data source feeding the
// step program's `tokens`, the learning-rate schedule feeding `lr`, progress
// and metrics from its `loss` and `grad_norm`, and checkpoints of every
// parameter (optimizer state included) with the data position, so a resumed
// run continues exactly where the interrupted one was.

#include "runtime/backends/ProgramExecutor.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <set>
#include <vector>
#include <string>

namespace loom {

struct TrainingOptions {
  int64_t steps = 0;       // total: a resumed run continues up to this step
  std::string data;        // a token file, Megatron prefix, .npy or synthetic:VOCAB
  double lr = 3e-4;        // peak learning rate
  std::string schedule = "constant"; // "constant" or "cosine"
  int64_t warmupSteps = 0; // linear warmup from 0 to lr
  double minLrRatio = 0.1; // cosine decays to lr * minLrRatio at `steps`
  uint64_t seed = 0;       // data order
  bool sequentialData = false; // windows in file order, no shuffle
  std::string metricsPath; // JSONL, one object per step
  std::string checkpointDir;
  int64_t checkpointEvery = 0; // 0: only at the end (when a dir is given)
  unsigned keepCheckpoints = 3;
  /// Checkpoints written in the background: at the step boundary the state
  /// is copied to host memory (the stall, measured as checkpoint_stall_s in
  /// the metrics) and a writer thread persists it while training goes on;
  /// the next checkpoint first waits for the previous write.
  bool checkpointAsync = false;
  /// A checkpoint that cannot be written (a full disk): stop the run with
  /// the error (false), or report it and go on training (true). Either
  /// way the previous checkpoint survives.
  bool continueAfterCheckpointFailure = false;
  /// Tests: each checkpoint's writer finds the disk full after this many
  /// bytes.
  std::optional<uint64_t> simulateFullDiskAfterBytes;
  bool resume = false;
  /// Settings a resumed run may change from the checkpoint's (names as
  /// loom-run's --override-resumed takes them); any other difference is an
  /// error.
  std::set<std::string> overrideResumed;
  int64_t logEvery = 1;
  /// Stops after this many steps of this run (tests simulate an interrupted
  /// run with it); 0: no limit.
  int64_t stopAfter = 0;

  /// What an anomalous step does. An anomaly is a loss or gradient norm
  /// that is not finite or, with lossSpikeZScore > 0, a loss that many
  /// standard deviations above the mean of the last lossSpikeWindow good
  /// steps. Stop: the run ends with the reason. Skip: the state returns to
  /// the last in-memory snapshot, the steps since are run again and the
  /// anomalous step's batch is left out. Rewind: the state returns to the
  /// snapshot and every batch since it is left out.
  enum class AnomalyAction { Stop, Skip, Rewind };
  AnomalyAction onAnomaly = AnomalyAction::Stop;
  double lossSpikeZScore = 0;
  int64_t lossSpikeWindow = 100;
  /// Skip and rewind: an in-memory snapshot of every rank's state (host
  /// memory, never the disk) after every this many good steps.
  int64_t snapshotEvery = 100;
  /// Anomalies handled without a new snapshot in between; one more stops
  /// the run.
  int64_t anomalyRetries = 3;
  /// Batches (1-based, in the order the data would give them) no step
  /// trains on: a run that never sees them.
  std::set<int64_t> skipBatches;

  /// Multi-rank runs: a rank whose compute time (its step time less its
  /// time in collectives), averaged over the last stragglerWindow steps, is
  /// above the median rank's by more than this fraction is named as a
  /// straggler. 0: no detection.
  double stragglerThreshold = 0.5;
  int64_t stragglerWindow = 20;

  /// Fault injection for tests: before step injectNanAtStep (1-based, the
  /// first time it runs) every rank's trainable parameters become NaN;
  /// rank injectDelayRank sleeps injectDelaySeconds before each step; rank
  /// injectHangRank stops for good before step injectHangStep.
  int64_t injectNanAtStep = 0;
  int64_t injectDelayRank = -1;
  double injectDelaySeconds = 0;
  int64_t injectHangRank = -1;
  int64_t injectHangStep = 0;
};

/// The names --override-resumed takes.
const std::vector<std::string> &resumableSettings();

/// The learning rate at 0-based `step`.
double learningRateAt(const TrainingOptions &options, int64_t step);

/// Runs the training steps of a `train` executable. Progress goes to `log`.
///
/// In a multi-rank run every rank calls this with its executor and its
/// `communicator`, and the ranks step in lockstep: each reads the same global
/// batch and sets its block of it (by the `tokens` input's sharding). Rank 0
/// alone logs, writes the metrics and commits checkpoints: every rank sends
/// it the parameter blocks it is first to hold, and the checkpoint stores
/// them as shards of the global tensors. Resuming reassembles the global
/// tensors and takes this rank's blocks, whatever layout wrote them.
llvm::Error runTraining(const Executable &exe, ProgramExecutor &executor,
                        const TrainingOptions &options, llvm::raw_ostream &log,
                        Communicator *communicator = nullptr);

} // namespace loom

#endif
