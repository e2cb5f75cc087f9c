// The thread communicator: every collective on a 2x2 mesh and its
// sub-groups, on random non-zero data, checked exactly against a reference
// computed here in group order; timeouts and aborts end waits.

#include "runtime/comm/Communicator.h"
#include "runtime/support/FloatTypes.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

namespace loom {
namespace {

const Mesh kMesh{{"dp", "tp"}, {2, 2}};

/// Runs `body(rank, communicator)` on one thread per rank; returns each
/// rank's error text ("" when it succeeded).
std::vector<std::string>
onRanks(const Mesh &mesh, const std::function<llvm::Error(int64_t, Communicator &)> &body,
        std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto comms = createThreadCommunicators(mesh, timeout);
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] {
      if (llvm::Error err = body(r, *comms[r]))
        errors[r] = llvm::toString(std::move(err));
    });
  for (std::thread &t : threads)
    t.join();
  return errors;
}

void expectAllSucceeded(const std::vector<std::string> &errors) {
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_EQ(errors[r], "") << "rank " << r;
}

/// Rank r's input: random non-zero floats, different per rank.
std::vector<float> randomFloats(int64_t rank, size_t count) {
  std::mt19937 gen(1234 + rank);
  std::uniform_real_distribution<float> dist(0.1f, 2.0f);
  std::vector<float> v(count);
  for (float &x : v)
    x = (gen() % 2 ? 1 : -1) * dist(gen);
  return v;
}

TEST(ThreadCommunicator, AllReduceSumOverEachAxis) {
  const size_t n = 37;
  for (std::vector<std::string> axes :
       {std::vector<std::string>{"tp"}, {"dp"}, {"dp", "tp"}}) {
    SCOPED_TRACE(axes.size() == 2 ? "dp,tp" : axes[0]);
    std::vector<std::vector<float>> outs(4);
    expectAllSucceeded(onRanks(kMesh, [&](int64_t r, Communicator &c) {
      std::vector<float> in = randomFloats(r, n);
      outs[r].assign(n, 0);
      return c.allReduce(in.data(), outs[r].data(), DType::F32, {int64_t(n)}, ReduceOp::Sum, axes);
    }));
    for (int64_t r = 0; r < 4; ++r) {
      Group g = *groupOf(kMesh, r, axes);
      for (size_t i = 0; i < n; ++i) {
        float expected = randomFloats(g.members[0], n)[i];
        for (int64_t m = 1; m < g.size(); ++m)
          expected += randomFloats(g.members[m], n)[i];
        ASSERT_EQ(outs[r][i], expected) << "rank " << r << " element " << i;
      }
    }
  }
}

TEST(ThreadCommunicator, AllReduceMaxAvgAndTypes) {
  // bf16 sum (accumulated in f32, rounded once), i64 max, i32 avg, f16 avg.
  std::vector<std::vector<uint16_t>> bf16Out(4), f16Out(4);
  std::vector<std::vector<int64_t>> i64Out(4);
  std::vector<std::vector<int32_t>> i32Out(4);
  auto bf16In = [](int64_t r) {
    std::vector<uint16_t> v;
    for (float x : randomFloats(r, 8))
      v.push_back(floatToBf16(x));
    return v;
  };
  auto f16In = [](int64_t r) {
    std::vector<uint16_t> v;
    for (float x : randomFloats(r + 10, 8))
      v.push_back(floatToF16(x));
    return v;
  };
  auto intIn = [](int64_t r, int64_t i) { return (r * 7 + i * 13) % 11 - 5 + (i == 3 ? 1000 : 0); };
  expectAllSucceeded(onRanks(kMesh, [&](int64_t r, Communicator &c) -> llvm::Error {
    std::vector<uint16_t> b = bf16In(r), h = f16In(r);
    bf16Out[r].resize(8);
    f16Out[r].resize(8);
    if (auto err = c.allReduce(b.data(), bf16Out[r].data(), DType::BF16, {2, 4}, ReduceOp::Sum,
                               {"dp", "tp"}))
      return err;
    if (auto err = c.allReduce(h.data(), f16Out[r].data(), DType::F16, {8}, ReduceOp::Avg, {"tp"}))
      return err;
    std::vector<int64_t> i64(5);
    std::vector<int32_t> i32(5);
    for (int64_t i = 0; i < 5; ++i) {
      i64[i] = intIn(r, i);
      i32[i] = int32_t(intIn(r, i) * 3);
    }
    i64Out[r].resize(5);
    i32Out[r].resize(5);
    if (auto err = c.allReduce(i64.data(), i64Out[r].data(), DType::I64, {5}, ReduceOp::Max, {"dp"}))
      return err;
    return c.allReduce(i32.data(), i32Out[r].data(), DType::I32, {5}, ReduceOp::Avg, {"dp", "tp"});
  }));
  for (int64_t r = 0; r < 4; ++r) {
    for (int i = 0; i < 8; ++i) {
      float sum = 0;
      for (int64_t m = 0; m < 4; ++m)
        sum += bf16ToFloat(bf16In(m)[i]);
      EXPECT_EQ(bf16Out[r][i], floatToBf16(sum)) << "bf16 element " << i;
      Group tp = *groupOf(kMesh, r, {"tp"});
      float avg = (f16ToFloat(f16In(tp.members[0])[i]) + f16ToFloat(f16In(tp.members[1])[i])) / 2.0f;
      EXPECT_EQ(f16Out[r][i], floatToF16(avg)) << "f16 element " << i;
    }
    Group dp = *groupOf(kMesh, r, {"dp"});
    for (int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(i64Out[r][i], std::max(intIn(dp.members[0], i), intIn(dp.members[1], i)));
      int64_t sum = 0;
      for (int64_t m = 0; m < 4; ++m)
        sum += intIn(m, i) * 3;
      EXPECT_EQ(i32Out[r][i], int32_t(sum / 4));
    }
  }
}

