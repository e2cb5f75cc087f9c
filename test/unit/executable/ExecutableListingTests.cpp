// printExecutable and executableToJson (what `loom-inspect` shows).

#include "SampleExecutable.h"

#include "runtime/executable/ExecutableListing.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

std::string listing(const Executable &exe) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printExecutable(exe, os);
  return text;
}

llvm::json::Value jsonRoundTrip(const Executable &exe) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << executableToJson(exe);
  auto parsed = llvm::json::parse(text);
  if (!parsed) {
    ADD_FAILURE() << "invalid JSON: " << llvm::toString(parsed.takeError());
    return nullptr;
  }
  return std::move(*parsed);
}

void expectContains(const std::string &text, const std::string &line) {
  EXPECT_NE(text.find(line), std::string::npos)
      << "missing:\n" << line << "\nin:\n" << text;
}

TEST(ExecutableListing, Header) {
  std::string text = listing(test::makeSampleExecutable());
  expectContains(text, "Loom executable, format version 2\n"
                       "  model:         tiny-mlp\n"
                       "  mode:          train\n"
                       "  compile flags: --mesh=2 --schedule=1f1b\n"
                       "  ranks:         2\n");
  expectContains(text, "parameters (5, 208 bytes):\n"
                       "  p0 model.w: f32[4, 8], init normal(scale 0.02), "
                       "trainable\n"
                       "  p1 model.b: f32[8], init data(32 bytes), frozen\n"
                       "  p2 model.gamma: bf16[8], init uniform(scale 0.5), "
                       "trainable\n"
                       "  p3 rank1.scale: f32[4], init ones, trainable\n"
                       "  p4 rank1.bias: f32[4], init zeros, trainable\n");
}

TEST(ExecutableListing, RankSections) {
  std::string text = listing(test::makeSampleExecutable());
  expectContains(text, "\nrank 0:\n"
                       "  inputs (1):\n"
                       "    x: b3 f32[2, 4]\n"
                       "  outputs (1):\n"
                       "    y: b7 f32[2, 8]\n"
                       "  parameters (3):\n"
                       "    p0 model.w -> b0: f32[4, 8], init normal(scale "
                       "0.02), trainable\n");
  expectContains(text, "  buffers (8):\n"
                       "     #  arena       offset  bytes  type       name\n"
                       "    b0  persistent       0    128  f32[4, 8]  w\n");
  expectContains(text, "    b5  scratch         64     64  f32[16]    h_flat\n");
  expectContains(text, "  memory plan:\n"
                       "    persistent arena:      176 bytes\n"
                       "    scratch arena (peak):  192 bytes\n"
                       "    scratch without reuse: 224 bytes in 4 allocations "
                       "(reuse saves 14.3%)\n");
  expectContains(text, "  streams (2): s0 compute, s1 comm\n"
                       "  events: 1\n");
  expectContains(text, "\nrank 1:\n");
}

TEST(ExecutableListing, Instructions) {
  std::string text = listing(test::makeSampleExecutable());
  expectContains(
      text, "  instructions (5):\n"
            "  0 [compute] nn.matmul (b3, b0) -> (b4) {transpose_rhs = 0, "
            "alpha = 1.0, approximate = \"tanh\", dims = [0, -1], scales = "
            "[0.5, -inf]}  loc(model.py:12:5)\n"
            "  1 [compute] nn.add (b4, b1) -> (b6)\n"
            "  2 [compute] record_event e0\n"
            "  3 [comm] wait_event e0\n"
            "  4 [comm] copy (b6) -> (b7)\n");
}

TEST(ExecutableListing, AliasedScratchBuffersCountOnce) {
  RankProgram program;
  program.arenaSize[static_cast<int>(ArenaKind::Persistent)] = 1000;
  program.arenaSize[static_cast<int>(ArenaKind::Scratch)] = 48;
  auto add = [&](ArenaKind arena, uint64_t offset, std::vector<int64_t> shape) {
    BufferDesc buffer;
    buffer.arena = arena;
    buffer.offset = offset;
    buffer.shape = std::move(shape);
    program.buffers.push_back(buffer);
  };
  add(ArenaKind::Scratch, 0, {2, 4});       // 32 bytes at 0
  add(ArenaKind::Scratch, 0, {8});          // reshape view of the same bytes
  program.buffers.back().aliasOf = 0;
  add(ArenaKind::Scratch, 0, {4});          // reuses offset 0, other size
  add(ArenaKind::Scratch, 32, {4});         // 16 bytes at 32
  add(ArenaKind::Persistent, 0, {100});     // not scratch
  MemoryPlanSummary plan = summarizeMemoryPlan(program);
  EXPECT_EQ(plan.persistentArenaBytes, 1000u);
  EXPECT_EQ(plan.scratchArenaBytes, 48u);
  EXPECT_EQ(plan.scratchWithoutReuseBytes, 32u + 16u + 16u);
  EXPECT_EQ(plan.scratchAllocations, 3u);
}

