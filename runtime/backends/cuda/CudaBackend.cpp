// The CUDA backend: device arenas from cudaMalloc, one CUDA stream per named
// stream of the program, events between them, kernels from kernels/cuda and
// GEMMs through cuBLASLt.

#include "runtime/backends/Backend.h"

#include "kernels/cuda/CudaKernels.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/ScopeExit.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <string_view>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace loom {
namespace {

llvm::Error check(cudaError_t status, const char *what) { return cuda::cudaError(status, what); }

/// What one asynchronous copy to host memory uses: spare device memory
/// (when there is room), pinned host memory, a stream and two events. Kept
/// for the next copy once the previous one is done with.
struct HostCopyBuffers {
  int device = 0;
  void *spare = nullptr; // device; null: read the regions directly
  size_t spareBytes = 0;
  uint8_t *host = nullptr; // pinned
  size_t hostBytes = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t read = nullptr;
  /// The copies of the last regions (and read marks), recorded once as a
  /// graph: a later copy of the same regions is one launch.
  cudaGraphExec_t copies = nullptr;
  std::vector<std::pair<const void *, size_t>> copiedRegions;
  std::vector<size_t> copiedMarks;
  void *copiedTo = nullptr;
  bool valid() const { return stream != nullptr; }
  void release() {
    cudaSetDevice(device);
    if (stream)
      cudaStreamSynchronize(stream);
    if (copies)
      cudaGraphExecDestroy(copies);
    if (spare)
      cudaFree(spare);
    if (host)
      cudaFreeHost(host);
    if (read)
      cudaEventDestroy(read);
    if (stream)
      cudaStreamDestroy(stream);
    *this = HostCopyBuffers();
  }
};

struct HostCopyPool {
  std::mutex mutex;
  std::atomic<bool> stuck{false}; // the device hangs: release nothing

  HostCopyBuffers idle; // at most one set waits here
  ~HostCopyPool() {
    if (!stuck)
      idle.release();
  }
  HostCopyBuffers take() {
    std::lock_guard<std::mutex> lock(mutex);
    HostCopyBuffers taken = idle;
    idle = HostCopyBuffers();
    return taken;
  }
  void give(HostCopyBuffers buffers) {
    std::lock_guard<std::mutex> lock(mutex);
    if (idle.valid())
      buffers.release();
    else
      idle = buffers;
  }
};

class CudaPendingHostCopy final : public PendingHostCopy {
public:
  CudaPendingHostCopy(std::shared_ptr<HostCopyPool> pool, HostCopyBuffers buffers,
                      std::vector<size_t> offsets, size_t total)
      : pool_(std::move(pool)), buffers_(buffers), offsets_(std::move(offsets)), total_(total) {}
  ~CudaPendingHostCopy() override {
    if (pool_->stuck)
      return;
    cudaSetDevice(buffers_.device);
    cudaStreamSynchronize(buffers_.stream);
    pool_->give(buffers_);
  }
  /// With a spare, the regions are in device memory by now (or will be, in
  /// stream order): pinned memory is allocated here, off the training loop,
  /// and filled in chunks, so small transfers of the training loop (a loss
  /// read back) are not queued behind gigabytes.
  llvm::Error wait() override {
    HostCopyBuffers &b = buffers_;
    if (auto err = check(cudaSetDevice(b.device), "cudaSetDevice"))
      return err;
    if (b.spare && !issued_) {
      issued_ = true;
      if (b.hostBytes < total_) {
        if (b.host)
          cudaFreeHost(b.host);
        b.host = nullptr;
        b.hostBytes = 0;
        void *host = nullptr;
        if (auto err = check(cudaHostAlloc(&host, total_, cudaHostAllocDefault),
                             "cudaHostAlloc (copy to host)"))
          return err;
        b.host = static_cast<uint8_t *>(host);
        b.hostBytes = total_;
      }
      // One chunk at a time: the copy engine takes transfers in order, and
      // gigabytes queued at once would hold the training loop's own reads
      // (its loss, every step) for as long as they take to cross PCIe.
      constexpr size_t kChunk = size_t(32) << 20;
      for (size_t done = 0; done < total_; done += kChunk) {
        if (auto err = check(cudaMemcpyAsync(b.host + done, static_cast<uint8_t *>(b.spare) + done,
                                             std::min(kChunk, total_ - done),
                                             cudaMemcpyDeviceToHost, b.stream),
                             "cudaMemcpyAsync (copy to host)"))
          return err;
        if (auto err = check(cudaStreamSynchronize(b.stream), "cudaStreamSynchronize (copy to host)"))
          return err;
      }
    }
    return check(cudaStreamSynchronize(b.stream), "cudaStreamSynchronize (copy to host)");
  }
  const uint8_t *region(size_t i) const override { return buffers_.host + offsets_[i]; }

private:
  std::shared_ptr<HostCopyPool> pool_;
  HostCopyBuffers buffers_;
  std::vector<size_t> offsets_;
  size_t total_;
  bool issued_ = false;
};

class CudaBackend final : public Backend {
public:
  ~CudaBackend() override {
    if (stuck_) {
      // A kernel still spins on a peer that never came (a collective timed
      // out), and freeing device or pinned memory waits for the device: the
      // memory is left to the process's exit. Nothing synchronizes here.
      new std::shared_ptr<HostCopyPool>(std::move(hostCopies_));
      return;
    }
    cudaDeviceSynchronize();
    if (graphExec_)
      cudaGraphExecDestroy(graphExec_);
    for (cudaEvent_t e : captureEvents_)
      cudaEventDestroy(e);
    for (auto &set : paceMarks_)
      for (cudaEvent_t e : set)
        cudaEventDestroy(e);
    for (cudaEvent_t e : timingEvents_)
      cudaEventDestroy(e);
    for (auto [id, e] : marks_)
      cudaEventDestroy(e);
    for (cudaEvent_t e : events_)
      cudaEventDestroy(e);
    if (hostCopyRead_)
      cudaEventDestroy(hostCopyRead_);
    for (cudaEvent_t e : readMarks_)
      cudaEventDestroy(e);
    for (cudaStream_t s : streams_)
      cudaStreamDestroy(s);
    for (void *ws : workspaces_)
      if (ws && ws != context_.workspace)
        cudaFree(ws);
    if (context_.workspace)
      cudaFree(context_.workspace);
    for (unsigned *c : counters_)
      if (c)
        cudaFree(c);
    if (staging_)
      cudaFreeHost(staging_);
    if (prepareScratch_)
      cudaFree(prepareScratch_);
    if (context_.cublasLt)
      cublasLtDestroy(context_.cublasLt);
  }