TEST(ThreadCommunicator, AllGatherAlongADim) {
  // [2, 3] per rank gathered along dim 1 over tp: [2, 6], members side by side.
  std::vector<std::vector<float>> outs(4);
  expectAllSucceeded(onRanks(kMesh, [&](int64_t r, Communicator &c) {
    std::vector<float> in = randomFloats(r, 6);
    outs[r].assign(12, 0);
    return c.allGather(in.data(), {2, 3}, outs[r].data(), DType::F32, 1, {"tp"});
  }));
  for (int64_t r = 0; r < 4; ++r) {
    Group tp = *groupOf(kMesh, r, {"tp"});
    for (int64_t row = 0; row < 2; ++row)
      for (int64_t m = 0; m < 2; ++m)
        for (int64_t col = 0; col < 3; ++col)
          EXPECT_EQ(outs[r][row * 6 + m * 3 + col], randomFloats(tp.members[m], 6)[row * 3 + col]);
  }
}

TEST(ThreadCommunicator, AllGatherMovesFp8Bytes) {
  // FP8 values (here every byte pattern, NaNs included) are gathered as
  // they are: [2, 3] per rank along dim 0 over tp.
  std::vector<std::vector<uint8_t>> outs(4);
  auto bytesOf = [](int64_t r) {
    std::vector<uint8_t> v(6);
    for (int i = 0; i < 6; ++i)
      v[i] = uint8_t(r * 61 + i * 43 + 127);
    return v;
  };
  expectAllSucceeded(onRanks(kMesh, [&](int64_t r, Communicator &c) {
    std::vector<uint8_t> in = bytesOf(r);
    outs[r].assign(12, 0);
    return c.allGather(in.data(), {2, 3}, outs[r].data(), DType::F8E4M3FN, 0, {"tp"});
  }));
  for (int64_t r = 0; r < 4; ++r) {
    Group tp = *groupOf(kMesh, r, {"tp"});
    for (int64_t m = 0; m < 2; ++m)
      for (int i = 0; i < 6; ++i)
        EXPECT_EQ(outs[r][m * 6 + i], bytesOf(tp.members[m])[i]);
  }
}

TEST(ThreadCommunicator, ReduceScatterAlongADim) {
  // [2, 4] per rank, summed over dp, member i keeps columns [2i, 2i+2).
  std::vector<std::vector<float>> outs(4);
  expectAllSucceeded(onRanks(kMesh, [&](int64_t r, Communicator &c) {
    std::vector<float> in = randomFloats(r, 8);
    outs[r].assign(4, 0);
    return c.reduceScatter(in.data(), {2, 4}, outs[r].data(), DType::F32, 1, ReduceOp::Sum, {"dp"});
  }));
  for (int64_t r = 0; r < 4; ++r) {
    Group dp = *groupOf(kMesh, r, {"dp"});
    for (int64_t row = 0; row < 2; ++row)
      for (int64_t col = 0; col < 2; ++col) {
        int64_t at = row * 4 + dp.index * 2 + col;
        float expected = randomFloats(dp.members[0], 8)[at] + randomFloats(dp.members[1], 8)[at];
        EXPECT_EQ(outs[r][row * 2 + col], expected) << "rank " << r;
      }
  }
}