TEST(ExecutableListing, JsonCarriesTheSameContent) {
  llvm::json::Value value = jsonRoundTrip(test::makeSampleExecutable());
  const llvm::json::Object *root = value.getAsObject();
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->getInteger("formatVersion"), 2);
  EXPECT_EQ(root->getString("model"), "tiny-mlp");
  EXPECT_EQ(root->getString("mode"), "train");
  EXPECT_EQ(root->getString("compileFlags"), "--mesh=2 --schedule=1f1b");

  const llvm::json::Array *parameters = root->getArray("parameters");
  ASSERT_NE(parameters, nullptr);
  ASSERT_EQ(parameters->size(), 5u);
  const llvm::json::Object *w = (*parameters)[0].getAsObject();
  EXPECT_EQ(w->getString("name"), "model.w");
  EXPECT_EQ(w->getString("dtype"), "f32");
  EXPECT_EQ(w->getString("init"), "normal");
  EXPECT_EQ(w->getNumber("initScale"), 0.02);
  EXPECT_EQ(w->getBoolean("trainable"), true);
  EXPECT_EQ(*w->get("shape"), llvm::json::Value(llvm::json::Array{4, 8}));
  EXPECT_EQ((*parameters)[1].getAsObject()->getInteger("dataBytes"), 32);

  const llvm::json::Array *ranks = root->getArray("ranks");
  ASSERT_NE(ranks, nullptr);
  ASSERT_EQ(ranks->size(), 2u);
  const llvm::json::Object *rank0 = (*ranks)[0].getAsObject();
  EXPECT_EQ(rank0->getInteger("rank"), 0);
  EXPECT_EQ(rank0->getInteger("numEvents"), 1);
  const llvm::json::Object *input = (*rank0->getArray("inputs"))[0].getAsObject();
  EXPECT_EQ(input->getString("name"), "x");
  EXPECT_EQ(input->getInteger("buffer"), 3);
  EXPECT_EQ(*input->get("shape"), llvm::json::Value(llvm::json::Array{2, 4}));
  const llvm::json::Object *binding =
      (*rank0->getArray("parameters"))[1].getAsObject();
  EXPECT_EQ(binding->getInteger("parameter"), 1);
  EXPECT_EQ(binding->getInteger("buffer"), 1);
  EXPECT_EQ(binding->getString("name"), "model.b");
  EXPECT_EQ(binding->getBoolean("trainable"), false);

  const llvm::json::Object *buffer =
      (*rank0->getArray("buffers"))[5].getAsObject();
  EXPECT_EQ(buffer->getString("name"), "h_flat");
  EXPECT_EQ(buffer->getString("arena"), "scratch");
  EXPECT_EQ(buffer->getInteger("offset"), 64);
  EXPECT_EQ(buffer->getInteger("bytes"), 64);

  const llvm::json::Object *plan = rank0->getObject("memoryPlan");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->getInteger("persistentArenaBytes"), 176);
  EXPECT_EQ(plan->getInteger("scratchArenaBytes"), 192);
  EXPECT_EQ(plan->getInteger("scratchWithoutReuseBytes"), 224);
  EXPECT_EQ(plan->getInteger("scratchAllocations"), 4);

  const llvm::json::Array *instructions = rank0->getArray("instructions");
  ASSERT_NE(instructions, nullptr);
  ASSERT_EQ(instructions->size(), 5u);
  const llvm::json::Object *matmul = (*instructions)[0].getAsObject();
  EXPECT_EQ(matmul->getString("kind"), "kernel");
  EXPECT_EQ(matmul->getString("kernel"), "nn.matmul");
  EXPECT_EQ(matmul->getString("streamName"), "compute");
  EXPECT_EQ(matmul->getString("location"), "model.py:12:5");
  EXPECT_EQ(*matmul->get("inputs"), llvm::json::Value(llvm::json::Array{3, 0}));
  const llvm::json::Array *attrs = matmul->getArray("attrs");
  ASSERT_EQ(attrs->size(), 5u);
  const char *types[] = {"i64", "f64", "string", "i64[]", "f64[]"};
  for (size_t k = 0; k < 5; ++k)
    EXPECT_EQ((*attrs)[k].getAsObject()->getString("type"), types[k]);
  EXPECT_EQ(*(*attrs)[4].getAsObject()->get("value"),
            llvm::json::Value(llvm::json::Array{0.5, "-inf"}));
  const llvm::json::Object *wait = (*instructions)[3].getAsObject();
  EXPECT_EQ(wait->getString("kind"), "wait_event");
  EXPECT_EQ(wait->getInteger("event"), 0);
  EXPECT_EQ(wait->getString("streamName"), "comm");
}

TEST(ExecutableListing, JsonStaysValidWithHostileNames) {
  Executable exe = test::makeSampleExecutable();
  exe.modelName = std::string("bad\xff\xfe utf8 \"quoted\"\n", 20);
  exe.ranks[0].buffers[0].name = std::string("\x80", 1);
  llvm::json::Value value = jsonRoundTrip(exe);
  ASSERT_NE(value.getAsObject(), nullptr);
  EXPECT_TRUE(value.getAsObject()->getString("model").has_value());
}

TEST(ExecutableListing, InvalidValuesAreShownNotTrusted) {
  // Listings may be asked for before verification: no out-of-range lookups.
  Executable exe = test::makeSampleExecutable();
  exe.ranks[0].buffers[3].dtype = static_cast<DType>(77);
  exe.ranks[0].instructions[0].stream = 9;
  exe.ranks[0].params[0].parameter = 40;
  exe.ranks[0].inputs[0].buffer = 123;
  std::string text = listing(exe);
  expectContains(text, "dtype(77)[2, 4]");
  expectContains(text, "  0 [s9?] nn.matmul");
  expectContains(text, "    p40 <no such parameter> -> b0\n");
  expectContains(text, "    x: b123 <no such buffer>\n");
  EXPECT_NE(jsonRoundTrip(exe).getAsObject(), nullptr);
}

} // namespace
} // namespace loom