  llvm::Error initialize(int device) {
    if (auto err = check(cudaSetDevice(device), "cudaSetDevice"))
      return err;
    cudaDeviceProp props;
    if (auto err = check(cudaGetDeviceProperties(&props, device), "cudaGetDeviceProperties"))
      return err;
    name_ = std::string("cuda:") + std::to_string(device) + " (" + props.name + ")";
    // The context exists from here on; what is in use now is not Loom's.
    if (auto err = check(cudaFree(nullptr), "cudaFree (context)"))
      return err;
    size_t freeBytes = 0, totalBytes = 0;
    if (cudaMemGetInfo(&freeBytes, &totalBytes) == cudaSuccess)
      memoryAtStart_ = totalBytes - freeBytes;
    context_.multiprocessors = props.multiProcessorCount;
    if (cublasLtCreate(&context_.cublasLt) != CUBLAS_STATUS_SUCCESS)
      return llvm::createStringError(std::errc::io_error, "cublasLtCreate failed");
    context_.workspaceBytes = size_t(32) << 20;
    // Kernels take their scratch from the stream-ordered pool; keeping what
    // it holds means steps after the first never reach the driver allocator.
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
      uint64_t keep = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    return check(cudaMalloc(&context_.workspace, context_.workspaceBytes), "cudaMalloc (workspace)");
  }

  std::string name() const override { return name_; }

  std::optional<uint64_t> deviceMemoryInUse() const override {
    size_t freeBytes = 0, totalBytes = 0;
    if (!memoryAtStart_ || cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess)
      return std::nullopt;
    uint64_t used = totalBytes - freeBytes;
    return used > *memoryAtStart_ ? used - *memoryAtStart_ : 0;
  }
  std::optional<uint64_t> deviceMemoryAtStart() const override { return memoryAtStart_; }

  llvm::Expected<void *> allocate(size_t bytes) override {
    void *ptr = nullptr;
    size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    if (auto err = check(cudaMalloc(&ptr, rounded), "cudaMalloc"))
      return std::move(err);
    if (auto err = check(cudaMemset(ptr, 0, rounded), "cudaMemset")) {
      cudaFree(ptr);
      return std::move(err);
    }
    return ptr;
  }
  void deallocate(void *ptr) override {
    if (!stuck_) // see ~CudaBackend
      cudaFree(ptr);
  }
  llvm::Expected<void *> allocateHost(size_t bytes) override {
    void *ptr = nullptr;
    if (auto err = check(cudaHostAlloc(&ptr, std::max<size_t>(bytes, 1), cudaHostAllocDefault),
                         "cudaHostAlloc (host arena)"))
      return std::move(err);
    std::memset(ptr, 0, bytes);
    return ptr;
  }
  void deallocateHost(void *ptr) override {
    if (!stuck_)
      cudaFreeHost(ptr);
  }

  // Host memory the caller owns is pageable; the copies go through a pinned
  // staging buffer, in chunks, so the DMA engines run at full speed.
  llvm::Error copyToDevice(void *dst, const void *src, size_t bytes) override {
    // A snapshot may still be reading what this overwrites (a restore).
    if (hostCopyRead_)
      if (auto err = check(cudaEventSynchronize(hostCopyRead_), "cudaEventSynchronize"))
        return err;
    return stagedCopy(dst, src, bytes, /*toDevice=*/true);
  }
  llvm::Error copyToHost(void *dst, const void *src, size_t bytes) override {
    return stagedCopy(dst, src, bytes, /*toDevice=*/false);
  }

