// Exchange instructions in an executable: their peer lists survive
// serialization, other collectives are written as before (no peer fields),
// the verifier checks peers against the group over the exchange's axes with
// one-line errors, and listings show each transfer with its peer.

#include "SampleExecutable.h"

#include "runtime/executable/ExecutableListing.h"
#include "runtime/schema/executable_generated.h"

#include <gtest/gtest.h>

#include <functional>

namespace loom {
namespace {

using test::errorMessage;

/// A pp x tp = 2 x 2 executable (rank = pp * 2 + tp) whose ranks trade with
/// their pp partner in one exchange: act f32[2, 3] and ids i64[4] out,
/// grad f32[2, 3] and mask bf16[3] in. Then a tp all_reduce of grad.
Executable makeExchangeExecutable() {
  Executable exe;
  exe.modelName = "exchange";
  exe.mode = "train";
  exe.mesh = {{"pp", "tp"}, {2, 2}};
  for (uint32_t r = 0; r < 4; ++r) {
    RankProgram p;
    p.rank = r;
    p.arenaSize[static_cast<int>(ArenaKind::Scratch)] = 320;
    auto buffer = [](uint64_t offset, DType dtype, std::vector<int64_t> shape) {
      BufferDesc b;
      b.arena = ArenaKind::Scratch;
      b.offset = offset;
      b.dtype = dtype;
      b.shape = std::move(shape);
      return b;
    };
    p.buffers = {buffer(0, DType::F32, {2, 3}),    // 0 act
                 buffer(64, DType::I64, {4}),      // 1 ids
                 buffer(128, DType::F32, {2, 3}),  // 2 grad
                 buffer(192, DType::BF16, {3}),    // 3 mask
                 buffer(256, DType::F32, {2, 3})}; // 4 summed grad
    p.streams = {"compute", "pp_comm", "tp_comm"};
    p.inputs = {{"act", 0}, {"ids", 1}};
    p.outputs = {{"grad", 4}, {"mask", 3}};
    int64_t partner = 1 - int64_t(r / 2); // the other pp index
    Instruction exchange;
    exchange.kind = InstrKind::Collective;
    exchange.stream = 1;
    exchange.collective.kind = CollectiveKind::Exchange;
    exchange.collective.axes = {"pp"};
    exchange.collective.sendPeers = {partner, partner};
    exchange.collective.recvPeers = {partner, partner};
    exchange.inputs = {0, 1};
    exchange.outputs = {2, 3};
    exchange.location = "pipeline.mlir:7:5";
    Instruction reduce;
    reduce.kind = InstrKind::Collective;
    reduce.stream = 2;
    reduce.collective.kind = CollectiveKind::AllReduce;
    reduce.collective.axes = {"tp"};
    reduce.inputs = {2};
    reduce.outputs = {4};
    p.instructions = {exchange, reduce};
    exe.ranks.push_back(std::move(p));
  }
  return exe;
}

TEST(ExchangeExecutable, Verifies) {
  EXPECT_EQ(errorMessage(verifyExecutable(makeExchangeExecutable())), "(no error)");
}

TEST(ExchangeExecutable, RoundTripPreservesPeers) {
  Executable exe = makeExchangeExecutable();
  std::vector<uint8_t> bytes = serializeExecutable(exe);
  auto loaded = loadExecutable(bytes.data(), bytes.size());
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  test::expectSameExecutable(exe, *loaded);
  // Guard against a comparison that passes on empty fields.
  const CollectiveDesc &c = loaded->ranks[2].instructions[0].collective;
  EXPECT_EQ(c.kind, CollectiveKind::Exchange);
  EXPECT_EQ(c.sendPeers, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(c.recvPeers, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(loaded->ranks[2].instructions[0].inputs, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(loaded->ranks[2].instructions[0].outputs, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(loaded->formatVersion, 2u);

  // On disk the exchange carries its peers; the all_reduce has no peer
  // fields at all, as collectives had before exchanges existed.
  const fb::Executable *root = fb::GetExecutable(bytes.data());
  const fb::Collective *onDisk = root->ranks()->Get(1)->instructions()->Get(0)->collective();
  ASSERT_NE(onDisk->send_peers(), nullptr);
  EXPECT_EQ(onDisk->send_peers()->Get(1), 1);
  const fb::Collective *reduce = root->ranks()->Get(1)->instructions()->Get(1)->collective();
  EXPECT_EQ(reduce->send_peers(), nullptr);
  EXPECT_EQ(reduce->recv_peers(), nullptr);
}

struct BrokenCase {
  const char *name;
  std::function<void(Executable &)> breakIt;
  const char *expectedMessage;
};

CollectiveDesc &exchangeOf(Executable &e, size_t rank) {
  return e.ranks[rank].instructions[0].collective;
}

const BrokenCase kBrokenCases[] = {
    {"PeerOutsideTheGroup", [](Executable &e) { exchangeOf(e, 1).recvPeers = {1, 2}; },
     "rank 1, instruction 0 (collective): exchange: receive 1: peer 2 is not an index in a "
     "group of 2"},
    {"NegativePeer", [](Executable &e) { exchangeOf(e, 3).sendPeers = {-1, 0}; },
     "rank 3, instruction 0 (collective): exchange: send 0: peer -1 is not an index in a "
     "group of 2"},
    {"FewerSendPeersThanInputs", [](Executable &e) { exchangeOf(e, 0).sendPeers = {1}; },
     "rank 0, instruction 0 (collective): exchange: 2 send buffer(s) but 1 send peer(s)"},
    {"MoreRecvPeersThanOutputs",
     [](Executable &e) { exchangeOf(e, 0).recvPeers = {1, 1, 1}; },
     "rank 0, instruction 0 (collective): exchange: 2 receive buffer(s) but 3 receive peer(s)"},
    {"NothingToTransfer",
     [](Executable &e) {
       Instruction &instr = e.ranks[2].instructions[0];
       instr.inputs.clear();
       instr.outputs.clear();
       instr.collective.sendPeers.clear();
       instr.collective.recvPeers.clear();
     },
     "rank 2, instruction 0 (collective): exchange transfers nothing"},
    {"AxisNotInTheMesh", [](Executable &e) { exchangeOf(e, 0).axes = {"dp"}; },
     "rank 0, instruction 0 (collective): axis 'dp' is not a mesh axis"},
    {"ElementTypeNotMoved", [](Executable &e) { e.ranks[0].buffers[1].dtype = DType::I1; },
     "rank 0, instruction 0 (collective): exchange: send 1: element type i1 is not one "
     "collectives move"},
    {"PeersOnAnAllReduce",
     [](Executable &e) { e.ranks[0].instructions[1].collective.sendPeers = {1}; },
     "rank 0, instruction 1 (collective): all_reduce takes no send or receive peers (only an "
     "exchange does)"},
    // Checked before the exchange reads the buffers' types.
    {"InputOutOfRange", [](Executable &e) { e.ranks[0].instructions[0].inputs[1] = 9; },
     "rank 0, instruction 0 (collective): input buffer 9 out of range (5 buffers)"},
};

class ExchangeVerifierRule : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(ExchangeVerifierRule, VerifyAndLoadReportItInOneLine) {
  Executable exe = makeExchangeExecutable();
  GetParam().breakIt(exe);
  test::expectVerifyAndLoadReport(exe, GetParam().expectedMessage);
}

INSTANTIATE_TEST_SUITE_P(Executable, ExchangeVerifierRule, ::testing::ValuesIn(kBrokenCases),
                         [](const ::testing::TestParamInfo<BrokenCase> &info) {
                           return std::string(info.param.name);
                         });

TEST(ExchangeExecutable, ListingShowsEachTransferAndItsPeer) {
  Executable exe = makeExchangeExecutable();
  std::vector<uint8_t> bytes = serializeExecutable(exe);
  Executable loaded = cantFail(loadExecutable(bytes.data(), bytes.size()));
  std::string text;
  llvm::raw_string_ostream os(text);
  printExecutable(loaded, os);
  // The peer is an index in the group over pp, then the rank it is: rank 1
  // (pp 0, tp 1) trades with rank 3, rank 2 (pp 1, tp 0) with rank 0.
  for (const char *line :
       {"  collectives (2):\n"
        "    #0 [pp_comm] exchange over [\"pp\"]: send b0 f32[2, 3] -> 1 (rank 3), send b1 "
        "i64[4] -> 1 (rank 3), recv b2 f32[2, 3] <- 1 (rank 3), recv b3 bf16[3] <- 1 (rank 3)\n"
        "    #1 [tp_comm] all_reduce(sum) over [\"tp\"] f32[2, 3] -> f32[2, 3]\n",
        "    #0 [pp_comm] exchange over [\"pp\"]: send b0 f32[2, 3] -> 0 (rank 0), send b1 "
        "i64[4] -> 0 (rank 0), recv b2 f32[2, 3] <- 0 (rank 0), recv b3 bf16[3] <- 0 (rank 0)\n",
        "  0 [pp_comm] exchange over [\"pp\"]: send b0 -> 0 (rank 0), send b1 -> 0 (rank 0), "
        "recv b2 <- 0 (rank 0), recv b3 <- 0 (rank 0)  loc(pipeline.mlir:7:5)\n"})
    EXPECT_NE(text.find(line), std::string::npos) << "missing:\n" << line << "in:\n" << text;

  llvm::json::Value json = executableToJson(loaded);
  const llvm::json::Object *rank3 = (*json.getAsObject()->getArray("ranks"))[3].getAsObject();
  const llvm::json::Object *collective =
      (*rank3->getArray("instructions"))[0].getAsObject()->getObject("collective");
  ASSERT_NE(collective, nullptr);
  EXPECT_EQ(collective->getString("kind"), "exchange");
  const llvm::json::Array *sendPeers = collective->getArray("sendPeers");
  ASSERT_NE(sendPeers, nullptr);
  ASSERT_EQ(sendPeers->size(), 2u);
  EXPECT_EQ((*sendPeers)[0].getAsInteger(), 0);
  ASSERT_NE(collective->getArray("recvPeers"), nullptr);
  EXPECT_EQ(collective->getArray("recvPeers")->size(), 2u);
}

} // namespace
} // namespace loom
