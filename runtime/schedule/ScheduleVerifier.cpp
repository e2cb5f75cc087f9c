#include "runtime/schedule/ScheduleVerifier.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>
#include <tuple>

namespace loom::pipeline {
namespace {

using Key = std::tuple<int, int, int>; // kind, stage, mb

Key key(ActionKind kind, int stage, int mb) { return {int(kind), stage, mb}; }

llvm::Error problem(const llvm::Twine &message) {
  return llvm::createStringError("schedule: " + message);
}

std::string where(int rank, size_t index, const Action &a) {
  return llvm::formatv("rank {0} action {1} ({2})", rank, index, a.str()).str();
}

/// The partner of a transfer: SEND_F(s) <-> RECV_F(s+1), SEND_B(s) <-> RECV_B(s-1).
Action partner(const Action &a) {
  switch (a.kind) {
  case ActionKind::SendF: return Action::make(ActionKind::RecvF, a.stage + 1, a.mb);
  case ActionKind::RecvF: return Action::make(ActionKind::SendF, a.stage - 1, a.mb);
  case ActionKind::SendB: return Action::make(ActionKind::RecvB, a.stage - 1, a.mb);
  case ActionKind::RecvB: return Action::make(ActionKind::SendB, a.stage + 1, a.mb);
  default: return a;
  }
}

class Verifier {
public:
  explicit Verifier(const Schedule &s) : s(s) {}

  llvm::Error run() {
    if (llvm::Error err = checkShape())
      return err;
    if (llvm::Error err = checkActions())
      return err;
    if (llvm::Error err = checkCoverage())
      return err;
    if (llvm::Error err = checkPeerOrder())
      return err;
    return simulate();
  }

private:
  const Schedule &s;
  // Where each transfer is: (rank, index).
  std::map<Key, std::pair<int, size_t>> comms;

  llvm::Error checkShape() {
    if (s.numRanks <= 0 || int(s.ranks.size()) != s.numRanks)
      return problem(llvm::formatv("{0} ranks declared, {1} action lists", s.numRanks,
                                   s.ranks.size()));
    if (s.numChains <= 0 || s.numStages <= 0 || s.numStages % s.numChains != 0)
      return problem(llvm::formatv("{0} stages do not split into {1} chains", s.numStages,
                                   s.numChains));
    if (s.numMicrobatches <= 0 || s.numMicrobatches % s.numChains != 0)
      return problem(llvm::formatv("{0} microbatches do not split over {1} chains",
                                   s.numMicrobatches, s.numChains));
    if (int(s.stageRank.size()) != s.numStages)
      return problem(llvm::formatv("{0} stages but {1} stage placements", s.numStages,
                                   s.stageRank.size()));
    for (int stage = 0; stage < s.numStages; ++stage)
      if (s.stageRank[stage] < 0 || s.stageRank[stage] >= s.numRanks)
        return problem(llvm::formatv("stage {0} is placed on rank {1}, outside 0..{2}", stage,
                                     s.stageRank[stage], s.numRanks - 1));
    return llvm::Error::success();
  }

  llvm::Error checkIndex(int rank, size_t i, const Action &a, int stage, int mb) {
    if (stage < 0 || stage >= s.numStages)
      return problem(where(rank, i, a) + llvm::formatv(": stage outside 0..{0}", s.numStages - 1));
    if (mb < 0 || mb >= s.microbatchesPerChain())
      return problem(where(rank, i, a) +
                     llvm::formatv(": microbatch outside 0..{0}", s.microbatchesPerChain() - 1));
    if (s.stageRank[stage] != rank)
      return problem(where(rank, i, a) +
                     llvm::formatv(": stage {0} lives on rank {1}", stage, s.stageRank[stage]));
    return llvm::Error::success();
  }

