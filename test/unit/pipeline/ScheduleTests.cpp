// Pipeline schedules: every generator's output verifies, and the analysis
// reproduces the published bubble / activation / parameter figures
// (DeepSeek DualPipe's table), at PP=4 and PP=8 and several microbatch counts.

#include "runtime/schedule/ScheduleAnalysis.h"
#include "runtime/schedule/ScheduleGenerators.h"
#include "runtime/schedule/ScheduleVerifier.h"

#include <gtest/gtest.h>

#include <random>

using namespace loom::pipeline;

namespace {

Schedule generate(ScheduleKind kind, int pp, int vpp, int mbs) {
  auto s = generateSchedule(kind, pp, vpp, mbs);
  if (!s) {
    ADD_FAILURE() << llvm::toString(s.takeError());
    return {};
  }
  return std::move(*s);
}

ScheduleAnalysis analyze(const Schedule &s, const ScheduleCosts &c) {
  auto a = analyzeSchedule(s, c);
  if (!a) {
    ADD_FAILURE() << llvm::toString(a.takeError());
    return {};
  }
  return std::move(*a);
}

std::string verifyError(const Schedule &s) {
  llvm::Error err = verifySchedule(s);
  return err ? llvm::toString(std::move(err)) : "";
}

// Cost models: F, B (= I + W), I, W, F&B, comm.
const ScheduleCosts kCosts[] = {
    {1, 2, 1, 1, 3, 0},   // F = I = W, no gain from overlap
    {2, 3, 2, 1, 4, 0},   // W cheaper than I
    {1, 2, 1, 1, 2.5, 0}, // overlap hides half a chunk
};

struct Case {
  int pp, mbs;
};
const Case kCases[] = {{4, 8}, {4, 16}, {4, 24}, {8, 16}, {8, 32}};

} // namespace

TEST(ScheduleFormulas, OneFOneB) {
  for (const Case &c : kCases)
    for (const ScheduleCosts &k : kCosts) {
      Schedule s = generate(ScheduleKind::OneFOneB, c.pp, 1, c.mbs);
      ScheduleAnalysis a = analyze(s, k);
      EXPECT_DOUBLE_EQ(a.maxBubble(), (c.pp - 1) * (k.f + k.b)) << c.pp << " " << c.mbs;
      EXPECT_EQ(a.maxPeakActivations(), c.pp);
      EXPECT_EQ(a.ranks[0].peakActivations, c.pp);
      EXPECT_EQ(a.parameterCopies, 1);
      EXPECT_DOUBLE_EQ(a.ranks[0].parameterCopies, 1.0);
    }
}

TEST(ScheduleFormulas, ZeroBubbleH1) {
  for (const Case &c : kCases)
    for (const ScheduleCosts &k : kCosts) {
      Schedule s = generate(ScheduleKind::ZBH1, c.pp, 1, c.mbs);
      ScheduleAnalysis a = analyze(s, k);
      EXPECT_DOUBLE_EQ(a.maxBubble(), (c.pp - 1) * (k.f + k.b - 2 * k.w)) << c.pp << " " << c.mbs;
      EXPECT_EQ(a.maxPeakActivations(), c.pp);
      EXPECT_EQ(a.parameterCopies, 1);
    }
}

// DeepSeek's PP is the number of pipeline stages: DualPipe runs PP stages
// per direction on PP ranks, DualPipeV runs PP stages on PP/2 ranks.
TEST(ScheduleFormulas, DualPipe) {
  for (const Case &c : kCases)
    for (const ScheduleCosts &k : kCosts) {
      Schedule s = generate(ScheduleKind::DualPipe, c.pp, 1, c.mbs);
      ScheduleAnalysis a = analyze(s, k);
      int stages = c.pp;
      EXPECT_DOUBLE_EQ(a.maxBubble(), (stages / 2 - 1) * (k.fb + k.b - 3 * k.w))
          << c.pp << " " << c.mbs;
      EXPECT_EQ(a.maxPeakActivations(), stages + 1);
      EXPECT_EQ(a.parameterCopies, 2);
      for (const RankAnalysis &r : a.ranks)
        EXPECT_DOUBLE_EQ(r.parameterCopies, 2.0);
    }
}

