#ifndef LOOM_RUNTIME_BACKENDS_BACKEND_H
#define LOOM_RUNTIME_BACKENDS_BACKEND_H

// The one interface every backend implements: memory, copies, kernel calls,
// streams and events, collectives. The CPU backend is the reference; the
// CUDA backend implements the same calls with cuBLASLt, Loom's kernels and
// CUDA streams.

#include "kernels/cpu/CpuKernels.h"
#include "runtime/abi/KernelList.h"
#include "runtime/comm/Communicator.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <string>

namespace loom {

/// A tensor in a backend's memory: a pointer in its address space.
using DeviceTensor = cpu::Tensor;
using KernelAttrs = cpu::KernelAttrs;

/// Device memory on its way to host memory (Backend::copyToHostAsync).
class PendingHostCopy {
public:
  virtual ~PendingHostCopy() = default;
  /// Waits until every region is in host memory.
  virtual llvm::Error wait() = 0;
  /// Region i's bytes, once wait() has returned.
  virtual const uint8_t *region(size_t i) const = 0;
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  /// Zero-filled memory aligned to at least 256 bytes. Arenas are allocated
  /// once per run; nothing is allocated inside a step.
  virtual llvm::Expected<void *> allocate(size_t bytes) = 0;
  virtual void deallocate(void *ptr) = 0;
  /// Host memory the device copies to and from at full speed (pinned on a
  /// GPU): the host arena of offloaded activations. Zeroed. The default is
  /// allocate(), for backends whose memory is the host's.
  virtual llvm::Expected<void *> allocateHost(size_t bytes) { return allocate(bytes); }
  virtual void deallocateHost(void *ptr) { deallocate(ptr); }

  virtual llvm::Error copyToDevice(void *dst, const void *src, size_t bytes) = 0;
  virtual llvm::Error copyToHost(void *dst, const void *src, size_t bytes) = 0;

