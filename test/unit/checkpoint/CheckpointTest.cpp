#include "runtime/checkpoint/Checkpoint.h"

#include "CheckpointTestSupport.h"

#include "llvm/Support/JSON.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <random>
#include <set>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace loom;
using namespace loom::checkpoint_test;
using ::testing::HasSubstr;

namespace {

CheckpointTensor makeTensor(const std::string &name, DType dtype,
                            std::vector<int64_t> shape, uint32_t seed) {
  CheckpointTensor tensor{name, dtype, std::move(shape), {}};
  tensor.data.resize(*tensorByteSize(dtype, tensor.shape));
  std::mt19937 random(seed);
  for (uint8_t &byte : tensor.data)
    byte = dtype == DType::I1 ? random() % 2 : static_cast<uint8_t>(random());
  return tensor;
}

/// One tensor of every element type, plus a scalar and an empty tensor; the
/// bytes depend on `seed`.
std::vector<CheckpointTensor> sampleTensors(uint32_t seed) {
  return {
      makeTensor("layer0.w", DType::F32, {2, 3}, seed + 1),
      makeTensor("layer0.f16", DType::F16, {4}, seed + 2),
      makeTensor("layer0.bf16", DType::BF16, {2, 2}, seed + 3),
      makeTensor("fp8.e4m3", DType::F8E4M3FN, {5}, seed + 4),
      makeTensor("fp8.e5m2", DType::F8E5M2, {3}, seed + 5),
      makeTensor("counts.i64", DType::I64, {2}, seed + 6),
      makeTensor("counts.i32", DType::I32, {3, 1}, seed + 7),
      makeTensor("mask", DType::I1, {4}, seed + 8),
      makeTensor("adam.m.f64", DType::F64, {2}, seed + 9),
      makeTensor("scale", DType::F32, {}, seed + 10),
      makeTensor("empty", DType::F32, {0, 3}, seed + 11),
  };
}

CheckpointState sampleState(int64_t step) {
  CheckpointState state;
  state.step = step;
  state.modelName = "llama-tiny";
  state.compileFlags = "--mesh=dp2 --schedule=1f1b --dtype=bf16 \"quoted\"";
  state.dataPosition = {{"epoch", 1}, {"sample", 1000 + step}};
  state.rngState = {0, 1, UINT64_MAX, 0x8000000000000000ull, 0x0123456789abcdefull};
  state.learningRateSchedule = {
      "cosine", {{"peak", 3e-4}, {"warmup_steps", 100}, {"min_ratio", 0.1}}};
  state.integers = {{"tokens_seen", -5}};
  state.strings = {{"git", "1b8d29d"}, {"note", "ünïcode ok"}};
  return state;
}

class CheckpointTest : public ScratchDirectoryTest {
protected:
  std::string dir() const { return path("ckpt"); }
  std::string stepDir(int64_t step) const {
    return dir() + "/" + checkpointStepDirectoryName(step);
  }

  void writeStep(int64_t step, const CheckpointWriteOptions &options = {}) {
    ASSERT_FALSE(llvm::errorToBool(
        writeCheckpoint(dir(), 0, sampleTensors(static_cast<uint32_t>(step)),
                        sampleState(step), options)));
  }

  LoadedCheckpoint load(const std::string &where) {
    llvm::Expected<LoadedCheckpoint> loaded = loadCheckpoint(where);
    if (!loaded) {
      ADD_FAILURE() << llvm::toString(loaded.takeError());
      return {};
    }
    return std::move(*loaded);
  }

  std::string loadError(const std::string &where) {
    llvm::Expected<LoadedCheckpoint> loaded = loadCheckpoint(where);
    if (loaded)
      return "(loaded)";
    return oneLineMessage(loaded.takeError());
  }

  std::set<std::string> entries(const std::string &where) {
    llvm::Expected<std::vector<std::string>> names = checkpoint_io::listDirectory(where);
    if (!names) {
      ADD_FAILURE() << llvm::toString(names.takeError());
      return {};
    }
    return std::set<std::string>(names->begin(), names->end());
  }

