#include "runtime/backends/ProgramExecutor.h"

#include "runtime/abi/FusedBody.h"
#include "runtime/support/FloatTypes.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <thread>

namespace loom {

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument, message.str().c_str());
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

double unitUniform(uint64_t key, uint64_t index) {
  // 53 random bits in (0, 1): never 0, so log() below is finite.
  uint64_t bits = cpu::splitMix64(key + cpu::splitMix64(index)) >> 11;
  return (static_cast<double>(bits) + 0.5) / 9007199254740992.0;
}

} // namespace

namespace {

/// Element i of a seeded initializer: normal uses Box-Muller over a
/// counter-based hash, so a value depends only on (key, index).
double initialValue(InitKind init, double scale, uint64_t key, int64_t i) {
  switch (init) {
  case InitKind::Ones:
    return 1.0;
  case InitKind::Uniform:
    return scale * (2.0 * unitUniform(key, i) - 1.0);
  case InitKind::Normal: {
    double u1 = unitUniform(key, 2 * i), u2 = unitUniform(key, 2 * i + 1);
    return scale * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  default:
    return 0.0;
  }
}

/// Calls fn(begin, end) over [0, n) in chunks on up to the machine's cores
/// (a billion-parameter model's initialization is seconds, not minutes).
template <typename Fn> void parallelChunks(int64_t n, Fn &&fn) {
  const int64_t minChunk = int64_t(1) << 20;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int64_t workers = std::min<int64_t>(cores, std::max<int64_t>(1, n / minChunk));
  if (workers <= 1) {
    fn(int64_t(0), n);
    return;
  }
  std::vector<std::thread> threads;
  const int64_t chunk = (n + workers - 1) / workers;
  for (int64_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] { fn(w * chunk, std::min(n, (w + 1) * chunk)); });
  for (std::thread &t : threads)
    t.join();
}

uint64_t initKey(const ParameterDesc &param, uint64_t seed) {
  return cpu::splitMix64(seed ^ fnv1a(param.name));
}

} // namespace

std::vector<double> initialValues(const ParameterDesc &param, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : param.shape)
    n *= d;
  std::vector<double> values(n, 0.0);
  const uint64_t key = initKey(param, seed);
  parallelChunks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      values[i] = initialValue(param.init, param.initScale, key, i);
  });
  return values;
}

/// The same values, stored in the parameter's dtype as they are made.
static std::vector<uint8_t> initialData(const ParameterDesc &param, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : param.shape)
    n *= d;
  std::vector<uint8_t> data(size_t(n) * dtypeSize(param.dtype), 0);
  const uint64_t key = initKey(param, seed);
  parallelChunks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      storeFromDouble(data.data(), param.dtype, i,
                      initialValue(param.init, param.initScale, key, i));
  });
  return data;
}

llvm::Expected<HostTensor> takeBlock(const Mesh &mesh, int64_t rank,
                                    const Sharding &sharding, const HostTensor &global) {
  if (isReplicated(sharding))
    return global;
  auto block = shardBlock(mesh, rank, sharding, global.shape);
  if (!block)
    return block.takeError();
  HostTensor local{global.name, global.dtype, block->shape, {}};
  int64_t count = 1;
  for (int64_t d : block->shape)
    count *= d;
  local.data.resize(count * dtypeSize(global.dtype));
  extractBlock(global.data.data(), global.shape, dtypeSize(global.dtype), *block,
               local.data.data());
  return local;
}

llvm::Expected<std::unique_ptr<ProgramExecutor>>
ProgramExecutor::create(const Executable &exe, uint32_t rank, Backend &backend,
                        uint64_t seed) {
  if (rank >= exe.ranks.size())
    return error("rank " + llvm::Twine(rank) + " does not exist (the executable has " +
                 llvm::Twine(exe.ranks.size()) + " ranks)");
  std::unique_ptr<ProgramExecutor> executor(
      new ProgramExecutor(exe, exe.ranks[rank], backend));
  if (auto err = executor->initialize(seed))
    return std::move(err);
  return executor;
}

