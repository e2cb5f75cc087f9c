// loom-run: runs a Loom executable. Inference: named inputs from .npy files,
// outputs to .npy files, checked against the program's signature.

#include "tools/LoomVersion.h"
#include "runtime/backends/Backend.h"
#include "runtime/backends/ProgramExecutor.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/executable/Executable.h"
#include "runtime/executable/ExecutableListing.h"
#include "runtime/comm/Communicator.h"
#include "runtime/training/TrainingLoop.h"
#include "runtime/support/FloatTypes.h"
#include "runtime/support/AtomicFile.h"
#include "runtime/support/Npy.h"
#include "runtime/support/UserFile.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/WithColor.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <dirent.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

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
cl::opt<bool> allowPartialWeights(
    "allow-partial-weights",
    cl::desc("let --weights hold only some trainable parameters; the others start from their "
             "initializer, and loom-run names them (default off: every one must be there)"),
    cl::cat(category));
cl::opt<std::string> backendName("backend",
                                 cl::desc("auto (a GPU when there is one, else the CPU), cpu or cuda (default: auto)"),
                                 cl::init("auto"),
                                 cl::cat(category));
cl::opt<int> threads("threads",
                     cl::desc("CPU threads per kernel (default 0: all cores, shared among the ranks)"),
                     cl::init(0), cl::cat(category));
cl::opt<std::string> devices(
    "devices",
    cl::desc("GPUs of a multi-rank run on CUDA, one per rank (or per local rank under "
             "mpirun): e.g. 0,1,2,3 (default: 0, 1, ...)"),
    cl::value_desc("ID,ID,..."), cl::cat(category));
cl::opt<unsigned> commTimeout(
    "comm-timeout",
    cl::desc("seconds a rank waits for its peers in a collective before it fails, naming "
             "the ranks that never came; the run then ends on every rank (threads, mpirun, "
             "NCCL; default: 600)"),
    cl::init(600), cl::cat(category));
cl::opt<bool> noVerifyChecksum("no-verify-checksum",
                               cl::desc("load the executable without checking its checksums"),
                               cl::cat(category));
cl::opt<bool> profile("profile",
                      cl::desc("time every kernel and print where the time went (cuda: "
                               "device timestamps on each stream; cpu: waiting for each; default off)"),
                      cl::cat(category));
cl::opt<std::string> tracePath(
    "trace",
    cl::desc("write the run's kernels as a Chrome trace (open in Perfetto): a process per "
             "rank, a track per stream; times as --profile takes them, within the replayed "
             "CUDA graph from the second step on (under mpirun, rank r writes "
             "FILE.json.rank<r>.json)"),
    cl::value_desc("FILE.json"), cl::cat(category));
cl::opt<bool> stepGraph(
    "step-graph",
    cl::desc("on a backend that can (cuda), capture a step as one CUDA graph after the first "
             "and replay it (default on; --step-graph=false issues every kernel every step)"),
    cl::init(true), cl::cat(category));
cl::opt<unsigned> stallTimeout(
    "stall-timeout",
    cl::desc("seconds without progress (no rank issuing a new instruction) after which "
             "loom-run prints where each rank is and exits with an error (default 0: wait "
             "forever)"),
    cl::init(0), cl::cat(category));
cl::opt<uint64_t> seed("seed",
                       cl::desc("seed for fresh parameters and the order of the training data (default: 0)"),
                       cl::init(0), cl::cat(category));

cl::OptionCategory trainCategory("loom-run training options (a --mode=train executable)");
cl::opt<int64_t> steps("steps", cl::desc("train up to this step (a resumed run continues to it)"),
                       cl::init(0), cl::cat(trainCategory));
cl::opt<std::string> data("data",
                          cl::desc("training tokens: FILE.u16/.u32, FILE.npy, a Megatron "
                                   "PREFIX (.bin + .idx), or synthetic:VOCAB"),
                          cl::cat(trainCategory));
cl::opt<bool> sequentialData("sequential-data",
                             cl::desc("read training windows in file order, no shuffle (default off)"),
                             cl::cat(trainCategory));
cl::opt<double> lr("lr", cl::desc("peak learning rate (default: 3e-4)"), cl::init(3e-4), cl::cat(trainCategory));
cl::opt<std::string> lrSchedule("lr-schedule", cl::desc("constant or cosine (default: constant)"),
                                cl::init("constant"), cl::cat(trainCategory));
cl::opt<int64_t> warmupSteps("warmup-steps", cl::desc("steps of linear learning-rate warmup (default: 0)"),
                             cl::init(0), cl::cat(trainCategory));
cl::opt<double> minLrRatio("min-lr-ratio", cl::desc("cosine decays to lr times this (default: 0.1)"),
                           cl::init(0.1), cl::cat(trainCategory));
cl::opt<std::string> metricsPath("metrics", cl::desc("write one JSON object per step (JSONL)"),
                                 cl::value_desc("FILE.jsonl"), cl::cat(trainCategory));
cl::opt<std::string> checkpointDir("checkpoint-dir", cl::desc("where checkpoints are written"),
                                   cl::cat(trainCategory));
cl::opt<int64_t> checkpointEvery("checkpoint-every",
                                 cl::desc("checkpoint every K steps and at the end (default 0: only at the end)"),
                                 cl::init(0), cl::cat(trainCategory));
cl::opt<bool> checkpointAsync(
    "checkpoint-async",
    cl::desc("write checkpoints in the background: the step boundary copies the state to host "
             "memory (its stall is checkpoint_stall_s in --metrics) and a writer thread "
             "persists it while training goes on (default: on with the CUDA backend, off on "
             "the CPU)"),
    cl::cat(trainCategory));
cl::opt<std::string> onCheckpointFailure(
    "on-checkpoint-failure",
    cl::desc("when a checkpoint cannot be written (a full disk): stop (default), or continue "
             "training and report it; the previous checkpoint survives either way"),
    cl::init("stop"), cl::cat(trainCategory));
cl::opt<uint64_t> simulateFullDisk(
    "simulate-full-disk-after-bytes",
    cl::desc("tests: each checkpoint finds the disk full after this many bytes"),
    cl::cat(trainCategory), cl::Hidden);
