#ifndef LOOM_PASSES_PIPELINE_SCHEDULEGENERATORS_H
#define LOOM_PASSES_PIPELINE_SCHEDULEGENERATORS_H

#include "runtime/schedule/Schedule.h"

namespace loom::pipeline {

// One function per schedule. Each returns the compute actions per rank (F,
// B, I, W, OVERLAP_F_B) with the stage placement, or a one-line error saying
// what the schedule needs. `generateSchedule` adds the transfers and verifies.

/// 1F1B (PipeDream-Flush): rank r runs pp-1-r warm-up forwards, then
/// alternates one forward and one full backward, then drains the backwards.
/// Stage s on rank s.
llvm::Expected<Schedule> generate1F1B(int pp, int microbatches);

/// Interleaved 1F1B (Megatron-LM's virtual pipeline): each rank holds vpp
/// stages, stage v*pp + r on rank r; microbatches advance in groups of pp
/// through the local stages. Needs vpp >= 2 and microbatches a multiple of pp.
llvm::Expected<Schedule> generateInterleaved(int pp, int vpp, int microbatches);

/// Zero Bubble H1: 1F1B's order and memory (rank r holds at most pp-r
/// activations between F and I) with each backward split into I and W; W is
/// deferred and fills the time a rank would otherwise wait (listed by
/// simulating unit costs F = I = W).
llvm::Expected<Schedule> generateZBH1(int pp, int microbatches);

/// DualPipe (DeepSeek-V3): two pipelines in opposite directions over the same
/// ranks, each a full copy of the model (2x parameters). Rank r runs stage r
/// of the "down" chain (stages 0..pp-1, microbatches 0..M/2-1) and stage
/// pp-1-r of the "up" chain (stages pp..2pp-1, stage pp+j on rank pp-1-j).
/// Forward and backward chunks of the two directions run as OVERLAP_F_B
/// pairs in the steady state; zero-bubble I/W splits fill the ends. Needs an
/// even pp >= 2 and an even number of microbatches >= 2*pp.
llvm::Expected<Schedule> generateDualPipe(int pp, int microbatches);

/// DualPipeV ("cut-in-half" DualPipe): 2*pp stages in one chain, rank r
/// holding stages r and 2pp-1-r (a V), one copy of the parameters. Needs
/// microbatches >= 2*pp.
llvm::Expected<Schedule> generateDualPipeV(int pp, int microbatches);

/// The named schedule with transfers inserted, verified. `vpp` matters only
/// for `interleaved` (for the others it must be 1, or 2 for the two V-placed
/// stages of dualpipev and the two directions of dualpipe). `verify` false
/// skips the verifier (loom-plan costs thousands of generated schedules;
/// the generators' tests verify every shape, and compiling verifies again).
llvm::Expected<Schedule> generateSchedule(ScheduleKind kind, int pp, int vpp, int microbatches,
                                          bool verify = true);

/// Stages per rank a schedule kind needs for a given --vpp (1f1b/zb-h1: 1,
/// interleaved: vpp, dualpipe/dualpipev: 2).
int stagesPerRank(ScheduleKind kind, int vpp);

} // namespace loom::pipeline

#endif