  llvm::Error checkActions() {
    for (int rank = 0; rank < s.numRanks; ++rank)
      for (size_t i = 0; i < s.ranks[rank].size(); ++i) {
        const Action &a = s.ranks[rank][i];
        if (llvm::Error err = checkIndex(rank, i, a, a.stage, a.mb))
          return err;
        if (a.kind == ActionKind::OverlapFB) {
          if (llvm::Error err = checkIndex(rank, i, a, a.bStage, a.bMb))
            return err;
          if (a.stage == a.bStage && a.mb == a.bMb)
            return problem(where(rank, i, a) + ": overlaps a microbatch's F with its own B");
        }
        if (!isComm(a.kind))
          continue;
        bool forward = a.kind == ActionKind::SendF || a.kind == ActionKind::RecvF;
        bool send = a.kind == ActionKind::SendF || a.kind == ActionKind::SendB;
        // SEND_F and RECV_B look at the next stage, RECV_F and SEND_B at the previous.
        bool towardNext = forward == send;
        if (towardNext ? s.isLastInChain(a.stage) : s.isFirstInChain(a.stage))
          return problem(where(rank, i, a) + ": the stage has no " +
                         (towardNext ? "next" : "previous") + " stage to exchange with");
        int peerStage = towardNext ? a.stage + 1 : a.stage - 1;
        if (s.stageRank[peerStage] == rank)
          return problem(where(rank, i, a) +
                         llvm::formatv(": stages {0} and {1} share rank {2}, the transfer is "
                                       "local and takes no SEND/RECV",
                                       a.stage, peerStage, rank));
        if (!comms.emplace(key(a.kind, a.stage, a.mb), std::make_pair(rank, i)).second)
          return problem(where(rank, i, a) + ": appears twice");
      }
    for (auto &[k, at] : comms) {
      const Action &a = s.ranks[at.first][at.second];
      Action p = partner(a);
      if (!comms.count(key(p.kind, p.stage, p.mb)))
        return problem(where(at.first, at.second, a) +
                       llvm::formatv(": no matching {0} on rank {1}", p.str(),
                                     s.stageRank[p.stage]));
    }
    return llvm::Error::success();
  }

  llvm::Error checkCoverage() {
    int stages = s.numStages, mbs = s.microbatchesPerChain();
    std::vector<int> f(stages * mbs), b(stages * mbs), in(stages * mbs), w(stages * mbs);
    for (int rank = 0; rank < s.numRanks; ++rank)
      for (const Action &a : s.ranks[rank]) {
        switch (a.kind) {
        case ActionKind::F: ++f[a.stage * mbs + a.mb]; break;
        case ActionKind::B: ++b[a.stage * mbs + a.mb]; break;
        case ActionKind::I: ++in[a.stage * mbs + a.mb]; break;
        case ActionKind::W: ++w[a.stage * mbs + a.mb]; break;
        case ActionKind::OverlapFB:
          ++f[a.stage * mbs + a.mb];
          ++b[a.bStage * mbs + a.bMb];
          break;
        default: break;
        }
      }
    for (int stage = 0; stage < stages; ++stage)
      for (int mb = 0; mb < mbs; ++mb) {
        int k = stage * mbs + mb;
        std::string what = llvm::formatv("stage {0} microbatch {1}", stage, mb).str();
        if (f[k] != 1)
          return problem(what + llvm::formatv(" has {0} forwards (F), expected 1", f[k]));
        bool full = b[k] == 1 && in[k] == 0 && w[k] == 0;
        bool split = b[k] == 0 && in[k] == 1 && w[k] == 1;
        if (!full && !split)
          return problem(what + llvm::formatv(" has {0} B, {1} I, {2} W: expected one B, or "
                                              "one I and one W",
                                              b[k], in[k], w[k]));
      }
    return llvm::Error::success();
  }

  llvm::Error checkPeerOrder() {
    // Sequence of transfers from rank a to rank b as a sends them and as b receives them.
    std::map<std::pair<int, int>, std::vector<Action>> sent, received;
    for (int rank = 0; rank < s.numRanks; ++rank)
      for (const Action &a : s.ranks[rank]) {
        if (a.kind == ActionKind::SendF || a.kind == ActionKind::SendB)
          sent[{rank, s.stageRank[partner(a).stage]}].push_back(partner(a));
        if (a.kind == ActionKind::RecvF || a.kind == ActionKind::RecvB)
          received[{s.stageRank[partner(a).stage], rank}].push_back(a);
      }
    for (auto &[peers, sends] : sent) {
      const std::vector<Action> &recvs = received[peers];
      for (size_t i = 0; i < sends.size() && i < recvs.size(); ++i)
        if (sends[i] != recvs[i])
          return problem(llvm::formatv(
              "rank {0} sends to rank {1} in a different order than rank {1} receives: "
              "transfer {2} is {3} for the sender and {4} for the receiver",
              peers.first, peers.second, i, partner(sends[i]).str(), recvs[i].str()));
    }
    return llvm::Error::success();
  }