cl::opt<bool> resume("resume", cl::desc("continue from the latest checkpoint in --checkpoint-dir (default off)"),
                     cl::cat(trainCategory));
cl::list<std::string> overrideResumed(
    "override-resumed",
    cl::desc("settings a --resume may change from the checkpoint's: lr, lr-schedule, "
             "warmup-steps, min-lr-ratio, steps (a cosine schedule's length), batch, seq, "
             "weight-decay, adam-beta1, adam-beta2, adam-epsilon, max-grad-norm, precision "
             "(default: none; any other difference is an error)"),
    cl::value_desc("SETTING,..."), cl::CommaSeparated, cl::cat(trainCategory));
cl::opt<unsigned> keepCheckpoints("keep-checkpoints",
                                  cl::desc("keep this many checkpoints (default: 3; 0: all)"), cl::init(3),
                                  cl::cat(trainCategory));
cl::opt<int64_t> logEvery("log-every", cl::desc("print progress every K steps (default: 1)"), cl::init(1),
                          cl::cat(trainCategory));
cl::opt<int64_t> stopAfter("stop-after",
                           cl::desc("stop after this many steps of this run (as if interrupted)"),
                           cl::init(0), cl::cat(trainCategory), cl::Hidden);

cl::opt<std::string> onAnomaly(
    "on-anomaly",
    cl::desc("when a step's loss or gradient norm is not finite, or its loss spikes "
             "(--loss-spike-zscore): stop (default); skip: return to the last in-memory "
             "snapshot, run the steps since again and leave that step's batch out; rewind: "
             "return to the snapshot and leave out every batch since it"),
    cl::init("stop"), cl::cat(trainCategory));
cl::opt<double> lossSpikeZScore(
    "loss-spike-zscore",
    cl::desc("a loss this many standard deviations above the mean of the last "
             "--loss-spike-window good steps is an anomaly (default 0: spikes are not "
             "anomalies; 6 is a common choice)"),
    cl::init(0), cl::cat(trainCategory));
cl::opt<int64_t> lossSpikeWindow("loss-spike-window",
                                 cl::desc("good steps the spike test averages over (default: "
                                          "100; it starts after min(20, this) steps)"),
                                 cl::init(100), cl::cat(trainCategory));
cl::opt<int64_t> snapshotEvery(
    "snapshot-every",
    cl::desc("--on-anomaly=skip|rewind: copy the state to host memory every K good steps, "
             "and at every checkpoint (default: 100)"),
    cl::init(100), cl::cat(trainCategory));
cl::opt<int64_t> anomalyRetries(
    "anomaly-retries",
    cl::desc("--on-anomaly=skip|rewind: rollbacks allowed without a new snapshot in between; "
             "the next anomaly stops the run (default: 3)"),
    cl::init(3), cl::cat(trainCategory));
cl::opt<std::string> skipBatchesList(
    "skip-batches",
    cl::desc("batches no step trains on, 1-based in the order the data gives them, e.g. "
             "6-7,12 (a run that never sees them)"),
    cl::value_desc("N|A-B,..."), cl::cat(trainCategory));
cl::opt<double> stragglerThreshold(
    "straggler-threshold",
    cl::desc("multi-rank runs: name a rank whose compute time (its step less its time in "
             "collectives), over the last --straggler-window steps, exceeds the median "
             "rank's by this fraction (default: 0.5; 0: off)"),
    cl::init(0.5), cl::cat(trainCategory));
cl::opt<int64_t> stragglerWindow("straggler-window",
                                 cl::desc("steps the straggler test averages over (default: 20)"),
                                 cl::init(20), cl::cat(trainCategory));
cl::opt<int64_t> injectNanAtStep(
    "inject-nan-at-step",
    cl::desc("tests: every trainable parameter becomes NaN before this step (once)"),
    cl::init(0), cl::cat(trainCategory), cl::Hidden);
cl::opt<std::string> injectDelay(
    "inject-delay", cl::desc("tests: RANK:SECONDS, that rank sleeps before every step"),
    cl::cat(trainCategory), cl::Hidden);
cl::opt<std::string> injectHang(
    "inject-hang", cl::desc("tests: RANK:STEP, that rank stops for good before that step"),
    cl::cat(trainCategory), cl::Hidden);

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "loom-run") << message << "\n";
  std::exit(1);
}

/// --skip-batches: "N" or "A-B" items, comma-separated, each at least 1.
std::set<int64_t> parseSkipBatches() {
  std::set<int64_t> batches;
  llvm::SmallVector<llvm::StringRef> items;
  llvm::StringRef(skipBatchesList).split(items, ',', -1, false);
  for (llvm::StringRef item : items) {
    auto [first, last] = item.trim().split('-');
    int64_t a = 0, b = 0;
    bool bad = first.trim().getAsInteger(10, a) ||
               (item.contains('-') ? last.trim().getAsInteger(10, b) : (b = a, false));
    if (bad || a < 1 || b < a || b - a > 100000000)
      fail("--skip-batches: '" + item + "' is not a batch number or a range A-B of them "
           "(1-based, A <= B)");
    for (int64_t i = a; i <= b; ++i)
      batches.insert(i);
  }
  return batches;
}

/// --inject-delay RANK:SECONDS, --inject-hang RANK:STEP.
std::pair<int64_t, double> parseRankPair(const std::string &text, const char *option) {
  if (text.empty())
    return {-1, 0};
  auto [rankText, valueText] = llvm::StringRef(text).split(':');
  int64_t rank = 0;
  double value = 0;
  if (rankText.getAsInteger(10, rank) || valueText.getAsDouble(value) || rank < 0 ||
      !std::isfinite(value) || value < 0)
    fail(llvm::Twine(option) + " takes RANK:NUMBER, got '" + text + "'");
  return {rank, value};
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

/// The GPU of rank slot `slot` (a rank in one process, a local rank under
/// mpirun): --devices' entry, or the slot itself.
llvm::Expected<int> deviceFor(int64_t slot) {
  if (devices.empty())
    return int(slot);
  llvm::SmallVector<llvm::StringRef> ids;
  llvm::StringRef(devices).split(ids, ',');
  if (slot >= int64_t(ids.size()))
    return llvm::createStringError(std::errc::invalid_argument,
                                   "--devices lists %zu GPUs, rank slot %lld has none",
                                   ids.size(), (long long)slot);
  int id = 0;
  if (ids[slot].trim().getAsInteger(10, id) || id < 0)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "--devices expects GPU numbers like 0,1, got '%s'",
                                   devices.c_str());
  return id;
}