ProgramExecutor::~ProgramExecutor() {
  for (int a = 0; a < kNumArenas; ++a)
    if (arenas_[a]) {
      if (a == static_cast<int>(ArenaKind::Host))
        backend_.deallocateHost(arenas_[a]);
      else
        backend_.deallocate(arenas_[a]);
    }
}

llvm::Error ProgramExecutor::initialize(uint64_t seed) {
  for (int a = 0; a < kNumArenas; ++a) {
    bool host = a == static_cast<int>(ArenaKind::Host);
    if (host && program_.arenaSize[a] == 0)
      continue; // no offloaded activations
    auto arena = host ? backend_.allocateHost(program_.arenaSize[a])
                      : backend_.allocate(program_.arenaSize[a]);
    if (!arena)
      return arena.takeError();
    arenas_[a] = *arena;
  }
  if (auto err = backend_.createStreams(program_.streams.size(), program_.numEvents))
    return err;
  for (const ParamBinding &binding : program_.params) {
    const ParameterDesc &param = exe_.parameters[binding.parameter];
    const BufferDesc &buffer = program_.buffers[binding.buffer];
    // The global tensor's values, then this rank's block of them, so a
    // sharded run starts from the same weights as a one-rank run.
    HostTensor global{param.name, param.dtype, param.shape, {}};
    if (param.init == InitKind::Data) {
      global.data = param.data;
    } else {
      global.data = initialData(param, seed);
    }
    auto local = takeBlock(exe_.mesh, program_.rank, param.sharding, global);
    if (!local)
      return error("parameter '" + param.name + "': " + llvm::toString(local.takeError()));
    if (local->data.size() != buffer.sizeInBytes())
      return error("parameter '" + param.name + "': its block holds " +
                   llvm::Twine(local->data.size()) + " bytes, the buffer " +
                   llvm::Twine(buffer.sizeInBytes()));
    if (auto err = backend_.copyToDevice(address(buffer), local->data.data(), local->data.size()))
      return err;
  }
  // Each kernel resolved once: its id (the executable names it once) and its
  // attributes; an unknown kernel is an error here, never at a launch.
  kernels_.resize(program_.instructions.size());
  for (size_t i = 0; i < program_.instructions.size(); ++i) {
    const Instruction &instr = program_.instructions[i];
    if (instr.kind != InstrKind::Kernel)
      continue;
    std::optional<KernelId> id = findKernel(instr.kernel);
    if (!id)
      return error("rank " + llvm::Twine(program_.rank) + ": instruction " + llvm::Twine(i) +
                   ": unknown kernel '" + instr.kernel + "'");
    kernels_[i] = {*id, KernelAttrs(instr.attrs), instr.kernel};
    // A fusion group is named by its members in profiles and traces
    // ("nn.fused{silu,mul}"), so each group's time shows apart.
    if (*id == KernelId::Fused)
      if (const AttrValue *text = kernels_[i].attrs.find("body"))
        if (const std::string *body = std::get_if<std::string>(text)) {
          llvm::Expected<FusedBody> parsed = parseFusedBody(*body);
          if (!parsed) {
            llvm::consumeError(parsed.takeError());
            continue;
          }
          std::string members;
          for (const FusedStep &step : parsed->steps) {
            std::string_view name = kernelName(step.kernel);
            name.remove_prefix(std::min(name.find('.') + 1, name.size()));
            members += (members.empty() ? "" : ",") + std::string(name);
          }
          kernels_[i].label = instr.kernel + "{" + members + "}";
        }
  }
  // Kernels that load at first use load now, not mid-step (Backend::prepareKernel).
  for (size_t i = 0; i < program_.instructions.size(); ++i) {
    const Instruction &instr = program_.instructions[i];
    if (instr.kind != InstrKind::Kernel)
      continue;
    std::vector<DeviceTensor> inputs, outputs;
    for (uint32_t b : instr.inputs)
      inputs.push_back(tensor(b));
    // Before the first step the scratch arena holds nothing (the caller
    // fills the inputs after initialize()): a kernel writing only there may
    // be readied in place.
    bool scratchOnly = true;
    for (uint32_t b : instr.outputs) {
      outputs.push_back(tensor(b));
      scratchOnly &= program_.buffers[b].arena == ArenaKind::Scratch;
    }
    if (auto err = backend_.prepareKernel(kernels_[i].id, inputs, outputs, kernels_[i].attrs,
                                          instr.stream, scratchOnly))
      return error("rank " + llvm::Twine(program_.rank) + ": preparing " + instr.kernel +
                   (instr.location.empty() ? "" : " at " + instr.location) + ": " +
                   llvm::toString(std::move(err)));
  }
  return backend_.finishPreparing();
}