  /// Prepares `numStreams` streams and `numEvents` events for a program.
  virtual llvm::Error createStreams(unsigned numStreams, unsigned numEvents) = 0;
  virtual llvm::Error copy(void *dst, const void *src, size_t bytes,
                           unsigned stream) = 0;
  /// Runs kernel `kernel` (resolved from its name once, when the program was
  /// readied) on `stream`.
  virtual llvm::Error launch(KernelId kernel, llvm::ArrayRef<DeviceTensor> inputs,
                             llvm::ArrayRef<DeviceTensor> outputs,
                             const KernelAttrs &attrs, unsigned stream) = 0;
  /// The same by name (tests, tools): an unknown name is an error.
  llvm::Error launch(std::string_view kernel, llvm::ArrayRef<DeviceTensor> inputs,
                     llvm::ArrayRef<DeviceTensor> outputs, const KernelAttrs &attrs,
                     unsigned stream);
  /// Runs a collective of this rank on `stream` through the attached
  /// communicator; `in`/`out` are null where the kind has none. The default
  /// stages device memory through the host and runs the communicator there
  /// (what the CPU backend does with no staging at all).
  virtual llvm::Error collective(const CollectiveDesc &desc, const DeviceTensor *in,
                                 const DeviceTensor *out, unsigned stream);
  /// Runs a bucket of collectives (Communicator::runBucket): ins[i] reduced
  /// into outs[i], all issued together. The default stages device memory
  /// through the host.
  virtual llvm::Error collectiveBucket(const CollectiveDesc &desc,
                                       llvm::ArrayRef<DeviceTensor> ins,
                                       llvm::ArrayRef<DeviceTensor> outs, unsigned stream);
  /// Runs an exchange of this rank on `stream` through the attached
  /// communicator (Communicator::exchange): sends[i] goes to group member
  /// desc.sendPeers[i], recvs[j] arrives from desc.recvPeers[j]. The default
  /// stages device memory through the host.
  virtual llvm::Error exchange(const CollectiveDesc &desc, llvm::ArrayRef<DeviceTensor> sends,
                               llvm::ArrayRef<DeviceTensor> recvs, unsigned stream);
  /// Runs a gather_rows or scatter_rows of this rank (Collective.h). A
  /// gather_rows' `out` gets, at each row its range names, that row of the
  /// members' `data`, fetched from the member holding it, and zeros
  /// elsewhere; a scatter_rows sends each row of its range to the member
  /// holding the row it names, which adds what arrives (members in group
  /// order, rows in order, f32 accumulation). Every member computes every
  /// send and receive list from `rows` and `ranges` (the same on all), so
  /// only the rows move: one exchange. The default reads the operands
  /// through the host and exchanges host copies (threads, MPI); a backend
  /// whose communicator moves device memory overrides it.
  virtual llvm::Error moveRows(const CollectiveDesc &desc, const DeviceTensor &data,
                               const DeviceTensor &rows, const DeviceTensor &ranges,
                               const DeviceTensor &out, unsigned stream);
  /// Readies `kernel` for its first launch in a step, before any step runs.
  /// On CUDA, cuBLASLt loads a GEMM's kernel at its first use, and loading
  /// waits for the GPU to go idle: mid-step, while a peer's transfer spins
  /// on this GPU waiting for this rank, that is forever; a fusion group's
  /// kernel is generated, compiled (NVRTC) and loaded at its first call. So
  /// each of them runs once here, into scratch outputs (nothing the program
  /// holds changes), or, when `outputsHoldNothing` (the caller's promise
  /// that nothing reads those bytes before they are written again: the
  /// scratch arena before the first step), into `outputs` themselves, so
  /// readying a 4 GB logits GEMM costs no 4 GB beside the arenas.
  /// finishPreparing() waits for it all and frees the scratch. The default
  /// does nothing.
  virtual llvm::Error prepareKernel(KernelId kernel, llvm::ArrayRef<DeviceTensor> inputs,
                                    llvm::ArrayRef<DeviceTensor> outputs,
                                    const KernelAttrs &attrs, unsigned stream,
                                    bool outputsHoldNothing = false) {
    return llvm::Error::success();
  }
  virtual llvm::Error finishPreparing() { return llvm::Error::success(); }
  /// One line on what readying kernels cost this process so far (the CUDA
  /// backend: fusion kernels compiled with NVRTC, read from the kernel
  /// cache), or empty when there is nothing to say.
  virtual std::string kernelPreparationReport() const { return ""; }
  /// The communicator of this backend's rank; collectives fail without one.
  void attachCommunicator(Communicator *communicator) { communicator_ = communicator; }
  Communicator *communicator() const { return communicator_; }
  /// Multi-rank runs: synchronize() gives up after this many seconds
  /// (--comm-timeout), as a collective waiting for a peer that never comes
  /// would otherwise hold it forever (0: wait forever).
  void setWaitTimeout(double seconds) { waitTimeoutSeconds_ = seconds; }

  virtual llvm::Error recordEvent(unsigned event, unsigned stream) = 0;
  virtual llvm::Error waitEvent(unsigned event, unsigned stream) = 0;
  /// Returns once all issued work is done.
  virtual llvm::Error synchronize() = 0;
  /// Starts copying `regions` (device address, bytes) to host memory, after
  /// the work issued so far, in the order given, and returns without
  /// waiting: the regions are first read into spare device memory where
  /// there is room. Work issued afterwards runs beside the copy. What
  /// overwrites a region must first call waitForHostCopyReads on its stream
  /// with a read mark k whose readMarks[k] (ascending region counts) covers
  /// the region; copyToDevice waits by itself. The default copies at once
  /// (copyToHost).
  virtual llvm::Expected<std::unique_ptr<PendingHostCopy>>
  copyToHostAsync(llvm::ArrayRef<std::pair<const void *, size_t>> regions,
                  llvm::ArrayRef<size_t> readMarks = {});
  /// Work issued on `stream` from here on waits until the latest
  /// copyToHostAsync has read the regions before its read mark `mark` (all
  /// of them, for a mark it did not have). In a captured step the wait is
  /// part of the recording and waits, at each replay, on the copy issued
  /// last. The default has nothing to wait for.
  virtual llvm::Error waitForHostCopyReads(unsigned /*stream*/, unsigned /*mark*/) {
    return llvm::Error::success();
  }