  /// Checks that `loaded` is exactly what writeStep(step) wrote.
  void expectStep(const LoadedCheckpoint &loaded, int64_t step) {
    EXPECT_EQ(loaded.directory, stepDir(step));
    EXPECT_EQ(loaded.state, sampleState(step));
    const std::vector<CheckpointTensor> expected =
        sampleTensors(static_cast<uint32_t>(step));
    ASSERT_EQ(loaded.tensors.size(), expected.size());
    for (const CheckpointTensor &tensor : expected) {
      ASSERT_TRUE(loaded.tensors.count(tensor.name)) << tensor.name;
      const CheckpointTensor &got = loaded.tensors.at(tensor.name);
      EXPECT_EQ(got.name, tensor.name);
      EXPECT_EQ(got.dtype, tensor.dtype) << tensor.name;
      EXPECT_EQ(got.shape, tensor.shape) << tensor.name;
      EXPECT_EQ(got.data, tensor.data) << tensor.name;
    }
  }

  std::string rankFile(int64_t step) const {
    return stepDir(step) + "/" + checkpointRankFileName(0);
  }
};

TEST_F(CheckpointTest, RoundTripsEveryDTypeAndTheState) {
  writeStep(7);
  expectStep(load(dir()), 7);
  expectStep(load(stepDir(7)), 7);
  EXPECT_EQ(readText(dir() + "/latest"), "step-000007\n");
  EXPECT_EQ(entries(dir()), (std::set<std::string>{"latest", "step-000007"}));
  EXPECT_EQ(entries(stepDir(7)),
            (std::set<std::string>{"index.json", "rank-00000.safetensors"}));
  llvm::Expected<std::string> latest = latestCheckpoint(dir());
  ASSERT_TRUE(static_cast<bool>(latest)) << llvm::toString(latest.takeError());
  EXPECT_EQ(*latest, stepDir(7));
}

// The index as other tools will read it: names, shapes, shards, checksums.
TEST_F(CheckpointTest, IndexDescribesFilesTensorsAndState) {
  writeStep(3);
  llvm::Expected<llvm::json::Value> index =
      llvm::json::parse(readText(stepDir(3) + "/index.json"));
  ASSERT_TRUE(static_cast<bool>(index)) << llvm::toString(index.takeError());
  const llvm::json::Object &root = *index->getAsObject();
  EXPECT_EQ(root.getString("format"), "loom-checkpoint");
  EXPECT_EQ(root.getInteger("version"), 1);
  EXPECT_EQ(root.getInteger("step"), 3);
  const llvm::json::Object *file =
      root.getObject("files")->getObject("rank-00000.safetensors");
  ASSERT_NE(file, nullptr);
  const std::vector<uint8_t> bytes = readBytes(rankFile(3));
  EXPECT_EQ(file->getInteger("rank"), 0);
  EXPECT_EQ(file->getInteger("bytes"), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(file->getString("sha256"), Sha256::hexOf(bytes.data(), bytes.size()));
  const llvm::json::Object *weight = root.getObject("tensors")->getObject("layer0.w");
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->getString("dtype"), "F32");
  EXPECT_EQ(*weight->getArray("shape"), (llvm::json::Array{2, 3}));
  EXPECT_EQ(*weight->getArray("shards"),
            (llvm::json::Array{llvm::json::Object{{"file", "rank-00000.safetensors"},
                                                  {"offsets", llvm::json::Array{0, 0}},
                                                  {"shape", llvm::json::Array{2, 3}}}}));
  const llvm::json::Object *state = root.getObject("state");
  EXPECT_EQ(state->getString("model"), "llama-tiny");
  EXPECT_EQ(state->getObject("data_position")->getInteger("sample"), 1003);
  // The rank file is an ordinary safetensors file, with the metadata
  // Hugging Face's loaders look for.
  llvm::Expected<SafetensorsFile> safetensors = readSafetensors(rankFile(3));
  ASSERT_TRUE(static_cast<bool>(safetensors)) << llvm::toString(safetensors.takeError());
  EXPECT_EQ(safetensors->metadata.at("format"), "pt");
  EXPECT_EQ(safetensors->metadata.at("loom.step"), "3");
}

TEST_F(CheckpointTest, FlippedBitInTensorBytesFailsTheChecksum) {
  writeStep(1);
  std::vector<uint8_t> bytes = readBytes(rankFile(1));
  bytes[bytes.size() - 3] ^= 0x10; // inside the last tensor's bytes
  writeBytes(rankFile(1), bytes);
  const std::string message = loadError(dir());
  EXPECT_THAT(message, HasSubstr("'" + rankFile(1) + "': checksum mismatch: SHA-256 "));
  EXPECT_THAT(message, HasSubstr("(the file is damaged)"));
}

TEST_F(CheckpointTest, TruncatedOrMissingRankFileIsRefused) {
  writeStep(1);
  const std::vector<uint8_t> bytes = readBytes(rankFile(1));
  writeBytes(rankFile(1), std::vector<uint8_t>(bytes.begin(), bytes.end() - 10));
  EXPECT_EQ(loadError(dir()),
            "'" + rankFile(1) + "': is " + std::to_string(bytes.size() - 10) +
                " bytes, the index says " + std::to_string(bytes.size()) +
                " (truncated or damaged)");
  ASSERT_EQ(::unlink(rankFile(1).c_str()), 0);
  EXPECT_EQ(loadError(dir()),
            "'" + rankFile(1) + "': cannot open: No such file or directory");
}

// A rank file whose checksum the index vouches for but whose header is bad
// (a buggy or foreign writer) still fails on the header checks.
TEST_F(CheckpointTest, GarbageRankFileWithMatchingChecksumFailsOnItsHeader) {
  writeStep(1);
  const std::string indexPath = stepDir(1) + "/index.json";
  const std::vector<uint8_t> original = readBytes(rankFile(1));
  std::string index = readText(indexPath);
  std::vector<uint8_t> garbage(original.size(), 0xff);
  writeBytes(rankFile(1), garbage);
  const std::string oldSha = Sha256::hexOf(original.data(), original.size());
  index.replace(index.find(oldSha), oldSha.size(),
                Sha256::hexOf(garbage.data(), garbage.size()));
  writeText(indexPath, index);
  EXPECT_THAT(loadError(dir()), HasSubstr("'" + rankFile(1) + "': header size "));
}

TEST_F(CheckpointTest, DamagedIndexIsRefused) {
  writeStep(1);
  const std::string indexPath = stepDir(1) + "/index.json";
  const std::string index = readText(indexPath);
  // Every truncation of the index is an error, never a crash.
  for (size_t length = 0; length < index.size(); length += 23) {
    writeText(indexPath, index.substr(0, length));
    EXPECT_THAT(loadError(dir()), HasSubstr("'" + indexPath + "': "))
        << "length " << length;
  }
  writeText(indexPath, "\x01garbage");
  EXPECT_THAT(loadError(dir()), HasSubstr("'" + indexPath + "': not valid JSON"));
  writeText(indexPath, "{\"format\": \"something-else\"}");
  EXPECT_EQ(loadError(dir()), "'" + indexPath +
                                  "': not a Loom checkpoint index (\"format\" is not "
                                  "\"loom-checkpoint\")");
  std::string newer = index;
  newer.replace(newer.find("\"version\": 1"), 12, "\"version\": 2");
  writeText(indexPath, newer);
  EXPECT_EQ(loadError(dir()),
            "'" + indexPath + "': format version 2, this Loom reads version 1");
  // The index's shape disagrees with the file's header.
  std::string reshaped = index;
  const std::string weight =
      "\"layer0.w\": {\n      \"dtype\": \"F32\",\n      \"shape\": [\n"
      "        2,\n        3\n      ]";
  ASSERT_NE(reshaped.find(weight), std::string::npos) << index;
  reshaped.replace(reshaped.find(weight), weight.size(),
                   "\"layer0.w\": {\"dtype\": \"F32\", \"shape\": [3, 2]");
  const std::string shard =
      "\"offsets\": [\n            0,\n            0\n          ],\n"
      "          \"shape\": [\n            2,\n            3\n";
  ASSERT_NE(reshaped.find(shard), std::string::npos) << reshaped;
  reshaped.replace(reshaped.find(shard), shard.size(),
                   "\"offsets\": [0, 0], \"shape\": [3, 2\n");
  writeText(indexPath, reshaped);
  EXPECT_EQ(loadError(dir()), "'" + rankFile(1) +
                                  "': tensor 'layer0.w' is F32 [2, 3], the index says "
                                  "F32 [3, 2]");
  // A file name that would escape the step directory.
  std::string escaping = index;
  escaping.replace(escaping.find("\"rank-00000.safetensors\": {"), 27,
                   "\"../rank-00000.safetensors\": {");
  writeText(indexPath, escaping);
  EXPECT_THAT(
      loadError(dir()),
      HasSubstr("file name '../rank-00000.safetensors' is not a plain file name"));
}

TEST_F(CheckpointTest, MissingOrBadLatestIsRefused) {
  EXPECT_EQ(loadError(dir()),
            "'" + dir() + "': cannot open checkpoint: No such file or directory");
  ASSERT_EQ(::mkdir(dir().c_str(), 0755), 0);
  EXPECT_THAT(loadError(dir()), HasSubstr("'" + dir() + "': not a checkpoint"));
  writeStep(2);
  writeText(dir() + "/latest", "step-000009\n");
  EXPECT_EQ(loadError(dir()),
            "'" + dir() + "/latest': names 'step-000009', which does not exist");
  writeText(dir() + "/latest", "../../etc\n");
  EXPECT_EQ(loadError(dir()),
            "'" + dir() + "/latest': does not name a step directory (step-<number>)");
}

TEST_F(CheckpointTest, ExpectationMismatchesAreRefusedWithOneLine) {
  writeStep(1);
  const LoadedCheckpoint loaded = load(dir());
  const std::string prefix = "checkpoint '" + stepDir(1) + "': ";
  // A subset of what the checkpoint holds is fine (optimizer state is extra).
  EXPECT_FALSE(llvm::errorToBool(checkMatches(
      loaded, {{"layer0.w", DType::F32, {2, 3}}, {"scale", DType::F32, {}}})));
  EXPECT_EQ(oneLineMessage(checkMatches(loaded, {{"layer1.w", DType::F32, {2, 3}}})),
            prefix + "tensor 'layer1.w' is missing");
  EXPECT_EQ(oneLineMessage(checkMatches(loaded, {{"layer0.w", DType::BF16, {2, 3}}})),
            prefix + "tensor 'layer0.w' is f32, expected bf16");
  EXPECT_EQ(oneLineMessage(checkMatches(loaded, {{"layer0.w", DType::F32, {3, 2}}})),
            prefix + "tensor 'layer0.w' has shape [2, 3], expected [3, 2]");
  EXPECT_EQ(oneLineMessage(checkMatches(loaded, {{"layer0.w", DType::F32, {3, 2}},
                                                 {"mask", DType::I1, {4}},
                                                 {"nope", DType::I1, {4}},
                                                 {"scale", DType::F32, {1}}})),
            prefix + "tensor 'layer0.w' has shape [2, 3], expected [3, 2] (and 2 more "
                     "mismatches)");
}

// A disk that fills up at any byte of the new checkpoint (rank file, index
// or `latest`) leaves the previous checkpoint and `latest` as they were and
// no temporary directory.
TEST_F(CheckpointTest, FullDiskAtAnyPointKeepsThePreviousCheckpoint) {
  writeStep(1);
  const std::string latestBefore = readText(dir() + "/latest");
  // The bytes a complete step-2 checkpoint writes, measured on the side.
  const std::string measureDir = path("measure");
  ASSERT_FALSE(llvm::errorToBool(
      writeCheckpoint(measureDir, 0, sampleTensors(2), sampleState(2))));
  const uint64_t total =
      readBytes(measureDir + "/step-000002/rank-00000.safetensors").size() +
      readBytes(measureDir + "/step-000002/index.json").size() +
      readBytes(measureDir + "/latest").size();
  for (uint64_t budget = 0; budget < total; budget += budget < 64 ? 1 : 97) {
    CheckpointWriteOptions options;
    options.simulateFullDiskAfterBytes = budget;
    const std::string message = oneLineMessage(
        writeCheckpoint(dir(), 0, sampleTensors(2), sampleState(2), options));
    EXPECT_THAT(message, HasSubstr("cannot write: No space left on device"))
        << "budget " << budget;
    EXPECT_THAT(message, HasSubstr("'" + dir() + "/")) << "budget " << budget;
    EXPECT_EQ(entries(dir()), (std::set<std::string>{"latest", "step-000001"}))
        << "budget " << budget;
    EXPECT_EQ(readText(dir() + "/latest"), latestBefore);
  }
  expectStep(load(dir()), 1);
  CheckpointWriteOptions enough;
  enough.simulateFullDiskAfterBytes = total;
  writeStep(2, enough);
  expectStep(load(dir()), 2);
}

TEST_F(CheckpointTest, UnwritableDirectoryKeepsThePreviousCheckpoint) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "permissions do not bind root";
  writeStep(1);
  ASSERT_EQ(::chmod(dir().c_str(), 0555), 0);
  const std::string message =
      oneLineMessage(writeCheckpoint(dir(), 0, sampleTensors(2), sampleState(2)));
  ::chmod(dir().c_str(), 0755);
  EXPECT_THAT(message, HasSubstr("Permission denied"));
  EXPECT_EQ(entries(dir()), (std::set<std::string>{"latest", "step-000001"}));
  expectStep(load(dir()), 1);
}

