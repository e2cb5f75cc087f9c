#ifndef LOOM_RUNTIME_BACKENDS_PROGRAMEXECUTOR_H
#define LOOM_RUNTIME_BACKENDS_PROGRAMEXECUTOR_H

// Runs one rank's program of a loaded executable on a backend: allocates its
// arenas once, initializes parameters, and runs steps.

#include "runtime/backends/Backend.h"
#include "runtime/executable/Executable.h"
#include "runtime/support/HostTensor.h"

#include <atomic>
#include <chrono>
#include <map>
#include <optional>

namespace loom {


class ProgramExecutor {
public:
  /// Allocates the arenas and initializes every parameter: from its stored
  /// data, or from its seeded initializer (`seed` mixes with the name).
  static llvm::Expected<std::unique_ptr<ProgramExecutor>>
  create(const Executable &exe, uint32_t rank, Backend &backend, uint64_t seed);
  ~ProgramExecutor();

  const RankProgram &program() const { return program_; }
  std::string backendName() const { return backend_.name(); }
  const Backend &backend() const { return backend_; }

  /// Copies a host tensor into the named input; its dtype and shape must be
  /// the program's.
  llvm::Error setInput(const std::string &name, const HostTensor &value);
  /// Runs the instruction list once and waits for it. The memory planner lets
  /// later buffers reuse an input's bytes once it has been read, so inputs
  /// must be set again before every run.
  llvm::Error run();
  llvm::Expected<HostTensor> getOutput(const std::string &name) const;
  /// With profiling on, run() times every instruction and adds its time to
  /// its kernel's total: where a step's time goes. Backends with device
  /// timestamps (cuda) time kernels on their streams, overlaps included;
  /// others wait for each instruction and time it on the host.
  void setProfiling(bool on) { profiling_ = on; }
  /// With step capture on (and a backend that can capture), the second run
  /// records the whole instruction list once (a CUDA Graph) and every later
  /// run replays it: one launch per step instead of one per kernel. A step
  /// that cannot be captured runs eagerly, and captureStatus() says why.
  /// Profiling keeps capture where the backend has device timestamps (they
  /// are recorded in the graph); elsewhere a profiled run is eager.
  void setStepCapture(bool on) { stepCapture_ = on; }
  /// With collective timing on, a backend with device timestamps (cuda)
  /// stamps each collective on its stream, in captured steps too, and
  /// lastCollectiveSeconds() is the time the last run's collectives took on
  /// the device: waiting for peers included, which the host, which only
  /// enqueues them (NCCL), cannot see. Empty elsewhere.
  void setCollectiveTiming(bool on) { collectiveTiming_ = on; }
  std::optional<double> lastCollectiveSeconds() const { return lastCollectiveSeconds_; }
  /// Where the host thread is, for a watchdog on another thread: the runs
  /// begun, and the instruction being issued (the instruction count once a
  /// run's instructions are all issued and it waits for the device).
  struct Progress {
    std::atomic<int64_t> runs{0};
    std::atomic<int64_t> instruction{-1};
  };
  const Progress &progress() const { return progress_; }
  const std::string &captureStatus() const { return captureStatus_; }
  /// A one-line description of instruction `i` ("kernel matmul on stream 0").
  std::string describeInstruction(int64_t i) const;
  struct KernelTime {
    std::string kernel;
    double seconds = 0;
    int64_t calls = 0;
  };
  /// Totals since profiling began, largest first.
  std::vector<KernelTime> profile() const;
  /// One timed instruction of a profiled run, for --trace.
  struct TraceEvent {
    std::string name;
    uint32_t stream;
    double startSeconds, durationSeconds; // from the first profiled run's start
    uint32_t instruction;
    int64_t run;   // 1 for the first run
    bool replayed; // timed in a replay of the captured step
  };
  const std::vector<TraceEvent> &traceEvents() const { return trace_; }