/// The backend for rank slot `slot`, made on the thread that will use it.
llvm::Expected<std::unique_ptr<Backend>> backendFor(int64_t slot, int numThreads) {
  if (backendName == "cpu")
    return createCpuBackend(numThreads);
  if (backendName != "cuda" && backendName != "auto")
    return createBackend(backendName, numThreads); // names the unknown backend
  auto device = deviceFor(slot);
  if (!device)
    return device.takeError();
  auto cuda = createCudaBackend(*device);
  if (cuda || backendName == "cuda")
    return cuda;
  llvm::consumeError(cuda.takeError());
  return createCpuBackend(numThreads);
}

/// Whether this run's ranks drive GPUs: --backend=cuda, or auto with a GPU.
bool usesCuda() {
  if (backendName == "cuda")
    return true;
  if (backendName != "auto")
    return false;
  auto probe = createCudaBackend(0);
  if (probe)
    return true;
  llvm::consumeError(probe.takeError());
  return false;
}

/// Every group (axes list) the executable's collectives use, in a fixed
/// order: NCCL splits their communicators up front. Exchanges run on the
/// world communicator and need none.
std::vector<std::vector<std::string>> collectiveGroups(const Executable &exe) {
  std::set<std::vector<std::string>> groups;
  for (const RankProgram &program : exe.ranks)
    for (const Instruction &instr : program.instructions)
      if (instr.kind == InstrKind::Collective && !instr.collective.axes.empty() &&
          instr.collective.kind != CollectiveKind::Exchange)
        groups.insert(instr.collective.axes);
  return {groups.begin(), groups.end()};
}

/// Per rank, the ranks it sends to or receives from point to point (made
/// symmetric): the NCCL connections to make before the first step.
std::vector<std::vector<int64_t>> pointToPointPeers(const Executable &exe) {
  std::vector<std::set<int64_t>> peers(exe.mesh.numRanks());
  auto link = [&](int64_t a, int64_t b) {
    if (a == b || a < 0 || b < 0 || a >= int64_t(peers.size()) || b >= int64_t(peers.size()))
      return;
    peers[a].insert(b);
    peers[b].insert(a);
  };
  for (const RankProgram &program : exe.ranks)
    for (const Instruction &instr : program.instructions) {
      if (instr.kind != InstrKind::Collective)
        continue;
      const CollectiveDesc &desc = instr.collective;
      if (desc.kind == CollectiveKind::Send || desc.kind == CollectiveKind::Recv) {
        link(program.rank, desc.peer);
      } else if (desc.kind == CollectiveKind::Exchange) {
        auto group = groupOf(exe.mesh, program.rank, desc.axes);
        if (!group) { // the verifier reports it when the program runs
          llvm::consumeError(group.takeError());
          continue;
        }
        for (const std::vector<int64_t> *list : {&desc.sendPeers, &desc.recvPeers})
          for (int64_t index : *list)
            if (index >= 0 && index < int64_t(group->members.size()))
              link(program.rank, group->members[index]);
      }
    }
  std::vector<std::vector<int64_t>> result;
  for (const std::set<int64_t> &p : peers)
    result.emplace_back(p.begin(), p.end());
  return result;
}

/// --stall-timeout: each rank's phase and executor, for the watchdog.
struct RankWatch {
  std::string phase = "starting";
  const ProgramExecutor *executor = nullptr;
};
struct Watched {
  std::mutex mutex;
  std::map<int64_t, RankWatch> ranks;
};
/// Never destroyed: the watchdog thread is detached and still reads it while
/// exit() runs the destructors of static objects.
Watched &watched() {
  static Watched *state = new Watched;
  return *state;
}

/// "running, run 4, #12 of 177: all_reduce ... on tp_comm": a rank's phase
/// and, once it runs steps, the instruction its host thread is at.
std::string describeWhere(const RankWatch &w) {
  std::string where = w.phase;
  if (w.executor) {
    const ProgramExecutor::Progress &p = w.executor->progress();
    where += ", run " + std::to_string(p.runs.load()) + ", " +
             w.executor->describeInstruction(p.instruction.load());
  }
  return where;
}

void setPhase(int64_t rank, const std::string &phase, const ProgramExecutor *executor) {
  std::lock_guard<std::mutex> lock(watched().mutex);
  watched().ranks[rank] = {phase, executor};
}