TEST(ScheduleFormulas, DualPipeV) {
  for (const Case &c : kCases)
    for (const ScheduleCosts &k : kCosts) {
      Schedule s = generate(ScheduleKind::DualPipeV, c.pp, 1, c.mbs);
      ScheduleAnalysis a = analyze(s, k);
      int stages = 2 * c.pp;
      EXPECT_DOUBLE_EQ(a.maxBubble(), (stages / 2 - 1) * (k.fb + k.b - 3 * k.w))
          << c.pp << " " << c.mbs;
      EXPECT_EQ(a.maxPeakActivations(), stages + 1);
      EXPECT_EQ(a.parameterCopies, 1);
      for (const RankAnalysis &r : a.ranks)
        EXPECT_DOUBLE_EQ(r.parameterCopies, 1.0);
    }
}

// Interleaved 1F1B: bubble (PP-1)(F+B) of one (smaller) chunk, rank 0 holds
// 2(PP-1) + (VPP-1)PP + 1 activations (Megatron's warm-up).
TEST(ScheduleFormulas, Interleaved) {
  for (int pp : {4, 8})
    for (int vpp : {2, 3}) {
      Schedule s = generate(ScheduleKind::Interleaved, pp, vpp, 2 * pp);
      ScheduleAnalysis a = analyze(s, kCosts[0]);
      EXPECT_DOUBLE_EQ(a.maxBubble(), (pp - 1) * 3.0);
      EXPECT_EQ(a.ranks[0].peakActivations, 2 * (pp - 1) + (vpp - 1) * pp + 1);
      EXPECT_EQ(s.numStages, pp * vpp);
    }
}

TEST(ScheduleGenerators, BadCombinations) {
  auto error = [](llvm::Expected<Schedule> s) {
    return s ? std::string() : llvm::toString(s.takeError());
  };
  EXPECT_EQ(error(generateSchedule(ScheduleKind::DualPipe, 3, 1, 12)),
            "--schedule=dualpipe needs an even --pp >= 2, got 3");
  EXPECT_EQ(error(generateSchedule(ScheduleKind::DualPipe, 4, 1, 6)),
            "--schedule=dualpipe needs an even --microbatches >= 2*pp = 8, got 6");
  EXPECT_EQ(error(generateSchedule(ScheduleKind::DualPipe, 4, 1, 9)),
            "--schedule=dualpipe needs an even --microbatches >= 2*pp = 8, got 9");
  EXPECT_EQ(error(generateSchedule(ScheduleKind::DualPipeV, 4, 1, 7)),
            "--schedule=dualpipev needs --microbatches >= 2*pp = 8, got 7");
  EXPECT_EQ(error(generateSchedule(ScheduleKind::Interleaved, 4, 1, 8)),
            "--schedule=interleaved needs --vpp >= 2 (stages per rank), got 1");
  EXPECT_EQ(error(generateSchedule(ScheduleKind::Interleaved, 4, 2, 6)),
            "--schedule=interleaved needs --microbatches a multiple of --pp (4), got 6");
  EXPECT_EQ(error(generateSchedule(ScheduleKind::OneFOneB, 4, 3, 8)),
            "--schedule=1f1b needs --vpp 1 (it places 1 stage(s) per rank), got 3");
  EXPECT_EQ(error(generateSchedule(ScheduleKind::DualPipeV, 4, 1, 9)), "") << "odd M is fine";
}

TEST(ScheduleVerifier, CatchesBrokenSchedules) {
  Schedule good = generate(ScheduleKind::OneFOneB, 2, 1, 2);
  ASSERT_EQ(verifyError(good), "");
  // rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 (grouped as generated)
  {
    Schedule s = good; // a send without its receive
    llvm::erase_if(s.ranks[1], [](const Action &a) { return a.kind == ActionKind::RecvF && a.mb == 1; });
    EXPECT_NE(verifyError(s).find("no matching 1RECV_F1 on rank 1"), std::string::npos)
        << verifyError(s);
  }
  {
    Schedule s = good; // B before F on the last stage
    auto &r1 = s.ranks[1];
    auto f = llvm::find(r1, Action::make(ActionKind::F, 1, 0));
    auto b = llvm::find(r1, Action::make(ActionKind::B, 1, 0));
    std::iter_swap(f, b);
    EXPECT_NE(verifyError(s).find("before its F"), std::string::npos) << verifyError(s);
  }
  {
    Schedule s = good; // a microbatch forwarded twice
    s.ranks[0].push_back(Action::make(ActionKind::F, 0, 1));
    EXPECT_NE(verifyError(s).find("stage 0 microbatch 1 has 2 forwards"), std::string::npos)
        << verifyError(s);
  }
  {
    // Rank 0 waits for microbatch 0's gradient before it sends the forward
    // output that rank 1 needs to compute it: a cycle of blocking waits.
    Schedule s;
    s.numRanks = 2;
    s.numStages = 2;
    s.numMicrobatches = 1;
    s.stageRank = {0, 1};
    auto A = [](const char *t) { return cantFail(Action::parse(t)); };
    s.ranks = {{A("0F0"), A("0SEND_F0"), A("0RECV_B0"), A("0B0")},
               {A("1RECV_F0"), A("1F0"), A("1B0"), A("1SEND_B0")}};
    EXPECT_EQ(verifyError(s), "");
    s.ranks[0] = {A("0F0"), A("0RECV_B0"), A("0B0"), A("0SEND_F0")};
    EXPECT_EQ(verifyError(s), "schedule: deadlock: rank 0 at 0RECV_B0 waits for 1SEND_B0 of "
                              "rank 1; rank 1 at 1RECV_F0 waits for 0SEND_F0 of rank 0");
  }
  {
    Schedule s = good; // W without a split backward
    s.ranks[0].push_back(Action::make(ActionKind::W, 0, 0));
    EXPECT_NE(verifyError(s).find("1 B, 0 I, 1 W"), std::string::npos) << verifyError(s);
  }
}