  /// Progress marks, for naming what hangs: mark(id, stream) is passed
  /// once the work issued on `stream` so far is done (in a captured step,
  /// at each replay). unpassedMarks() lists the marks whose latest record
  /// the device has not reached. The default runs everything at once and
  /// has none.
  virtual llvm::Error mark(unsigned /*id*/, unsigned /*stream*/) {
    return llvm::Error::success();
  }
  virtual std::vector<unsigned> unpassedMarks() { return {}; }

  /// Whole-step capture (CUDA Graphs). Between beginCapture() and
  /// endCapture() the work issued on the backend's streams is recorded, not
  /// run; replay() issues the recording again (then synchronize() waits for
  /// it). Buffer addresses must not change between replays, which arenas
  /// allocated once per run guarantee.
  virtual bool canCapture() const { return false; }
  virtual llvm::Error beginCapture();
  /// Ends a capture begun by beginCapture(); an error (something issued could
  /// not be captured) leaves the backend as it was before beginCapture().
  virtual llvm::Error endCapture();
  virtual llvm::Error replay();

  /// Device-side timing for profiles. timestamp() marks `stream` with a
  /// timestamp taken when the work issued on it so far is done and returns
  /// its id; after synchronize(), timestampSeconds(id) is that time in
  /// seconds since the first timestamp after resetTimestamps(). Backends
  /// without device timing return false from canTimestamp(), and profiles
  /// then wait for each kernel and time it on the host. A timestamp taken
  /// during a capture is part of the recording: each replay stamps it again,
  /// and after synchronize() timestampSeconds() reads the replay's times.
  virtual bool canTimestamp() const { return false; }
  virtual llvm::Expected<unsigned> timestamp(unsigned stream);
  virtual llvm::Expected<double> timestampSeconds(unsigned id);
  virtual void resetTimestamps() {}

  /// Device memory this backend's process holds beyond what was in use when
  /// the backend started (the CUDA context): arenas, library workspaces,
  /// kernel images loaded since, stream-ordered pools. Backends whose
  /// memory is the host's return nothing.
  virtual std::optional<uint64_t> deviceMemoryInUse() const { return std::nullopt; }
  /// What was in use on the device when the backend started (its context).
  virtual std::optional<uint64_t> deviceMemoryAtStart() const { return std::nullopt; }

protected:
  double waitTimeoutSeconds_ = 0;
  /// The exchange on the tensors' own memory, no staging: host memory (the
  /// CPU backend), or device memory that the communicator reads itself
  /// (NCCL, on `commStream`).
  /// A gather_rows' or scatter_rows' lists (moveRows): its operands
  /// checked, the streams' work waited for, rows and ranges read on the
  /// host. `sent[q]` lists the rows of data this member sends to member q
  /// (its own at q = me), `placed[q]` the rows of out what q sends lands
  /// in, in order.
  struct RowMoves {
    int64_t me = 0, members = 0;
    std::vector<std::vector<int64_t>> sent, placed;
  };
  llvm::Expected<RowMoves> planRowMoves(const CollectiveDesc &desc, const DeviceTensor &data,
                                        const DeviceTensor &rows, const DeviceTensor &ranges,
                                        const DeviceTensor &out);
  llvm::Error exchangeUnstaged(const CollectiveDesc &desc, llvm::ArrayRef<DeviceTensor> sends,
                               llvm::ArrayRef<DeviceTensor> recvs, void *commStream);

  Communicator *communicator_ = nullptr;
};

/// The reference backend. Streams run in issue order on the calling thread
/// (a valid order for any correctly synchronized program); kernels use up to
/// `numThreads` threads each, with results independent of the count.
std::unique_ptr<Backend> createCpuBackend(int numThreads);

/// The CUDA backend on GPU `device`; an error when there is none (or when
/// this build has no CUDA backend).
llvm::Expected<std::unique_ptr<Backend>> createCudaBackend(int device);

/// "cpu", "cuda", or "auto" (cuda when a GPU is usable, else cpu); an error
/// names what is unavailable.
llvm::Expected<std::unique_ptr<Backend>> createBackend(std::string_view name,
                                                       int numThreads);

} // namespace loom

#endif