  llvm::Error createStreams(unsigned numStreams, unsigned numEvents) override {
    while (streams_.size() < numStreams) {
      cudaStream_t s;
      if (auto err = check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                           "cudaStreamCreate"))
        return err;
      streams_.push_back(s);
    }
    while (events_.size() < numEvents) {
      cudaEvent_t e;
      if (auto err = check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                           "cudaEventCreate"))
        return err;
      events_.push_back(e);
    }
    numStreams_ = numStreams;
    numEvents_ = numEvents;
    if (!hostCopyRead_ && !streams_.empty()) {
      // Recorded once here, so that a step captured before any snapshot
      // waits on a completed event.
      if (auto err = check(cudaEventCreateWithFlags(&hostCopyRead_, cudaEventDisableTiming),
                           "cudaEventCreate"))
        return err;
      if (auto err = check(cudaEventRecord(hostCopyRead_, streams_[0]), "cudaEventRecord"))
        return err;
    }
    return llvm::Error::success();
  }

  llvm::Error copy(void *dst, const void *src, size_t bytes, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    // Device to device, or to and from the host arena's pinned memory
    // (offloaded activations): the addresses say which.
    if (auto err = check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, streams_[stream]),
                         "cudaMemcpyAsync"))
      return err;
    return pace();
  }

  using Backend::launch;
  llvm::Error launch(KernelId kernel, llvm::ArrayRef<DeviceTensor> inputs,
                     llvm::ArrayRef<DeviceTensor> outputs, const KernelAttrs &attrs,
                     unsigned stream) override {
    auto ctx = contextFor(stream);
    if (!ctx)
      return ctx.takeError();
    if (auto err = cuda::launchKernel(kernel, inputs, outputs, attrs, *ctx))
      return err;
    return pace();
  }

  llvm::Error prepareKernel(KernelId kernel, llvm::ArrayRef<DeviceTensor> inputs,
                            llvm::ArrayRef<DeviceTensor> outputs, const KernelAttrs &attrs,
                            unsigned stream, bool outputsHoldNothing) override {
    // Every stream that launches kernels gets its cuBLASLt workspace here,
    // before any step (no allocation mid-step or while capturing).
    auto ctx = contextFor(stream);
    if (!ctx)
      return ctx.takeError();
    // cuBLASLt's GEMMs load at first use (see Backend::prepareKernel).
    if (!cuda::loadsAtFirstUse(kernel))
      return llvm::Error::success();
    if (outputsHoldNothing)
      return cuda::launchKernel(kernel, inputs, outputs, attrs, *ctx);
    size_t bytes = 0;
    for (const DeviceTensor &t : outputs)
      bytes += (t.sizeInBytes() + 255) / 256 * 256;
    if (bytes > prepareBytes_) {
      if (prepareScratch_) {
        if (auto err = check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))
          return err;
        cudaFree(prepareScratch_);
        prepareScratch_ = nullptr;
        prepareBytes_ = 0;
      }
      if (auto err = check(cudaMalloc(&prepareScratch_, bytes), "cudaMalloc (kernel warm-up)"))
        return err;
      prepareBytes_ = bytes;
    }
    std::vector<DeviceTensor> scratch(outputs.begin(), outputs.end());
    size_t offset = 0;
    for (DeviceTensor &t : scratch) {
      t.data = static_cast<char *>(prepareScratch_) + offset;
      offset += (t.sizeInBytes() + 255) / 256 * 256;
    }
    return cuda::launchKernel(kernel, inputs, scratch, attrs, *ctx);
  }
  llvm::Error finishPreparing() override {
    llvm::Error err = check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (kernel warm-up)");
    if (prepareScratch_)
      cudaFree(prepareScratch_);
    prepareScratch_ = nullptr;
    prepareBytes_ = 0;
    return err;
  }

  std::string kernelPreparationReport() const override {
    cuda::FusedKernelStats stats = cuda::fusedKernelStats();
    if (stats.compiled + stats.diskHits == 0)
      return "";
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.2f", stats.compileSeconds);
    std::string dir = cuda::fusedKernelCacheDirectory();
    return "fused kernels: " + std::to_string(stats.compiled) + " compiled with NVRTC (" +
           seconds + " s), " + std::to_string(stats.diskHits) + " read from the kernel cache (" +
           (dir.empty() ? std::string("off") : dir) + ")";
  }

  /// NCCL runs on the instruction's stream; other communicators (threads,
  /// MPI) stage through host memory (Backend::collective).
  llvm::Error collective(const CollectiveDesc &desc, const DeviceTensor *in,
                         const DeviceTensor *out, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    if (!communicator_ || communicator_->name() != "nccl")
      return Backend::collective(desc, in, out, stream);
    CollectiveOperands operands;
    operands.dtype = in ? in->dtype : out->dtype;
    if (in) {
      operands.in = in->data;
      operands.inShape = in->shape;
    }
    if (out) {
      operands.out = out->data;
      operands.outShape = out->shape;
    }
    operands.stream = streams_[stream];
    if (auto err = communicator_->run(desc, operands))
      return err;
    return pace();
  }

  /// Like collective(): NCCL reduces the bucket's tensors where they are, in
  /// one NCCL group on the instruction's stream.
  llvm::Error collectiveBucket(const CollectiveDesc &desc, llvm::ArrayRef<DeviceTensor> ins,
                               llvm::ArrayRef<DeviceTensor> outs, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    if (!communicator_ || communicator_->name() != "nccl" || ins.size() != outs.size())
      return Backend::collectiveBucket(desc, ins, outs, stream);
    std::vector<CollectiveOperands> operands(ins.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      CollectiveOperands &o = operands[i];
      o.dtype = ins[i].dtype;
      o.in = ins[i].data;
      o.inShape = ins[i].shape;
      o.out = outs[i].data;
      o.outShape = outs[i].shape;
      o.stream = streams_[stream];
    }
    if (auto err = communicator_->runBucket(desc, operands))
      return err;
    return pace();
  }

  /// Like collective(): NCCL moves device memory on the instruction's stream
  /// (one NCCL group, nothing synchronized, so it can be captured); other
  /// communicators stage through host memory.
  llvm::Error exchange(const CollectiveDesc &desc, llvm::ArrayRef<DeviceTensor> sends,
                       llvm::ArrayRef<DeviceTensor> recvs, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    if (!communicator_ || communicator_->name() != "nccl")
      return Backend::exchange(desc, sends, recvs, stream);
    if (auto err = exchangeUnstaged(desc, sends, recvs, streams_[stream]))
      return err;
    return pace();
  }

  /// With a host communicator, through host memory (Backend::moveRows).
  /// Over NCCL the send and receive lists come from the rows' indices,
  /// read on the host: the step waits for its streams here (so a program
  /// with these collectives is never captured), then packs the rows to
  /// send with a gather, exchanges them (one NCCL group), and places or
  /// adds what arrived with one scatter-add (nn.gather_grad: a row a
  /// position for gather_rows; members in group order, rows in order, for
  /// scatter_rows). The transfer buffers are allocated per call.
  llvm::Error moveRows(const CollectiveDesc &desc, const DeviceTensor &data,
                       const DeviceTensor &rows, const DeviceTensor &ranges,
                       const DeviceTensor &out, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    if (!communicator_ || communicator_->name() != "nccl")
      return Backend::moveRows(desc, data, rows, ranges, out, stream);
    auto moves = planRowMoves(desc, data, rows, ranges, out);
    if (!moves)
      return moves.takeError();
    const int64_t me = moves->me, members = moves->members;
    const std::vector<std::vector<int64_t>> &sent = moves->sent, &placed = moves->placed;
    // Rows of data to send (peers in order, this member's own first: they
    // land in its own slot of the received rows) and positions of out.
    std::vector<int64_t> sendRows(sent[me].begin(), sent[me].end()), positions;
    for (int64_t q = 0; q < members; ++q)
      if (q != me)
        sendRows.insert(sendRows.end(), sent[q].begin(), sent[q].end());
    std::vector<int64_t> slot(members + 1, 0); // received rows' offsets, by member
    for (int64_t q = 0; q < members; ++q) {
      slot[q + 1] = slot[q] + static_cast<int64_t>(placed[q].size());
      positions.insert(positions.end(), placed[q].begin(), placed[q].end());
    }
    const int64_t rowElements = data.shape[0] > 0 ? data.numElements() / data.shape[0] : 0;
    const size_t rowBytes = rowElements * dtypeSize(data.dtype);
    auto rowShape = [&](int64_t count) {
      std::vector<int64_t> shape = data.shape;
      shape[0] = count;
      return shape;
    };
    // Scratch: the rows to send, the rows received, and the two index lists.
    const int64_t sendCount = static_cast<int64_t>(sendRows.size()),
                  recvCount = slot[members];
    std::vector<void *> scratch;
    auto release = llvm::make_scope_exit([&] {
      for (void *p : scratch)
        cudaFree(p);
    });
    auto alloc = [&](size_t bytes) -> llvm::Expected<void *> {
      void *p = nullptr;
      if (auto err = check(cudaMalloc(&p, std::max<size_t>(bytes, 256)), "cudaMalloc (rows)"))
        return std::move(err);
      scratch.push_back(p);
      return p;
    };
    auto upload = [&](const std::vector<int64_t> &values) -> llvm::Expected<DeviceTensor> {
      auto p = alloc(values.size() * 8);
      if (!p)
        return p.takeError();
      if (auto err = copyToDevice(*p, values.data(), values.size() * 8))
        return std::move(err);
      return DeviceTensor{*p, DType::I64, {static_cast<int64_t>(values.size())}};
    };
    auto sendBuffer = alloc(sendCount * rowBytes), recvBuffer = alloc(recvCount * rowBytes);
    if (!sendBuffer)
      return sendBuffer.takeError();
    if (!recvBuffer)
      return recvBuffer.takeError();
    auto sendIndex = upload(sendRows);
    if (!sendIndex)
      return sendIndex.takeError();
    auto positionIndex = upload(positions);
    if (!positionIndex)
      return positionIndex.takeError();
    KernelAttrs axis0;
    axis0.set("axis", int64_t(0));
    if (sendCount > 0 && rowBytes > 0)
      if (auto err = launch(KernelId::Gather, {data, *sendIndex},
                            {DeviceTensor{*sendBuffer, data.dtype, rowShape(sendCount)}}, axis0,
                            stream))
        return err;
    // This member's own rows: from the send buffer's head to its slot.
    const size_t own = sent[me].size() * rowBytes;
    if (own > 0)
      if (auto err = check(cudaMemcpyAsync(static_cast<char *>(*recvBuffer) + slot[me] * rowBytes,
                                           *sendBuffer, own, cudaMemcpyDeviceToDevice,
                                           streams_[stream]),
                           "cudaMemcpyAsync (own rows)"))
        return err;
    CollectiveDesc exchange;
    exchange.kind = CollectiveKind::Exchange;
    exchange.axes = desc.axes;
    std::vector<DeviceTensor> sends, recvs;
    int64_t offset = static_cast<int64_t>(sent[me].size());
    for (int64_t q = 0; q < members; ++q) {
      if (q == me)
        continue;
      if (!sent[q].empty()) {
        const int64_t n = static_cast<int64_t>(sent[q].size());
        sends.push_back({static_cast<char *>(*sendBuffer) + offset * rowBytes, data.dtype,
                         rowShape(n)});
        exchange.sendPeers.push_back(q);
        offset += n;
      }
      if (!placed[q].empty()) {
        recvs.push_back({static_cast<char *>(*recvBuffer) + slot[q] * rowBytes, data.dtype,
                         rowShape(slot[q + 1] - slot[q])});
        exchange.recvPeers.push_back(q);
      }
    }
    if (rowBytes > 0 && (!sends.empty() || !recvs.empty()))
      if (auto err = exchangeUnstaged(exchange, sends, recvs, streams_[stream]))
        return err;
    // Placed (gather) or added (scatter), in the received order.
    KernelAttrs place;
    place.set("axis", int64_t(0));
    place.set("axis_size", out.shape[0]);
    if (auto err = launch(KernelId::GatherGrad,
                          {*positionIndex, DeviceTensor{*recvBuffer, data.dtype, rowShape(recvCount)}},
                          {out}, place, stream))
      return err;
    return synchronize(); // the scratch is freed on return
  }

  llvm::Error recordEvent(unsigned event, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    if (event >= numEvents_)
      return llvm::createStringError(std::errc::invalid_argument, "event %u out of range", event);
    return check(cudaEventRecord(events_[event], streams_[stream]), "cudaEventRecord");
  }
  llvm::Error waitEvent(unsigned event, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    if (event >= numEvents_)
      return llvm::createStringError(std::errc::invalid_argument, "event %u out of range", event);
    return check(cudaStreamWaitEvent(streams_[stream], events_[event], 0), "cudaStreamWaitEvent");
  }
  /// Waits for the program's streams, not the whole device: a copy to host
  /// memory in flight on its own stream (copyToHostAsync) goes on. In a
  /// multi-rank run a collective whose peer never comes spins on the GPU
  /// forever, so the streams are polled until the deadline (--comm-timeout)
  /// instead; the caller then aborts the communicator, which ends the
  /// spinning kernels.
  /// Polls `query` (cudaStreamQuery, cudaEventQuery) until the work is
  /// done, within --comm-timeout of `start`. Past it, the backend never
  /// waits for the device again (~CudaBackend), and the error says which
  /// work (`where`) never finished.
  llvm::Error pollUntilDone(llvm::function_ref<cudaError_t()> query,
                            std::chrono::steady_clock::time_point start, const char *what,
                            const std::string &where) {
    while (true) {
      cudaError_t state = query();
      if (state != cudaErrorNotReady)
        return check(state, what);
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
          waitTimeoutSeconds_) {
        markStuck();
        return llvm::createStringError(
            std::errc::timed_out,
            "the GPU's work%s did not finish within %.0f s (--comm-timeout): a collective on "
            "it waits for a peer that never came",
            where.c_str(), waitTimeoutSeconds_);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  llvm::Error syncStreams(const char *what) {
    if (waitTimeoutSeconds_ <= 0 || !communicator()) {
      for (unsigned s = 0; s < numStreams_; ++s)
        if (auto err = check(cudaStreamSynchronize(streams_[s]), what))
          return err;
      return check(cudaGetLastError(), what);
    }
    auto start = std::chrono::steady_clock::now();
    for (unsigned s = 0; s < numStreams_; ++s)
      if (auto err = pollUntilDone([&] { return cudaStreamQuery(streams_[s]); }, start, what,
                                   " (stream " + std::to_string(s) + ")"))
        return err;
    return check(cudaGetLastError(), what);
  }

  llvm::Error synchronize() override {
    return syncStreams("cudaStreamSynchronize (a kernel failed)");
  }

  /// Waits for `e`, within --comm-timeout in a multi-rank run (syncStreams).
  llvm::Error waitEvent(cudaEvent_t e, const char *what) {
    if (waitTimeoutSeconds_ <= 0 || !communicator())
      return check(cudaEventSynchronize(e), what);
    return pollUntilDone([&] { return cudaEventQuery(e); }, std::chrono::steady_clock::now(),
                         what, "");
  }

  llvm::Error waitForHostCopyReads(unsigned stream, unsigned mark) override {
    if (auto err = checkStream(stream))
      return err;
    // Marks are made by copies, all before the step is captured; one that
    // no copy has made yet waits for the latest copy as a whole.
    cudaEvent_t e = mark < readMarks_.size() ? readMarks_[mark] : hostCopyRead_;
    // In a captured step, an external wait: each replay waits on the
    // event's latest record, the latest copy's.
    return check(cudaStreamWaitEvent(streams_[stream], e, capturing_ ? cudaEventWaitExternal : 0),
                 "cudaStreamWaitEvent (snapshot reads)");
  }

  llvm::Expected<std::unique_ptr<PendingHostCopy>>
  copyToHostAsync(llvm::ArrayRef<std::pair<const void *, size_t>> regions,
                  llvm::ArrayRef<size_t> readMarks) override;

  bool canCapture() const override { return numStreams_ > 0; }

  // Capture starts on stream 0; the other streams join it through a fork
  // event and rejoin it before the capture ends, so the graph holds the
  // program's cross-stream events as edges.
  llvm::Error beginCapture() override {
    if (numStreams_ == 0)
      return llvm::createStringError(std::errc::invalid_argument, "no streams to capture");
    while (captureEvents_.size() < numStreams_) {
      cudaEvent_t e;
      if (auto err = check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                           "cudaEventCreate"))
        return err;
      captureEvents_.push_back(e);
    }
    if (auto err = check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))
      return err;
    if (auto err = check(cudaStreamBeginCapture(streams_[0], cudaStreamCaptureModeThreadLocal),
                         "cudaStreamBeginCapture"))
      return err;
    capturing_ = true;
    if (auto err = check(cudaEventRecord(captureEvents_[0], streams_[0]), "cudaEventRecord"))
      return abandonCapture(std::move(err));
    for (unsigned s = 1; s < numStreams_; ++s)
      if (auto err = check(cudaStreamWaitEvent(streams_[s], captureEvents_[0], 0),
                           "cudaStreamWaitEvent"))
        return abandonCapture(std::move(err));
    return llvm::Error::success();
  }

  llvm::Error endCapture() override {
    for (unsigned s = 1; s < numStreams_; ++s) {
      if (auto err = check(cudaEventRecord(captureEvents_[s], streams_[s]), "cudaEventRecord"))
        return abandonCapture(std::move(err));
      if (auto err = check(cudaStreamWaitEvent(streams_[0], captureEvents_[s], 0),
                           "cudaStreamWaitEvent"))
        return abandonCapture(std::move(err));
    }
    cudaGraph_t graph = nullptr;
    capturing_ = false;
    if (auto err = check(cudaStreamEndCapture(streams_[0], &graph), "cudaStreamEndCapture")) {
      if (graph)
        cudaGraphDestroy(graph);
      cudaGetLastError();
      return err;
    }
    if (graphExec_) {
      cudaGraphExecDestroy(graphExec_);
      graphExec_ = nullptr;
    }
    llvm::Error err = check(cudaGraphInstantiate(&graphExec_, graph, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(graph);
    if (err)
      graphExec_ = nullptr;
    return err;
  }

  llvm::Error replay() override {
    if (!graphExec_)
      return llvm::createStringError(std::errc::invalid_argument, "no captured step to replay");
    return check(cudaGraphLaunch(graphExec_, streams_[0]), "cudaGraphLaunch");
  }

  llvm::Error mark(unsigned id, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    cudaEvent_t &e = marks_[id];
    if (!e)
      if (auto err = check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                           "cudaEventCreate (mark)"))
        return err;
    return check(capturing_ ? cudaEventRecordWithFlags(e, streams_[stream], cudaEventRecordExternal)
                            : cudaEventRecord(e, streams_[stream]),
                 "cudaEventRecord (mark)");
  }
  std::vector<unsigned> unpassedMarks() override {
    std::vector<unsigned> out;
    for (auto [id, e] : marks_)
      if (cudaEventQuery(e) == cudaErrorNotReady)
        out.push_back(id);
    cudaGetLastError();
    return out;
  }

  bool canTimestamp() const override { return true; }
  llvm::Expected<unsigned> timestamp(unsigned stream) override {
    if (auto err = checkStream(stream))
      return std::move(err);
    if (nextTimestamp_ == timingEvents_.size()) {
      cudaEvent_t e;
      if (auto err = check(cudaEventCreate(&e), "cudaEventCreate (timing)"))
        return std::move(err);
      timingEvents_.push_back(e);
    }
    // In a capture the record becomes a node of the graph (an external
    // event), so every replay stamps it again: a replayed step is timed
    // as it runs, without the gaps of issuing kernels one by one.
    cudaError_t recorded =
        capturing_ ? cudaEventRecordWithFlags(timingEvents_[nextTimestamp_], streams_[stream],
                                              cudaEventRecordExternal)
                   : cudaEventRecord(timingEvents_[nextTimestamp_], streams_[stream]);
    if (auto err = check(recorded, "cudaEventRecord (timing)"))
      return std::move(err);
    return nextTimestamp_++;
  }
  llvm::Expected<double> timestampSeconds(unsigned id) override {
    if (id >= nextTimestamp_)
      return llvm::createStringError(std::errc::invalid_argument, "no timestamp %u", id);
    float ms = 0;
    if (auto err = check(cudaEventElapsedTime(&ms, timingEvents_[0], timingEvents_[id]),
                         "cudaEventElapsedTime"))
      return std::move(err);
    return ms * 1e-3;
  }
  void resetTimestamps() override { nextTimestamp_ = 0; }

private:
  /// Ends a capture that went wrong, discarding what it recorded.
  llvm::Error abandonCapture(llvm::Error err) {
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(streams_[0], &graph);
    if (graph)
      cudaGraphDestroy(graph);
    cudaGetLastError();
    return err;
  }

  static constexpr size_t kStagingBytes = size_t(64) << 20;

  llvm::Error stagedCopy(void *dst, const void *src, size_t bytes, bool toDevice) {
    // Work already issued on the program's streams may read or write these
    // bytes (or, before the streams exist, on the default stream, which the
    // copies below follow).
    if (auto err = syncStreams("cudaStreamSynchronize"))
      return err;
    if (!staging_) {
      if (auto err = check(cudaHostAlloc(&staging_, kStagingBytes, cudaHostAllocDefault),
                           "cudaHostAlloc (staging)"))
        return err;
    }
    for (size_t done = 0; done < bytes;) {
      size_t chunk = std::min(kStagingBytes, bytes - done);
      if (toDevice) {
        std::memcpy(staging_, static_cast<const char *>(src) + done, chunk);
        if (auto err = check(cudaMemcpy(static_cast<char *>(dst) + done, staging_, chunk,
                                        cudaMemcpyHostToDevice),
                             "cudaMemcpy to device"))
          return err;
      } else {
        if (auto err = check(cudaMemcpy(staging_, static_cast<const char *>(src) + done, chunk,
                                        cudaMemcpyDeviceToHost),
                             "cudaMemcpy to host"))
          return err;
        std::memcpy(static_cast<char *>(dst) + done, staging_, chunk);
      }
      done += chunk;
    }
    return llvm::Error::success();
  }

  /// Keeps this rank's host thread at most about `launchAhead_` launches
  /// ahead of its GPU when ranks are threads of one process. CUDA queues the
  /// launches of all of a process's GPUs together: a rank whose GPU waits on
  /// a peer's transfer (a pipeline's receive) and whose thread keeps
  /// launching fills that queue, and the peer's thread then blocks in its
  /// launch before it reaches the send: both ranks hang. Every
  /// launchAhead_/4 launches this records a mark on each stream and waits
  /// for the mark recorded four periods earlier. Waiting for this rank's
  /// own earlier work cannot deadlock a program that runs with each
  /// instruction waited for. LOOM_LAUNCH_AHEAD sets the bound (0: none).
  llvm::Error pace() {
    if (launchAhead_ == 0 || capturing_ || !communicator_ || communicator_->numRanks() < 2 ||
        communicator_->name() != "nccl")
      return llvm::Error::success();
    if (++launched_ % std::max(1u, launchAhead_ / kPaceMarks) != 0)
      return llvm::Error::success();
    std::vector<cudaEvent_t> &marks = paceMarks_[paceNext_ % kPaceMarks];
    for (cudaEvent_t e : marks)
      if (auto err = waitEvent(e, "cudaEventSynchronize (launch pacing)"))
        return err;
    while (marks.size() < numStreams_) {
      cudaEvent_t e;
      if (auto err = check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                           "cudaEventCreate"))
        return err;
      marks.push_back(e);
    }
    for (unsigned s = 0; s < numStreams_; ++s)
      if (auto err = check(cudaEventRecord(marks[s], streams_[s]), "cudaEventRecord"))
        return err;
    ++paceNext_;
    return llvm::Error::success();
  }

  static unsigned launchAheadFromEnvironment() {
    const char *text = std::getenv("LOOM_LAUNCH_AHEAD");
    return text ? unsigned(std::strtoul(text, nullptr, 10)) : 256;
  }

  llvm::Error checkStream(unsigned stream) const {
    if (stream >= numStreams_)
      return llvm::createStringError(std::errc::invalid_argument,
                                     "cuda backend: stream %u out of range (%u streams)", stream,
                                     numStreams_);
    return llvm::Error::success();
  }

  std::string name_;
  std::optional<uint64_t> memoryAtStart_;
  cuda::LaunchContext context_;
  /// cuBLASLt's workspace per stream (null: none yet). Two GEMMs on
  /// different streams may run at once (OVERLAP_F_B puts a backward on
  /// compute_b beside a forward on compute), and cuBLASLt's split-K and
  /// stream-K algorithms keep partial sums in the workspace: sharing one
  /// corrupts both results. The first stream that launches takes
  /// context_.workspace; another gets its own, at its first launch (the
  /// eager step before any capture, or initialize's kernel warm-up).
  std::vector<void *> workspaces_;
  /// Each stream's LaunchContext::counters (null: none yet).
  std::vector<unsigned *> counters_;

  llvm::Expected<cuda::LaunchContext> contextFor(unsigned stream) {
    if (auto err = checkStream(stream))
      return std::move(err);
    if (workspaces_.size() < numStreams_)
      workspaces_.resize(numStreams_, nullptr);
    if (counters_.size() < numStreams_)
      counters_.resize(numStreams_, nullptr);
    unsigned *&counters = counters_[stream];
    if (!counters) {
      // Zeroed once, on the stream itself (ahead of its first kernel, and
      // never touching another stream's capture); every kernel that uses
      // them leaves them zero.
      const size_t bytes = cuda::kCounterWords * sizeof(unsigned);
      if (auto err = check(cudaMalloc(reinterpret_cast<void **>(&counters), bytes),
                           "cudaMalloc (counters)"))
        return std::move(err);
      if (auto err = check(cudaMemsetAsync(counters, 0, bytes, streams_[stream]),
                           "cudaMemsetAsync (counters)"))
        return std::move(err);
    }
    void *&ws = workspaces_[stream];
    if (!ws) {
      bool taken = llvm::is_contained(workspaces_, context_.workspace);
      if (!taken)
        ws = context_.workspace;
      else if (auto err = check(cudaMalloc(&ws, context_.workspaceBytes),
                                "cudaMalloc (cuBLASLt workspace of a second stream)"))
        return std::move(err);
    }
    cuda::LaunchContext ctx = context_;
    ctx.stream = streams_[stream];
    ctx.workspace = ws;
    ctx.counters = counters;
    return ctx;
  }
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> events_;
  unsigned numStreams_ = 0, numEvents_ = 0;
  void *staging_ = nullptr;
  std::shared_ptr<HostCopyPool> hostCopies_ = std::make_shared<HostCopyPool>();
  /// The device's work did not finish within the wait timeout: nothing may
  /// wait for the device again (~CudaBackend).
  bool stuck_ = false;
  void markStuck() {
    stuck_ = true;
    hostCopies_->stuck = true;
  }
  /// Recorded once the latest copyToHostAsync has read its regions, and
  /// once it has read the regions before each of its read marks.
  cudaEvent_t hostCopyRead_ = nullptr;
  std::vector<cudaEvent_t> readMarks_;
  std::vector<cudaEvent_t> captureEvents_; // [0] forks, [s] joins stream s
  cudaGraphExec_t graphExec_ = nullptr;
  std::vector<cudaEvent_t> timingEvents_;
  std::map<unsigned, cudaEvent_t> marks_;
  unsigned nextTimestamp_ = 0;
  bool capturing_ = false;
  void *prepareScratch_ = nullptr;
  size_t prepareBytes_ = 0;
  static constexpr unsigned kPaceMarks = 4;
  const unsigned launchAhead_ = launchAheadFromEnvironment();
  uint64_t launched_ = 0, paceNext_ = 0;
  std::vector<cudaEvent_t> paceMarks_[kPaceMarks];
};