TEST(ScheduleCsv, RoundTripsEverySchedule) {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::Interleaved, ScheduleKind::ZBH1,
                            ScheduleKind::DualPipe, ScheduleKind::DualPipeV}) {
    Schedule s = generate(kind, 4, kind == ScheduleKind::Interleaved ? 2 : 1, 8);
    std::string csv = exportCsv(s);
    auto back = importCsv(csv);
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(back->ranks, s.ranks) << scheduleKindName(kind).str();
    EXPECT_EQ(back->stageRank, s.stageRank);
    EXPECT_EQ(back->numStages, s.numStages);
    EXPECT_EQ(back->numMicrobatches, s.numMicrobatches);
    EXPECT_EQ(back->numChains, s.numChains);
    EXPECT_EQ(exportCsv(*back), csv);
  }
}

TEST(ScheduleCsv, HeaderAlwaysKeepsTheKind) {
  // What an executable stores: the header even for one chain, so the kind
  // reads back; exported again without asking, the header goes.
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::Interleaved, ScheduleKind::ZBH1,
                            ScheduleKind::DualPipe, ScheduleKind::DualPipeV}) {
    Schedule s = generate(kind, 4, kind == ScheduleKind::Interleaved ? 2 : 1, 8);
    std::string csv = exportCsv(s, CsvHeader::Always);
    EXPECT_TRUE(llvm::StringRef(csv).starts_with(
        ("# loom-schedule kind=" + scheduleKindName(kind) + " ranks=4 ").str()))
        << csv;
    auto back = importCsv(csv);
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(back->kind, kind);
    EXPECT_EQ(back->ranks, s.ranks);
    EXPECT_EQ(back->numStages, s.numStages);
    EXPECT_EQ(back->numMicrobatches, s.numMicrobatches);
    EXPECT_EQ(exportCsv(*back), exportCsv(s));
    EXPECT_EQ(exportCsv(*back, CsvHeader::Always), csv);
  }
}

TEST(ScheduleCsv, ReadsPyTorchActions) {
  // A V-shaped 2-rank schedule as PyTorch writes it, with FSDP actions and an
  // overlapped pair.
  const char *csv = "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,3RECV_F0,3F0,3B0,3RECV_F1,"
                    "(3F1;3B0)OVERLAP_F_B\n";
  auto bad = importCsv(csv);
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("schedule"), std::string::npos);

  auto a = Action::parse("(0F3;3B1)OVERLAP_F_B");
  ASSERT_TRUE(bool(a));
  EXPECT_EQ(*a, Action::overlap(0, 3, 3, 1));
  EXPECT_EQ(a->str(), "(0F3;3B1)OVERLAP_F_B");
  EXPECT_EQ(cantFail(Action::parse("12SEND_B7")), Action::make(ActionKind::SendB, 12, 7));
  auto unknown = Action::parse("0X1");
  ASSERT_FALSE(bool(unknown));
  EXPECT_NE(llvm::toString(unknown.takeError()).find("unknown action kind"), std::string::npos);

  const char *ok = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1I0,1SEND_B0,1W0\n";
  auto s = importCsv(ok);
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(s->numRanks, 2);
  EXPECT_EQ(s->numStages, 2);
  EXPECT_EQ(s->numMicrobatches, 1);
  EXPECT_EQ(exportCsv(*s), ok);
}

