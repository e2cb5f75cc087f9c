#include "SampleExecutable.h"

#include <gtest/gtest.h>

#include <limits>

namespace loom::test {

namespace {

BufferDesc buffer(const char *name, ArenaKind arena, uint64_t offset,
                  DType dtype, std::vector<int64_t> shape) {
  BufferDesc desc;
  desc.name = name;
  desc.arena = arena;
  desc.offset = offset;
  desc.dtype = dtype;
  desc.shape = std::move(shape);
  return desc;
}

Instruction kernel(const char *name, std::vector<uint32_t> inputs,
                   std::vector<uint32_t> outputs, uint32_t stream = 0) {
  Instruction instr;
  instr.kind = InstrKind::Kernel;
  instr.kernel = name;
  instr.stream = stream;
  instr.inputs = std::move(inputs);
  instr.outputs = std::move(outputs);
  return instr;
}

Instruction event(InstrKind kind, uint32_t stream, uint32_t eventId) {
  Instruction instr;
  instr.kind = kind;
  instr.stream = stream;
  instr.event = eventId;
  return instr;
}

ParameterDesc parameter(const char *name, DType dtype,
                        std::vector<int64_t> shape, InitKind init,
                        double scale = 0.0, bool trainable = true) {
  ParameterDesc param;
  param.name = name;
  param.dtype = dtype;
  param.shape = std::move(shape);
  param.init = init;
  param.initScale = scale;
  param.trainable = trainable;
  return param;
}

} // namespace

Executable makeSampleExecutable() {
  Executable exe;
  exe.modelName = "tiny-mlp";
  exe.mode = "train";
  exe.compileFlags = "--mesh=2 --schedule=1f1b";
  exe.vocabSize = 32000;

  exe.parameters.push_back(
      parameter("model.w", DType::F32, {4, 8}, InitKind::Normal, 0.02));
  ParameterDesc bias =
      parameter("model.b", DType::F32, {8}, InitKind::Data, 0.0, false);
  for (int i = 0; i < 32; ++i)
    bias.data.push_back(static_cast<uint8_t>(i * 7 + 1));
  exe.parameters.push_back(bias);
  exe.parameters.push_back(
      parameter("model.gamma", DType::BF16, {8}, InitKind::Uniform, 0.5));
  exe.parameters.push_back(
      parameter("rank1.scale", DType::F32, {4}, InitKind::Ones));
  exe.parameters.push_back(
      parameter("rank1.bias", DType::F32, {4}, InitKind::Zeros));

  RankProgram rank0;
  rank0.rank = 0;
  rank0.arenaSize[static_cast<int>(ArenaKind::Persistent)] = 176;
  rank0.arenaSize[static_cast<int>(ArenaKind::Scratch)] = 192;
  rank0.buffers = {
      buffer("w", ArenaKind::Persistent, 0, DType::F32, {4, 8}),
      buffer("b", ArenaKind::Persistent, 128, DType::F32, {8}),
      buffer("gamma", ArenaKind::Persistent, 160, DType::BF16, {8}),
      buffer("x", ArenaKind::Scratch, 0, DType::F32, {2, 4}),
      buffer("h", ArenaKind::Scratch, 64, DType::F32, {2, 8}),
      buffer("h_flat", ArenaKind::Scratch, 64, DType::F32, {16}),
      buffer("y", ArenaKind::Scratch, 0, DType::F32, {2, 8}),
      buffer("y_out", ArenaKind::Scratch, 128, DType::F32, {2, 8}),
  };
  rank0.buffers[5].aliasOf = 4; // h_flat is a reshape of h
  rank0.buffers[4].category = MemoryCategory::Activation;
  rank0.buffers[4].microbatch = 1;
  rank0.streams = {"compute", "comm"};
  rank0.numEvents = 1;
  rank0.params = {{0, 0}, {1, 1}, {2, 2}};
  rank0.inputs = {{"x", 3}};
  rank0.outputs = {{"y", 7}};
  Instruction matmul = kernel("nn.matmul", {3, 0}, {4});
  matmul.attrs = {
      {"transpose_rhs", int64_t{0}},
      {"alpha", 1.0},
      {"approximate", std::string("tanh")},
      {"dims", std::vector<int64_t>{0, -1}},
      {"scales", std::vector<double>{0.5, -std::numeric_limits<double>::infinity()}},
  };
  matmul.location = "model.py:12:5";
  rank0.instructions = {
      matmul,
      kernel("nn.add", {4, 1}, {6}),
      event(InstrKind::RecordEvent, 0, 0),
      event(InstrKind::WaitEvent, 1, 0),
  };
  Instruction copy;
  copy.kind = InstrKind::Copy;
  copy.stream = 1;
  copy.inputs = {6};
  copy.outputs = {7};
  rank0.instructions.push_back(copy);
  exe.ranks.push_back(rank0);

  RankProgram rank1;
  rank1.rank = 1;
  rank1.arenaSize[static_cast<int>(ArenaKind::Persistent)] = 32;
  rank1.arenaSize[static_cast<int>(ArenaKind::Scratch)] = 32;
  rank1.buffers = {
      buffer("scale", ArenaKind::Persistent, 0, DType::F32, {4}),
      buffer("bias", ArenaKind::Persistent, 16, DType::F32, {4}),
      buffer("in", ArenaKind::Scratch, 0, DType::F32, {4}),
      buffer("out", ArenaKind::Scratch, 16, DType::F32, {4}),
  };
  rank1.streams = {"compute"};
  rank1.params = {{3, 0}, {4, 1}};
  rank1.inputs = {{"x", 2}};
  rank1.outputs = {{"y", 3}};
  rank1.instructions = {kernel("nn.mul", {2, 0}, {3}),
                        kernel("nn.add", {3, 1}, {2})};
  exe.ranks.push_back(rank1);
  return exe;
}

void expectSameExecutable(const Executable &expected,
                          const Executable &actual) {
  EXPECT_EQ(expected.formatVersion, actual.formatVersion);
  EXPECT_EQ(expected.modelName, actual.modelName);
  EXPECT_EQ(expected.mode, actual.mode);
  EXPECT_EQ(expected.compileFlags, actual.compileFlags);
  EXPECT_EQ(expected.mesh.axes, actual.mesh.axes);
  EXPECT_EQ(expected.mesh.shape, actual.mesh.shape);
  EXPECT_EQ(expected.scheduleCsv, actual.scheduleCsv);
  EXPECT_EQ(expected.vocabSize, actual.vocabSize);
  ASSERT_EQ(expected.parameters.size(), actual.parameters.size());
  for (size_t p = 0; p < expected.parameters.size(); ++p) {
    SCOPED_TRACE("parameter " + std::to_string(p));
    const ParameterDesc &e = expected.parameters[p];
    const ParameterDesc &a = actual.parameters[p];
    EXPECT_EQ(e.name, a.name);
    EXPECT_EQ(e.dtype, a.dtype);
    EXPECT_EQ(e.shape, a.shape);
    EXPECT_EQ(e.trainable, a.trainable);
    EXPECT_EQ(e.init, a.init);
    EXPECT_EQ(e.initScale, a.initScale);
    EXPECT_EQ(e.data, a.data);
    EXPECT_EQ(e.sharding, a.sharding);
  }
  ASSERT_EQ(expected.ranks.size(), actual.ranks.size());
  for (size_t r = 0; r < expected.ranks.size(); ++r) {
    SCOPED_TRACE("rank index " + std::to_string(r));
    const RankProgram &e = expected.ranks[r];
    const RankProgram &a = actual.ranks[r];
    EXPECT_EQ(e.rank, a.rank);
    for (int arena = 0; arena < kNumArenas; ++arena)
      EXPECT_EQ(e.arenaSize[arena], a.arenaSize[arena]);
    ASSERT_EQ(e.buffers.size(), a.buffers.size());
    for (size_t b = 0; b < e.buffers.size(); ++b) {
      SCOPED_TRACE("buffer " + std::to_string(b));
      EXPECT_EQ(e.buffers[b].name, a.buffers[b].name);
      EXPECT_EQ(e.buffers[b].arena, a.buffers[b].arena);
      EXPECT_EQ(e.buffers[b].offset, a.buffers[b].offset);
      EXPECT_EQ(e.buffers[b].dtype, a.buffers[b].dtype);
      EXPECT_EQ(e.buffers[b].shape, a.buffers[b].shape);
      EXPECT_EQ(e.buffers[b].category, a.buffers[b].category);
      EXPECT_EQ(e.buffers[b].microbatch, a.buffers[b].microbatch);
    }
    EXPECT_EQ(e.streams, a.streams);
    EXPECT_EQ(e.numEvents, a.numEvents);
    ASSERT_EQ(e.params.size(), a.params.size());
    for (size_t p = 0; p < e.params.size(); ++p) {
      EXPECT_EQ(e.params[p].parameter, a.params[p].parameter);
      EXPECT_EQ(e.params[p].buffer, a.params[p].buffer);
    }
    auto expectSameBindings = [](const std::vector<IOBinding> &e,
                                 const std::vector<IOBinding> &a) {
      ASSERT_EQ(e.size(), a.size());
      for (size_t i = 0; i < e.size(); ++i) {
        EXPECT_EQ(e[i].name, a[i].name);
        EXPECT_EQ(e[i].buffer, a[i].buffer);
        EXPECT_EQ(e[i].globalShape, a[i].globalShape);
        EXPECT_EQ(e[i].sharding, a[i].sharding);
      }
    };
    expectSameBindings(e.inputs, a.inputs);
    expectSameBindings(e.outputs, a.outputs);
    ASSERT_EQ(e.instructions.size(), a.instructions.size());
    for (size_t i = 0; i < e.instructions.size(); ++i) {
      SCOPED_TRACE("instruction " + std::to_string(i));
      const Instruction &ei = e.instructions[i];
      const Instruction &ai = a.instructions[i];
      EXPECT_EQ(ei.kind, ai.kind);
      EXPECT_EQ(ei.kernel, ai.kernel);
      EXPECT_EQ(ei.stream, ai.stream);
      EXPECT_EQ(ei.event, ai.event);
      EXPECT_EQ(ei.inputs, ai.inputs);
      EXPECT_EQ(ei.outputs, ai.outputs);
      EXPECT_EQ(ei.location, ai.location);
      if (ei.kind == InstrKind::Collective) {
        const CollectiveDesc &ec = ei.collective, &ac = ai.collective;
        EXPECT_EQ(ec.kind, ac.kind);
        EXPECT_EQ(ec.axes, ac.axes);
        EXPECT_EQ(ec.reduce, ac.reduce);
        EXPECT_EQ(ec.dim, ac.dim);
        EXPECT_EQ(ec.splitDim, ac.splitDim);
        EXPECT_EQ(ec.concatDim, ac.concatDim);
        EXPECT_EQ(ec.root, ac.root);
        EXPECT_EQ(ec.peer, ac.peer);
        EXPECT_EQ(ec.sendPeers, ac.sendPeers);
        EXPECT_EQ(ec.recvPeers, ac.recvPeers);
      }
      ASSERT_EQ(ei.attrs.size(), ai.attrs.size());
      for (size_t k = 0; k < ei.attrs.size(); ++k) {
        EXPECT_EQ(ei.attrs[k].name, ai.attrs[k].name);
        EXPECT_EQ(ei.attrs[k].value.index(), ai.attrs[k].value.index());
        EXPECT_TRUE(ei.attrs[k].value == ai.attrs[k].value)
            << "attribute " << ei.attrs[k].name;
      }
    }
  }
}

std::string errorMessage(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("(no error)");
}

void expectVerifyAndLoadReport(const Executable &exe, const std::string &expected) {
  std::string message = errorMessage(verifyExecutable(exe));
  EXPECT_NE(message.find(expected), std::string::npos) << "message: " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line";
  std::vector<uint8_t> bytes = serializeExecutable(exe);
  std::string loadMessage = errorMessage(loadExecutable(bytes.data(), bytes.size()).takeError());
  EXPECT_NE(loadMessage.find(expected), std::string::npos) << "message: " << loadMessage;
  EXPECT_EQ(loadMessage.find('\n'), std::string::npos) << "not one line";
}

} // namespace loom::test
