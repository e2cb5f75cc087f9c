#include "runtime/training/TrainingLoop.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/data/TokenSource.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

namespace loom {

namespace {

/// The position of rank `rank`'s program in exe.ranks.
uint32_t rankIndex(const Executable &exe, int64_t rank) {
  for (uint32_t i = 0; i < exe.ranks.size(); ++i)
    if (exe.ranks[i].rank == rank)
      return i;
  return 0;
}

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument, message.str().c_str());
}

const BufferDesc *findIO(const RankProgram &program, const std::vector<IOBinding> &list,
                         llvm::StringRef name) {
  for (const IOBinding &b : list)
    if (b.name == name)
      return &program.buffers[b.buffer];
  return nullptr;
}

const IOBinding *findBinding(const std::vector<IOBinding> &list, llvm::StringRef name) {
  for (const IOBinding &b : list)
    if (b.name == name)
      return &b;
  return nullptr;
}

HostTensor scalar(llvm::StringRef name, float value) {
  HostTensor t{name.str(), DType::F32, {}, std::vector<uint8_t>(4)};
  std::memcpy(t.data.data(), &value, 4);
  return t;
}

float scalarValue(const HostTensor &t) {
  float v;
  std::memcpy(&v, t.data.data(), 4);
  return v;
}

/// Parameters whose values change during training or cannot be rebuilt:
/// everything but the executable's stored constants that no step writes
/// (a frozen buffer a step updates, such as a router's correction bias,
/// is state too).
bool isCheckpointed(const ParameterDesc &param, bool written) {
  return param.trainable || written || param.init != InitKind::Data;
}

/// By parameter index: whether some rank's program writes its buffer.
std::vector<bool> writtenParameters(const Executable &exe) {
  std::vector<bool> written(exe.parameters.size(), false);
  for (const RankProgram &program : exe.ranks) {
    const size_t numBuffers = program.buffers.size();
    std::vector<bool> out(numBuffers, false);
    for (const Instruction &instr : program.instructions)
      for (uint32_t b : instr.outputs)
        if (b < numBuffers) {
          int64_t alias = program.buffers[b].aliasOf;
          out[alias >= 0 && uint64_t(alias) < numBuffers ? uint32_t(alias) : b] = true;
        }
    for (const ParamBinding &binding : program.params)
      if (binding.buffer < numBuffers && binding.parameter < written.size() &&
          out[binding.buffer])
        written[binding.parameter] = true;
  }
  return written;
}

/// A number as a user would type it.
std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

/// The optimizer settings a training step was compiled with, from
/// loom-compile's flags as the executable records them; an absent flag is
/// loom-compile's default. Numbers are normalized (0.10 and 1e-1 are one).
std::map<std::string, std::string> compiledSettings(llvm::StringRef flags) {
  std::map<std::string, std::string> settings = {
      {"weight-decay", "0.1"}, {"adam-beta1", "0.9"},    {"adam-beta2", "0.95"},
      {"adam-epsilon", "1e-8"}, {"max-grad-norm", "1"}, {"precision", "f32"}};
  llvm::SmallVector<llvm::StringRef> words;
  flags.split(words, ' ', -1, false);
  for (size_t i = 0; i < words.size(); ++i) {
    llvm::StringRef word = words[i];
    if (!word.consume_front("--") && !word.consume_front("-"))
      continue;
    auto [name, value] = word.split('=');
    auto it = settings.find(name.str());
    if (it == settings.end())
      continue;
    if (!word.contains('=')) {
      if (i + 1 >= words.size())
        continue;
      value = words[++i];
    }
    it->second = value.str();
  }
  for (auto &[name, value] : settings) {
    double number = 0;
    if (!llvm::StringRef(value).getAsDouble(number))
      value = formatNumber(number);
  }
  return settings;
}

/// What a resume from `state` would change of the checkpoint's settings,
/// except those the user lets change: "lr (0.003 -> 0.0003)", ...
std::vector<std::string> resumeChanges(const CheckpointState &state,
                                       const TrainingOptions &options,
                                       const Executable &exe, int64_t batch, int64_t seq) {
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> changes;
  const LearningRateSchedule &lrs = state.learningRateSchedule;
  auto number = [&](const char *name, const char *key, double now) {
    auto it = lrs.settings.find(key);
    if (it != lrs.settings.end() && it->second != now)
      changes.push_back({name, {formatNumber(it->second), formatNumber(now)}});
  };
  if (!lrs.kind.empty() && lrs.kind != options.schedule)
    changes.push_back({"lr-schedule", {lrs.kind, options.schedule}});
  number("lr", "peak", options.lr);
  number("warmup-steps", "warmup_steps", double(options.warmupSteps));
  number("min-lr-ratio", "min_lr_ratio", options.minLrRatio);
  // A cosine schedule decays over the run's steps: more steps stretch it.
  if (options.schedule == "cosine" && lrs.kind == "cosine")
    number("steps", "total_steps", double(options.steps));
  for (auto [name, now] : {std::pair<const char *, int64_t>{"batch", batch},
                           std::pair<const char *, int64_t>{"seq", seq}}) {
    auto it = state.integers.find(name);
    if (it != state.integers.end() && it->second != now)
      changes.push_back({name, {std::to_string(it->second), std::to_string(now)}});
  }
  for (const auto &[name, now] : compiledSettings(exe.compileFlags)) {
    auto it = state.strings.find("setting:" + name);
    if (it != state.strings.end() && it->second != now)
      changes.push_back({name, {it->second, now}});
  }
  std::vector<std::string> refused;
  for (const auto &[name, values] : changes)
    if (!options.overrideResumed.count(name))
      refused.push_back(name + " (" + values.first + " -> " + values.second + ")");
  return refused;
}