/// The stack of every thread of this process, on stderr: what a hang is
/// waiting in. Each thread is sent a signal whose handler writes its own
/// frames (module+offset, for `addr2line -f -C -e loom-run OFFSET`).
std::atomic<int> stacksWritten{0};
void writeOwnStack(int) {
  void *frames[40];
  int n = backtrace(frames, 40);
  char head[48];
  int len = std::snprintf(head, sizeof head, "-- thread %ld:\n", long(syscall(SYS_gettid)));
  if (len > 0 && ::write(2, head, size_t(len)) < 0)
    return;
  backtrace_symbols_fd(frames, n, 2);
  stacksWritten.fetch_add(1);
}
void writeAllStacks() {
  void *warm[1];
  backtrace(warm, 1); // loads the unwinder outside a signal handler
  const int signal = SIGRTMIN + 5;
  struct sigaction action = {};
  action.sa_handler = writeOwnStack;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, nullptr);
  DIR *tasks = opendir("/proc/self/task");
  if (!tasks)
    return;
  long self = long(syscall(SYS_gettid));
  while (dirent *entry = readdir(tasks)) {
    long tid = std::strtol(entry->d_name, nullptr, 10);
    if (tid <= 0 || tid == self)
      continue;
    int before = stacksWritten.load();
    if (syscall(SYS_tgkill, long(getpid()), tid, signal) != 0)
      continue;
    for (int i = 0; i < 50 && stacksWritten.load() == before; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  closedir(tasks);
}

/// Prints where every rank is once nothing has moved for --stall-timeout
/// seconds, then ends the process: a hang becomes an error that says which
/// rank waits where.
void startWatchdog() {
  if (stallTimeout == 0)
    return;
  std::thread([] {
    std::string last;
    auto since = std::chrono::steady_clock::now();
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::string now, report;
      // Loading (parameters, weights) takes as long as it takes, and once
      // every rank has finished (the trace being written) nothing moves.
      bool loading = false, unfinished = false;
      {
        std::lock_guard<std::mutex> lock(watched().mutex);
        for (auto &[rank, w] : watched().ranks) {
          loading |= w.phase == "starting" || w.phase == "loading parameters";
          unfinished |= w.phase != "finished";
          std::string where = describeWhere(w);
          now += where + "\n";
          report += "  rank " + std::to_string(rank) + ": " + where + "\n";
        }
      }
      if (now != last || loading || !unfinished) {
        last = now;
        since = std::chrono::steady_clock::now();
        continue;
      }
      if (std::chrono::steady_clock::now() - since < std::chrono::seconds(stallTimeout))
        continue;
      llvm::errs() << "loom-run: error: no progress for " << stallTimeout.getValue()
                   << " s (--stall-timeout); where each rank is:\n"
                   << report << "loom-run: the stack of each thread:\n";
      llvm::errs().flush();
      writeAllStacks();
      std::_Exit(1);
    }
  }).detach();
}

/// --trace: every rank's events, written once all ranks are done.
std::mutex traceMutex;
llvm::json::Array traceEvents;

llvm::Error writeTrace(const std::string &path) {
  if (path.empty())
    return llvm::Error::success();
  size_t kernels = 0;
  for (const llvm::json::Value &e : traceEvents)
    if (auto *o = e.getAsObject(); o && o->getString("ph") == "X")
      ++kernels;
  std::string text;
  llvm::raw_string_ostream out(text);
  out << llvm::json::Value(llvm::json::Object{{"traceEvents", std::move(traceEvents)},
                                              {"displayTimeUnit", "ms"}});
  if (llvm::Error err = loom::writeFileAtomically(path, text.data(), text.size()))
    return err;
  llvm::errs() << "loom-run: wrote " << kernels << " kernel events to " << path << "\n";
  return llvm::Error::success();
}