void *ProgramExecutor::address(const BufferDesc &buffer) const {
  return static_cast<uint8_t *>(arenas_[static_cast<int>(buffer.arena)]) + buffer.offset;
}

DeviceTensor ProgramExecutor::tensor(uint32_t index) const {
  const BufferDesc &buffer = program_.buffers[index];
  DeviceTensor t;
  t.data = address(buffer);
  t.dtype = buffer.dtype;
  t.shape = buffer.shape;
  return t;
}

llvm::Error ProgramExecutor::setInput(const std::string &name,
                                      const HostTensor &value) {
  for (const IOBinding &input : program_.inputs) {
    if (input.name != name)
      continue;
    const BufferDesc &buffer = program_.buffers[input.buffer];
    if (value.dtype != buffer.dtype || value.shape != buffer.shape)
      return error("input '" + name + "' must be " + std::string(dtypeName(buffer.dtype)) + " " +
                   shapeString(buffer.shape) + ", got " + std::string(dtypeName(value.dtype)) +
                   " " + shapeString(value.shape));
    if (value.data.size() != buffer.sizeInBytes())
      return error("input '" + name + "' holds " + llvm::Twine(value.data.size()) +
                   " bytes, expected " + llvm::Twine(buffer.sizeInBytes()));
    return backend_.copyToDevice(address(buffer), value.data.data(), value.data.size());
  }
  return error("the program has no input named '" + name + "'");
}

std::string ProgramExecutor::describeInstruction(int64_t i) const {
  if (i < 0)
    return "not started";
  if (i >= int64_t(program_.instructions.size()))
    return "all " + std::to_string(program_.instructions.size()) +
           " instructions issued, waiting for the device";
  const Instruction &instr = program_.instructions[i];
  std::string what;
  switch (instr.kind) {
  case InstrKind::Kernel:
    what = "kernel " + instr.kernel;
    break;
  case InstrKind::Copy:
    what = "copy";
    break;
  case InstrKind::Collective:
    what = collectiveKindName(instr.collective.kind);
    if (!instr.collective.axes.empty())
      what += " over mesh axes " + llvm::join(instr.collective.axes, ",");
    break;
  case InstrKind::RecordEvent:
    what = "record event " + std::to_string(instr.event);
    break;
  case InstrKind::WaitEvent:
    what = "wait for event " + std::to_string(instr.event);
    break;
  default:
    what = "instruction";
  }
  std::string stream = instr.stream < program_.streams.size() ? program_.streams[instr.stream]
                                                              : std::to_string(instr.stream);
  return "#" + std::to_string(i) + " of " + std::to_string(program_.instructions.size()) +
         ": " + what + " on " + stream;
}

