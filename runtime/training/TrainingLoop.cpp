#include "runtime/training/TrainingLoop.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/data/TokenSource.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <chrono>
#include <cmath>
#include <cstring>

namespace loom {

namespace {

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
/// everything but the executable's stored constants.
bool isCheckpointed(const ParameterDesc &param) {
  return param.trainable || param.init != InitKind::Data;
}

std::string formatDuration(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  return llvm::formatv("{0}:{1:2}:{2:2}", s / 3600, (s / 60) % 60, s % 60).str();
}

} // namespace

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
                        const TrainingOptions &options, llvm::raw_ostream &log) {
  const RankProgram &program = executor.program();
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
  if (options.steps <= 0)
    return error("--steps must be positive");
  if (options.schedule != "constant" && options.schedule != "cosine")
    return error("--lr-schedule must be constant or cosine, got '" + options.schedule + "'");
  if (options.data.empty())
    return error("training needs --data (a token file, a Megatron prefix, .npy, or synthetic:VOCAB)");
  int64_t batch = tokens->shape[0], seq = tokens->shape[1] - 1;

  TokenSourceOptions dataOptions;
  dataOptions.batchSize = batch;
  dataOptions.sequenceLength = seq;
  dataOptions.seed = options.seed;
  dataOptions.sequential = options.sequentialData;
  auto source = openTokenSource(options.data, dataOptions);
  if (!source)
    return source.takeError();

  // Where each checkpointed parameter lives.
  std::vector<std::pair<const ParameterDesc *, uint32_t>> checkpointed;
  for (const ParamBinding &binding : program.params)
    if (isCheckpointed(exe.parameters[binding.parameter]))
      checkpointed.push_back({&exe.parameters[binding.parameter], binding.buffer});

  int64_t startStep = 0;
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
    for (auto [param, buffer] : checkpointed)
      if (auto err = executor.writeBuffer(buffer, loaded->tensors.at(param->name)))
        return err;
    DataPosition position{uint64_t(loaded->state.dataPosition["epoch"]),
                          uint64_t(loaded->state.dataPosition["index"])};
    if (auto err = (*source)->restore(position))
      return err;
    startStep = loaded->state.step;
    log << "resumed from " << loaded->directory << " at step " << startStep << "\n";
  } else if (options.resume) {
    log << "no checkpoint in '" << options.checkpointDir << "' yet: starting from step 0\n";
  }
  if (startStep >= options.steps) {
    log << "already at step " << startStep << " of " << options.steps << ": nothing to do\n";
    return llvm::Error::success();
  }

  std::unique_ptr<llvm::raw_fd_ostream> metrics;
  if (!options.metricsPath.empty()) {
    std::error_code ec;
    metrics = std::make_unique<llvm::raw_fd_ostream>(
        options.metricsPath, ec,
        startStep > 0 ? llvm::sys::fs::OF_Append : llvm::sys::fs::OF_None);
    if (ec)
      return error("cannot write metrics to '" + options.metricsPath + "': " + ec.message());
  }

  auto saveCheckpoint = [&](int64_t step) -> llvm::Error {
    std::vector<CheckpointTensor> tensors;
    for (auto [param, buffer] : checkpointed) {
      auto value = executor.readBuffer(buffer);
      if (!value)
        return value.takeError();
      value->name = param->name;
      tensors.push_back(std::move(*value));
    }
    CheckpointState state;
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
    CheckpointWriteOptions writeOptions;
    writeOptions.keepLast = options.keepCheckpoints;
    auto start = std::chrono::steady_clock::now();
    if (auto err = writeCheckpoint(options.checkpointDir, /*rank=*/0, tensors, state, writeOptions))
      return err;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    log << "checkpoint: step " << step << " written to " << options.checkpointDir << " in "
        << llvm::format("%.2f", seconds) << " s\n";
    return llvm::Error::success();
  };

  log << "training " << exe.modelName << " on " << executor.backendName() << ": steps " << startStep + 1 << ".." << options.steps
      << ", batch " << batch << " x " << seq << " tokens, data " << (*source)->describe()
      << "\n";
  std::vector<int64_t> batchTokens(batch * (seq + 1));
  HostTensor tokensIn{"tokens", DType::I64, {batch, seq + 1}, {}};
  auto runStart = std::chrono::steady_clock::now();
  int64_t stepsRun = 0;
  for (int64_t step = startStep; step < options.steps; ++step) {
    auto stepStart = std::chrono::steady_clock::now();
    if (auto err = (*source)->nextBatch(batchTokens))
      return err;
    tokensIn.data.assign(reinterpret_cast<const uint8_t *>(batchTokens.data()),
                         reinterpret_cast<const uint8_t *>(batchTokens.data() + batchTokens.size()));
    double lr = learningRateAt(options, step);
    if (auto err = executor.setInput("tokens", tokensIn))
      return err;
    if (auto err = executor.setInput("lr", scalar("lr", float(lr))))
      return err;
    if (auto err = executor.setInput("step", scalar("step", float(step + 1))))
      return err;
    if (auto err = executor.run())
      return err;
    auto loss = executor.getOutput("loss");
    if (!loss)
      return loss.takeError();
    auto norm = executor.getOutput("grad_norm");
    if (!norm)
      return norm.takeError();
    double stepSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - stepStart).count();
    ++stepsRun;
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - runStart).count();
    double tokensPerSecond = double(batch * seq) / std::max(stepSeconds, 1e-9);
    float lossValue = scalarValue(*loss), normValue = scalarValue(*norm);
    if (!std::isfinite(lossValue))
      return error("step " + llvm::Twine(step + 1) + ": the loss is not finite (" +
                   llvm::Twine(std::to_string(lossValue)) + "); lower --lr or check the data");
    if (metrics) {
      llvm::json::Object line{{"step", step + 1},
                              {"loss", double(lossValue)},
                              {"lr", lr},
                              {"grad_norm", double(normValue)},
                              {"tokens_per_s", tokensPerSecond},
                              {"step_time_s", stepSeconds}};
      *metrics << llvm::json::Value(std::move(line)) << "\n";
      metrics->flush();
    }
    bool last = step + 1 == options.steps;
    if ((step + 1) % std::max<int64_t>(1, options.logEvery) == 0 || last) {
      double eta = elapsed / stepsRun * double(options.steps - step - 1);
      log << llvm::format("step %6lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  %.0f tok/s  eta %s\n",
                          (long long)(step + 1), (long long)options.steps, lossValue, lr,
                          normValue, tokensPerSecond, formatDuration(eta).c_str());
      log.flush();
    }
    bool stopping = options.stopAfter > 0 && stepsRun >= options.stopAfter;
    if (!options.checkpointDir.empty() &&
        ((options.checkpointEvery > 0 && (step + 1) % options.checkpointEvery == 0) || last))
      if (auto err = saveCheckpoint(step + 1))
        return err;
    if (stopping)
      break;
  }
  return llvm::Error::success();
}

} // namespace loom