/// Everything one rank does: initialize, load weights, train or infer.
/// Rank 0 (`leader`) alone prints, writes outputs, metrics and checkpoints.
llvm::Error runRank(const Executable &exe, uint32_t rankIndex, Backend &backend,
                    Communicator *communicator) {
  bool leader = exe.ranks[rankIndex].rank == 0;
  auto created = ProgramExecutor::create(exe, rankIndex, backend, seed);
  if (!created)
    return created.takeError();
  std::unique_ptr<ProgramExecutor> executor = std::move(*created);
  if (leader)
    if (std::string report = backend.kernelPreparationReport(); !report.empty())
      llvm::errs() << "loom-run: " << report << "\n";
  const RankProgram &program = executor->program();
  const int64_t rankId = program.rank;
  setPhase(rankId, "loading parameters", executor.get());
  // The executor goes when this returns; so does the watchdog's view of it.
  auto forget = llvm::make_scope_exit([&] { setPhase(rankId, "finished", nullptr); });
  executor->setProfiling((leader && profile) || !tracePath.empty());
  executor->setStepCapture(stepGraph);
  auto printProfile = [&]() -> llvm::Error {
    if (!tracePath.empty()) {
      // Chrome's trace format: complete ("X") events in microseconds, one
      // process per rank, one thread per stream of its program.
      std::lock_guard<std::mutex> lock(traceMutex);
      llvm::json::Array &events = traceEvents;
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
                                            {"args", llvm::json::Object{
                                                         {"instruction", int64_t(e.instruction)},
                                                         {"step", e.run},
                                                         {"graph", e.replayed}}}});
    }
    if (!leader || !profile)
      return llvm::Error::success();
    double total = 0;
    for (const auto &k : executor->profile())
      total += k.seconds;
    llvm::errs() << "loom-run: time by kernel ("
                 << (backend.canTimestamp() ? "device timestamps on each stream"
                                             : "each waited for")
                 << "):\n";
    for (const auto &k : executor->profile())
      llvm::errs() << llvm::format("  %-24s %10.3f ms %6.1f%% %8lld calls\n", k.kernel.c_str(),
                                   k.seconds * 1e3, 100.0 * k.seconds / std::max(total, 1e-12),
                                   (long long)k.calls);
    return llvm::Error::success();
  };
  auto failure = [](const llvm::Twine &message) {
    return llvm::createStringError(std::errc::invalid_argument, message.str().c_str());
  };
  if (!weightsPath.empty()) {
    auto file = readSafetensors(weightsPath);
    if (!file)
      return file.takeError();
    std::map<std::string, std::pair<const ParameterDesc *, uint32_t>> bufferOf;
    for (const ParamBinding &binding : program.params)
      bufferOf[exe.parameters[binding.parameter].name] = {&exe.parameters[binding.parameter],
                                                          binding.buffer};
    size_t loaded = 0;
    for (HostTensor &tensor : file->tensors) {
      auto it = bufferOf.find(tensor.name);
      if (it == bufferOf.end()) {
        // In a pipeline, another rank holds it.
        bool elsewhere = false;
        for (const ParameterDesc &param : exe.parameters)
          elsewhere = elsewhere || param.name == tensor.name;
        if (elsewhere)
          continue;
        return failure("'" + weightsPath + "': tensor '" + tensor.name +
                       "' is not a parameter of this executable");
      }
      // A bf16 or f16 model trains through f32 master weights
      // (--loom-promote-masters): its own file's narrow tensors widen exactly.
      const ParameterDesc &param = *it->second.first;
      if (param.dtype == DType::F32 && (tensor.dtype == DType::BF16 || tensor.dtype == DType::F16) &&
          tensor.shape == param.shape) {
        size_t n = tensor.data.size() / 2;
        std::vector<uint8_t> wide(n * sizeof(float));
        for (size_t i = 0; i < n; ++i) {
          uint16_t bits;
          std::memcpy(&bits, tensor.data.data() + 2 * i, 2);
          float value = tensor.dtype == DType::BF16 ? bf16ToFloat(bits) : f16ToFloat(bits);
          std::memcpy(wide.data() + i * sizeof(float), &value, sizeof(float));
        }
        tensor.data = std::move(wide);
        tensor.dtype = DType::F32;
      }
      // The file holds global tensors; a sharded parameter takes its block.
      auto block = tensor.shape == it->second.first->shape
                       ? takeBlock(exe.mesh, program.rank, it->second.first->sharding, tensor)
                       : llvm::Expected<HostTensor>(tensor);
      if (!block)
        return failure("'" + weightsPath + "': tensor '" + tensor.name +
                       "': " + llvm::toString(block.takeError()));
      if (llvm::Error err = executor->writeBuffer(it->second.second, *block))
        return failure("'" + weightsPath + "': tensor '" + tensor.name + "': " +
                       llvm::toString(std::move(err)));
      ++loaded;
    }
    // Every trainable parameter (of every rank) must be in the file: one
    // left out would silently keep its initializer.
    std::set<std::string> inFile;
    for (const HostTensor &tensor : file->tensors)
      inFile.insert(tensor.name);
    std::vector<std::string> fresh;
    size_t trainable = 0;
    for (const ParameterDesc &param : exe.parameters)
      if (param.trainable) {
        ++trainable;
        if (!inFile.count(param.name) &&
            llvm::find(fresh, param.name) == fresh.end())
          fresh.push_back(param.name);
      }
    std::string freshList;
    for (size_t i = 0; i < fresh.size() && i < 8; ++i)
      freshList += (i ? ", " : "") + fresh[i];
    if (fresh.size() > 8)
      freshList += ", and " + std::to_string(fresh.size() - 8) + " more";
    if (!fresh.empty() && !allowPartialWeights)
      return failure("'" + weightsPath + "' holds " + llvm::Twine(trainable - fresh.size()) +
                     " of the executable's " + llvm::Twine(trainable) +
                     " trainable parameters; missing: " + freshList +
                     " (--allow-partial-weights starts them from their initializer)");
    if (leader) {
      llvm::errs() << "loom-run: loaded " << loaded << " tensors from " << weightsPath << "\n";
      if (!fresh.empty())
        llvm::errs() << "loom-run: --allow-partial-weights: " << fresh.size()
                     << " trainable parameters start from their initializer: "
                     << llvm::join(fresh, ", ") << "\n";
    }
  }

  // No rank starts a step before every rank has allocated and loaded. A
  // rank whose GPU already spins in a transfer would stall a peer still
  // allocating: with NCCL's peer access between GPUs of one process,
  // cudaMalloc maps new memory into the peers and waits for them.
  if (communicator && communicator->numRanks() > 1) {
    setPhase(rankId, "waiting for the other ranks to load", executor.get());
    if (llvm::Error err = communicator->barrier())
      return err;
  }
  setPhase(rankId, "running", executor.get());
  if (exe.mode == "train") {
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
    options.checkpointAsync =
        checkpointAsync.getNumOccurrences()
            ? bool(checkpointAsync)
            : llvm::StringRef(executor->backendName()).starts_with("cuda");
    options.continueAfterCheckpointFailure = onCheckpointFailure == "continue";
    if (simulateFullDisk.getNumOccurrences())
      options.simulateFullDiskAfterBytes = uint64_t(simulateFullDisk);
    options.resume = resume;
    options.overrideResumed.insert(overrideResumed.begin(), overrideResumed.end());
    options.logEvery = logEvery;
    options.stopAfter = stopAfter;
    options.onAnomaly = onAnomaly == "skip"     ? TrainingOptions::AnomalyAction::Skip
                        : onAnomaly == "rewind" ? TrainingOptions::AnomalyAction::Rewind
                                                : TrainingOptions::AnomalyAction::Stop;
    options.lossSpikeZScore = lossSpikeZScore;
    options.lossSpikeWindow = lossSpikeWindow;
    options.snapshotEvery = snapshotEvery;
    options.anomalyRetries = anomalyRetries;
    options.skipBatches = parseSkipBatches();
    options.stragglerThreshold = stragglerThreshold;
    options.stragglerWindow = stragglerWindow;
    options.injectNanAtStep = injectNanAtStep;
    std::tie(options.injectDelayRank, options.injectDelaySeconds) =
        parseRankPair(injectDelay, "--inject-delay");
    auto hang = parseRankPair(injectHang, "--inject-hang");
    options.injectHangRank = hang.first;
    options.injectHangStep = int64_t(hang.second);
    if (auto err = runTraining(exe, *executor, options, llvm::outs(), communicator))
      return err;
    if (leader && stepGraph && backend.canCapture())
      llvm::outs() << "loom-run: steps " << executor->captureStatus() << "\n";
    return printProfile();
  }

  // The inputs of all ranks, by name (a pipeline's stages take different
  // ones); positional files follow this order, rank 0's first.
  std::vector<IOBinding> allInputs, allOutputs;
  std::vector<std::string> inputTypes;
  std::map<std::string, uint32_t> outputWriter; // name -> rank that writes it
  for (const RankProgram &p : exe.ranks) {
    for (const IOBinding &b : p.inputs)
      if (llvm::none_of(allInputs, [&](const IOBinding &x) { return x.name == b.name; })) {
        allInputs.push_back(b);
        inputTypes.push_back(std::string(dtypeName(p.buffers[b.buffer].dtype)));
      }
    for (const IOBinding &b : p.outputs)
      if (outputWriter.emplace(b.name, p.rank).second)
        allOutputs.push_back(b);
  }
  if (inputs.size() != allInputs.size()) {
    std::string expected;
    for (size_t i = 0; i < allInputs.size(); ++i)
      expected += (expected.empty() ? "" : ", ") + allInputs[i].name + " (" + inputTypes[i] + ")";
    return failure("the program takes " + llvm::Twine(allInputs.size()) + " inputs (" +
                   expected + "), got " + llvm::Twine(inputs.size()) + " --input files");
  }
  std::map<std::string, std::string> inputPaths;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto [name, path] = bindingFor(inputs[i], i, allInputs, "input");
    if (llvm::none_of(allInputs, [&](const IOBinding &x) { return x.name == name; }))
      return failure("the program has no input named '" + name + "'");
    inputPaths[name] = path;
  }
  for (const IOBinding &input : program.inputs) {
    const std::string &name = input.name;
    const IOBinding *binding = &input;
    std::string path = inputPaths[name];
    const BufferDesc &buffer = program.buffers[binding->buffer];
    auto array = readNpyAs(path, buffer.dtype);
    if (!array)
      return array.takeError();
    // The file holds the global input; a sharded input takes its block.
    HostTensor value{name, buffer.dtype, array->shape, std::move(array->data)};
    if (!binding->globalShape.empty()) {
      if (value.shape != binding->globalShape)
        return failure("input '" + name + "' must be global shape " +
                       formatTensorType(buffer.dtype, binding->globalShape) + ", got " +
                       formatTensorType(buffer.dtype, value.shape));
      auto block = takeBlock(exe.mesh, program.rank, binding->sharding, value);
      if (!block)
        return block.takeError();
      value = std::move(*block);
    }
    if (auto err = executor->setInput(name, value))
      return err;
  }

  auto start = std::chrono::steady_clock::now();
  if (auto err = executor->run())
    return err;
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Each output is written by the first rank that has it (rank 0, or a
  // pipeline's last stage).
  auto writeOutput = [&](const std::string &name, const std::string &path) -> llvm::Error {
    if (outputWriter[name] != program.rank)
      return llvm::Error::success();
    auto value = executor->getOutput(name);
    if (!value)
      return value.takeError();
    NpyArray array;
    array.kind = npyRawKindFor(value->dtype);
    array.shape = value->shape;
    array.data = std::move(value->data);
    return writeNpy(path, array);
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto [name, path] = bindingFor(outputs[i], i, allOutputs, "output");
    if (!outputWriter.count(name))
      return failure("the program has no output named '" + name + "'");
    if (auto err = writeOutput(name, path))
      return err;
  }
  if (!outputDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(outputDir))
      return failure("cannot create '" + outputDir + "': " + ec.message());
    for (const IOBinding &output : program.outputs)
      if (auto err = writeOutput(output.name, outputDir + "/" + output.name + ".npy"))
        return err;
  }
  if (!leader)
    return llvm::Error::success();
  if (auto err = printProfile())
    return err;
  llvm::errs() << "loom-run: ran " << program.instructions.size() << " instructions on "
               << backend.name();
  if (exe.mesh.numRanks() > 1)
    llvm::errs() << " x " << exe.mesh.numRanks() << " ranks";
  llvm::errs() << " in " << llvm::format("%.3f", seconds * 1e3) << " ms\n";
  return llvm::Error::success();
}

