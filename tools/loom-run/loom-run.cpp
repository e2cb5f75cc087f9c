// loom-run: runs a Loom executable. Inference: named inputs from .npy files,
// outputs to .npy files, checked against the program's signature.

#include "runtime/backends/Backend.h"
#include "runtime/backends/ProgramExecutor.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/executable/Executable.h"
#include "runtime/training/TrainingLoop.h"
#include "runtime/support/Npy.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/WithColor.h"

#include <chrono>

namespace cl = llvm::cl;
using namespace loom;

namespace {

cl::OptionCategory category("loom-run options");
cl::opt<std::string> executablePath(cl::Positional, cl::desc("<model.loomx>"),
                                    cl::Required, cl::cat(category));
cl::list<std::string> inputs(
    "input",
    cl::desc("an input as a .npy file: PATH (in the program's input order) or NAME=PATH"),
    cl::value_desc("[name=]path"), cl::cat(category));
cl::list<std::string> outputs(
    "output",
    cl::desc("where to write an output .npy: PATH (in the program's output order) or NAME=PATH"),
    cl::value_desc("[name=]path"), cl::cat(category));
cl::opt<std::string> outputDir("output-dir",
                              cl::desc("write every output as DIR/<name>.npy"),
                              cl::value_desc("DIR"), cl::cat(category));
cl::opt<std::string> weightsPath(
    "weights",
    cl::desc("load parameters by name from a safetensors file (as Hugging Face ships them); "
             "every tensor must match a parameter's dtype and shape"),
    cl::value_desc("FILE.safetensors"), cl::cat(category));
cl::opt<std::string> backendName("backend",
                                 cl::desc("auto (a GPU when there is one, else the CPU), cpu or cuda"),
                                 cl::init("auto"),
                                 cl::cat(category));
cl::opt<int> threads("threads", cl::desc("CPU threads per kernel (0: all cores)"),
                     cl::init(0), cl::cat(category));
cl::opt<bool> profile("profile",
                      cl::desc("time every kernel and print where the time went (cuda: "
                               "device timestamps on each stream; cpu: waiting for each)"),
                      cl::cat(category));
cl::opt<std::string> tracePath(
    "trace",
    cl::desc("write the run's kernels as a Chrome trace (open in Perfetto), one track per "
             "stream; times as --profile takes them"),
    cl::value_desc("FILE.json"), cl::cat(category));
cl::opt<bool> stepGraph(
    "step-graph",
    cl::desc("on a backend that can (cuda), capture a step as one CUDA graph after the first "
             "and replay it (default on; --step-graph=false issues every kernel every step)"),
    cl::init(true), cl::cat(category));
cl::opt<uint64_t> seed("seed",
                       cl::desc("seed for fresh parameters and the order of the training data"),
                       cl::init(0), cl::cat(category));

cl::OptionCategory trainCategory("loom-run training options (a --mode=train executable)");
cl::opt<int64_t> steps("steps", cl::desc("train up to this step (a resumed run continues to it)"),
                       cl::init(0), cl::cat(trainCategory));
cl::opt<std::string> data("data",
                          cl::desc("training tokens: FILE.u16/.u32, FILE.npy, a Megatron "
                                   "PREFIX (.bin + .idx), or synthetic:VOCAB"),
                          cl::cat(trainCategory));
cl::opt<bool> sequentialData("sequential-data",
                             cl::desc("read training windows in file order (no shuffle)"),
                             cl::cat(trainCategory));
cl::opt<double> lr("lr", cl::desc("peak learning rate"), cl::init(3e-4), cl::cat(trainCategory));
cl::opt<std::string> lrSchedule("lr-schedule", cl::desc("constant or cosine"),
                                cl::init("constant"), cl::cat(trainCategory));
cl::opt<int64_t> warmupSteps("warmup-steps", cl::desc("linear learning-rate warmup"),
                             cl::init(0), cl::cat(trainCategory));
cl::opt<double> minLrRatio("min-lr-ratio", cl::desc("cosine decays to lr times this"),
                           cl::init(0.1), cl::cat(trainCategory));
cl::opt<std::string> metricsPath("metrics", cl::desc("write one JSON object per step (JSONL)"),
                                 cl::value_desc("FILE.jsonl"), cl::cat(trainCategory));
cl::opt<std::string> checkpointDir("checkpoint-dir", cl::desc("where checkpoints are written"),
                                   cl::cat(trainCategory));
cl::opt<int64_t> checkpointEvery("checkpoint-every",
                                 cl::desc("checkpoint every K steps (and at the end)"),
                                 cl::init(0), cl::cat(trainCategory));
cl::opt<bool> resume("resume", cl::desc("continue from the latest checkpoint in --checkpoint-dir"),
                     cl::cat(trainCategory));
cl::opt<unsigned> keepCheckpoints("keep-checkpoints",
                                  cl::desc("keep this many checkpoints (0: all)"), cl::init(3),
                                  cl::cat(trainCategory));
cl::opt<int64_t> logEvery("log-every", cl::desc("print progress every K steps"), cl::init(1),
                          cl::cat(trainCategory));
cl::opt<int64_t> stopAfter("stop-after",
                           cl::desc("stop after this many steps of this run (as if interrupted)"),
                           cl::init(0), cl::cat(trainCategory), cl::Hidden);

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "loom-run") << message << "\n";
  std::exit(1);
}

