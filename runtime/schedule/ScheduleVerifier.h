#ifndef LOOM_PASSES_PIPELINE_SCHEDULEVERIFIER_H
#define LOOM_PASSES_PIPELINE_SCHEDULEVERIFIER_H

#include "runtime/schedule/Schedule.h"

namespace loom::pipeline {

/// Checks a schedule, returning the first problem in one line (which rank,
/// which action, what was expected):
/// - shape: stages split into chains, every stage on a rank in range, every
///   action on the rank that holds its stage, indices in range;
/// - coverage: every (stage, microbatch) has exactly one F, and exactly one
///   B or one I and one W;
/// - order on a rank: a microbatch's F precedes its B/I, I precedes W, a send
///   follows the compute that produced its tensor; a stage's input from a
///   stage of another rank arrives through a RECV before the compute that
///   reads it (transfers between stages of one rank are local);
/// - communication: every SEND has exactly one matching RECV on the rank of
///   the peer stage, and between two ranks the sends and their receives come
///   in the same order (point-to-point transfers match in order, as NCCL's);
/// - no deadlock, by simulating the ranks with blocking communication: a run
///   of consecutive SEND/RECV actions on a rank is posted as one group
///   (ncclGroupStart/End, batch_isend_irecv) and completes only when the
///   partner of each of its transfers has been posted (rendezvous); compute
///   never waits on another rank except through a RECV.
/// A compute-only schedule (no SEND/RECV at all) is checked with the
/// transfers insertCommunication would add.
llvm::Error verifySchedule(const Schedule &schedule);

} // namespace loom::pipeline

#endif