/// An output file's path, checked before any work (runtime/support/UserFile.h).
void checkOutputFile(const std::string &path, const char *option) {
  if (llvm::Error err = loom::checkOutputPath(path, option))
    fail(llvm::toString(std::move(err)));
}

/// A folder loom-run will create or write into: it is a writable folder,
/// or its nearest existing ancestor is.
void checkOutputFolder(const std::string &path, const char *option) {
  if (path.empty())
    return;
  std::string existing = path;
  while (!llvm::sys::fs::exists(existing)) {
    llvm::StringRef parent = llvm::sys::path::parent_path(existing);
    existing = parent.empty() ? "." : parent.str();
  }
  if (!llvm::sys::fs::is_directory(existing))
    fail(llvm::Twine(option) + " '" + path + "': '" + existing + "' is not a directory");
  if (llvm::sys::fs::access(existing, llvm::sys::fs::AccessMode::Write))
    fail(llvm::Twine(option) + " '" + path + "': '" + existing + "' is not writable");
}

/// A number as the user would type it.
std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

/// Every flag in range and meaningful for this executable: a flag that
/// would do nothing is an error, as is one that would fail after the work.
void validateFlags(const Executable &exe) {
  bool training = exe.mode == "train";
  if (!training) {
    // Training flags on an inference executable would do nothing.
    for (auto &entry : cl::getRegisteredOptions())
      if (cl::Option *option = entry.getValue();
          option->getNumOccurrences() && llvm::is_contained(option->Categories, &trainCategory) &&
          entry.getKey() != "steps")
        fail("--" + entry.getKey() + " applies to training; '" + executablePath +
             "' is an inference executable (compiled with --mode=" + exe.mode + ")");
    return;
  }
  if (!outputDir.empty())
    fail("'" + executablePath + "' is a training executable: --output-dir applies to inference");
  if (threads < 0)
    fail("--threads must be at least 0 (0: all cores), got " + llvm::Twine(int(threads)));
  if (!std::isfinite(double(lr)) || lr <= 0)
    fail("--lr must be a positive number, got " + formatNumber(lr));
  if (lrSchedule != "constant" && lrSchedule != "cosine")
    fail("--lr-schedule must be constant or cosine, got '" + lrSchedule + "'");
  if (warmupSteps < 0)
    fail("--warmup-steps must be at least 0, got " + llvm::Twine(int64_t(warmupSteps)));
  if (!std::isfinite(double(minLrRatio)) || minLrRatio < 0 || minLrRatio > 1)
    fail("--min-lr-ratio must be between 0 and 1, got " + formatNumber(minLrRatio));
  if (minLrRatio.getNumOccurrences() && lrSchedule != "cosine")
    fail("--min-lr-ratio applies to --lr-schedule=cosine");
  if (logEvery < 1)
    fail("--log-every must be at least 1, got " + llvm::Twine(int64_t(logEvery)));
  if (stopAfter < 0)
    fail("--stop-after must be at least 0, got " + llvm::Twine(int64_t(stopAfter)));
  if (onCheckpointFailure != "stop" && onCheckpointFailure != "continue")
    fail("--on-checkpoint-failure must be stop or continue, got '" + onCheckpointFailure + "'");
  if (checkpointEvery < 0)
    fail("--checkpoint-every must be at least 0, got " + llvm::Twine(int64_t(checkpointEvery)));
  if (onAnomaly != "stop" && onAnomaly != "skip" && onAnomaly != "rewind")
    fail("--on-anomaly must be stop, skip or rewind, got '" + onAnomaly + "'");
  if (!std::isfinite(double(lossSpikeZScore)) || lossSpikeZScore < 0)
    fail("--loss-spike-zscore must be at least 0, got " + formatNumber(lossSpikeZScore));
  if (lossSpikeWindow < 2)
    fail("--loss-spike-window must be at least 2, got " + llvm::Twine(int64_t(lossSpikeWindow)));
  if (snapshotEvery < 1)
    fail("--snapshot-every must be at least 1, got " + llvm::Twine(int64_t(snapshotEvery)));
  if (anomalyRetries < 0)
    fail("--anomaly-retries must be at least 0, got " + llvm::Twine(int64_t(anomalyRetries)));
  if (onAnomaly == "stop")
    for (cl::Option *option : std::initializer_list<cl::Option *>{&snapshotEvery, &anomalyRetries})
      if (option->getNumOccurrences())
        fail("--" + option->ArgStr + " applies to --on-anomaly=skip or rewind");
  if (!std::isfinite(double(stragglerThreshold)) || stragglerThreshold < 0)
    fail("--straggler-threshold must be at least 0, got " + formatNumber(stragglerThreshold));
  if (stragglerWindow < 1)
    fail("--straggler-window must be at least 1, got " + llvm::Twine(int64_t(stragglerWindow)));
  (void)parseSkipBatches();
  (void)parseRankPair(injectDelay, "--inject-delay");
  (void)parseRankPair(injectHang, "--inject-hang");
  if (checkpointDir.empty())
    for (cl::Option *option : std::initializer_list<cl::Option *>{
             &checkpointEvery, &keepCheckpoints, &checkpointAsync, &onCheckpointFailure,
             &simulateFullDisk, &resume})
      if (option->getNumOccurrences())
        fail("--" + option->ArgStr + " needs --checkpoint-dir");
  if (!overrideResumed.empty() && !resume)
    fail("--override-resumed applies to --resume");
  for (const std::string &name : overrideResumed)
    if (!llvm::is_contained(resumableSettings(), name))
      fail("--override-resumed: unknown setting '" + name + "' (expected " +
           llvm::join(resumableSettings(), ", ") + ")");
  if (resume) {
    if (!llvm::sys::fs::exists(checkpointDir))
      fail("--resume: the checkpoint directory '" + checkpointDir + "' does not exist");
    if (!llvm::sys::fs::is_directory(checkpointDir))
      fail("--resume: '" + checkpointDir + "' is not a directory");
  }
  checkOutputFolder(checkpointDir, "--checkpoint-dir");
  checkOutputFile(metricsPath, "--metrics");
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  loom::setVersionPrinter();
  cl::HideUnrelatedOptions({&category, &trainCategory});
  cl::ParseCommandLineOptions(
      argc, argv,
      "loom-run: run a Loom executable\n\n"
      "  loom-run model.loomx --input x.npy --output y.npy\n"
      "  loom-run train.loomx --steps 100 --data tokens.u16 --metrics m.jsonl\n\n"
      "An executable of N ranks runs as N threads (one GPU each on CUDA, --devices),\n"
      "or as one rank per process when started by mpirun.\n");

  Executable exe = check(loadExecutableFile(executablePath, !noVerifyChecksum));
  startWatchdog();
  // Ranks that wait on each other through NCCL cannot let CUDA load a
  // kernel's module on its first launch: loading waits for the kernels
  // running on the device, and a receive spinning there until a peer
  // launches its send deadlocks against that peer doing the same (a
  // pipeline's ranks are never in step). Load every module up front,
  // before CUDA starts, unless the user chose otherwise.
  // NCCL likewise connects peers at initialization rather than inside the
  // first transfer, whose handshake would wait for a peer's host thread.
  if (exe.mesh.numRanks() > 1) {
    setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
    setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  }
  bool training = exe.mode == "train";
  if (training && (!inputs.empty() || !outputs.empty()))
    fail("'" + executablePath + "' is a training executable: give --steps and --data, not "
         "--input/--output");
  if (!training && steps > 0)
    fail("'" + executablePath + "' is an inference executable (compile with --mode=train to "
         "train)");
  if (training && steps <= 0)
    fail("training needs --steps N");
  validateFlags(exe);
  checkOutputFile(tracePath, "--trace");
  for (const std::string &output : outputs) {
    size_t eq = output.find('=');
    checkOutputFile(eq == std::string::npos ? output : output.substr(eq + 1), "--output");
  }
  checkOutputFolder(outputDir, "--output-dir");
  int64_t numRanks = exe.mesh.numRanks();

  if (launchedUnderMpi() && haveMpi()) {
    // One rank per process; MPI carries the collectives.
    std::unique_ptr<Communicator> communicator = check(createMpiCommunicator(exe.mesh, std::chrono::seconds(commTimeout.getValue())));
    int64_t rank = communicator->rank();
    uint32_t rankIndex = 0;
    while (rankIndex < exe.ranks.size() && exe.ranks[rankIndex].rank != rank)
      ++rankIndex;
    if (rankIndex == exe.ranks.size())
      fail("the executable has no program for rank " + llvm::Twine(rank));
    // The GPU slot: this process's rank on its node (Open MPI, Slurm, MPICH).
    const char *localRank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!localRank)
      localRank = std::getenv("SLURM_LOCALID");
    if (!localRank)
      localRank = std::getenv("MPI_LOCALRANKID");
    int64_t slot = localRank ? std::atoll(localRank) : rank;
    std::unique_ptr<Communicator> nccl; // GPUs: NCCL, bootstrapped through MPI
    llvm::Error err = [&]() -> llvm::Error {
      auto backend = backendFor(slot, threads);
      if (!backend)
        return backend.takeError();
      Communicator *deviceComm = communicator.get();
      if ((*backend)->name() != "cpu" && haveNccl()) {
        auto device = deviceFor(slot);
        if (!device)
          return device.takeError();
        auto created = createNcclCommunicator(exe.mesh, *device, *communicator,
                                              collectiveGroups(exe),
                                              pointToPointPeers(exe)[rank]);
        if (!created)
          return created.takeError();
        nccl = std::move(*created);
        deviceComm = nccl.get();
      }
      (*backend)->attachCommunicator(deviceComm);
      (*backend)->setWaitTimeout(double(commTimeout.getValue()));
      if (auto err = runRank(exe, rankIndex, **backend, communicator.get()))
        return err;
      // Each process writes its rank's trace; rank 0 the file named.
      return writeTrace(rank == 0 || tracePath.empty()
                            ? std::string(tracePath)
                            : tracePath + ".rank" + std::to_string(rank) + ".json");
    }();
    if (err) {
      std::string message = "rank " + std::to_string(rank) + ": " + llvm::toString(std::move(err));
      llvm::WithColor::error(llvm::errs(), "loom-run") << message << "\n";
      llvm::errs().flush();
      communicator->abort(message);
      return 1;
    }
    return 0;
  }

  if (numRanks == 1) {
    std::unique_ptr<Backend> backend = check(backendFor(0, threads));
    auto communicators = createThreadCommunicators(exe.mesh);
    backend->attachCommunicator(communicators[0].get());
    check(runRank(exe, 0, *backend, communicators[0].get()));
    check(writeTrace(tracePath));
    return 0;
  }

  // N ranks as N threads of this process.
  if (int64_t(exe.ranks.size()) != numRanks)
    fail("the executable's mesh has " + llvm::Twine(numRanks) + " ranks but " +
         llvm::Twine(exe.ranks.size()) + " programs");
  int perRank = threads > 0 ? int(threads)
                            : std::max(1, int(std::thread::hardware_concurrency() / numRanks));
  auto communicators =
      createThreadCommunicators(exe.mesh, std::chrono::seconds(commTimeout.getValue()));
  // On GPUs the collectives go through NCCL, one communicator per GPU; the
  // thread communicators still carry host traffic (checkpoints).
  std::vector<std::unique_ptr<Communicator>> ncclComms;
  if (usesCuda() && haveNccl()) {
    std::vector<int> gpus;
    std::vector<Communicator *> hosts;
    for (int64_t r = 0; r < numRanks; ++r) {
      gpus.push_back(check(deviceFor(r)));
      hosts.push_back(communicators[r].get());
    }
    ncclComms = check(createNcclCommunicators(exe.mesh, gpus, collectiveGroups(exe),
                                              pointToPointPeers(exe), hosts));
  }
  std::vector<std::string> errors(numRanks);
  std::vector<std::thread> workers;
  // A rank that hangs outside a collective (stuck in a kernel) never
  // returns: once a rank has failed, the others get a grace period to
  // finish (peers waiting in collectives are aborted at once), then the
  // process ends without them.
  std::mutex doneMutex;
  std::condition_variable doneChanged;
  std::vector<bool> finished(numRanks, false);
  int64_t numFinished = 0;
  bool anyFailed = false;
  for (int64_t r = 0; r < numRanks; ++r)
    workers.emplace_back([&, r] {
      uint32_t rankIndex = 0;
      while (exe.ranks[rankIndex].rank != uint32_t(r))
        ++rankIndex;
      llvm::Error err = [&]() -> llvm::Error {
        auto backend = backendFor(r, perRank);
        if (!backend)
          return backend.takeError();
        (*backend)->attachCommunicator(ncclComms.empty() ? communicators[r].get()
                                                         : ncclComms[r].get());
        (*backend)->setWaitTimeout(double(commTimeout.getValue()));
        return runRank(exe, rankIndex, **backend, communicators[r].get());
      }();
      std::string message = err ? llvm::toString(std::move(err)) : std::string();
      if (!message.empty()) {
        // On record before the abort, which may itself wait (NCCL).
        {
          std::lock_guard<std::mutex> lock(doneMutex);
          errors[r] = message;
          anyFailed = true;
          doneChanged.notify_all();
        }
        (ncclComms.empty() ? communicators[r] : ncclComms[r])->abort(message);
      }
      std::lock_guard<std::mutex> lock(doneMutex);
      finished[r] = true;
      ++numFinished;
      doneChanged.notify_all();
    });
  bool allFinished;
  {
    std::unique_lock<std::mutex> lock(doneMutex);
    doneChanged.wait(lock, [&] { return numFinished == numRanks || anyFailed; });
    doneChanged.wait_for(lock, std::chrono::seconds(5), [&] { return numFinished == numRanks; });
    allFinished = numFinished == numRanks;
  }
  if (!allFinished) {
    for (std::thread &worker : workers)
      worker.detach();
    std::lock_guard<std::mutex> lock(doneMutex);
    std::vector<std::string> lines;
    for (int64_t r = 0; r < numRanks; ++r)
      if (!errors[r].empty())
        lines.push_back("rank " + std::to_string(r) + ": " + errors[r]);
    {
      std::lock_guard<std::mutex> watch(watched().mutex);
      for (int64_t r = 0; r < numRanks; ++r) {
        if (finished[r] || !errors[r].empty())
          continue;
        auto it = watched().ranks.find(r);
        std::string where = it == watched().ranks.end() ? "starting" : describeWhere(it->second);
        lines.push_back("rank " + std::to_string(r) + ": did not finish 5 s after the failure (" +
                        where + ")");
      }
    }
    llvm::WithColor::error(llvm::errs(), "loom-run") << lines.front() << "\n";
    for (size_t i = 1; i < lines.size(); ++i)
      llvm::errs() << "loom-run: " << lines[i] << "\n";
    llvm::errs().flush();
    llvm::outs().flush();
    std::_Exit(1);
  }
  for (std::thread &worker : workers)
    worker.join();
  // The first rank that failed on its own, not because a peer aborted.
  for (bool consequences : {false, true})
    for (int64_t r = 0; r < numRanks; ++r)
      if (!errors[r].empty() &&
          (consequences || errors[r].find("aborted (rank ") == std::string::npos))
        fail("rank " + llvm::Twine(r) + ": " + errors[r]);
  check(writeTrace(tracePath));
  return 0;
}