TEST(ThreadCommunicator, ABucketReducesEachTensorOnItsOwn) {
  // Two f32 tensors of different sizes summed over dp in one call; then a
  // reduce_scatter bucket along dim 0 over tp.
  const int64_t n0 = 5, n1 = 12;
  std::vector<std::vector<float>> out0(4), out1(4), rs0(4), rs1(4);
  expectAllSucceeded(onRanks(kMesh, [&](int64_t r, Communicator &c) {
    std::vector<float> in = randomFloats(r, n0 + n1);
    out0[r].assign(n0, 0);
    out1[r].assign(n1, 0);
    CollectiveDesc desc;
    desc.kind = CollectiveKind::AllReduce;
    desc.axes = {"dp"};
    std::vector<CollectiveOperands> bucket(2);
    bucket[0] = {DType::F32, in.data(), {n0}, out0[r].data(), {n0}};
    bucket[1] = {DType::F32, in.data() + n0, {3, 4}, out1[r].data(), {3, 4}};
    if (llvm::Error err = c.runBucket(desc, bucket))
      return err;
    rs0[r].assign(3, 0);
    rs1[r].assign(2, 0);
    desc.kind = CollectiveKind::ReduceScatter;
    desc.axes = {"tp"};
    desc.dim = 0;
    bucket[0] = {DType::F32, in.data(), {6}, rs0[r].data(), {3}};
    bucket[1] = {DType::F32, in.data() + 6, {4}, rs1[r].data(), {2}};
    return c.runBucket(desc, bucket);
  }));
  for (int64_t r = 0; r < 4; ++r) {
    Group dp = *groupOf(kMesh, r, {"dp"}), tp = *groupOf(kMesh, r, {"tp"});
    auto sum = [&](const Group &g, int64_t at) {
      return randomFloats(g.members[0], n0 + n1)[at] + randomFloats(g.members[1], n0 + n1)[at];
    };
    for (int64_t i = 0; i < n0; ++i)
      EXPECT_EQ(out0[r][i], sum(dp, i)) << "rank " << r << " tensor 0 element " << i;
    for (int64_t i = 0; i < n1; ++i)
      EXPECT_EQ(out1[r][i], sum(dp, n0 + i)) << "rank " << r << " tensor 1 element " << i;
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(rs0[r][i], sum(tp, tp.index * 3 + i)) << "rank " << r;
    for (int64_t i = 0; i < 2; ++i)
      EXPECT_EQ(rs1[r][i], sum(tp, 6 + tp.index * 2 + i)) << "rank " << r;
  }
}

TEST(ThreadCommunicator, BucketErrorsNameTheEntry) {
  std::vector<std::string> errors = onRanks(kMesh, [&](int64_t r, Communicator &c) {
    std::vector<float> in(8), out(8);
    CollectiveDesc desc;
    desc.kind = CollectiveKind::AllReduce;
    desc.axes = {"dp"};
    std::vector<CollectiveOperands> bucket(2);
    bucket[0] = {DType::F32, in.data(), {8}, out.data(), {8}};
    bucket[1] = {DType::F32, in.data(), {8}, out.data(), {4}};
    llvm::Error shapes = c.runBucket(desc, bucket);
    if (!shapes)
      return llvm::createStringError(std::errc::invalid_argument, "mismatched shapes accepted");
    std::string text = llvm::toString(std::move(shapes));
    desc.kind = CollectiveKind::AllGather;
    bucket[1] = bucket[0];
    llvm::Error kind = c.runBucket(desc, bucket);
    if (!kind)
      return llvm::createStringError(std::errc::invalid_argument, "all_gather bucket accepted");
    return llvm::createStringError(std::errc::invalid_argument, "%s | %s", text.c_str(),
                                   llvm::toString(std::move(kind)).c_str());
  });
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_NE(errors[r].find("all_reduce bucket of 2 on rank " + std::to_string(r) +
                             ": entry 1: all_reduce: input [8] and output [4] must have the same shape"),
              std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("only all_reduce and reduce_scatter take a bucket"), std::string::npos)
        << errors[r];
  }
}