// A writer killed midway (SIGKILL: no cleanup) leaves the previous
// checkpoint loadable; the next writer removes the debris.
TEST_F(CheckpointTest, KilledWriterKeepsThePreviousCheckpoint) {
  writeStep(1);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Large enough that the write lasts well past the parent's first look.
    std::vector<CheckpointTensor> large;
    for (int i = 0; i < 8; ++i)
      large.push_back({"big" + std::to_string(i),
                       DType::F32,
                       {4 << 20},
                       std::vector<uint8_t>(16u << 20, static_cast<uint8_t>(i))});
    const bool failed =
        llvm::errorToBool(writeCheckpoint(dir(), 0, large, sampleState(2)));
    ::_exit(failed ? 1 : 0);
  }
  const std::string tempFile = dir() + "/.step-000002.tmp-";
  bool sawPartialFile = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!sawPartialFile && std::chrono::steady_clock::now() < deadline) {
    for (const std::string &name : entries(dir()))
      if (name.rfind(".step-000002.tmp-", 0) == 0) {
        // stat, not a read: reading the growing file took long enough for
        // the writer to finish before the kill.
        struct stat info;
        const std::string partial = dir() + "/" + name + "/rank-00000.safetensors";
        sawPartialFile = ::stat(partial.c_str(), &info) == 0 && info.st_size > (1 << 20);
      }
    if (!sawPartialFile)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(sawPartialFile);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer finished before it was killed";

  EXPECT_EQ(readText(dir() + "/latest"), "step-000001\n");
  expectStep(load(dir()), 1);
  EXPECT_EQ(entries(dir()).size(), 3u) << "latest, step-000001 and the debris";
  writeStep(2);
  EXPECT_EQ(entries(dir()),
            (std::set<std::string>{"latest", "step-000001", "step-000002"}));
  expectStep(load(dir()), 2);
}