template <typename T> T check(llvm::Expected<T> value) {
  if (!value)
    fail(llvm::toString(value.takeError()));
  return std::move(*value);
}
void check(llvm::Error err) {
  if (err)
    fail(llvm::toString(std::move(err)));
}

/// Splits NAME=PATH; a bare PATH takes the name at `position` in `bindings`.
std::pair<std::string, std::string> bindingFor(const std::string &arg, size_t position,
                                               const std::vector<IOBinding> &bindings,
                                               const char *what) {
  size_t eq = arg.find('=');
  if (eq != std::string::npos)
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  if (position >= bindings.size())
    fail(llvm::Twine("more --") + what + " files than the program has " + what + "s (" +
         llvm::Twine(bindings.size()) + ")");
  return {bindings[position].name, arg};
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions({&category, &trainCategory});
  cl::ParseCommandLineOptions(
      argc, argv,
      "loom-run: run a Loom executable\n\n"
      "  loom-run model.loomx --input x.npy --output y.npy\n"
      "  loom-run train.loomx --steps 100 --data tokens.u16 --metrics m.jsonl\n");

  Executable exe = check(loadExecutableFile(executablePath));
  bool training = exe.mode == "train";
  if (training && (!inputs.empty() || !outputs.empty()))
    fail("'" + executablePath + "' is a training executable: give --steps and --data, not "
         "--input/--output");
  if (!training && steps > 0)
    fail("'" + executablePath + "' is an inference executable (compile with --mode=train to "
         "train)");
  if (training && steps <= 0)
    fail("training needs --steps N");
  std::unique_ptr<Backend> backend = check(createBackend(backendName, threads));
  std::unique_ptr<ProgramExecutor> executor =
      check(ProgramExecutor::create(exe, /*rank=*/0, *backend, seed));
  const RankProgram &program = executor->program();
  executor->setProfiling(profile || !tracePath.empty());
  executor->setStepCapture(stepGraph);
  auto printProfile = [&]() {
    if (!tracePath.empty()) {
      // Chrome's trace format: complete ("X") events in microseconds, one
      // thread per stream of the program.
      llvm::json::Array events;
      for (size_t s = 0; s < program.streams.size(); ++s)
        events.push_back(llvm::json::Object{
            {"name", "thread_name"}, {"ph", "M"}, {"pid", int64_t(program.rank)},
            {"tid", int64_t(s)}, {"args", llvm::json::Object{{"name", program.streams[s]}}}});
      for (const auto &e : executor->traceEvents())
        events.push_back(llvm::json::Object{{"name", e.name},
                                            {"ph", "X"},
                                            {"pid", int64_t(program.rank)},
                                            {"tid", int64_t(e.stream)},
                                            {"ts", e.startSeconds * 1e6},
                                            {"dur", e.durationSeconds * 1e6},
                                            {"args", llvm::json::Object{{"instruction", int64_t(e.instruction)}}}});
      std::error_code ec;
      llvm::raw_fd_ostream out(tracePath, ec);
      if (ec)
        fail("cannot write '" + tracePath + "': " + ec.message());
      out << llvm::json::Value(llvm::json::Object{{"traceEvents", std::move(events)},
                                                  {"displayTimeUnit", "ms"}});
      llvm::errs() << "loom-run: wrote " << executor->traceEvents().size() << " kernel events to "
                   << tracePath << "\n";
    }
    if (!profile)
      return;
    double total = 0;
    for (const auto &k : executor->profile())
      total += k.seconds;
    llvm::errs() << "loom-run: time by kernel ("
                 << (backend->canTimestamp() ? "device timestamps on each stream"
                                             : "each waited for")
                 << "):\n";
    for (const auto &k : executor->profile())
      llvm::errs() << llvm::format("  %-24s %10.3f ms %6.1f%% %8lld calls\n", k.kernel.c_str(),
                                   k.seconds * 1e3, 100.0 * k.seconds / std::max(total, 1e-12),
                                   (long long)k.calls);
  };
  if (!weightsPath.empty()) {
    auto file = check(readSafetensors(weightsPath));
    std::map<std::string, uint32_t> bufferOf;
    for (const ParamBinding &binding : program.params)
      bufferOf[exe.parameters[binding.parameter].name] = binding.buffer;
    size_t loaded = 0;
    for (HostTensor &tensor : file.tensors) {
      auto it = bufferOf.find(tensor.name);
      if (it == bufferOf.end())
        fail("'" + weightsPath + "': tensor '" + tensor.name +
             "' is not a parameter of this executable");
      if (llvm::Error err = executor->writeBuffer(it->second, tensor))
        fail("'" + weightsPath + "': tensor '" + tensor.name + "': " +
             llvm::toString(std::move(err)));
      ++loaded;
    }
    llvm::errs() << "loom-run: loaded " << loaded << " tensors from " << weightsPath << "\n";
  }

  if (training) {
    TrainingOptions options;
    options.steps = steps;
    options.data = data;
    options.lr = lr;
    options.schedule = lrSchedule;
    options.warmupSteps = warmupSteps;
    options.minLrRatio = minLrRatio;
    options.seed = seed;
    options.sequentialData = sequentialData;
    options.metricsPath = metricsPath;
    options.checkpointDir = checkpointDir;
    options.checkpointEvery = checkpointEvery;
    options.keepCheckpoints = keepCheckpoints;
    options.resume = resume;
    options.logEvery = logEvery;
    options.stopAfter = stopAfter;
    if (resume && checkpointDir.empty())
      fail("--resume needs --checkpoint-dir");
    check(runTraining(exe, *executor, options, llvm::outs()));
    if (stepGraph && backend->canCapture() && !profile && tracePath.empty())
      llvm::outs() << "loom-run: steps " << executor->captureStatus() << "\n";
    printProfile();
    return 0;
  }

  if (inputs.size() != program.inputs.size()) {
    std::string expected;
    for (const IOBinding &b : program.inputs) {
      const BufferDesc &buf = program.buffers[b.buffer];
      expected += (expected.empty() ? "" : ", ") + b.name + " (" +
                  std::string(dtypeName(buf.dtype)) + ")";
    }
    fail("the program takes " + llvm::Twine(program.inputs.size()) + " inputs (" +
         expected + "), got " + llvm::Twine(inputs.size()) + " --input files");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto [name, path] = bindingFor(inputs[i], i, program.inputs, "input");
    const BufferDesc *buffer = nullptr;
    for (const IOBinding &b : program.inputs)
      if (b.name == name)
        buffer = &program.buffers[b.buffer];
    if (!buffer)
      fail("the program has no input named '" + name + "'");
    NpyArray array = check(readNpyAs(path, buffer->dtype));
    HostTensor value{name, buffer->dtype, array.shape, std::move(array.data)};
    check(executor->setInput(name, value));
  }

  auto start = std::chrono::steady_clock::now();
  check(executor->run());
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  for (size_t i = 0; i < outputs.size(); ++i) {
    auto [name, path] = bindingFor(outputs[i], i, program.outputs, "output");
    HostTensor value = check(executor->getOutput(name));
    NpyArray array;
    array.kind = npyRawKindFor(value.dtype);
    array.shape = value.shape;
    array.data = std::move(value.data);
    check(writeNpy(path, array));
  }
  if (!outputDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(outputDir))
      fail("cannot create '" + outputDir + "': " + ec.message());
    for (const IOBinding &output : program.outputs) {
      HostTensor value = check(executor->getOutput(output.name));
      NpyArray array;
      array.kind = npyRawKindFor(value.dtype);
      array.shape = value.shape;
      array.data = std::move(value.data);
      check(writeNpy(outputDir + "/" + output.name + ".npy", array));
    }
  }
  printProfile();
  llvm::errs() << "loom-run: ran " << program.instructions.size() << " instructions on "
               << backend->name() << " in " << llvm::format("%.3f", seconds * 1e3)
               << " ms\n";
  return 0;
}
