// The optimizer kernel, the learning-rate schedule and the logging of the
// training loop.

#include "kernels/cpu/CpuKernels.h"
#include "runtime/comm/Communicator.h"
#include "runtime/training/TrainingLoop.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

using namespace loom;

namespace {

cpu::KernelAttrs adamAttrs(double decay) {
  cpu::KernelAttrs attrs;
  attrs.set("beta1", 0.9).set("beta2", 0.95).set("epsilon", 1e-8).set("weight_decay", decay);
  return attrs;
}

TEST(AdamWKernel, MatchesTheUpdateRuleOverSeveralSteps) {
  const int n = 37;
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  std::vector<float> p(n), m(n, 0), v(n, 0);
  std::vector<double> rp(n), rm(n, 0), rv(n, 0);
  for (int i = 0; i < n; ++i)
    rp[i] = p[i] = float(normal(rng));
  for (int t = 1; t <= 4; ++t) {
    std::vector<float> g(n);
    for (float &x : g)
      x = float(normal(rng));
    float lr = 0.01f * t, step = float(t);
    std::vector<float> p2(n), m2(n), v2(n);
    std::vector<cpu::Tensor> in = {{p.data(), DType::F32, {n}}, {g.data(), DType::F32, {n}},
                                   {m.data(), DType::F32, {n}}, {v.data(), DType::F32, {n}},
                                   {&lr, DType::F32, {}},       {&step, DType::F32, {}}};
    std::vector<cpu::Tensor> out = {{p2.data(), DType::F32, {n}}, {m2.data(), DType::F32, {n}},
                                    {v2.data(), DType::F32, {n}}};
    llvm::Error err = cpu::runKernel("nn.adamw", in, out, adamAttrs(0.1));
    ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    for (int i = 0; i < n; ++i) {
      // The reference, in double, written from the formula.
      rm[i] = 0.9 * rm[i] + 0.1 * g[i];
      rv[i] = 0.95 * rv[i] + 0.05 * double(g[i]) * g[i];
      double mhat = rm[i] / (1 - std::pow(0.9, t)), vhat = rv[i] / (1 - std::pow(0.95, t));
      rp[i] = rp[i] - lr * (0.1 * rp[i] + mhat / (std::sqrt(vhat) + 1e-8));
      EXPECT_NEAR(p2[i], rp[i], 1e-5 * (1 + std::fabs(rp[i])));
      EXPECT_NEAR(m2[i], rm[i], 1e-6);
    }
    p = p2, m = m2, v = v2;
  }
}

TEST(AdamWKernel, UpdatesInPlaceAsTheRuntimePlansIt) {
  const int n = 1000;
  std::vector<float> p(n), g(n), m(n), v(n);
  for (int i = 0; i < n; ++i) {
    p[i] = std::sin(i), g[i] = std::cos(i), m[i] = 0.01f * i, v[i] = 0.001f * i;
  }
  std::vector<float> p2(n), m2(n), v2(n);
  float lr = 0.1f, step = 2;
  auto tensors = [&](float *a, float *b, float *c) {
    return std::vector<cpu::Tensor>{{a, DType::F32, {n}}, {b, DType::F32, {n}},
                                    {c, DType::F32, {n}}};
  };
  std::vector<cpu::Tensor> in = {{p.data(), DType::F32, {n}}, {g.data(), DType::F32, {n}},
                                 {m.data(), DType::F32, {n}}, {v.data(), DType::F32, {n}},
                                 {&lr, DType::F32, {}},       {&step, DType::F32, {}}};
  ASSERT_FALSE(static_cast<bool>(
      cpu::runKernel("nn.adamw", in, tensors(p2.data(), m2.data(), v2.data()), adamAttrs(0.0))));
  ASSERT_FALSE(static_cast<bool>(
      cpu::runKernel("nn.adamw", in, tensors(p.data(), m.data(), v.data()), adamAttrs(0.0))));
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
}

TEST(AdamWKernel, RejectsAStepBelowOne) {
  float p = 1, g = 1, m = 0, v = 0, lr = 0.1f, step = 0;
  std::vector<cpu::Tensor> in = {{&p, DType::F32, {1}}, {&g, DType::F32, {1}},
                                 {&m, DType::F32, {1}}, {&v, DType::F32, {1}},
                                 {&lr, DType::F32, {}}, {&step, DType::F32, {}}};
  std::vector<cpu::Tensor> out = {{&p, DType::F32, {1}}, {&m, DType::F32, {1}},
                                  {&v, DType::F32, {1}}};
  llvm::Error err = cpu::runKernel("nn.adamw", in, out, adamAttrs(0.0));
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("step must be at least 1"), std::string::npos);
}