  llvm::Error simulate() {
    bool hasComm = !comms.empty();
    int mbs = s.microbatchesPerChain();
    auto idx = [&](int stage, int mb) { return size_t(stage) * mbs + mb; };
    std::vector<char> fDone(s.numStages * mbs), bDone(s.numStages * mbs),
        iOnly(s.numStages * mbs), recvDone(2 * s.numStages * mbs);
    auto recvSlot = [&](bool forward, int stage, int mb) {
      return (forward ? 0 : s.numStages * mbs) + idx(stage, mb);
    };
    std::vector<size_t> pc(s.numRanks, 0);

    auto needInput = [&](int rank, size_t i, const Action &a, bool forward, int stage,
                         int mb) -> llvm::Error {
      bool edge = forward ? s.isFirstInChain(stage) : s.isLastInChain(stage);
      if (edge)
        return llvm::Error::success();
      int from = forward ? stage - 1 : stage + 1;
      if (s.stageRank[from] == rank) {
        bool ready = forward ? fDone[idx(from, mb)] : bDone[idx(from, mb)];
        if (!ready)
          return problem(where(rank, i, a) +
                         llvm::formatv(": runs before {0}{1}{2} on the same rank", from,
                                       forward ? "F" : "B/I", mb));
        return llvm::Error::success();
      }
      if (!hasComm)
        return llvm::Error::success(); // compute-only: dataflow checked by timing
      if (!recvDone[recvSlot(forward, stage, mb)])
        return problem(where(rank, i, a) +
                       llvm::formatv(": its input from stage {0} (rank {1}) was not received "
                                     "before it (no {2}{3}{4} earlier on rank {5})",
                                     from, s.stageRank[from], stage,
                                     forward ? "RECV_F" : "RECV_B", mb, rank));
      return llvm::Error::success();
    };
    auto runForward = [&](int rank, size_t i, const Action &a, int stage,
                          int mb) -> llvm::Error {
      if (llvm::Error err = needInput(rank, i, a, true, stage, mb))
        return err;
      fDone[idx(stage, mb)] = 1;
      return llvm::Error::success();
    };
    auto runBackward = [&](int rank, size_t i, const Action &a, int stage, int mb,
                           bool inputOnly) -> llvm::Error {
      if (!fDone[idx(stage, mb)])
        return problem(where(rank, i, a) +
                       llvm::formatv(": backward of stage {0} microbatch {1} before its F",
                                     stage, mb));
      if (llvm::Error err = needInput(rank, i, a, false, stage, mb))
        return err;
      bDone[idx(stage, mb)] = 1;
      iOnly[idx(stage, mb)] = inputOnly;
      return llvm::Error::success();
    };

    // Compute-only schedules: ranks wait on each other's compute directly.
    auto computeReady = [&](int rank, const Action &a) {
      if (hasComm)
        return true;
      auto ready = [&](bool forward, int stage, int mb) {
        bool edge = forward ? s.isFirstInChain(stage) : s.isLastInChain(stage);
        if (edge)
          return true;
        int from = forward ? stage - 1 : stage + 1;
        if (s.stageRank[from] == rank)
          return true; // checked as a same-rank order error
        return bool(forward ? fDone[idx(from, mb)] : bDone[idx(from, mb)]);
      };
      switch (a.kind) {
      case ActionKind::F: return ready(true, a.stage, a.mb);
      case ActionKind::B:
      case ActionKind::I: return ready(false, a.stage, a.mb);
      case ActionKind::OverlapFB:
        return ready(true, a.stage, a.mb) && ready(false, a.bStage, a.bMb);
      default: return true;
      }
    };

    // The group of consecutive transfers starting at `start` on `rank`.
    auto groupEnd = [&](int rank, size_t start) {
      size_t end = start;
      while (end < s.ranks[rank].size() && isComm(s.ranks[rank][end].kind))
        ++end;
      return end;
    };
    auto posted = [&](const Action &a) {
      auto at = comms.at(key(a.kind, a.stage, a.mb));
      return pc[at.first] >= at.second ||
             (pc[at.first] < at.second && groupEnd(at.first, pc[at.first]) > at.second &&
              isComm(s.ranks[at.first][pc[at.first]].kind));
    };

    bool progress = true;
    while (progress) {
      progress = false;
      for (int rank = 0; rank < s.numRanks; ++rank) {
        const auto &actions = s.ranks[rank];
        while (pc[rank] < actions.size()) {
          size_t i = pc[rank];
          const Action &a = actions[i];
          if (isComm(a.kind)) {
            size_t end = groupEnd(rank, i);
            // Sends carry tensors computed earlier on this rank.
            for (size_t j = i; j < end; ++j) {
              const Action &c = actions[j];
              if (c.kind == ActionKind::SendF && !fDone[idx(c.stage, c.mb)])
                return problem(where(rank, j, c) + ": sends before its F ran");
              if (c.kind == ActionKind::SendB && !bDone[idx(c.stage, c.mb)])
                return problem(where(rank, j, c) + ": sends before its B/I ran");
            }
            bool ready = true;
            for (size_t j = i; j < end && ready; ++j)
              ready = posted(partner(actions[j]));
            if (!ready)
              break;
            for (size_t j = i; j < end; ++j) {
              const Action &c = actions[j];
              if (c.kind == ActionKind::RecvF || c.kind == ActionKind::RecvB)
                recvDone[recvSlot(c.kind == ActionKind::RecvF, c.stage, c.mb)] = 1;
            }
            pc[rank] = end;
            progress = true;
            continue;
          }
          if (!computeReady(rank, a))
            break;
          llvm::Error err = llvm::Error::success();
          switch (a.kind) {
          case ActionKind::F: err = runForward(rank, i, a, a.stage, a.mb); break;
          case ActionKind::B: err = runBackward(rank, i, a, a.stage, a.mb, false); break;
          case ActionKind::I: err = runBackward(rank, i, a, a.stage, a.mb, true); break;
          case ActionKind::W:
            if (!bDone[idx(a.stage, a.mb)] || !iOnly[idx(a.stage, a.mb)])
              err = problem(where(rank, i, a) +
                            llvm::formatv(": weight gradient before {0}I{1}", a.stage, a.mb));
            break;
          case ActionKind::OverlapFB:
            err = runForward(rank, i, a, a.stage, a.mb);
            if (!err)
              err = runBackward(rank, i, a, a.bStage, a.bMb, false);
            break;
          default: break;
          }
          if (err)
            return err;
          ++pc[rank];
          progress = true;
        }
      }
    }
    std::string blocked;
    for (int rank = 0; rank < s.numRanks; ++rank) {
      if (pc[rank] >= s.ranks[rank].size())
        continue;
      const Action &a = s.ranks[rank][pc[rank]];
      std::string waits;
      if (isComm(a.kind)) {
        for (size_t j = pc[rank]; j < groupEnd(rank, pc[rank]); ++j) {
          Action p = partner(s.ranks[rank][j]);
          if (!posted(p)) {
            waits = llvm::formatv("{0} of rank {1}", p.str(), s.stageRank[p.stage]).str();
            break;
          }
        }
      } else {
        waits = "another rank's compute";
      }
      blocked += llvm::formatv("{0}rank {1} at {2} waits for {3}", blocked.empty() ? "" : "; ",
                               rank, a.str(), waits)
                     .str();
    }
    if (!blocked.empty())
      return problem("deadlock: " + blocked);
    return llvm::Error::success();
  }
};

} // namespace

llvm::Error verifySchedule(const Schedule &schedule) { return Verifier(schedule).run(); }

} // namespace loom::pipeline