  /// Reads any buffer (parameters included), for tests and checkpoints.
  llvm::Expected<HostTensor> readBuffer(uint32_t buffer) const;
  /// Starts copying `buffers` to host memory (Backend::copyToHostAsync):
  /// region i of the result is buffers[i]. The next run() may start at once:
  /// the buffers are copied in the order the step first writes them, and
  /// each first writer (the optimizer's update of a parameter, in a
  /// training step) waits only until its buffers have been read, so the
  /// step runs beside the copy. A step captured before a copy of other
  /// buffers is captured again.
  llvm::Expected<std::unique_ptr<PendingHostCopy>>
  copyBuffersToHostAsync(llvm::ArrayRef<uint32_t> buffers);
  /// Overwrites a buffer (a parameter restored from a checkpoint); dtype and
  /// shape must match. The next run() then runs the program's refresh
  /// instructions, which recompute what it derives from the parameters.
  llvm::Error writeBuffer(uint32_t buffer, const HostTensor &value);

private:
  ProgramExecutor(const Executable &exe, const RankProgram &program,
                  Backend &backend)
      : exe_(exe), program_(program), backend_(backend) {}
  llvm::Error initialize(uint64_t seed);
  llvm::Error issue();
  llvm::Error issueAndWait();
  llvm::Error replayAndWait();
  /// Adds to a timed-out wait which collective has not finished.
  llvm::Error nameUnfinishedCollective(llvm::Error err) const;
  llvm::Error collectTimes(std::chrono::steady_clock::time_point runStarted, bool replayed);
  void *address(const BufferDesc &buffer) const;
  DeviceTensor tensor(uint32_t buffer) const;

  const Executable &exe_;
  const RankProgram &program_;
  Backend &backend_;
  void *arenas_[kNumArenas] = {nullptr, nullptr, nullptr};
  bool profiling_ = false;
  bool collectiveTiming_ = false;
  std::optional<double> lastCollectiveSeconds_;
  bool stepCapture_ = false, captured_ = false;
  /// The parameters were set from outside (created, writeBuffer) since the
  /// last run: the next run also runs the refresh instructions.
  bool refreshPending_ = true;
  Progress progress_;
  bool deviceTiming_ = false;
  struct PendingTime {
    uint32_t instruction;
    unsigned begin, end; // backend timestamps
  };
  std::vector<PendingTime> pendingTimes_;
  int eagerRuns_ = 0;
  /// How copyBuffersToHostAsync copies `buffers`: in `order`, the order
  /// in which the step first writes them, with read mark k after the first
  /// readMarks[k] of them. waitMark[i] >= 0: instruction i first writes
  /// some of them and waits for that mark first.
  struct CopyPlan {
    std::vector<uint32_t> buffers;
    std::vector<size_t> order, readMarks;
    std::vector<int32_t> waitMark;
  };
  CopyPlan copyPlan_;
  void planCopy(llvm::ArrayRef<uint32_t> buffers);
  std::string captureStatus_ = "not captured";
  std::map<std::string, std::pair<double, int64_t>> kernelTimes_;
  std::vector<TraceEvent> trace_;
  std::optional<std::chrono::steady_clock::time_point> traceOrigin_;
  /// Per instruction: its kernel resolved once, when the program is readied
  /// (the kernel's id and its attributes in the form kernels read), so a
  /// launch looks nothing up by name and copies no attribute.
  struct ResolvedKernel {
    KernelId id{};
    KernelAttrs attrs;
    /// Its name in profiles and traces: the kernel's, or for a fusion group
    /// the kernel's with its members ("nn.fused{silu,mul}").
    std::string label;
  };
  std::vector<ResolvedKernel> kernels_;
};

/// The initial values of a parameter with a seeded initializer, as f64:
/// normal uses Box-Muller over a counter-based hash, so a value depends only
/// on (seed, name, index).
std::vector<double> initialValues(const ParameterDesc &param, uint64_t seed);

/// The block of `global` that `rank` holds under `sharding` (the whole
/// tensor when nothing is split).
llvm::Expected<HostTensor> takeBlock(const Mesh &mesh, int64_t rank,
                                     const Sharding &sharding, const HostTensor &global);

} // namespace loom

#endif