TEST(LearningRate, WarmsUpThenFollowsTheSchedule) {
  TrainingOptions options;
  options.steps = 110;
  options.lr = 1e-3;
  options.warmupSteps = 10;
  EXPECT_DOUBLE_EQ(learningRateAt(options, 0), 1e-4);
  EXPECT_DOUBLE_EQ(learningRateAt(options, 9), 1e-3);
  EXPECT_DOUBLE_EQ(learningRateAt(options, 50), 1e-3); // constant
  options.schedule = "cosine";
  options.minLrRatio = 0.1;
  EXPECT_DOUBLE_EQ(learningRateAt(options, 10), 1e-3);            // peak after warmup
  EXPECT_NEAR(learningRateAt(options, 60), 0.55e-3, 1e-12);        // halfway: the mean
  EXPECT_NEAR(learningRateAt(options, 110), 1e-4, 1e-12);          // the floor
  EXPECT_GT(learningRateAt(options, 30), learningRateAt(options, 31));
}

/// A training step of two pipeline ranks that computes nothing: the inputs
/// and outputs runTraining needs, and no instructions (the loss reads 0).
Executable emptyTwoRankStep() {
  Executable exe;
  exe.modelName = "empty";
  exe.mode = "train";
  exe.mesh = {{"pp"}, {2}};
  for (uint32_t rank = 0; rank < 2; ++rank) {
    RankProgram r;
    r.rank = rank;
    r.arenaSize[static_cast<int>(ArenaKind::Scratch)] = 512;
    r.streams = {"compute"};
    r.buffers = {{"tokens", ArenaKind::Scratch, 0, DType::I64, {2, 5}},
                 {"lr", ArenaKind::Scratch, 128, DType::F32, {}},
                 {"step", ArenaKind::Scratch, 192, DType::F32, {}},
                 {"loss", ArenaKind::Scratch, 256, DType::F32, {}},
                 {"grad_norm", ArenaKind::Scratch, 320, DType::F32, {}}};
    r.inputs = {{"tokens", 0}, {"lr", 1}, {"step", 2}};
    r.outputs = {{"loss", 3}, {"grad_norm", 4}};
    exe.ranks.push_back(r);
  }
  return exe;
}

/// Lets the test point a stream at a buffer it can read back afterwards
/// (raw_ostream::SetBuffer is protected; its pointer is not).
struct StreamBufferAccess : llvm::raw_ostream {
  static void setBuffer(llvm::raw_ostream &os, char *buffer, size_t size) {
    (os.*&StreamBufferAccess::SetBuffer)(buffer, size);
  }
};

// Ranks as threads run runTraining at once. A rank other than 0 must log to
// a stream of its own: llvm::nulls() is one buffered stream per process, and
// rank threads writing it together set up, free and fill its buffer without
// a lock (heap corruption, seen as a crash in free() on 4 GPUs).
TEST(TrainingLoop, OtherRanksLogToNoStreamSharedAcrossThreads) {
  Executable exe = emptyTwoRankStep();
  auto communicators = createThreadCommunicators(exe.mesh);
  std::unique_ptr<Backend> backend = createCpuBackend(1);
  auto executor = cantFail(ProgramExecutor::create(exe, 1, *backend, /*seed=*/0));
  TrainingOptions options;
  options.steps = 2;
  options.data = "synthetic:16";
  std::vector<char> shared(4096, 0);
  StreamBufferAccess::setBuffer(llvm::nulls(), shared.data(), shared.size());
  std::string log;
  llvm::raw_string_ostream rankLog(log);
  // Rank 0 runs beside it: the ranks step in lockstep (each step rank 0
  // gathers every rank's report and answers with one verdict).
  std::unique_ptr<Backend> leaderBackend = createCpuBackend(1);
  auto leader = cantFail(ProgramExecutor::create(exe, 0, *leaderBackend, /*seed=*/0));
  std::string leaderLog;
  llvm::raw_string_ostream leaderStream(leaderLog);
  llvm::Error leaderErr = llvm::Error::success();
  std::thread rank0([&] {
    leaderErr = runTraining(exe, *leader, options, leaderStream, communicators[0].get());
  });
  llvm::Error err = runTraining(exe, *executor, options, rankLog, communicators[1].get());
  rank0.join();
  llvm::nulls().SetUnbuffered(); // lets go of `shared`
  ASSERT_FALSE(static_cast<bool>(leaderErr)) << llvm::toString(std::move(leaderErr));
  ASSERT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
  EXPECT_EQ(log, ""); // rank 0 alone speaks for the run
  EXPECT_EQ(std::count(shared.begin(), shared.end(), 0), int64_t(shared.size()))
      << "rank 1 wrote to llvm::nulls(): " << std::string(shared.data());
}

} // namespace