TEST(ThreadCommunicator, AllToAllOverTheWholeMesh) {
  // [4, 2] per rank split along dim 0 into 4 rows; row j goes to member j;
  // received rows are concatenated along dim 1: [1, 8].
  std::vector<std::vector<float>> outs(4);
  expectAllSucceeded(onRanks(kMesh, [&](int64_t r, Communicator &c) {
    std::vector<float> in = randomFloats(r, 8);
    outs[r].assign(8, 0);
    return c.allToAll(in.data(), {4, 2}, outs[r].data(), DType::F32, 0, 1, {"dp", "tp"});
  }));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t m = 0; m < 4; ++m)
      for (int64_t k = 0; k < 2; ++k)
        EXPECT_EQ(outs[r][m * 2 + k], randomFloats(m, 8)[r * 2 + k]) << "rank " << r;
}

TEST(ThreadCommunicator, BroadcastFromARootIndex) {
  std::vector<std::vector<float>> outs(4);
  expectAllSucceeded(onRanks(kMesh, [&](int64_t r, Communicator &c) {
    std::vector<float> in = randomFloats(r, 5);
    outs[r].assign(5, 0);
    return c.broadcast(in.data(), outs[r].data(), DType::F32, {5}, /*root=*/1, {"dp"});
  }));
  for (int64_t r = 0; r < 4; ++r) {
    Group dp = *groupOf(kMesh, r, {"dp"});
    EXPECT_EQ(outs[r], randomFloats(dp.members[1], 5));
  }
}

TEST(ThreadCommunicator, SendRecvAroundARing) {
  std::vector<std::vector<float>> outs(4);
  expectAllSucceeded(onRanks(kMesh, [&](int64_t r, Communicator &c) -> llvm::Error {
    std::vector<float> in = randomFloats(r, 6);
    outs[r].assign(6, 0);
    if (auto err = c.send(in.data(), DType::F32, {6}, (r + 1) % 4))
      return err;
    return c.recv(outs[r].data(), DType::F32, {6}, (r + 3) % 4);
  }));
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(outs[r], randomFloats((r + 3) % 4, 6));
}

TEST(ThreadCommunicator, InPlaceAllReduceAndRepeatedCallsAreBitwiseStable) {
  // Random delays change which thread arrives first, never the result.
  const size_t n = 1000;
  std::vector<float> reference;
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<std::vector<float>> bufs(4);
    expectAllSucceeded(onRanks(kMesh, [&](int64_t r, Communicator &c) -> llvm::Error {
      bufs[r] = randomFloats(r, n);
      std::mt19937 gen(trial * 10 + r);
      for (int step = 0; step < 3; ++step) {
        std::this_thread::sleep_for(std::chrono::microseconds(gen() % 2000));
        if (auto err = c.allReduce(bufs[r].data(), bufs[r].data(), DType::F32, {int64_t(n)},
                                   ReduceOp::Sum, {"dp", "tp"}))
          return err;
      }
      return llvm::Error::success();
    }));
    for (int64_t r = 1; r < 4; ++r)
      ASSERT_EQ(bufs[r], bufs[0]);
    if (trial == 0) {
      // Three rounds of the fixed-order sum.
      std::vector<std::vector<float>> v(4);
      for (int64_t r = 0; r < 4; ++r)
        v[r] = randomFloats(r, n);
      for (int step = 0; step < 3; ++step) {
        std::vector<float> s(n);
        for (size_t i = 0; i < n; ++i)
          s[i] = ((v[0][i] + v[1][i]) + v[2][i]) + v[3][i];
        for (auto &x : v)
          x = s;
      }
      reference = v[0];
    }
    ASSERT_EQ(0, std::memcmp(bufs[0].data(), reference.data(), n * 4)) << "trial " << trial;
  }
}

TEST(ThreadCommunicator, AMissingPeerTimesOut) {
  auto errors = onRanks(
      kMesh,
      [&](int64_t r, Communicator &c) -> llvm::Error {
        if (r == 1)
          return llvm::Error::success(); // never joins
        float x = 1, y = 0;
        if (r == 0)
          return c.allReduce(&x, &y, DType::F32, {1}, ReduceOp::Sum, {"tp"});
        return llvm::Error::success();
      },
      std::chrono::milliseconds(200));
  EXPECT_NE(errors[0].find("all_reduce on rank 0: "), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("timed out after 200 ms waiting for rank(s) 1 to join"),
            std::string::npos)
      << errors[0];
}