llvm::Error ProgramExecutor::run() {
  ++progress_.runs;
  // The first step after the parameters were set runs the refresh
  // instructions too, eagerly (never captured: the later steps skip them).
  if (refreshPending_) {
    ++eagerRuns_;
    if (auto err = issueAndWait())
      return err;
    refreshPending_ = false;
    return llvm::Error::success();
  }
  // A profiled step can be captured too where the backend stamps times on
  // the device: the stamps are recorded in the graph, and each replay is
  // timed as it really runs.
  // The all-to-all's row collectives read their indices on the host, which
  // a captured step cannot: such a program runs eagerly.
  if (stepCapture_ && !captured_) {
    for (const Instruction &instr : program_.instructions)
      if (instr.kind == InstrKind::Collective &&
          (instr.collective.kind == CollectiveKind::GatherRows ||
           instr.collective.kind == CollectiveKind::ScatterRows)) {
        stepCapture_ = false;
        captureStatus_ = "not captured (gather_rows and scatter_rows read their row indices on "
                         "the host); running eagerly";
        break;
      }
  }
  const bool capturing = stepCapture_ && backend_.canCapture() &&
                         (!profiling_ || backend_.canTimestamp());
  if (!capturing)
    return issueAndWait();
  if (captured_)
    return replayAndWait();
  // The first step runs eagerly: it settles what kernels cache on first use
  // (GEMM algorithm choices, kernel attributes); the second is captured.
  if (eagerRuns_++ == 0)
    return issueAndWait();
  if (auto err = backend_.beginCapture()) {
    captureStatus_ = "not captured (" + llvm::toString(std::move(err)) + ")";
    stepCapture_ = false;
    return issueAndWait();
  }
  deviceTiming_ = profiling_ || (collectiveTiming_ && backend_.canTimestamp());
  pendingTimes_.clear();
  if (deviceTiming_)
    backend_.resetTimestamps();
  llvm::Error issued = issue();
  llvm::Error ended = backend_.endCapture();
  if (issued || ended) {
    std::string why = issued ? llvm::toString(std::move(issued)) : llvm::toString(std::move(ended));
    llvm::consumeError(std::move(ended));
    captureStatus_ = "not captured (" + why + "); running eagerly";
    stepCapture_ = false;
    return issueAndWait();
  }
  captured_ = true;
  captureStatus_ = "captured as one graph";
  return replayAndWait();
}

llvm::Error ProgramExecutor::replayAndWait() {
  auto runStarted = std::chrono::steady_clock::now();
  if (auto err = backend_.replay())
    return error("rank " + llvm::Twine(program_.rank) +
                 ": replaying the captured step: " + llvm::toString(std::move(err)));
  if (auto err = backend_.synchronize())
    return nameUnfinishedCollective(std::move(err));
  return deviceTiming_ ? collectTimes(runStarted, /*replayed=*/true) : llvm::Error::success();
}

llvm::Error ProgramExecutor::issueAndWait() {
  deviceTiming_ = (profiling_ || collectiveTiming_) && backend_.canTimestamp();
  pendingTimes_.clear();
  auto runStarted = std::chrono::steady_clock::now();
  if (deviceTiming_)
    backend_.resetTimestamps();
  if (auto err = issue())
    return err;
  if (auto err = backend_.synchronize())
    return nameUnfinishedCollective(std::move(err));
  return deviceTiming_ ? collectTimes(runStarted, /*replayed=*/false) : llvm::Error::success();
}

llvm::Error ProgramExecutor::nameUnfinishedCollective(llvm::Error err) const {
  return llvm::handleErrors(std::move(err), [&](const llvm::StringError &e) -> llvm::Error {
    std::string message = e.getMessage();
    if (e.convertToErrorCode() == std::errc::timed_out) {
      // The first collective in program order whose mark the device has
      // not passed is the one the step waits in.
      std::vector<unsigned> unpassed = backend_.unpassedMarks();
      if (!unpassed.empty())
        message += "; the first unfinished collective is instruction " +
                   describeInstruction(*std::min_element(unpassed.begin(), unpassed.end()));
    }
    return llvm::createStringError(e.convertToErrorCode(), message);
  });
}

// Device timestamps: what each kernel took on its stream, overlaps between
// streams included, without waiting after every kernel.
llvm::Error ProgramExecutor::collectTimes(std::chrono::steady_clock::time_point runStarted,
                                          bool replayed) {
  if (!traceOrigin_)
    traceOrigin_ = runStarted;
  const double runOffset = std::chrono::duration<double>(runStarted - *traceOrigin_).count();
  double collectives = 0;
  for (const PendingTime &p : pendingTimes_) {
    llvm::Expected<double> begin = backend_.timestampSeconds(p.begin);
    if (!begin)
      return begin.takeError();
    llvm::Expected<double> end = backend_.timestampSeconds(p.end);
    if (!end)
      return end.takeError();
    const Instruction &instr = program_.instructions[p.instruction];
    if (instr.kind == InstrKind::Collective)
      collectives += *end - *begin;
    if (!profiling_)
      continue;
    std::string name = instr.kind == InstrKind::Kernel ? kernels_[p.instruction].label
                       : instr.kind == InstrKind::Copy
                           ? std::string("copy")
                           : collectiveKindName(instr.collective.kind);
    auto &[seconds, calls] = kernelTimes_[name];
    seconds += *end - *begin;
    ++calls;
    trace_.push_back({std::move(name), instr.stream, runOffset + *begin, *end - *begin,
                      p.instruction, progress_.runs.load(std::memory_order_relaxed), replayed});
  }
  if (collectiveTiming_)
    lastCollectiveSeconds_ = collectives;
  return llvm::Error::success();
}