TEST_F(CheckpointTest, KeepsTheLastKCheckpoints) {
  CheckpointWriteOptions options;
  options.keepLast = 2;
  for (int64_t step = 1; step <= 5; ++step) {
    writeStep(step * 10, options);
    llvm::Expected<std::vector<int64_t>> steps = listCheckpointSteps(dir());
    ASSERT_TRUE(static_cast<bool>(steps)) << llvm::toString(steps.takeError());
    if (step == 1)
      EXPECT_EQ(*steps, (std::vector<int64_t>{10}));
    else
      EXPECT_EQ(*steps, (std::vector<int64_t>{(step - 1) * 10, step * 10}));
  }
  expectStep(load(dir()), 50);
  expectStep(load(stepDir(40)), 40);
  // A run restarted from an earlier step: the new checkpoint is the one
  // `latest` names and is kept even though higher steps exist.
  options.keepLast = 1;
  writeStep(45, options);
  llvm::Expected<std::vector<int64_t>> steps = listCheckpointSteps(dir());
  ASSERT_TRUE(static_cast<bool>(steps));
  EXPECT_EQ(*steps, (std::vector<int64_t>{45}));
  expectStep(load(dir()), 45);
}

TEST_F(CheckpointTest, WithoutKeepLastAllCheckpointsStay) {
  writeStep(1);
  writeStep(2);
  writeStep(3);
  llvm::Expected<std::vector<int64_t>> steps = listCheckpointSteps(dir());
  ASSERT_TRUE(static_cast<bool>(steps));
  EXPECT_EQ(*steps, (std::vector<int64_t>{1, 2, 3}));
}