/// Batch numbers as --skip-batches takes them: "6-7,12".
std::string formatBatches(const std::set<int64_t> &batches) {
  std::string text;
  for (auto it = batches.begin(); it != batches.end();) {
    int64_t first = *it, last = first;
    while (++it != batches.end() && *it == last + 1)
      last = *it;
    text += (text.empty() ? "" : ",") + std::to_string(first) +
            (last > first ? "-" + std::to_string(last) : "");
  }
  return text;
}

std::string formatDuration(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  return llvm::formatv("{0}:{1:2}:{2:2}", s / 3600, (s / 60) % 60, s % 60).str();
}

} // namespace

const std::vector<std::string> &resumableSettings() {
  static const std::vector<std::string> names = {
      "lr",         "lr-schedule", "warmup-steps", "min-lr-ratio", "steps",
      "batch",      "seq",         "weight-decay", "adam-beta1",   "adam-beta2",
      "adam-epsilon", "max-grad-norm", "precision"};
  return names;
}

double learningRateAt(const TrainingOptions &options, int64_t step) {
  if (options.warmupSteps > 0 && step < options.warmupSteps)
    return options.lr * double(step + 1) / double(options.warmupSteps);
  if (options.schedule != "cosine")
    return options.lr;
  int64_t decaySteps = std::max<int64_t>(1, options.steps - options.warmupSteps);
  double progress = std::min(1.0, double(step - options.warmupSteps) / double(decaySteps));
  double minLr = options.lr * options.minLrRatio;
  return minLr + 0.5 * (options.lr - minLr) * (1.0 + std::cos(M_PI * progress));
}