llvm::Error ProgramExecutor::issue() {
  for (size_t i = 0; i < program_.instructions.size(); ++i) {
    progress_.instruction.store(int64_t(i), std::memory_order_relaxed);
    const Instruction &instr = program_.instructions[i];
    if (instr.refresh && !refreshPending_)
      continue;
    if (!copyPlan_.waitMark.empty() && copyPlan_.waitMark[i] >= 0)
      if (auto err = backend_.waitForHostCopyReads(instr.stream, unsigned(copyPlan_.waitMark[i])))
        return err;
    auto started = std::chrono::steady_clock::now();
    llvm::Error err = llvm::Error::success();
    // Profiling times every kernel, copy and collective; collective timing
    // (device timestamps only) the collectives.
    const bool timed =
        (profiling_ && (instr.kind == InstrKind::Kernel || instr.kind == InstrKind::Copy ||
                        instr.kind == InstrKind::Collective)) ||
        (collectiveTiming_ && deviceTiming_ && instr.kind == InstrKind::Collective);
    unsigned beginMark = 0;
    if (timed && deviceTiming_) {
      llvm::Expected<unsigned> mark = backend_.timestamp(instr.stream);
      if (!mark)
        return mark.takeError();
      beginMark = *mark;
    }
    switch (instr.kind) {
    case InstrKind::Kernel: {
      std::vector<DeviceTensor> inputs, outputs;
      for (uint32_t b : instr.inputs)
        inputs.push_back(tensor(b));
      for (uint32_t b : instr.outputs)
        outputs.push_back(tensor(b));
      err = backend_.launch(kernels_[i].id, inputs, outputs, kernels_[i].attrs, instr.stream);
      break;
    }
    case InstrKind::Copy:
      err = backend_.copy(address(program_.buffers[instr.outputs[0]]),
                          address(program_.buffers[instr.inputs[0]]),
                          program_.buffers[instr.inputs[0]].sizeInBytes(), instr.stream);
      break;
    case InstrKind::Collective: {
      if (instr.collective.kind == CollectiveKind::GatherRows ||
          instr.collective.kind == CollectiveKind::ScatterRows) {
        err = backend_.moveRows(instr.collective, tensor(instr.inputs[0]),
                                tensor(instr.inputs[1]), tensor(instr.inputs[2]),
                                tensor(instr.outputs[0]), instr.stream);
        break;
      }
      if (instr.collective.kind == CollectiveKind::Exchange) {
        std::vector<DeviceTensor> sends, recvs;
        for (uint32_t b : instr.inputs)
          sends.push_back(tensor(b));
        for (uint32_t b : instr.outputs)
          recvs.push_back(tensor(b));
        err = backend_.exchange(instr.collective, sends, recvs, instr.stream);
        break;
      }
      if (instr.inputs.size() > 1 || instr.outputs.size() > 1) { // a bucket
        std::vector<DeviceTensor> ins, outs;
        for (uint32_t b : instr.inputs)
          ins.push_back(tensor(b));
        for (uint32_t b : instr.outputs)
          outs.push_back(tensor(b));
        err = backend_.collectiveBucket(instr.collective, ins, outs, instr.stream);
        break;
      }
      std::optional<DeviceTensor> in, out;
      if (!instr.inputs.empty())
        in = tensor(instr.inputs[0]);
      if (!instr.outputs.empty())
        out = tensor(instr.outputs[0]);
      err = backend_.collective(instr.collective, in ? &*in : nullptr, out ? &*out : nullptr,
                                instr.stream);
      break;
    }
    case InstrKind::RecordEvent:
      err = backend_.recordEvent(instr.event, instr.stream);
      break;
    case InstrKind::WaitEvent:
      err = backend_.waitEvent(instr.event, instr.stream);
      break;
    }
    // A mark after each collective: a hung step says which one waits.
    if (!err && instr.kind == InstrKind::Collective)
      err = backend_.mark(unsigned(i), instr.stream);
    if (!err && timed && deviceTiming_) {
      llvm::Expected<unsigned> mark = backend_.timestamp(instr.stream);
      if (!mark)
        err = mark.takeError();
      else
        pendingTimes_.push_back({static_cast<uint32_t>(i), beginMark, *mark});
    } else if (!err && timed) {
      err = backend_.synchronize();
      auto finished = std::chrono::steady_clock::now();
      std::string name = instr.kind == InstrKind::Kernel ? kernels_[i].label
                         : instr.kind == InstrKind::Copy
                             ? std::string("copy")
                             : collectiveKindName(instr.collective.kind);
      auto &[seconds, calls] = kernelTimes_[name];
      double duration = std::chrono::duration<double>(finished - started).count();
      seconds += duration;
      ++calls;
      if (!traceOrigin_)
        traceOrigin_ = started;
      trace_.push_back({std::move(name), instr.stream,
                        std::chrono::duration<double>(started - *traceOrigin_).count(), duration,
                        static_cast<uint32_t>(i), progress_.runs.load(std::memory_order_relaxed),
                        false});
    }
    if (err)
      return error("rank " + llvm::Twine(program_.rank) + ", instruction " +
                   llvm::Twine(i) + " (" +
                   (instr.kind == InstrKind::Kernel       ? instr.kernel
                    : instr.kind == InstrKind::Collective ? collectiveKindName(instr.collective.kind)
                                                          : std::string("copy/event")) +
                   (instr.location.empty() ? "" : " at " + instr.location) +
                   "): " + llvm::toString(std::move(err)));
  }
  progress_.instruction.store(int64_t(program_.instructions.size()), std::memory_order_relaxed);
  return llvm::Error::success();
}