// A run killed after moving a step's directory into place but before
// `latest` names it leaves an unpublished step; the resumed run (from
// `latest`) writes that step again over it. A published step is never
// overwritten.
TEST_F(CheckpointTest, RewritesAStepThatWasNeverPublished) {
  writeStep(1);
  writeStep(2);
  const std::string published = readText(dir() + "/latest");
  // Step 2 as a killed commit leaves it: its directory, `latest` at step 1.
  writeText(dir() + "/latest", checkpointStepDirectoryName(1) + "\n");
  writeStep(2);
  expectStep(load(dir()), 2);
  EXPECT_EQ(readText(dir() + "/latest"), published);
  EXPECT_EQ(oneLineMessage(writeCheckpoint(dir(), 0, sampleTensors(1), sampleState(1))),
            "'" + stepDir(1) + "': already exists: step 1 was checkpointed before");
  // Killed before the first `latest`: nothing was published.
  ASSERT_EQ(::unlink((dir() + "/latest").c_str()), 0);
  writeStep(1);
  expectStep(load(dir()), 1);
}

TEST_F(CheckpointTest, RefusesToOverwriteAStepOrMixSteps) {
  writeStep(1);
  EXPECT_EQ(oneLineMessage(writeCheckpoint(dir(), 0, sampleTensors(9), sampleState(1))),
            "'" + stepDir(1) + "': already exists: step 1 was checkpointed before");
  llvm::Expected<std::unique_ptr<CheckpointWriter>> writer =
      CheckpointWriter::begin(dir(), 2, {});
  ASSERT_TRUE(static_cast<bool>(writer));
  ASSERT_FALSE(llvm::errorToBool((*writer)->writeRankFile(0, sampleTensors(2))));
  EXPECT_THAT(oneLineMessage((*writer)->commit(sampleState(3))),
              HasSubstr("the state is of step 3, the checkpoint of step 2"));
  EXPECT_EQ(entries(dir()), (std::set<std::string>{"latest", "step-000001"}));
  expectStep(load(dir()), 1);
}

