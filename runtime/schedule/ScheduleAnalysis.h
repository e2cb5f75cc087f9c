#ifndef LOOM_PASSES_PIPELINE_SCHEDULEANALYSIS_H
#define LOOM_PASSES_PIPELINE_SCHEDULEANALYSIS_H

#include "runtime/schedule/Schedule.h"

#include <string>
#include <vector>

namespace loom::pipeline {

/// Durations of one action on one stage, in any unit (the SVG's time axis).
struct ScheduleCosts {
  double f = 1.0;    // forward
  double b = 2.0;    // full backward (input and weight gradients)
  double i = 1.0;    // input gradient only
  double w = 1.0;    // weight gradient only
  double fb = 3.0;   // an overlapped F and B pair (DualPipe's F&B)
  double comm = 0.0; // a transfer between two ranks
  // Per stage, a factor on its compute times (empty: every stage costs the
  // same), e.g. the stage's FLOPs over the mean stage's.
  std::vector<double> stageScale;
  double scale(int stage) const {
    return stage >= 0 && size_t(stage) < stageScale.size() ? stageScale[stage] : 1.0;
  }
};

/// When an action runs under a cost model.
struct TimedAction {
  Action action;
  double start = 0, end = 0;
};

struct RankAnalysis {
  double busy = 0;          // time spent computing
  double bubble = 0;        // idle time until the step's end: makespan - busy
  int peakActivations = 0;  // most (stage, microbatch) activations held at once
  double parameterCopies = 0; // parameters held, in units of one rank's share under 1F1B
};

struct ScheduleAnalysis {
  double makespan = 0;
  std::vector<RankAnalysis> ranks;
  std::vector<std::vector<TimedAction>> timeline; // per rank, compute actions only
  int parameterCopies = 1; // copies of the model the whole pipeline holds
  double maxBubble() const;
  int maxPeakActivations() const;
  /// A table: per rank, busy, bubble, peak activations, parameters.
  std::string format() const;
};

/// "f=1,b=2,i=1,w=1,fb=3,comm=0" (any subset, the rest default).
llvm::Expected<ScheduleCosts> parseScheduleCosts(llvm::StringRef text);

/// The schedule and its analysis as JSON: shape, per-rank actions (PyTorch
/// notation) and figures, step time.
std::string scheduleToJson(const Schedule &schedule, const ScheduleAnalysis &analysis,
                           const ScheduleCosts &costs);

/// Times a verified schedule: each compute action starts when its rank is
/// free and its inputs are ready (the producing action's end, plus `comm`
/// when it ran on another rank); transfers themselves take no rank time. An
/// activation is live from its F's start until its B or I ends.
/// `verify` false trusts the schedule (one from generateSchedule, timed
/// under many cost models by loom-plan).
llvm::Expected<ScheduleAnalysis> analyzeSchedule(const Schedule &schedule,
                                                 const ScheduleCosts &costs = {},
                                                 bool verify = true);

/// The per-rank timeline as SVG: one row per rank, one box per compute
/// action colored by kind (F, B, I, W, and OVERLAP_F_B split in its F and B
/// halves) with the microbatch number, a time axis from the cost model, and
/// each box's action in a `data-action` attribute and a tooltip.
std::string renderScheduleSvg(const Schedule &schedule, const ScheduleAnalysis &analysis);

} // namespace loom::pipeline

#endif