llvm::Error runTraining(const Executable &exe, ProgramExecutor &executor,
                        const TrainingOptions &options, llvm::raw_ostream &rankLog,
                        Communicator *communicator) {
  const RankProgram &program = executor.program();
  int64_t rank = program.rank;
  int64_t numRanks = exe.mesh.numRanks();
  // Each rank's time in collectives, for the straggler report.
  executor.setCollectiveTiming(numRanks > 1);
  if (numRanks > 1 && (!communicator || communicator->numRanks() != numRanks))
    return error("a run of " + llvm::Twine(numRanks) + " ranks needs a communicator of as many");
  bool leader = rank == 0;
  // Rank 0 speaks for the run. The others write to a stream of their own:
  // llvm::nulls() is one buffered stream for the whole process, and ranks
  // as threads writing it at once corrupt the heap (its buffer is set up,
  // replaced and filled without a lock).
  llvm::raw_null_ostream discarded;
  llvm::raw_ostream &log = leader ? rankLog : discarded;
  if (exe.mode != "train")
    return error("this executable was compiled with --mode=" + exe.mode +
                 "; recompile with --mode=train to train it");
  const BufferDesc *tokens = findIO(program, program.inputs, "tokens");
  const BufferDesc *lrIn = findIO(program, program.inputs, "lr");
  const BufferDesc *stepIn = findIO(program, program.inputs, "step");
  if (!tokens || !lrIn || !stepIn || tokens->shape.size() != 2 ||
      tokens->dtype != DType::I64 || !findIO(program, program.outputs, "loss") ||
      !findIO(program, program.outputs, "grad_norm"))
    return error("not a Loom training step: expected inputs tokens [batch, seq+1] i64, lr, "
                 "step and outputs loss, grad_norm");
  const bool hasFp8Overflows = findIO(program, program.outputs, "fp8_overflows") != nullptr;
  // Mixture of experts: the tokens each layer's experts received.
  const bool hasExpertCounts =
      findIO(program, program.outputs, "moe_tokens_per_expert") != nullptr;
  const bool hasDropped = findIO(program, program.outputs, "moe_dropped_tokens") != nullptr;
  if (options.steps <= 0)
    return error("--steps must be positive");
  if (options.schedule != "constant" && options.schedule != "cosine")
    return error("--lr-schedule must be constant or cosine, got '" + options.schedule + "'");
  if (options.data.empty())
    return error("training needs --data (a token file, a Megatron prefix, .npy, or synthetic:VOCAB)");
  // The global batch every rank reads; each sets its block of it.
  const IOBinding *tokensBinding = findBinding(program.inputs, "tokens");
  std::vector<int64_t> globalTokens =
      tokensBinding->globalShape.empty() ? tokens->shape : tokensBinding->globalShape;
  if (globalTokens.size() != 2)
    return error("the tokens input's global shape must be [batch, seq+1]");
  int64_t batch = globalTokens[0], seq = globalTokens[1] - 1;

  TokenSourceOptions dataOptions;
  dataOptions.batchSize = batch;
  dataOptions.sequenceLength = seq;
  dataOptions.seed = options.seed;
  dataOptions.sequential = options.sequentialData;
  // Every token below the model's vocabulary, checked as the batches are
  // read (0: an executable that does not record it).
  dataOptions.vocabSize = exe.vocabSize;
  auto source = openTokenSource(options.data, dataOptions);
  if (!source)
    return source.takeError();

  // Where each checkpointed parameter lives.
  std::vector<std::pair<const ParameterDesc *, uint32_t>> checkpointed;
  const std::vector<bool> writtenParams = writtenParameters(exe);
  for (const ParamBinding &binding : program.params)
    if (isCheckpointed(exe.parameters[binding.parameter], writtenParams[binding.parameter]))
      checkpointed.push_back({&exe.parameters[binding.parameter], binding.buffer});

  int64_t startStep = 0;
  int64_t batchesRead = 0; // batches taken from the source, skipped ones included
  if (options.resume && !options.checkpointDir.empty() &&
      llvm::sys::fs::exists(options.checkpointDir + "/latest")) {
    auto loaded = loadCheckpoint(options.checkpointDir);
    if (!loaded)
      return loaded.takeError();
    std::vector<TensorSpec> expected;
    for (auto [param, buffer] : checkpointed)
      expected.push_back({param->name, param->dtype, param->shape});
    if (auto err = checkMatches(*loaded, expected))
      return err;
    std::vector<std::string> changes = resumeChanges(loaded->state, options, exe, batch, seq);
    if (!changes.empty()) {
      std::string names;
      for (const std::string &change : changes)
        names += (names.empty() ? "" : ",") + change.substr(0, change.find(' '));
      return error("resuming from '" + loaded->directory + "' would change " +
                   llvm::join(changes, ", ") + ": pass --override-resumed=" + names +
                   " to change them");
    }
    // The checkpoint holds global tensors, whatever layout wrote them.
    for (auto [param, buffer] : checkpointed) {
      auto block = takeBlock(exe.mesh, rank, param->sharding, loaded->tensors.at(param->name));
      if (!block)
        return block.takeError();
      if (auto err = executor.writeBuffer(buffer, *block))
        return err;
    }
    DataPosition position{uint64_t(loaded->state.dataPosition["epoch"]),
                          uint64_t(loaded->state.dataPosition["index"])};
    if (auto err = (*source)->restore(position))
      return err;
    startStep = loaded->state.step;
    auto read = loaded->state.integers.find("batches_read");
    batchesRead = read != loaded->state.integers.end() ? read->second : startStep;
    log << "resumed from " << loaded->directory << " at step " << startStep << "\n";
  } else if (options.resume) {
    log << "no checkpoint in '" << options.checkpointDir << "' yet: starting from step 0\n";
  }
  if (startStep >= options.steps) {
    log << "already at step " << startStep << " of " << options.steps << ": nothing to do\n";
    return llvm::Error::success();
  }

  std::unique_ptr<llvm::raw_fd_ostream> metrics;
  if (leader && !options.metricsPath.empty()) {
    std::error_code ec;
    metrics = std::make_unique<llvm::raw_fd_ostream>(
        options.metricsPath, ec,
        startStep > 0 ? llvm::sys::fs::OF_Append : llvm::sys::fs::OF_None);
    if (ec)
      return error("cannot write metrics to '" + options.metricsPath + "': " + ec.message());
  }

  // Rank 0 writes every rank's blocks: the first rank (in rank order) that
  // holds a block sends it there, in parameter order, so the shards tile each
  // tensor once. Data-parallel ranks hold the same blocks, pipeline ranks
  // different parameters, DualPipe two copies of each.
  std::vector<std::vector<bool>> firstHolder(exe.ranks.size());
  {
    std::set<std::pair<uint32_t, std::vector<int64_t>>> claimed;
    for (uint32_t r = 0; r < exe.ranks.size(); ++r)
      for (const ParamBinding &binding : exe.ranks[r].params) {
        const ParameterDesc &param = exe.parameters[binding.parameter];
        std::vector<int64_t> offsets;
        if (!exe.mesh.axes.empty()) {
          auto block = shardBlock(exe.mesh, exe.ranks[r].rank, param.sharding, param.shape);
          if (!block)
            return block.takeError();
          offsets = block->offsets;
        }
        firstHolder[r].push_back(claimed.insert({binding.parameter, offsets}).second);
      }
  }
  auto ownedBlocks = [&](uint32_t r) {
    std::vector<std::pair<const ParameterDesc *, uint32_t>> owned;
    for (auto [i, binding] : llvm::enumerate(exe.ranks[r].params)) {
      const ParameterDesc &param = exe.parameters[binding.parameter];
      if (isCheckpointed(param, writtenParams[binding.parameter]) && firstHolder[r][i])
        owned.push_back({&param, binding.buffer});
    }
    return owned;
  };
  // A checkpoint in two parts: the state copied to host memory at the step
  // boundary (every rank sends the leader its blocks), then the files
  // written, inline or, with checkpointAsync, on a writer thread while the
  // training goes on. The copy a writer works from is its own: the next
  // checkpoint waits for it before copying again.
  struct HostCheckpoint {
    CheckpointState state;
    std::vector<uint32_t> ranks;
    std::vector<std::vector<CheckpointTensor>> tensors;
    std::vector<std::vector<ShardPlacement>> placements;
    /// Asynchronous checkpoints: the leader's own blocks, still on their
    /// way to host memory; region j fills tensors[slot.first][slot.second].
    std::unique_ptr<PendingHostCopy> pending;
    std::vector<std::pair<size_t, size_t>> pendingSlots;
  };
  auto copyCheckpoint = [&](int64_t step) -> llvm::Expected<std::optional<HostCheckpoint>> {
    if (!leader) {
      for (auto [param, buffer] : ownedBlocks(rankIndex(exe, rank))) {
        auto value = executor.readBuffer(buffer);
        if (!value)
          return value.takeError();
        if (auto err = communicator->sendBytes(value->data.data(), value->data.size(), 0))
          return std::move(err);
      }
      return std::nullopt;
    }
    HostCheckpoint copy;
    CheckpointState &state = copy.state;
    state.step = step;
    state.modelName = exe.modelName;
    state.compileFlags = exe.compileFlags;
    DataPosition position = (*source)->state();
    state.dataPosition = {{"epoch", int64_t(position.epoch)}, {"index", int64_t(position.index)}};
    state.rngState = {options.seed};
    state.learningRateSchedule.kind = options.schedule;
    state.learningRateSchedule.settings = {{"peak", options.lr},
                                           {"warmup_steps", double(options.warmupSteps)},
                                           {"min_lr_ratio", options.minLrRatio},
                                           {"total_steps", double(options.steps)}};
    state.integers["batch"] = batch;
    state.integers["seq"] = seq;
    state.integers["batches_read"] = batchesRead;
    for (const auto &[name, value] : compiledSettings(exe.compileFlags))
      state.strings["setting:" + name] = value;
    if (!exe.mesh.axes.empty()) {
      std::string mesh;
      for (size_t a = 0; a < exe.mesh.axes.size(); ++a)
        mesh += (a ? "," : "") + exe.mesh.axes[a] + "=" + std::to_string(exe.mesh.shape[a]);
      state.strings["mesh"] = mesh;
      for (const ParameterDesc &param : exe.parameters)
        if (!isReplicated(param.sharding))
          state.strings["sharding:" + param.name] = formatSharding(param.sharding);
    }
    std::vector<uint32_t> pendingBuffers;
    for (uint32_t r = 0; r < exe.ranks.size(); ++r) {
      std::vector<CheckpointTensor> tensors;
      std::vector<ShardPlacement> placements;
      for (auto [param, buffer] : ownedBlocks(r)) {
        auto block = shardBlock(exe.mesh, exe.ranks[r].rank, param->sharding, param->shape);
        if (!block)
          return block.takeError();
        HostTensor value{param->name, param->dtype, block->shape, {}};
        if (exe.ranks[r].rank == uint32_t(rank) && options.checkpointAsync) {
          // Filled by the writer once the asynchronous copy is in.
          pendingBuffers.push_back(buffer);
          copy.pendingSlots.push_back({copy.ranks.size(), tensors.size()});
        } else if (exe.ranks[r].rank == uint32_t(rank)) {
          auto local = executor.readBuffer(buffer);
          if (!local)
            return local.takeError();
          value.data = std::move(local->data);
        } else {
          value.data.resize(exe.ranks[r].buffers[buffer].sizeInBytes());
          if (auto err = communicator->recvBytes(value.data.data(), value.data.size(),
                                                 exe.ranks[r].rank))
            return std::move(err);
        }
        tensors.push_back(std::move(value));
        placements.push_back({param->shape, block->offsets});
      }
      if (tensors.empty())
        continue;
      copy.ranks.push_back(exe.ranks[r].rank);
      copy.tensors.push_back(std::move(tensors));
      copy.placements.push_back(std::move(placements));
    }
    if (!pendingBuffers.empty()) {
      auto pending = executor.copyBuffersToHostAsync(pendingBuffers);
      if (!pending)
        return pending.takeError();
      copy.pending = std::move(*pending);
    }
    return std::optional<HostCheckpoint>(std::move(copy));
  };
  // Writes a copy; returns the line to log ("checkpoint: ...").
  CheckpointWriteOptions writeOptions;
  writeOptions.keepLast = options.keepCheckpoints;
  writeOptions.simulateFullDiskAfterBytes = options.simulateFullDiskAfterBytes;
  const std::string checkpointDir = options.checkpointDir;
  auto writeCheckpoint = [writeOptions, checkpointDir](HostCheckpoint &copy,
                                                       bool background) -> llvm::Expected<std::string> {
    auto start = std::chrono::steady_clock::now();
    if (copy.pending) {
      if (auto err = copy.pending->wait())
        return std::move(err);
      for (size_t j = 0; j < copy.pendingSlots.size(); ++j) {
        auto [r, t] = copy.pendingSlots[j];
        CheckpointTensor &tensor = copy.tensors[r][t];
        size_t bytes = dtypeSize(tensor.dtype);
        for (int64_t d : tensor.shape)
          bytes *= size_t(d);
        const uint8_t *data = copy.pending->region(j);
        tensor.data.assign(data, data + bytes);
      }
      copy.pending.reset(); // its host memory serves the next checkpoint
    }
    auto writer = CheckpointWriter::begin(checkpointDir, copy.state.step, writeOptions);
    if (!writer)
      return writer.takeError();
    for (size_t i = 0; i < copy.ranks.size(); ++i)
      if (auto err = (*writer)->writeRankFile(copy.ranks[i], copy.tensors[i], copy.placements[i]))
        return std::move(err);
    if (auto err = (*writer)->commit(copy.state))
      return std::move(err);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string line;
    llvm::raw_string_ostream out(line);
    out << "checkpoint: step " << copy.state.step << " written to " << checkpointDir << " in "
        << llvm::format("%.2f", seconds) << " s" << (background ? " (in the background)" : "")
        << "\n";
    return line;
  };
  // The write in flight, if any (its thread holds its copy).
  std::future<std::pair<std::string, std::string>> inFlight; // (log line, error)
  // A checkpoint that could not be written: the run's error, or with
  // continueAfterCheckpointFailure a line on the log (the previous
  // checkpoint is still the latest).
  auto checkpointFailed = [&](std::string message) -> llvm::Error {
    if (!options.continueAfterCheckpointFailure)
      return error(message);
    log << "warning: " << message << "; training goes on (the latest checkpoint is the one "
        << "before)\n";
    log.flush();
    return llvm::Error::success();
  };
  auto finishWrite = [&]() -> llvm::Error {
    if (!inFlight.valid())
      return llvm::Error::success();
    auto [line, failure] = inFlight.get();
    if (!failure.empty())
      return checkpointFailed("checkpoint: writing in the background failed: " + failure);
    log << line;
    log.flush();
    return llvm::Error::success();
  };
  // Saves step `step`'s checkpoint; returns the stall (seconds the training
  // loop waited).
  auto saveCheckpoint = [&](int64_t step) -> llvm::Expected<double> {
    auto start = std::chrono::steady_clock::now();
    // The previous write must be done before its memory is reused.
    if (auto err = finishWrite())
      return std::move(err);
    auto copy = copyCheckpoint(step);
    if (!copy)
      return copy.takeError();
    if (*copy && !options.checkpointAsync) {
      auto line = writeCheckpoint(**copy, false);
      if (!line) {
        if (auto err = checkpointFailed(llvm::toString(line.takeError())))
          return std::move(err);
      } else {
        log << *line;
      }
    } else if (*copy) {
      auto held = std::make_shared<HostCheckpoint>(std::move(**copy));
      inFlight = std::async(std::launch::async, [writeCheckpoint, held]() {
        auto line = writeCheckpoint(*held, true);
        if (!line)
          return std::make_pair(std::string(), llvm::toString(line.takeError()));
        return std::make_pair(std::move(*line), std::string());
      });
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  // In-memory snapshots for --on-anomaly=skip|rewind: every checkpointed
  // buffer of this rank, in host memory, with the data position.
  using AnomalyAction = TrainingOptions::AnomalyAction;
  struct Snapshot {
    int64_t step = 0; // the state after this many steps
    std::vector<HostTensor> buffers; // parallel to `checkpointed`
    DataPosition position;
    int64_t batchesRead = 0;
    std::deque<double> losses;
  };
  std::optional<Snapshot> snapshot;
  std::deque<double> losses; // the last good steps' losses (spike test)
  int64_t retries = 0;       // anomalies handled since the snapshot
  auto takeSnapshot = [&](int64_t step) -> llvm::Expected<double> {
    auto start = std::chrono::steady_clock::now();
    Snapshot taken;
    taken.step = step;
    taken.position = (*source)->state();
    taken.batchesRead = batchesRead;
    taken.losses = losses;
    for (auto [param, buffer] : checkpointed) {
      auto value = executor.readBuffer(buffer);
      if (!value)
        return value.takeError();
      taken.buffers.push_back(std::move(*value));
    }
    snapshot = std::move(taken);
    retries = 0;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (options.onAnomaly != AnomalyAction::Stop) {
    if (auto taken = takeSnapshot(startStep); !taken)
      return taken.takeError();
  }
  // The batch a step trains on: the next one not in skipBatches.
  std::set<int64_t> skipBatches = options.skipBatches;
  std::vector<int64_t> batchTokens(batch * (seq + 1));
  auto readBatch = [&]() -> llvm::Error {
    while (true) {
      if (auto err = (*source)->nextBatch(batchTokens))
        return err;
      if (!skipBatches.count(++batchesRead))
        return llvm::Error::success();
    }
  };
  // Multi-rank: each step every rank sends the leader its times and what
  // it saw; the leader answers with the verdict all ranks act on.
  struct StepReport {
    double stepSeconds = 0, waitSeconds = 0, anomaly = 0;
    double deviceMemory = -1; // bytes beyond the backend's start; -1 unknown
  };
  double peakDeviceMemory = -1; // the most any rank held, at a step's end
  std::vector<std::deque<double>> rankCompute(numRanks), rankWait(numRanks);
  std::set<int64_t> stragglers; // named, not yet recovered
  int64_t lastStragglerReport = 0;

  // Asynchronous checkpoints: the first copy to host memory allocates
  // what every later one reuses (spare device memory, pinned host memory,
  // whose allocation holds up the GPU's other work for seconds): done once
  // here, before the first step, rather than in the middle of training.
  if (options.checkpointAsync && leader && !options.checkpointDir.empty()) {
    std::vector<uint32_t> own;
    for (auto [param, buffer] : ownedBlocks(rankIndex(exe, rank)))
      own.push_back(buffer);
    auto warm = executor.copyBuffersToHostAsync(own);
    if (!warm)
      return warm.takeError();
    if (auto err = (*warm)->wait())
      return err;
  }

  log << "training " << exe.modelName << " on " << executor.backendName();
  if (numRanks > 1)
    log << " x " << numRanks << " ranks (" << communicator->name() << ")";
  log << ": steps " << startStep + 1 << ".." << options.steps << ", batch " << batch << " x "
      << seq << " tokens, data " << (*source)->describe() << "\n";
  HostTensor tokensIn{"tokens", DType::I64, {batch, seq + 1}, {}};
  auto runStart = std::chrono::steady_clock::now();
  int64_t stepsRun = 0;
  bool nanInjected = false;
  bool reportedOverflow = false;
  double unreportedOverflows = 0;
  int64_t unreportedOverflowSteps = 0;
  for (int64_t step = startStep; step < options.steps; ++step) {
    if (rank == options.injectHangRank && step + 1 == options.injectHangStep) {
      rankLog << "rank " << rank << ": stopping for good before step " << step + 1
              << " (injected hang)\n";
      rankLog.flush();
      while (true)
        std::this_thread::sleep_for(std::chrono::hours(1));
    }
    auto stepStart = std::chrono::steady_clock::now();
    double waitBefore = communicator ? communicator->collectiveSeconds() : 0;
    if (rank == options.injectDelayRank && options.injectDelaySeconds > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(options.injectDelaySeconds));
    if (step + 1 == options.injectNanAtStep && !nanInjected) {
      nanInjected = true;
      for (const ParamBinding &binding : program.params) {
        const ParameterDesc &param = exe.parameters[binding.parameter];
        if (!param.trainable)
          continue;
        auto value = executor.readBuffer(binding.buffer);
        if (!value)
          return value.takeError();
        if (value->dtype == DType::F32) {
          float nan = std::nanf("");
          for (size_t i = 0; i + 4 <= value->data.size(); i += 4)
            std::memcpy(value->data.data() + i, &nan, 4);
        } else {
          // bf16/f16 NaN: every exponent bit and a mantissa bit set.
          for (size_t i = 0; i + 2 <= value->data.size(); i += 2) {
            value->data[i] = 0xff;
            value->data[i + 1] = 0x7f;
          }
        }
        if (auto err = executor.writeBuffer(binding.buffer, *value))
          return err;
      }
    }
    if (auto err = readBatch())
      return err;
    const int64_t batchIndex = batchesRead;
    tokensIn.data.assign(reinterpret_cast<const uint8_t *>(batchTokens.data()),
                         reinterpret_cast<const uint8_t *>(batchTokens.data() + batchTokens.size()));
    double lr = learningRateAt(options, step);
    if (tokensBinding->rowGroups > 1) {
      // Each rank's block holds its share of every microbatch: the rows of
      // microbatch m are rows [m b, (m+1) b) of the batch as read, as on one
      // rank.
      int64_t blocks = 1;
      if (!tokensBinding->sharding.empty())
        for (const std::string &axis : tokensBinding->sharding[0])
          blocks *= exe.mesh.shape[exe.mesh.axisIndex(axis)];
      std::vector<int64_t> order = rowGroupOrder(batch, tokensBinding->rowGroups, blocks);
      const size_t rowBytes = size_t(seq + 1) * sizeof(int64_t);
      std::vector<uint8_t> reordered(tokensIn.data.size());
      for (int64_t i = 0; i < batch; ++i)
        std::memcpy(reordered.data() + i * rowBytes, tokensIn.data.data() + order[i] * rowBytes,
                    rowBytes);
      tokensIn.data = std::move(reordered);
    }
    auto tokensBlock = takeBlock(exe.mesh, rank, tokensBinding->sharding, tokensIn);
    if (!tokensBlock)
      return error("input 'tokens': " + llvm::toString(tokensBlock.takeError()));
    if (auto err = executor.setInput("tokens", *tokensBlock))
      return err;
    if (auto err = executor.setInput("lr", scalar("lr", float(lr))))
      return err;
    if (auto err = executor.setInput("step", scalar("step", float(step + 1))))
      return err;
    if (auto err = executor.run())
      return error("step " + llvm::Twine(step + 1) + ": " + llvm::toString(std::move(err)));
    auto loss = executor.getOutput("loss");
    if (!loss)
      return loss.takeError();
    auto norm = executor.getOutput("grad_norm");
    if (!norm)
      return norm.takeError();
    // FP8: how many quantizations this step clipped (an amax beyond its
    // scale's range, or not finite), never clipped silently.
    double overflows = 0;
    if (hasFp8Overflows) {
      auto count = executor.getOutput("fp8_overflows");
      if (!count)
        return count.takeError();
      overflows = double(scalarValue(*count));
    }
    llvm::json::Array expertCounts;
    if (hasExpertCounts) {
      auto counts = executor.getOutput("moe_tokens_per_expert");
      if (!counts)
        return counts.takeError();
      if (counts->dtype != DType::I64 || counts->shape.size() != 2)
        return error("output 'moe_tokens_per_expert' must be i64 [layers, experts]");
      const auto *values = reinterpret_cast<const int64_t *>(counts->data.data());
      for (int64_t l = 0; l < counts->shape[0]; ++l) {
        llvm::json::Array row;
        for (int64_t e = 0; e < counts->shape[1]; ++e)
          row.push_back(values[l * counts->shape[1] + e]);
        expertCounts.push_back(std::move(row));
      }
    }
    llvm::json::Array droppedCounts;
    if (hasDropped) {
      auto dropped = executor.getOutput("moe_dropped_tokens");
      if (!dropped)
        return dropped.takeError();
      if (dropped->dtype != DType::I64 || dropped->shape.size() != 1)
        return error("output 'moe_dropped_tokens' must be i64 [layers]");
      const auto *values = reinterpret_cast<const int64_t *>(dropped->data.data());
      for (int64_t l = 0; l < dropped->shape[0]; ++l)
        droppedCounts.push_back(values[l]);
    }
    double stepSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - stepStart).count();
    // On GPUs the collectives' device time (NCCL waits on the device, the
    // host only enqueues); elsewhere the host's time in them.
    double waitSeconds = executor.lastCollectiveSeconds()
                             ? *executor.lastCollectiveSeconds()
                             : communicator ? communicator->collectiveSeconds() - waitBefore : 0;
    ++stepsRun;
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - runStart).count();
    double tokensPerSecond = double(batch * seq) / std::max(stepSeconds, 1e-9);
    float lossValue = scalarValue(*loss), normValue = scalarValue(*norm);
    bool last = step + 1 == options.steps;
    bool stopping = options.stopAfter > 0 && stepsRun >= options.stopAfter;

    // Anomalies: 1 the loss, 2 the gradient norm not finite, 3 a spike.
    int anomalyKind = 0;
    std::string anomaly;
    if (!std::isfinite(lossValue)) {
      anomalyKind = 1;
      anomaly = "the loss is not finite (" + std::to_string(lossValue) + ")";
    } else if (!std::isfinite(normValue)) {
      anomalyKind = 2;
      anomaly = "the gradient norm is not finite (" + std::to_string(normValue) + ")";
    } else if (options.lossSpikeZScore > 0 &&
               int64_t(losses.size()) >= std::min<int64_t>(options.lossSpikeWindow, 20)) {
      double mean = 0, var = 0;
      for (double l : losses)
        mean += l;
      mean /= double(losses.size());
      for (double l : losses)
        var += (l - mean) * (l - mean);
      double deviation = std::max(std::sqrt(var / double(losses.size())), 1e-6 * std::abs(mean));
      double z = (double(lossValue) - mean) / std::max(deviation, 1e-12);
      if (z > options.lossSpikeZScore) {
        anomalyKind = 3;
        anomaly = llvm::formatv("a loss spike: {0:F4} is {1:F1} standard deviations above the "
                                "mean {2:F4} of the last {3} steps",
                                lossValue, z, mean, losses.size())
                      .str();
      }
    }
    // Every rank acts on the same verdict: the leader's, from all reports.
    std::vector<StepReport> reports(numRanks);
    std::optional<uint64_t> deviceMemory = executor.backend().deviceMemoryInUse();
    reports[rank] = {stepSeconds, waitSeconds, double(anomalyKind),
                     deviceMemory ? double(*deviceMemory) : -1.0};
    if (numRanks > 1) {
      if (!leader) {
        if (auto err = communicator->sendBytes(&reports[rank], sizeof(StepReport), 0))
          return err;
        double verdict = 0;
        if (auto err = communicator->recvBytes(&verdict, sizeof(verdict), 0))
          return err;
        if (verdict != 0 && anomalyKind == 0)
          anomaly = "rank 0 reports an anomaly";
        anomalyKind = int(verdict);
      } else {
        for (int64_t r = 1; r < numRanks; ++r) {
          if (auto err = communicator->recvBytes(&reports[r], sizeof(StepReport), r))
            return err;
          if (anomalyKind == 0 && reports[r].anomaly != 0) {
            anomalyKind = int(reports[r].anomaly);
            anomaly = "rank " + std::to_string(r) + " saw " +
                      (anomalyKind == 1   ? "a loss that is not finite"
                       : anomalyKind == 2 ? "a gradient norm that is not finite"
                                          : "a loss spike");
          }
        }
        double verdict = anomalyKind;
        for (int64_t r = 1; r < numRanks; ++r)
          if (auto err = communicator->sendBytes(&verdict, sizeof(verdict), r))
            return err;
      }
    }

    // Stragglers (the leader): compute time is the step less the time in
    // collectives, averaged over the window; a rank above the median
    // rank's by the threshold is named.
    llvm::json::Array stragglerEntries;
    if (leader && numRanks > 1 && options.stragglerThreshold > 0) {
      for (int64_t r = 0; r < numRanks; ++r) {
        rankCompute[r].push_back(std::max(0.0, reports[r].stepSeconds - reports[r].waitSeconds));
        rankWait[r].push_back(reports[r].waitSeconds);
        if (int64_t(rankCompute[r].size()) > options.stragglerWindow) {
          rankCompute[r].pop_front();
          rankWait[r].pop_front();
        }
      }
      if (int64_t(rankCompute[0].size()) >= options.stragglerWindow) {
        auto mean = [](const std::deque<double> &d) {
          double sum = 0;
          for (double x : d)
            sum += x;
          return sum / double(std::max<size_t>(d.size(), 1));
        };
        std::vector<double> compute(numRanks), wait(numRanks);
        for (int64_t r = 0; r < numRanks; ++r) {
          compute[r] = mean(rankCompute[r]);
          wait[r] = mean(rankWait[r]);
        }
        std::vector<double> sorted = compute;
        std::sort(sorted.begin(), sorted.end());
        // The lower median: with two ranks, the faster one.
        double median = sorted[(sorted.size() - 1) / 2];
        std::set<int64_t> now;
        for (int64_t r = 0; r < numRanks; ++r)
          if (compute[r] > median * (1 + options.stragglerThreshold) &&
              compute[r] - median > 0.005)
            now.insert(r);
        bool report = now != stragglers ||
                      (!now.empty() && step + 1 - lastStragglerReport >= options.stragglerWindow);
        for (int64_t r : now) {
          std::string others;
          for (int64_t o = 0; o < numRanks; ++o)
            if (!now.count(o))
              others += llvm::formatv("{0}rank {1} {2:F3} s", others.empty() ? "" : ", ", o,
                                      wait[o])
                            .str();
          stragglerEntries.push_back(llvm::json::Object{{"rank", r},
                                                        {"compute_s", compute[r]},
                                                        {"median_compute_s", median},
                                                        {"comm_wait_s", wait[r]}});
          if (report)
            log << llvm::formatv("straggler: rank {0} computes {1:F3} s a step over the last {2} "
                                 "steps, {3:F2}x the median rank's {4:F3} s; it waits {5:F3} s "
                                 "a step in collectives, the others {6}\n",
                                 r, compute[r], options.stragglerWindow,
                                 compute[r] / std::max(median, 1e-12), median, wait[r], others);
        }
        for (int64_t r : stragglers)
          if (!now.count(r))
            log << "straggler: rank " << r << " has caught up\n";
        if (report)
          lastStragglerReport = step + 1;
        stragglers = std::move(now);
      }
    }

    // A checkpoint and a snapshot of a good step, before its metrics line
    // (which records their stalls); never of an anomalous one.
    std::optional<double> checkpointStall, snapshotStall;
    if (anomalyKind == 0) {
      losses.push_back(lossValue);
      if (int64_t(losses.size()) > options.lossSpikeWindow)
        losses.pop_front();
      if (!options.checkpointDir.empty() &&
          ((options.checkpointEvery > 0 && (step + 1) % options.checkpointEvery == 0) || last)) {
        auto stall = saveCheckpoint(step + 1);
        if (!stall)
          return stall.takeError();
        checkpointStall = *stall;
      }
      // A checkpoint is a snapshot too: a rollback never goes behind the
      // latest checkpoint (whose step would otherwise be written twice).
      if (options.onAnomaly != AnomalyAction::Stop && !last &&
          ((step + 1) % std::max<int64_t>(1, options.snapshotEvery) == 0 || checkpointStall)) {
        auto stall = takeSnapshot(step + 1);
        if (!stall)
          return stall.takeError();
        snapshotStall = *stall;
      }
    }
    if (metrics) {
      // The same JSONL as a one-rank run, so the files compare line by line.
      llvm::json::Object line{{"step", step + 1},
                              {"loss", double(lossValue)},
                              {"lr", lr},
                              {"grad_norm", double(normValue)},
                              {"tokens_per_s", tokensPerSecond},
                              {"step_time_s", stepSeconds}};
      if (hasFp8Overflows)
        line["fp8_overflows"] = overflows;
      if (hasExpertCounts)
        line["moe_tokens_per_expert"] = std::move(expertCounts);
      if (hasDropped)
        line["moe_dropped_tokens"] = std::move(droppedCounts);
      if (!std::isfinite(lossValue)) // JSON has no NaN
        line["loss"] = nullptr;
      if (!std::isfinite(normValue))
        line["grad_norm"] = nullptr;
      double stepMemory = -1;
      for (const StepReport &r : reports)
        stepMemory = std::max(stepMemory, r.deviceMemory);
      if (stepMemory >= 0)
        line["device_memory_bytes"] = int64_t(stepMemory);
      if (checkpointStall)
        line["checkpoint_stall_s"] = *checkpointStall;
      if (snapshotStall)
        line["snapshot_stall_s"] = *snapshotStall;
      if (numRanks > 1) {
        llvm::json::Array stepTimes, compute, wait;
        for (const StepReport &r : reports) {
          stepTimes.push_back(r.stepSeconds);
          compute.push_back(std::max(0.0, r.stepSeconds - r.waitSeconds));
          wait.push_back(r.waitSeconds);
        }
        line["rank_step_time_s"] = std::move(stepTimes);
        line["rank_compute_s"] = std::move(compute);
        line["rank_comm_wait_s"] = std::move(wait);
        if (!stragglerEntries.empty())
          line["stragglers"] = std::move(stragglerEntries);
      }
      *metrics << llvm::json::Value(std::move(line)) << "\n";
      metrics->flush();
    }
    // After the step's metrics, so the step that went wrong is on record.
    if (anomalyKind != 0) {
      std::string where = "step " + std::to_string(step + 1) + ": " + anomaly;
      if (options.onAnomaly == AnomalyAction::Stop)
        return error(where + (anomalyKind == 3
                                  ? "; --on-anomaly=rewind rolls back past it"
                                  : "; lower --lr, check the data, or let --on-anomaly=rewind "
                                    "roll back past it"));
      if (retries >= options.anomalyRetries)
        return error(where + "; " +
                     (retries == 0 ? std::string("--anomaly-retries=0")
                                   : std::to_string(retries) +
                                         " rollback(s) to the snapshot of step " +
                                         std::to_string(snapshot->step) +
                                         " did not get past it (--anomaly-retries)") +
                     ": stopping");
      ++retries;
      bool rewind = options.onAnomaly == AnomalyAction::Rewind;
      // The batches no step will train on: for skip this step's; for
      // rewind every one read since the snapshot.
      std::set<int64_t> leftOut;
      for (int64_t b = rewind ? snapshot->batchesRead + 1 : batchIndex; b <= batchIndex; ++b)
        if (skipBatches.insert(b).second)
          leftOut.insert(b);
      for (size_t i = 0; i < checkpointed.size(); ++i)
        if (auto err = executor.writeBuffer(checkpointed[i].second, snapshot->buffers[i]))
          return err;
      losses = snapshot->losses;
      if (!rewind) {
        // Replay from the snapshot's batch; the skip list leaves this one out.
        if (auto err = (*source)->restore(snapshot->position))
          return err;
        batchesRead = snapshot->batchesRead;
      }
      log << where << "; " << (rewind ? "rewinding" : "skipping its batch: back")
          << " to the snapshot of step " << snapshot->step << ", batch(es) "
          << formatBatches(leftOut) << " left out (--skip-batches=" << formatBatches(skipBatches)
          << " reproduces the run), retry " << retries << " of " << options.anomalyRetries
          << "\n";
      log.flush();
      if (metrics) {
        llvm::json::Object event{{"step", step + 1},
                                 {"event", "anomaly"},
                                 {"reason", anomaly},
                                 {"action", rewind ? "rewind" : "skip"},
                                 {"restored_step", snapshot->step},
                                 {"skipped_batches", formatBatches(leftOut)},
                                 {"retry", retries}};
        *metrics << llvm::json::Value(std::move(event)) << "\n";
        metrics->flush();
      }
      step = snapshot->step - 1; // the loop goes on from the snapshot
      continue;
    }
    // The first step that clips says so in full; later ones are counted
    // on the progress lines (every step's count is in --metrics).
    if (overflows != 0 && !reportedOverflow) {
      log << "step " << (step + 1) << ": FP8: " << llvm::format("%.0f", overflows)
          << " quantization(s) clipped: an amax beyond its scale's range (see fp8_overflows "
             "in --metrics; later steps' are counted on the progress lines)\n";
      reportedOverflow = true;
    } else if (overflows != 0) {
      unreportedOverflows += overflows;
      ++unreportedOverflowSteps;
    }
    if ((step + 1) % std::max<int64_t>(1, options.logEvery) == 0 || last) {
      double eta = elapsed / stepsRun * double(options.steps - step - 1);
      log << llvm::format("step %6lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  %.0f tok/s  eta %s",
                          (long long)(step + 1), (long long)options.steps, lossValue, lr,
                          normValue, tokensPerSecond, formatDuration(eta).c_str());
      if (unreportedOverflows != 0)
        log << llvm::format("  fp8 clipped %.0f in %lld step(s)", unreportedOverflows,
                            (long long)unreportedOverflowSteps);
      log << "\n";
      unreportedOverflows = 0;
      unreportedOverflowSteps = 0;
      log.flush();
    }
    for (const StepReport &r : reports)
      peakDeviceMemory = std::max(peakDeviceMemory, r.deviceMemory);
    if (stopping)
      break;
  }
  if (leader && peakDeviceMemory >= 0) {
    std::optional<uint64_t> atStart = executor.backend().deviceMemoryAtStart();
    log << llvm::format("device memory: %.2f GiB held at the most (at a step's end)%s beyond "
                        "the %.2f GiB in use when the backend started (its context)\n",
                        peakDeviceMemory / double(1ull << 30), numRanks > 1 ? " by a rank" : "",
                        atStart ? double(*atStart) / double(1ull << 30) : 0.0);
    log.flush();
  }
  // The last write in the background, before the run reports success.
  return finishWrite();
}

} // namespace loom