TEST_F(CheckpointTest, InvalidTensorLeavesNothingBehind) {
  writeStep(1);
  std::vector<CheckpointTensor> tensors = sampleTensors(2);
  tensors[0].data.pop_back();
  EXPECT_THAT(oneLineMessage(writeCheckpoint(dir(), 0, tensors, sampleState(2))),
              HasSubstr("tensor 'layer0.w': shape [2, 3] of F32 needs 24 bytes, got 23"));
  EXPECT_EQ(entries(dir()), (std::set<std::string>{"latest", "step-000001"}));
}

/// The elements of a row-major box of `global`.
CheckpointTensor slice(const CheckpointTensor &global, std::vector<int64_t> offsets,
                       std::vector<int64_t> shape) {
  CheckpointTensor part{global.name, global.dtype, shape, {}};
  const size_t element = dtypeSize(global.dtype);
  const int64_t total = shape.empty() ? 1 : shape[0] * shape[1] * shape[2];
  for (int64_t flat = 0; flat < total; ++flat) {
    const int64_t i = flat / (shape[1] * shape[2]), j = flat / shape[2] % shape[1],
                  k = flat % shape[2];
    const int64_t source =
        ((offsets[0] + i) * global.shape[1] + offsets[1] + j) * global.shape[2] +
        offsets[2] + k;
    part.data.insert(part.data.end(), global.data.begin() + source * element,
                     global.data.begin() + (source + 1) * element);
  }
  return part;
}