TEST(ScheduleSvg, DrawsEveryComputeAction) {
  Schedule s = generate(ScheduleKind::DualPipeV, 2, 1, 4);
  ScheduleAnalysis a = analyze(s, {});
  std::string svg = renderScheduleSvg(s, a);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t boxes = 0, computes = 0;
  for (size_t at = svg.find("data-action="); at != std::string::npos;
       at = svg.find("data-action=", at + 1))
    ++boxes;
  for (const auto &rank : s.ranks)
    for (const Action &act : rank)
      computes += isCompute(act.kind);
  EXPECT_EQ(boxes, computes);
}

// Perturbed schedules: whatever the verifier accepts, the analysis can time
// and the CSV round-trips; most perturbations are caught; nothing crashes.
TEST(ScheduleVerifier, PerturbedSchedules) {
  std::mt19937 random(7);
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::Interleaved, ScheduleKind::ZBH1,
                            ScheduleKind::DualPipe, ScheduleKind::DualPipeV}) {
    Schedule base = generate(kind, 4, kind == ScheduleKind::Interleaved ? 2 : 1, 8);
    int accepted = 0, rejected = 0;
    for (int trial = 0; trial < 300; ++trial) {
      Schedule s = base;
      auto &actions = s.ranks[random() % s.numRanks];
      size_t i = random() % actions.size(), j = random() % actions.size();
      switch (trial % 3) {
      case 0: std::swap(actions[i], actions[j]); break;
      case 1: actions.erase(actions.begin() + i); break;
      case 2: actions.insert(actions.begin() + i, actions[j]); break;
      }
      llvm::Error err = verifySchedule(s);
      if (err) {
        llvm::consumeError(std::move(err));
        ++rejected;
        continue;
      }
      ++accepted;
      auto a = analyzeSchedule(s);
      EXPECT_TRUE(bool(a)) << (a ? "" : llvm::toString(a.takeError()));
      auto back = importCsv(exportCsv(s));
      ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
      EXPECT_EQ(back->ranks, s.ranks);
    }
    EXPECT_GT(rejected, 200) << scheduleKindName(kind).str();
    EXPECT_GT(accepted, 0) << scheduleKindName(kind).str() << ": some swaps are harmless";
  }
  // Garbage never crashes the importer.
  const std::string alphabet = "0123456789FBIWSENDRCV_,;()\n#OVERLAP ";
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    for (int k = random() % 60; k > 0; --k)
      text += alphabet[random() % alphabet.size()];
    auto s = importCsv(text);
    if (!s)
      llvm::consumeError(s.takeError());
  }
}

// Per-stage scaling (a stage's FLOPs over the mean): one microbatch through
// two stages, the second three times as expensive.
TEST(ScheduleAnalysis, StageScale) {
  Schedule s = generate(ScheduleKind::OneFOneB, 2, 1, 1);
  ScheduleCosts costs;
  costs.stageScale = {1.0, 3.0};
  ScheduleAnalysis a = analyze(s, costs);
  // F0 [0,1], F1 [1,4], B1 [4,10], B0 [10,12].
  EXPECT_DOUBLE_EQ(a.makespan, 12.0);
  EXPECT_DOUBLE_EQ(a.ranks[0].busy, 3.0);
  EXPECT_DOUBLE_EQ(a.ranks[1].bubble, 3.0);
  ASSERT_EQ(a.timeline[1].size(), 2u);
  EXPECT_DOUBLE_EQ(a.timeline[1][1].start, 4.0);
  EXPECT_DOUBLE_EQ(a.timeline[1][1].end, 10.0);
}

// Every combination a generator accepts verifies and times; every one it
// refuses says why in one line.
TEST(ScheduleGenerators, SweepOfCombinations) {
  int generated = 0;
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::Interleaved, ScheduleKind::ZBH1,
                            ScheduleKind::DualPipe, ScheduleKind::DualPipeV})
    for (int pp = 1; pp <= 8; ++pp)
      for (int vpp = 1; vpp <= 3; ++vpp)
        for (int mbs = 1; mbs <= 24; ++mbs) {
          auto s = generateSchedule(kind, pp, vpp, mbs);
          if (!s) {
            std::string error = llvm::toString(s.takeError());
            EXPECT_EQ(error.find("internal"), std::string::npos) << error;
            EXPECT_EQ(error.find('\n'), std::string::npos) << error;
            EXPECT_EQ(error.rfind("--schedule=", 0), 0u) << error;
            continue;
          }
          ++generated;
          auto a = analyzeSchedule(*s);
          EXPECT_TRUE(bool(a)) << (a ? "" : llvm::toString(a.takeError()));
          EXPECT_EQ(s->numRanks, pp);
        }
  EXPECT_GT(generated, 700);
}
