#include "runtime/schedule/ScheduleGenerators.h"
#include "runtime/schedule/ScheduleVerifier.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <deque>
#include <limits>

namespace loom::pipeline {
namespace {

llvm::Error needs(llvm::StringRef schedule, const llvm::Twine &what) {
  return llvm::createStringError("--schedule=" + schedule + " needs " + what);
}

Schedule emptySchedule(ScheduleKind kind, int ranks, int stages, int microbatches, int chains) {
  Schedule s;
  s.kind = kind;
  s.numRanks = ranks;
  s.numStages = stages;
  s.numMicrobatches = microbatches;
  s.numChains = chains;
  s.ranks.resize(ranks);
  s.stageRank.resize(stages);
  return s;
}

llvm::Error checkCommon(llvm::StringRef name, int pp, int microbatches) {
  if (pp < 1)
    return needs(name, llvm::formatv("--pp >= 1, got {0}", pp));
  if (microbatches < 1)
    return needs(name, llvm::formatv("--microbatches >= 1, got {0}", microbatches));
  return llvm::Error::success();
}

/// The DualPipe family's per-rank program, shared by DualPipe (n = pp/2 ranks
/// per half, chunks = M/2 per direction) and DualPipeV (n = pp, chunks = M).
/// `pos` is the rank's distance from the end of the V where its phase-0
/// stage is the first; phase 0 is the stage early in its chain, phase 1 the
/// late one. `turn` marks the rank at the V's tip, whose first steady-state
/// F and B are not overlapped.
class DualPipeRank {
public:
  DualPipeRank(int n, int pos, int chunks, bool turn, int stage0, int stage1)
      : n(n), pos(pos), chunks(chunks), turn(turn), stage{stage0, stage1} {}

  std::vector<Action> build() {
    for (int i = 0; i < (n - pos - 1) * 2; ++i) // nF0
      forward(0);
    for (int i = 0; i < pos + 1; ++i) { // nF0F1
      forward(0);
      forward(1);
    }
    for (int i = 0; i < n - pos - 1; ++i) { // nB1W1F1, zero bubble
      backward(1, true);
      weight();
      forward(1);
    }
    for (int i = 0; i < chunks - 2 * n + pos + 1; ++i) { // main: nF0B1F1B0
      if (i == 0 && turn) {
        forward(0);
        backward(1, false);
      } else {
        overlapped(0, 1);
      }
      overlapped(1, 0);
    }
    for (int i = 0; i < n - pos - 1; ++i) { // nB1F1B0
      backward(1, false);
      overlapped(1, 0);
    }
    bool zb = false; // nB1B0: the second half uses zero bubble
    int steps6 = pos + 1;
    for (int i = 0; i < steps6; ++i) {
      if (i == steps6 / 2 && pos % 2 == 1)
        zb = true;
      backward(1, zb);
      if (i == steps6 / 2 && pos % 2 == 0)
        zb = true;
      backward(0, zb);
    }
    for (int i = 0; i < n - pos - 1; ++i) { // nWB0
      weight();
      backward(0, true);
    }
    for (int i = 0; i < pos + 1; ++i) // nW
      weight();
    return std::move(actions);
  }

private:
  int n, pos, chunks;
  bool turn;
  int stage[2];
  int nextF[2] = {0, 0}, nextB[2] = {0, 0};
  std::deque<Action> pendingW;
  std::vector<Action> actions;