llvm::Expected<std::unique_ptr<PendingHostCopy>>
CudaBackend::copyToHostAsync(llvm::ArrayRef<std::pair<const void *, size_t>> regions,
                             llvm::ArrayRef<size_t> readMarks) {
  std::vector<size_t> offsets;
  size_t total = 0;
  for (auto [address, bytes] : regions) {
    offsets.push_back(total);
    total += (bytes + 255) / 256 * 256;
  }
  int device = 0;
  if (auto err = check(cudaGetDevice(&device), "cudaGetDevice"))
    return std::move(err);
  HostCopyBuffers b = hostCopies_->take();
  auto fail = [&](llvm::Error err) -> llvm::Error {
    b.release();
    return err;
  };
  b.device = device;
  if (!b.valid()) {
    if (auto err = check(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking),
                         "cudaStreamCreate (copy to host)"))
      return fail(std::move(err));
    if (auto err = check(cudaEventCreateWithFlags(&b.read, cudaEventDisableTiming),
                         "cudaEventCreate (copy to host)"))
      return fail(std::move(err));
  }
  if (b.spareBytes < total) {
    if (b.spare)
      cudaFree(b.spare);
    b.spare = nullptr;
    b.spareBytes = 0;
    // No room on the device is no error: the regions are then read over
    // PCIe directly, and the next step waits for that instead.
    if (cudaMalloc(&b.spare, total) == cudaSuccess)
      b.spareBytes = total;
    else
      b.spare = nullptr;
    cudaGetLastError();
  }
  if (!b.spare && b.hostBytes < total) {
    if (b.host)
      cudaFreeHost(b.host);
    b.host = nullptr;
    b.hostBytes = 0;
    void *host = nullptr;
    if (auto err = check(cudaHostAlloc(&host, total, cudaHostAllocDefault),
                         "cudaHostAlloc (copy to host)"))
      return fail(std::move(err));
    b.host = static_cast<uint8_t *>(host);
    b.hostBytes = total;
  }
  // The copy reads what the work issued so far wrote.
  for (unsigned s = 0; s < numStreams_; ++s) {
    if (auto err = check(cudaEventRecord(b.read, streams_[s]), "cudaEventRecord"))
      return fail(std::move(err));
    if (auto err = check(cudaStreamWaitEvent(b.stream, b.read, 0), "cudaStreamWaitEvent"))
      return fail(std::move(err));
  }
  // In the order given: read mark k is recorded once the first
  // readMarks[k] regions are read, so that the step that runs beside the
  // copy waits, before each write, only for the regions it overwrites
  // (waitForHostCopyReads). A device-to-device copy beside compute runs on
  // the copy engines (about 250 GB/s on an H100), leaving the SMs to the
  // step: 0.7% slower compute where a copy kernel costs 8%
  // (docs/performance.md). The copies are recorded once as a graph, so
  // that each later snapshot of the same buffers is a single launch.
  void *target = b.spare ? b.spare : static_cast<void *>(b.host);
  const bool same = b.copies && b.copiedTo == target &&
                    llvm::ArrayRef<size_t>(b.copiedMarks) == readMarks &&
                    llvm::ArrayRef<std::pair<const void *, size_t>>(b.copiedRegions) == regions;
  if (!same) {
    if (b.copies)
      cudaGraphExecDestroy(b.copies);
    b.copies = nullptr;
    b.copiedTo = target;
    b.copiedRegions.assign(regions.begin(), regions.end());
    b.copiedMarks.assign(readMarks.begin(), readMarks.end());
    while (readMarks_.size() < readMarks.size()) {
      cudaEvent_t e;
      if (auto err = check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                           "cudaEventCreate (read mark)"))
        return fail(std::move(err));
      readMarks_.push_back(e);
    }
    if (auto err = check(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal),
                         "cudaStreamBeginCapture (copy to host)"))
      return fail(std::move(err));
    size_t mark = 0;
    llvm::Error recorded = llvm::Error::success();
    for (size_t i = 0; i <= regions.size() && !recorded; ++i) {
      for (; mark < readMarks.size() && readMarks[mark] <= i && !recorded; ++mark)
        recorded = check(
            cudaEventRecordWithFlags(readMarks_[mark], b.stream, cudaEventRecordExternal),
            "cudaEventRecord (read mark)");
      if (i == regions.size() || regions[i].second == 0 || recorded)
        continue;
      void *dst = b.spare ? static_cast<uint8_t *>(b.spare) + offsets[i]
                          : static_cast<void *>(b.host + offsets[i]);
      recorded = check(cudaMemcpyAsync(dst, regions[i].first, regions[i].second, cudaMemcpyDefault,
                                       b.stream),
                       "cudaMemcpyAsync (copy to host)");
    }
    cudaGraph_t graph = nullptr;
    llvm::Error ended = check(cudaStreamEndCapture(b.stream, &graph), "cudaStreamEndCapture");
    if (!recorded && !ended)
      ended = check(cudaGraphInstantiate(&b.copies, graph, 0), "cudaGraphInstantiate (copies)");
    if (graph)
      cudaGraphDestroy(graph);
    if (recorded || ended) {
      b.copies = nullptr;
      llvm::Error err = recorded ? std::move(recorded) : std::move(ended);
      llvm::consumeError(std::move(recorded));
      llvm::consumeError(std::move(ended));
      return fail(std::move(err));
    }
  }
  if (auto err = check(cudaGraphLaunch(b.copies, b.stream), "cudaGraphLaunch (copy to host)"))
    return fail(std::move(err));
  if (auto err = check(cudaEventRecord(b.read, b.stream), "cudaEventRecord"))
    return fail(std::move(err));
  // Marks this copy did not name wait for all of it.
  if (auto err = check(cudaEventRecord(hostCopyRead_, b.stream), "cudaEventRecord"))
    return fail(std::move(err));
  for (size_t k = readMarks.size(); k < readMarks_.size(); ++k)
    if (auto err = check(cudaEventRecord(readMarks_[k], b.stream), "cudaEventRecord"))
      return fail(std::move(err));
  // With a spare, the transfer to the host is the writer's (wait()).
  return std::unique_ptr<PendingHostCopy>(
      std::make_unique<CudaPendingHostCopy>(hostCopies_, b, std::move(offsets), total));
}

} // namespace

llvm::Expected<std::unique_ptr<Backend>> createCudaBackend(int device) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0)
    return llvm::createStringError(std::errc::no_such_device,
                                   "no CUDA device is available (%s)",
                                   status == cudaSuccess ? "0 devices" : cudaGetErrorString(status));
  if (device < 0 || device >= count)
    return llvm::createStringError(std::errc::no_such_device,
                                   "CUDA device %d does not exist (%d devices)", device, count);
  auto backend = std::make_unique<CudaBackend>();
  if (auto err = backend->initialize(device))
    return std::move(err);
  return std::unique_ptr<Backend>(std::move(backend));
}

} // namespace loom