std::vector<ProgramExecutor::KernelTime> ProgramExecutor::profile() const {
  std::vector<KernelTime> out;
  for (const auto &[kernel, entry] : kernelTimes_)
    out.push_back({kernel, entry.first, entry.second});
  std::sort(out.begin(), out.end(),
            [](const KernelTime &a, const KernelTime &b) { return a.seconds > b.seconds; });
  return out;
}

llvm::Expected<HostTensor> ProgramExecutor::readBuffer(uint32_t index) const {
  if (index >= program_.buffers.size())
    return error("buffer " + llvm::Twine(index) + " out of range");
  const BufferDesc &buffer = program_.buffers[index];
  HostTensor out;
  out.name = buffer.name;
  out.dtype = buffer.dtype;
  out.shape = buffer.shape;
  out.data.resize(buffer.sizeInBytes());
  if (auto err = backend_.copyToHost(out.data.data(), address(buffer), out.data.size()))
    return std::move(err);
  return out;
}

namespace {
/// A copy made in another order than its caller's: region i is the inner
/// copy's region position[i].
class ReorderedHostCopy final : public PendingHostCopy {
public:
  ReorderedHostCopy(std::unique_ptr<PendingHostCopy> inner, std::vector<size_t> position)
      : inner_(std::move(inner)), position_(std::move(position)) {}
  llvm::Error wait() override { return inner_->wait(); }
  const uint8_t *region(size_t i) const override { return inner_->region(position_[i]); }

private:
  std::unique_ptr<PendingHostCopy> inner_;
  std::vector<size_t> position_;
};
} // namespace