  void forward(int phase) { actions.push_back(Action::make(ActionKind::F, stage[phase], nextF[phase]++)); }
  void backward(int phase, bool zeroBubble) {
    int mb = nextB[phase]++;
    if (!zeroBubble) {
      actions.push_back(Action::make(ActionKind::B, stage[phase], mb));
      return;
    }
    actions.push_back(Action::make(ActionKind::I, stage[phase], mb));
    pendingW.push_back(Action::make(ActionKind::W, stage[phase], mb));
  }
  void weight() {
    actions.push_back(pendingW.front());
    pendingW.pop_front();
  }
  void overlapped(int fPhase, int bPhase) {
    actions.push_back(Action::overlap(stage[fPhase], nextF[fPhase]++, stage[bPhase], nextB[bPhase]++));
  }
};

} // namespace

llvm::Expected<Schedule> generate1F1B(int pp, int microbatches) {
  if (llvm::Error err = checkCommon("1f1b", pp, microbatches))
    return std::move(err);
  Schedule s = emptySchedule(ScheduleKind::OneFOneB, pp, pp, microbatches, 1);
  for (int r = 0; r < pp; ++r) {
    s.stageRank[r] = r;
    auto &out = s.ranks[r];
    int warmup = std::min(pp - r - 1, microbatches);
    for (int m = 0; m < warmup; ++m)
      out.push_back(Action::make(ActionKind::F, r, m));
    for (int m = 0; m + warmup < microbatches; ++m) {
      out.push_back(Action::make(ActionKind::F, r, m + warmup));
      out.push_back(Action::make(ActionKind::B, r, m));
    }
    for (int m = std::max(0, microbatches - warmup); m < microbatches; ++m)
      out.push_back(Action::make(ActionKind::B, r, m));
  }
  return s;
}

llvm::Expected<Schedule> generateInterleaved(int pp, int vpp, int microbatches) {
  if (llvm::Error err = checkCommon("interleaved", pp, microbatches))
    return std::move(err);
  if (vpp < 2)
    return needs("interleaved", llvm::formatv("--vpp >= 2 (stages per rank), got {0}", vpp));
  if (microbatches % pp != 0)
    return needs("interleaved", llvm::formatv("--microbatches a multiple of --pp ({0}), got {1}",
                                              pp, microbatches));
  int stages = pp * vpp;
  Schedule s = emptySchedule(ScheduleKind::Interleaved, pp, stages, microbatches, 1);
  for (int stage = 0; stage < stages; ++stage)
    s.stageRank[stage] = stage % pp;
  int total = microbatches * vpp; // (stage, microbatch) units per rank
  // The k-th forward (backward) unit of a rank: microbatches advance in groups of pp.
  auto unit = [&](int r, int k, bool forward) {
    int chunk = (k / pp) % vpp;
    if (!forward)
      chunk = vpp - 1 - chunk;
    int mb = (k / (pp * vpp)) * pp + k % pp;
    return std::make_pair(chunk * pp + r, mb);
  };
  for (int r = 0; r < pp; ++r) {
    auto &out = s.ranks[r];
    int warmup = std::min(total, (pp - r - 1) * 2 + (vpp - 1) * pp);
    int f = 0, b = 0;
    for (; f < warmup; ++f) {
      auto [stage, mb] = unit(r, f, true);
      out.push_back(Action::make(ActionKind::F, stage, mb));
    }
    for (; f < total; ++f, ++b) {
      auto [fs, fm] = unit(r, f, true);
      out.push_back(Action::make(ActionKind::F, fs, fm));
      auto [bs, bm] = unit(r, b, false);
      out.push_back(Action::make(ActionKind::B, bs, bm));
    }
    for (; b < total; ++b) {
      auto [stage, mb] = unit(r, b, false);
      out.push_back(Action::make(ActionKind::B, stage, mb));
    }
  }
  return s;
}

llvm::Expected<Schedule> generateZBH1(int pp, int microbatches) {
  if (llvm::Error err = checkCommon("zb-h1", pp, microbatches))
    return std::move(err);
  Schedule s = emptySchedule(ScheduleKind::ZBH1, pp, pp, microbatches, 1);
  const double inf = std::numeric_limits<double>::infinity();
  int M = microbatches;
  std::vector<std::vector<double>> fEnd(pp, std::vector<double>(M, inf)),
      iEnd(pp, std::vector<double>(M, inf));
  std::vector<double> clock(pp, 0);
  std::vector<int> nextF(pp, 0), nextI(pp, 0), pendingW(pp, 0), doneW(pp, 0);
  for (int r = 0; r < pp; ++r)
    s.stageRank[r] = r;
  auto finished = [&](int r) { return doneW[r] == M; };
  while (true) {
    // The rank with the earliest clock decides next: every input that can be
    // ready by then is already known (durations are positive).
    int r = -1;
    for (int q = 0; q < pp; ++q)
      if (!finished(q) && (r < 0 || clock[q] < clock[r]))
        r = q;
    if (r < 0)
      break;
    double readyI = inf, readyF = inf;
    if (nextI[r] < nextF[r])
      readyI = r == pp - 1 ? fEnd[r][nextI[r]] : std::max(fEnd[r][nextI[r]], iEnd[r + 1][nextI[r]]);
    if (nextF[r] < M && nextF[r] - nextI[r] < pp - r)
      readyF = r == 0 ? 0 : fEnd[r - 1][nextF[r]];
    auto &out = s.ranks[r];
    // A rank keeps at most pp-1 weight gradients for later (enough to fill
    // the wait at the end of the step); beyond that W goes before a new F.
    bool mustW = pendingW[r] > pp - 1;
    if (readyI <= clock[r]) {
      int m = nextI[r]++;
      out.push_back(Action::make(ActionKind::I, r, m));
      clock[r] += 1;
      iEnd[r][m] = clock[r];
      ++pendingW[r];
    } else if (pendingW[r] > 0 && (mustW || readyF > clock[r])) {
      out.push_back(Action::make(ActionKind::W, r, doneW[r]++));
      --pendingW[r];
      clock[r] += 1;
    } else if (readyF <= clock[r]) {
      int m = nextF[r]++;
      out.push_back(Action::make(ActionKind::F, r, m));
      clock[r] += 1;
      fEnd[r][m] = clock[r];
    } else {
      double next = std::min(readyI, readyF);
      if (next == inf) {
        next = inf;
        for (int q = 0; q < pp; ++q)
          if (q != r && !finished(q) && clock[q] > clock[r])
            next = std::min(next, clock[q]);
        if (next == inf)
          next = clock[r] + 1; // another rank at the same clock moves first
      }
      clock[r] = next;
    }
  }
  return s;
}

llvm::Expected<Schedule> generateDualPipe(int pp, int microbatches) {
  if (llvm::Error err = checkCommon("dualpipe", pp, microbatches))
    return std::move(err);
  if (pp < 2 || pp % 2 != 0)
    return needs("dualpipe", llvm::formatv("an even --pp >= 2, got {0}", pp));
  if (microbatches % 2 != 0 || microbatches < 2 * pp)
    return needs("dualpipe", llvm::formatv("an even --microbatches >= 2*pp = {0}, got {1}",
                                           2 * pp, microbatches));
  Schedule s = emptySchedule(ScheduleKind::DualPipe, pp, 2 * pp, microbatches, 2);
  int half = pp / 2;
  for (int r = 0; r < pp; ++r) {
    int down = r, up = pp + (pp - 1 - r);
    s.stageRank[down] = r;
    s.stageRank[up] = r;
    bool secondHalf = r >= half;
    int pos = std::min(r, pp - 1 - r);
    // Phase 0 is the direction this rank is early in.
    int stage0 = secondHalf ? up : down, stage1 = secondHalf ? down : up;
    s.ranks[r] = DualPipeRank(half, pos, microbatches / 2, pos == half - 1, stage0, stage1).build();
  }
  return s;
}

llvm::Expected<Schedule> generateDualPipeV(int pp, int microbatches) {
  if (llvm::Error err = checkCommon("dualpipev", pp, microbatches))
    return std::move(err);
  if (microbatches < 2 * pp)
    return needs("dualpipev",
                 llvm::formatv("--microbatches >= 2*pp = {0}, got {1}", 2 * pp, microbatches));
  Schedule s = emptySchedule(ScheduleKind::DualPipeV, pp, 2 * pp, microbatches, 1);
  for (int r = 0; r < pp; ++r) {
    s.stageRank[r] = r;
    s.stageRank[2 * pp - 1 - r] = r;
    s.ranks[r] = DualPipeRank(pp, r, microbatches, r == pp - 1, r, 2 * pp - 1 - r).build();
  }
  return s;
}

int stagesPerRank(ScheduleKind kind, int vpp) {
  switch (kind) {
  case ScheduleKind::Interleaved: return vpp;
  case ScheduleKind::DualPipe:
  case ScheduleKind::DualPipeV: return 2;
  default: return 1;
  }
}

llvm::Expected<Schedule> generateSchedule(ScheduleKind kind, int pp, int vpp, int microbatches,
                                          bool verify) {
  llvm::Expected<Schedule> s = Schedule();
  llvm::StringRef name = scheduleKindName(kind);
  if (kind != ScheduleKind::Interleaved && vpp != 1 && vpp != stagesPerRank(kind, vpp))
    return needs(name, llvm::formatv("--vpp {0} (it places {0} stage(s) per rank), got {1}",
                                     stagesPerRank(kind, 1), vpp));
  switch (kind) {
  case ScheduleKind::OneFOneB: s = generate1F1B(pp, microbatches); break;
  case ScheduleKind::Interleaved: s = generateInterleaved(pp, vpp, microbatches); break;
  case ScheduleKind::ZBH1: s = generateZBH1(pp, microbatches); break;
  case ScheduleKind::DualPipe: s = generateDualPipe(pp, microbatches); break;
  case ScheduleKind::DualPipeV: s = generateDualPipeV(pp, microbatches); break;
  case ScheduleKind::Custom:
    return llvm::createStringError("--schedule=custom is read from a CSV file, not generated");
  }
  if (!s)
    return s.takeError();
  llvm::Error err = insertCommunication(*s);
  if (!err && verify)
    err = verifySchedule(*s);
  if (err)
    return llvm::createStringError("internal error: the generated " + name +
                                   " schedule does not verify: " + llvm::toString(std::move(err)));
  return s;
}

} // namespace loom::pipeline