// Two ranks, written from two threads, each holding slices of the same
// tensors (split along different dimensions); the loader reassembles them.
TEST_F(CheckpointTest, ShardedTensorsFromTwoRanksAreReassembled) {
  const CheckpointTensor weight = makeTensor("w", DType::BF16, {4, 6, 5}, 1);
  const CheckpointTensor moments = makeTensor("m", DType::F32, {2, 4, 3}, 2);
  const CheckpointTensor bias = makeTensor("b", DType::F64, {5}, 3);
  llvm::Expected<std::unique_ptr<CheckpointWriter>> writer =
      CheckpointWriter::begin(dir(), 4, {});
  ASSERT_TRUE(static_cast<bool>(writer)) << llvm::toString(writer.takeError());
  // Returns the error message, empty on success.
  auto writeRank = [&](uint32_t rank) -> std::string {
    const int64_t half = rank;
    std::vector<CheckpointTensor> tensors = {
        slice(weight, {0, 3 * half, 0}, {4, 3, 5}), // split along dimension 1
        slice(moments, {half, 0, 0}, {1, 4, 3}),    // split along dimension 0
    };
    std::vector<ShardPlacement> placements = {{{4, 6, 5}, {0, 3 * half, 0}},
                                              {{2, 4, 3}, {half, 0, 0}}};
    if (rank == 0) { // replicated: one rank writes it
      tensors.push_back(bias);
      placements.push_back({{5}, {0}});
    }
    llvm::Error err = (*writer)->writeRankFile(rank, tensors, placements);
    return err ? llvm::toString(std::move(err)) : std::string();
  };
  std::string rank0Error, rank1Error;
  std::thread first([&] { rank0Error = writeRank(0); });
  std::thread second([&] { rank1Error = writeRank(1); });
  first.join();
  second.join();
  ASSERT_EQ(rank0Error, "");
  ASSERT_EQ(rank1Error, "");
  ASSERT_FALSE(llvm::errorToBool((*writer)->commit(sampleState(4))));

  EXPECT_EQ(entries(stepDir(4)),
            (std::set<std::string>{"index.json", "rank-00000.safetensors",
                                   "rank-00001.safetensors"}));
  const LoadedCheckpoint loaded = load(dir());
  EXPECT_EQ(loaded.state, sampleState(4));
  ASSERT_EQ(loaded.tensors.size(), 3u);
  for (const CheckpointTensor *expected : {&weight, &moments, &bias}) {
    const CheckpointTensor &got = loaded.tensors.at(expected->name);
    EXPECT_EQ(got.dtype, expected->dtype) << expected->name;
    EXPECT_EQ(got.shape, expected->shape) << expected->name;
    EXPECT_EQ(got.data, expected->data) << expected->name;
  }
}

TEST_F(CheckpointTest, ShardsThatDoNotTileTheTensorAreRefused) {
  writeStep(1);
  const CheckpointTensor weight = makeTensor("w", DType::F32, {4, 6, 1}, 1);
  struct Case {
    std::vector<int64_t> secondOffsets;
    std::vector<int64_t> secondShape;
    std::string problem;
  };
  const Case cases[] = {
      {{1, 0, 0},
       {2, 6, 1},
       "tensor 'w': the shards in 'rank-00000.safetensors' (offsets [0, 0, 0]) and "
       "'rank-00001.safetensors' (offsets [1, 0, 0]) overlap"},
      {{3, 0, 0}, {1, 6, 1}, "tensor 'w': its shards cover 18 of its 24 elements"},
      {{3, 0, 0},
       {2, 6, 1},
       "tensor 'w': the shard in 'rank-00001.safetensors' at offsets [3, 0, 0] with "
       "shape [2, 6, 1] does not fit in the global shape [4, 6, 1]"},
  };
  for (const Case &c : cases) {
    llvm::Expected<std::unique_ptr<CheckpointWriter>> writer =
        CheckpointWriter::begin(dir(), 2, {});
    ASSERT_TRUE(static_cast<bool>(writer));
    CheckpointTensor top = slice(weight, {0, 0, 0}, {2, 6, 1});
    CheckpointTensor other = makeTensor("w", DType::F32, c.secondShape, 5);
    ASSERT_FALSE(
        llvm::errorToBool((*writer)->writeRankFile(0, {top}, {{{4, 6, 1}, {0, 0, 0}}})));
    ASSERT_FALSE(llvm::errorToBool(
        (*writer)->writeRankFile(1, {other}, {{{4, 6, 1}, c.secondOffsets}})));
    EXPECT_THAT(oneLineMessage((*writer)->commit(sampleState(2))), HasSubstr(c.problem));
    EXPECT_EQ(entries(dir()), (std::set<std::string>{"latest", "step-000001"}));
  }
  expectStep(load(dir()), 1);
}

} // namespace