TEST(ThreadCommunicator, AnAbortWakesWaitingPeers) {
  auto start = std::chrono::steady_clock::now();
  auto errors = onRanks(
      kMesh,
      [&](int64_t r, Communicator &c) -> llvm::Error {
        if (r == 3) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          c.abort("kernel failed");
          return llvm::Error::success();
        }
        float x = 1, y = 0;
        return c.allReduce(&x, &y, DType::F32, {1}, ReduceOp::Sum, {"dp", "tp"});
      },
      std::chrono::seconds(30));
  for (int64_t r = 0; r < 3; ++r)
    EXPECT_NE(errors[r].find("aborted (rank 3 failed: kernel failed)"), std::string::npos)
        << errors[r];
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(ThreadCommunicator, MismatchedCallsAndShapesAreErrors) {
  auto errors = onRanks(kMesh, [&](int64_t r, Communicator &c) -> llvm::Error {
    std::vector<float> in(4, 1), out(8, 0);
    if (r == 0) // output too small for a gather over 2
      return c.run(CollectiveDesc{CollectiveKind::AllGather, {"tp"}},
                   {DType::F32, in.data(), {4}, out.data(), {6}});
    if (r == 2)
      return c.allReduce(in.data(), out.data(), DType::F8E4M3FN, {4}, ReduceOp::Sum, {"tp"});
    return llvm::Error::success();
  });
  EXPECT_EQ(errors[0], "all_gather on rank 0: all_gather: input [4] and output [6] differ along "
                       "dim 0: output must be 8 (the group has 2 ranks)");
  EXPECT_EQ(errors[2], "all_reduce on rank 2: all_reduce: element type f8E4M3FN is moved but "
                       "not reduced (f32, bf16, f16, i64, i32)");
}

} // namespace
} // namespace loom

// Exchanges: groups of point-to-point transfers posted together.

namespace loom {
namespace {

CollectiveDesc exchangeDesc(std::vector<std::string> axes, std::vector<int64_t> sendPeers,
                            std::vector<int64_t> recvPeers) {
  CollectiveDesc desc;
  desc.kind = CollectiveKind::Exchange;
  desc.axes = std::move(axes);
  desc.sendPeers = std::move(sendPeers);
  desc.recvPeers = std::move(recvPeers);
  return desc;
}

template <typename T> ExchangeBuffer bufferOf(std::vector<T> &v, DType dtype,
                                              std::vector<int64_t> shape) {
  return {dtype, v.data(), std::move(shape)};
}

/// Rank r's tensors for its neighbours: distinct per rank and per type.
std::vector<float> f32Of(int64_t r) { return randomFloats(100 + r, 15); }
std::vector<uint16_t> bf16Of(int64_t r) {
  std::vector<uint16_t> v;
  for (float x : randomFloats(200 + r, 7))
    v.push_back(floatToBf16(x));
  return v;
}
std::vector<int64_t> i64Of(int64_t r) {
  return {r, -r - 1, int64_t(1) << (40 + r), 7 * r + 3};
}

TEST(ThreadCommunicator, ExchangeWithBothNeighboursInOneCall) {
  // Around a ring of n: f32 [3, 5] and i64 [4] to the right, bf16 [7] to
  // the left, all in one exchange; so each rank receives f32 and i64 from
  // its left and bf16 from its right. With n = 2 left and right are the same
  // rank, and the three transfers between a pair match in order.
  for (int64_t n : {2, 4}) {
    SCOPED_TRACE("ring of " + std::to_string(n));
    Mesh ring{{"pp"}, {n}};
    std::vector<std::vector<float>> f32(n);
    std::vector<std::vector<uint16_t>> bf16(n);
    std::vector<std::vector<int64_t>> i64(n);
    expectAllSucceeded(onRanks(ring, [&](int64_t r, Communicator &c) {
      int64_t right = (r + 1) % n, left = (r + n - 1) % n;
      std::vector<float> sendF32 = f32Of(r);
      std::vector<uint16_t> sendBf16 = bf16Of(r);
      std::vector<int64_t> sendI64 = i64Of(r);
      f32[r].assign(15, 0);
      bf16[r].assign(7, 0);
      i64[r].assign(4, 0);
      return c.exchange(exchangeDesc({"pp"}, {right, left, right}, {left, right, left}),
                        {bufferOf(sendF32, DType::F32, {3, 5}),
                         bufferOf(sendBf16, DType::BF16, {7}),
                         bufferOf(sendI64, DType::I64, {4})},
                        {bufferOf(f32[r], DType::F32, {3, 5}),
                         bufferOf(bf16[r], DType::BF16, {7}),
                         bufferOf(i64[r], DType::I64, {4})});
    }));
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_EQ(f32[r], f32Of((r + n - 1) % n)) << "rank " << r;
      EXPECT_EQ(bf16[r], bf16Of((r + 1) % n)) << "rank " << r;
      EXPECT_EQ(i64[r], i64Of((r + n - 1) % n)) << "rank " << r;
    }
  }
}

TEST(ThreadCommunicator, ExchangeOfLargeMessagesBothWays) {
  // 4 MiB each way between a pair, in one exchange.
  const size_t count = size_t(1) << 20;
  auto values = [&](int64_t r) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i)
      v[i] = float(r * 3 + 1) + float(i % 1000) * 0.5f;
    return v;
  };
  std::vector<std::vector<float>> got(2);
  expectAllSucceeded(onRanks(Mesh{{"pp"}, {2}}, [&](int64_t r, Communicator &c) {
    std::vector<float> mine = values(r);
    got[r].assign(count, 0);
    return c.exchange(exchangeDesc({"pp"}, {1 - r}, {1 - r}),
                      {bufferOf(mine, DType::F32, {1024, 1024})},
                      {bufferOf(got[r], DType::F32, {1024, 1024})});
  }));
  EXPECT_TRUE(got[0] == values(1));
  EXPECT_TRUE(got[1] == values(0));
}