void ProgramExecutor::planCopy(llvm::ArrayRef<uint32_t> buffers) {
  const size_t n = buffers.size(), never = SIZE_MAX;
  const size_t count = program_.instructions.size();
  copyPlan_ = CopyPlan();
  copyPlan_.buffers.assign(buffers.begin(), buffers.end());
  copyPlan_.waitMark.assign(count, -1);
  // The first instruction that writes each buffer. Refresh instructions
  // (the first step after a load) wait for the whole copy.
  std::vector<size_t> firstWriter(n, never);
  for (size_t i = 0; i < count; ++i) {
    const Instruction &instr = program_.instructions[i];
    if (instr.kind == InstrKind::RecordEvent || instr.kind == InstrKind::WaitEvent)
      continue;
    for (uint32_t o : instr.outputs) {
      const BufferDesc &out = program_.buffers[o];
      for (size_t j = 0; j < n; ++j) {
        const BufferDesc &copied = program_.buffers[buffers[j]];
        if (out.arena != copied.arena || out.offset >= copied.offset + copied.sizeInBytes() ||
            copied.offset >= out.offset + out.sizeInBytes())
          continue;
        if (instr.refresh)
          copyPlan_.waitMark[i] = std::numeric_limits<int32_t>::max(); // all
        else if (firstWriter[j] == never)
          firstWriter[j] = i;
      }
    }
  }
  // Copied in the order the step overwrites them; mark k follows the
  // buffers of the k-th first writer.
  copyPlan_.order.resize(n);
  std::iota(copyPlan_.order.begin(), copyPlan_.order.end(), size_t(0));
  std::stable_sort(copyPlan_.order.begin(), copyPlan_.order.end(),
                   [&](size_t a, size_t b) { return firstWriter[a] < firstWriter[b]; });
  for (size_t k = 0; k < n; ++k) {
    size_t writer = firstWriter[copyPlan_.order[k]];
    if (writer == never)
      break;
    if (k + 1 < n && firstWriter[copyPlan_.order[k + 1]] == writer)
      continue;
    copyPlan_.waitMark[writer] = int32_t(copyPlan_.readMarks.size());
    copyPlan_.readMarks.push_back(k + 1);
  }
  // The captured step has no waits for these buffers yet.
  captured_ = false;
}

llvm::Expected<std::unique_ptr<PendingHostCopy>>
ProgramExecutor::copyBuffersToHostAsync(llvm::ArrayRef<uint32_t> buffers) {
  for (uint32_t index : buffers)
    if (index >= program_.buffers.size())
      return error("buffer " + llvm::Twine(index) + " out of range");
  if (llvm::ArrayRef<uint32_t>(copyPlan_.buffers) != buffers)
    planCopy(buffers);
  std::vector<std::pair<const void *, size_t>> regions;
  std::vector<size_t> position(buffers.size());
  for (size_t k = 0; k < copyPlan_.order.size(); ++k) {
    const BufferDesc &buffer = program_.buffers[buffers[copyPlan_.order[k]]];
    regions.push_back({address(buffer), buffer.sizeInBytes()});
    position[copyPlan_.order[k]] = k;
  }
  auto copy = backend_.copyToHostAsync(regions, copyPlan_.readMarks);
  if (!copy)
    return copy.takeError();
  return std::unique_ptr<PendingHostCopy>(
      std::make_unique<ReorderedHostCopy>(std::move(*copy), std::move(position)));
}

llvm::Error ProgramExecutor::writeBuffer(uint32_t index, const HostTensor &value) {
  if (index >= program_.buffers.size())
    return error("buffer " + llvm::Twine(index) + " out of range");
  const BufferDesc &buffer = program_.buffers[index];
  if (value.dtype != buffer.dtype || value.shape != buffer.shape ||
      value.data.size() != buffer.sizeInBytes())
    return error("buffer " + llvm::Twine(index) + " (" + buffer.name + ") is " +
                 std::string(dtypeName(buffer.dtype)) + " " + shapeString(buffer.shape) +
                 ", got " + std::string(dtypeName(value.dtype)) + " " + shapeString(value.shape));
  if (buffer.arena == ArenaKind::Persistent)
    refreshPending_ = true; // state derived from the parameters is stale
  return backend_.copyToDevice(address(buffer), value.data.data(), value.data.size());
}

llvm::Expected<HostTensor> ProgramExecutor::getOutput(const std::string &name) const {
  for (const IOBinding &output : program_.outputs)
    if (output.name == name)
      return readBuffer(output.buffer);
  return error("the program has no output named '" + name + "'");
}

} // namespace loom