TEST(ThreadCommunicator, TransfersMatchInOrderAcrossExchanges) {
  // Rank 0 sends twice in two exchanges; rank 1 receives both in one.
  std::vector<float> first = randomFloats(1, 6), second = randomFloats(2, 6);
  std::vector<float> a(6), b(6);
  expectAllSucceeded(onRanks(Mesh{{"pp"}, {2}}, [&](int64_t r, Communicator &c) -> llvm::Error {
    if (r == 0) {
      if (auto err = c.exchange(exchangeDesc({"pp"}, {1}, {}),
                                {bufferOf(first, DType::F32, {6})}, {}))
        return err;
      return c.exchange(exchangeDesc({"pp"}, {1}, {}), {bufferOf(second, DType::F32, {6})}, {});
    }
    return c.exchange(exchangeDesc({"pp"}, {}, {0, 0}), {},
                      {bufferOf(a, DType::F32, {6}), bufferOf(b, DType::F32, {6})});
  }));
  EXPECT_EQ(a, first);
  EXPECT_EQ(b, second);
}

TEST(ThreadCommunicator, ExchangeSendsWaitForTheReceiver) {
  // Both ranks send in one exchange and receive in the next. Buffered sends
  // would let this pass; NCCL cannot buffer a large message, so on GPUs it
  // hangs. Here it times out, naming the receive nobody posted.
  auto errors = onRanks(
      Mesh{{"pp"}, {2}},
      [&](int64_t r, Communicator &c) -> llvm::Error {
        std::vector<float> mine = randomFloats(r, 4), theirs(4);
        if (auto err = c.exchange(exchangeDesc({"pp"}, {1 - r}, {}),
                                  {bufferOf(mine, DType::F32, {4})}, {}))
          return err;
        return c.exchange(exchangeDesc({"pp"}, {}, {1 - r}), {},
                          {bufferOf(theirs, DType::F32, {4})});
      },
      std::chrono::milliseconds(300));
  // One rank times out first; the other is woken by its abort.
  int timedOut = 0;
  for (int64_t r = 0; r < 2; ++r) {
    std::string expected = "exchange on rank " + std::to_string(r) + ": timed out after 300 ms waiting for rank " + std::to_string(1 - r) +
                           " to receive send 0";
    if (errors[r] == expected)
      ++timedOut;
    else
      EXPECT_NE(errors[r].find("aborted (rank " + std::to_string(1 - r)), std::string::npos)
          << errors[r];
  }
  EXPECT_GE(timedOut, 1) << errors[0] << "\n" << errors[1];
}

TEST(ThreadCommunicator, ExchangePeersAreIndicesInTheGroup) {
  // pp x tp = 2 x 2, rank = pp * 2 + tp. Over ["pp"] the group of rank r is
  // [tp, 2 + tp]: peer index 1 - pp is rank r ^ 2, never the tp neighbour
  // that global rank 1 - pp would be.
  std::vector<std::vector<int64_t>> got(4);
  expectAllSucceeded(onRanks(
      Mesh{{"pp", "tp"}, {2, 2}},
      [&](int64_t r, Communicator &c) {
        int64_t pp = r / 2;
        std::vector<int64_t> mine = i64Of(r);
        got[r].assign(4, -1);
        return c.exchange(exchangeDesc({"pp"}, {1 - pp}, {1 - pp}),
                          {bufferOf(mine, DType::I64, {4})}, {bufferOf(got[r], DType::I64, {4})});
      },
      std::chrono::seconds(5)));
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(got[r], i64Of(r ^ 2)) << "rank " << r;
}

TEST(ThreadCommunicator, ExchangeErrorsNameTheTransfer) {
  Mesh pair{{"pp"}, {2}};
  auto errors = onRanks(
      pair,
      [&](int64_t r, Communicator &c) -> llvm::Error {
        std::vector<float> x(4, 1), y(4, 0);
        if (r == 0) // a peer outside the group of 2
          return c.exchange(exchangeDesc({"pp"}, {1}, {2}), {bufferOf(x, DType::F32, {4})},
                            {bufferOf(y, DType::F32, {4})});
        // Two buffers to send, one peer.
        return c.exchange(exchangeDesc({"pp"}, {0}, {}),
                          {bufferOf(x, DType::F32, {4}), bufferOf(y, DType::F32, {4})}, {});
      },
      std::chrono::milliseconds(500));
  EXPECT_EQ(errors[0],
            "exchange on rank 0: exchange: receive 0: peer 2 is not an index in a group of 2");
  EXPECT_EQ(errors[1], "exchange on rank 1: exchange: 2 send buffer(s) but 1 send peer(s)");

  errors = onRanks(
      pair,
      [&](int64_t r, Communicator &c) -> llvm::Error {
        std::vector<float> x(4, 1);
        std::vector<double> f64(4, 1);
        if (r == 0) // f64 is not moved; an unknown axis; nothing at all
          return c.exchange(exchangeDesc({"pp"}, {1}, {}), {bufferOf(f64, DType::F64, {4})}, {});
        if (llvm::Error err = c.exchange(exchangeDesc({"dp"}, {0}, {}),
                                         {bufferOf(x, DType::F32, {4})}, {})) {
          std::string text = llvm::toString(std::move(err));
          if (text != "exchange on rank 1: axis 'dp' is not a mesh axis (the mesh has [\"pp\"])")
            return llvm::createStringError(std::errc::invalid_argument, "unexpected: %s",
                                           text.c_str());
        }
        return c.exchange(exchangeDesc({"pp"}, {}, {}), {}, {});
      },
      std::chrono::milliseconds(500));
  EXPECT_EQ(errors[0], "exchange on rank 0: exchange: send 0: element type f64 is not one "
                       "collectives move (f32, bf16, f16, i64, i32, f8E4M3FN, f8E5M2)");
  EXPECT_EQ(errors[1],
            "exchange on rank 1: exchange transfers nothing (no send and no receive)");

  // Sizes that disagree between sender and receiver, and an exchange given
  // to run(), which takes one input and one output.
  errors = onRanks(
      pair,
      [&](int64_t r, Communicator &c) -> llvm::Error {
        std::vector<float> x(4, 1), y(3, 0);
        if (r == 0)
          return c.exchange(exchangeDesc({"pp"}, {1}, {}), {bufferOf(x, DType::F32, {4})}, {});
        if (llvm::Error err = c.exchange(exchangeDesc({"pp"}, {}, {0}), {},
                                         {bufferOf(y, DType::F32, {3})}))
          return err;
        return llvm::Error::success();
      },
      std::chrono::milliseconds(500));
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "exchange on rank 1: receive 0 from rank 0: rank 0 sent 16 bytes, "
                       "rank 1 expected 12");
  std::vector<float> x(4, 1), y(4, 0);
  auto one = createThreadCommunicators(pair, std::chrono::milliseconds(100));
  std::string text = llvm::toString(one[0]->run(exchangeDesc({"pp"}, {1}, {1}),
                                                {DType::F32, x.data(), {4}, y.data(), {4}}));
  EXPECT_EQ(text, "exchange on rank 0: exchange moves lists of buffers, not one input and one "
                  "output");
}

} // namespace
} // namespace loom
