// Ranks as GPUs with NCCL (CUDA builds). Collectives run on the stream the
// caller passes (CollectiveOperands::stream), on device memory. NCCL moves
// whole contiguous buffers, so a gather or scatter along an inner dimension
// stages through a per-stream scratch buffer with strided (2-D) copies.
// Sub-group communicators are split from the world once, at creation, for
// every group the executable's collectives use (ncclCommSplit is collective
// over all ranks, so they cannot form lazily).
// Point-to-point transfers (send, recv, exchange) use the world
// communicator with absolute ranks; their connections are made at creation
// (connectPeers), not at the first transfer.

#include "runtime/comm/Communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

namespace loom {

namespace {

llvm::Error ncclFailure(ncclResult_t result, const char *what) {
  return llvm::createStringError(std::errc::io_error, "%s failed: %s", what,
                                 ncclGetErrorString(result));
}
llvm::Error cudaFailure(cudaError_t result, const char *what) {
  return llvm::createStringError(std::errc::io_error, "%s failed: %s", what,
                                 cudaGetErrorString(result));
}

#define LOOM_NCCL(call, what)                                                  \
  do {                                                                         \
    ncclResult_t r_ = (call);                                                  \
    if (r_ != ncclSuccess)                                                     \
      return ncclFailure(r_, what);                                            \
  } while (0)
#define LOOM_CUDA(call, what)                                                  \
  do {                                                                         \
    cudaError_t r_ = (call);                                                   \
    if (r_ != cudaSuccess)                                                     \
      return cudaFailure(r_, what);                                            \
  } while (0)

ncclDataType_t ncclType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return ncclFloat32;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  case DType::I64:
    return ncclInt64;
  case DType::F8E4M3FN:
  case DType::F8E5M2: // moved as bytes, never reduced
    return ncclUint8;
  default:
    return ncclInt32;
  }
}

ncclRedOp_t ncclOp(ReduceOp op) {
  return op == ReduceOp::Max ? ncclMax : op == ReduceOp::Avg ? ncclAvg : ncclSum;
}

int64_t product(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator(Mesh mesh, int64_t rank, int device, ncclComm_t world,
                   Communicator *host)
      : Communicator(std::move(mesh), rank), device_(device), world_(world), host_(host) {}
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    for (auto &[stream, scratch] : scratch_)
      cudaFree(scratch.first);
    for (auto &[members, comm] : groups_)
      ncclCommDestroy(comm);
    if (world_)
      ncclCommDestroy(world_);
  }

  std::string name() const override { return "nccl"; }

  /// Splits the communicators of `groups` (every rank calls this with the
  /// same list, in the same order).
  llvm::Error splitGroups(llvm::ArrayRef<std::vector<std::string>> groups) {
    LOOM_CUDA(cudaSetDevice(device_), "cudaSetDevice");
    for (const std::vector<std::string> &axes : groups) {
      auto group = groupOf(mesh(), rank(), axes);
      if (!group)
        return group.takeError();
      if (groups_.count(group->members))
        continue;
      // Ranks sharing the coordinates off `axes` share a color; the key
      // orders them as the group does.
      int64_t color = 0;
      std::vector<int64_t> coords = mesh().coordinates(rank());
      for (size_t a = 0; a < mesh().axes.size(); ++a)
        if (std::find(axes.begin(), axes.end(), mesh().axes[a]) == axes.end())
          color = color * mesh().shape[a] + coords[a];
      ncclComm_t comm;
      LOOM_NCCL(ncclCommSplit(world_, int(color), int(group->index), &comm, nullptr),
                "ncclCommSplit");
      groups_[group->members] = comm;
    }
    return llvm::Error::success();
  }

  /// Takes `comm` as this rank's communicator for the group of `members`.
  void adoptGroup(const std::vector<int64_t> &members, ncclComm_t comm) {
    groups_[members] = comm;
  }
  bool hasGroup(const std::vector<int64_t> &members) const { return groups_.count(members); }

  // Host bytes (checkpoints) travel through the host communicator.
  llvm::Error sendBytes(const void *data, size_t bytes, int64_t peer) override {
    return host_ ? host_->sendBytes(data, bytes, peer) : noHost();
  }
  llvm::Error recvBytes(void *data, size_t bytes, int64_t peer) override {
    return host_ ? host_->recvBytes(data, bytes, peer) : noHost();
  }
  llvm::Error barrier() override { return host_ ? host_->barrier() : noHost(); }
  void abort(const std::string &reason) override {
    // Kernels spinning on a peer that never comes end with their
    // communicators.
    for (auto &[members, comm] : groups_)
      ncclCommAbort(comm);
    groups_.clear();
    if (world_)
      ncclCommAbort(world_);
    world_ = nullptr;
    if (host_)
      host_->abort(reason);
  }

protected:
  llvm::Error runGroup(const CollectiveDesc &desc, const Group &group,
                       const CollectiveOperands &operands) override {
    auto it = groups_.find(group.members);
    if (it == groups_.end())
      return llvm::createStringError(std::errc::invalid_argument,
                                     "no NCCL communicator was split for this group");
    ncclComm_t comm = it->second;
    auto stream = static_cast<cudaStream_t>(operands.stream);
    ncclDataType_t type = ncclType(operands.dtype);
    size_t size = dtypeSize(operands.dtype);
    int64_t g = group.size();
    llvm::ArrayRef<int64_t> inShape = operands.inShape;
    size_t count = product(inShape);
    switch (desc.kind) {
    case CollectiveKind::AllReduce:
      LOOM_NCCL(ncclAllReduce(operands.in, operands.out, count, type, ncclOp(desc.reduce), comm,
                              stream),
                "ncclAllReduce");
      return llvm::Error::success();
    case CollectiveKind::Broadcast:
      LOOM_NCCL(ncclBroadcast(operands.in, operands.out, count, type, int(desc.root), comm,
                              stream),
                "ncclBroadcast");
      return llvm::Error::success();
    case CollectiveKind::AllGather: {
      int64_t outer = product(inShape.take_front(desc.dim));
      if (outer == 1) {
        LOOM_NCCL(ncclAllGather(operands.in, operands.out, count, type, comm, stream),
                  "ncclAllGather");
        return llvm::Error::success();
      }
      // Gather member blocks contiguously, then interleave them along dim.
      auto scratch = scratchFor(stream, count * g * size);
      if (!scratch)
        return scratch.takeError();
      LOOM_NCCL(ncclAllGather(operands.in, *scratch, count, type, comm, stream), "ncclAllGather");
      size_t row = count / outer * size;
      for (int64_t m = 0; m < g; ++m)
        LOOM_CUDA(cudaMemcpy2DAsync(static_cast<uint8_t *>(operands.out) + m * row, g * row,
                                    static_cast<uint8_t *>(*scratch) + m * count * size, row, row,
                                    outer, cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpy2DAsync");
      return llvm::Error::success();
    }
    case CollectiveKind::ReduceScatter: {
      int64_t outer = product(inShape.take_front(desc.dim));
      size_t outCount = count / g;
      if (outer == 1) {
        LOOM_NCCL(ncclReduceScatter(operands.in, operands.out, outCount, type,
                                    ncclOp(desc.reduce), comm, stream),
                  "ncclReduceScatter");
        return llvm::Error::success();
      }
      // Make each member's block contiguous, then reduce-scatter.
      auto scratch = scratchFor(stream, count * size);
      if (!scratch)
        return scratch.takeError();
      size_t row = outCount / outer * size;
      for (int64_t m = 0; m < g; ++m)
        LOOM_CUDA(cudaMemcpy2DAsync(static_cast<uint8_t *>(*scratch) + m * outCount * size, row,
                                    static_cast<const uint8_t *>(operands.in) + m * row, g * row,
                                    row, outer, cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpy2DAsync");
      LOOM_NCCL(ncclReduceScatter(*scratch, operands.out, outCount, type, ncclOp(desc.reduce),
                                  comm, stream),
                "ncclReduceScatter");
      return llvm::Error::success();
    }
    case CollectiveKind::AllToAll: {
      // Scratch: g contiguous send blocks, then g received blocks.
      size_t blockCount = count / g, blockBytes = blockCount * size;
      auto scratch = scratchFor(stream, 2 * count * size);
      if (!scratch)
        return scratch.takeError();
      auto *send = static_cast<uint8_t *>(*scratch);
      uint8_t *recv = send + count * size;
      int64_t outerS = product(inShape.take_front(desc.splitDim));
      size_t rowS = blockBytes / outerS;
      for (int64_t j = 0; j < g; ++j)
        LOOM_CUDA(cudaMemcpy2DAsync(send + j * blockBytes, rowS,
                                    static_cast<const uint8_t *>(operands.in) + j * rowS,
                                    g * rowS, rowS, outerS, cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpy2DAsync");
      LOOM_NCCL(ncclGroupStart(), "ncclGroupStart");
      for (int64_t j = 0; j < g; ++j) {
        LOOM_NCCL(ncclSend(send + j * blockBytes, blockCount, type, int(j), comm, stream),
                  "ncclSend");
        LOOM_NCCL(ncclRecv(recv + j * blockBytes, blockCount, type, int(j), comm, stream),
                  "ncclRecv");
      }
      LOOM_NCCL(ncclGroupEnd(), "ncclGroupEnd");
      llvm::ArrayRef<int64_t> outShape = operands.outShape;
      int64_t outerC = product(outShape.take_front(desc.concatDim));
      size_t rowC = blockBytes / outerC;
      for (int64_t m = 0; m < g; ++m)
        LOOM_CUDA(cudaMemcpy2DAsync(static_cast<uint8_t *>(operands.out) + m * rowC, g * rowC,
                                    recv + m * blockBytes, rowC, rowC, outerC,
                                    cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpy2DAsync");
      return llvm::Error::success();
    }
    case CollectiveKind::Send:
    case CollectiveKind::Recv:
    case CollectiveKind::Exchange:
      break;
    }
    return llvm::Error::success();
  }

  // One NCCL group around the bucket's collectives: NCCL launches them
  // together on the stream, reading and writing the tensors where they are.
  // A reduce_scatter along an inner dim stages through the stream's one
  // scratch buffer, which entries of one group would share: such a bucket
  // runs entry by entry.
  llvm::Error runGroupBucket(const CollectiveDesc &desc, const Group &group,
                             llvm::ArrayRef<CollectiveOperands> operands) override {
    bool staged = desc.kind == CollectiveKind::ReduceScatter &&
                  llvm::any_of(operands, [&](const CollectiveOperands &o) {
                    return product(llvm::ArrayRef<int64_t>(o.inShape).take_front(desc.dim)) != 1;
                  });
    if (staged)
      return Communicator::runGroupBucket(desc, group, operands);
    LOOM_NCCL(ncclGroupStart(), "ncclGroupStart");
    llvm::Error failed = llvm::Error::success();
    for (size_t i = 0; i < operands.size() && !failed; ++i)
      if (llvm::Error err = runGroup(desc, group, operands[i]))
        failed = llvm::createStringError(std::errc::invalid_argument, "entry %zu: %s", i,
                                         llvm::toString(std::move(err)).c_str());
    // The group is closed even after a failed call, or the next one nests in it.
    ncclResult_t ended = ncclGroupEnd();
    if (failed)
      return failed;
    if (ended != ncclSuccess)
      return ncclFailure(ended, "ncclGroupEnd");
    return llvm::Error::success();
  }

  llvm::Error runPointToPoint(const CollectiveDesc &desc,
                              const CollectiveOperands &operands) override {
    auto stream = static_cast<cudaStream_t>(operands.stream);
    if (desc.kind == CollectiveKind::Send)
      LOOM_NCCL(ncclSend(operands.in, product(operands.inShape), ncclType(operands.dtype),
                         int(desc.peer), world_, stream),
                "ncclSend");
    else
      LOOM_NCCL(ncclRecv(operands.out, product(operands.outShape), ncclType(operands.dtype),
                         int(desc.peer), world_, stream),
                "ncclRecv");
    return llvm::Error::success();
  }

  // One NCCL group on the world communicator: every send and receive is
  // enqueued on `stream` together, and nothing here waits for the device,
  // so an exchange can be captured into a CUDA Graph.
  /// The transfers of an exchange to (from) one peer go as one message.
  /// NCCL runs a group's several sends (receives) to one peer one after
  /// another, each paired with a receive (send) of the same peer, so a
  /// receive that the peer answers only after it has this group's later
  /// sends would wait forever (a pipeline's activations with the values
  /// that travel beside them, against the gradients coming back). The
  /// pipeline puts at most one transfer's values per peer and direction in
  /// an exchange, so both ends pack the same tensors in the same order: a
  /// peer's several tensors are copied into scratch at 256-byte offsets,
  /// sent as bytes, and copied out on the other side.
  llvm::Error runExchange(llvm::ArrayRef<Transfer> sends, llvm::ArrayRef<Transfer> recvs,
                          void *stream) override {
    auto s = static_cast<cudaStream_t>(stream);
    struct Message {
      int64_t peer = 0;
      llvm::SmallVector<const Transfer *, 4> parts;
      size_t offset = 0, bytes = 0; // in the scratch, when packed
      bool packed() const { return parts.size() > 1; }
    };
    auto messagesOf = [](llvm::ArrayRef<Transfer> transfers) {
      std::vector<Message> messages;
      for (const Transfer &t : transfers) {
        auto it = llvm::find_if(messages, [&](const Message &m) { return m.peer == t.peer; });
        if (it == messages.end()) {
          messages.push_back(Message{t.peer, {}, 0, 0});
          it = std::prev(messages.end());
        }
        it->parts.push_back(&t);
      }
      return messages;
    };
    std::vector<Message> out = messagesOf(sends), in = messagesOf(recvs);
    constexpr size_t kAlign = 256;
    auto aligned = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
    size_t total = 0;
    for (std::vector<Message> *list : {&out, &in})
      for (Message &m : *list)
        if (m.packed()) {
          m.offset = total;
          for (const Transfer *t : m.parts)
            m.bytes += aligned(t->bytes());
          total += m.bytes;
        }
    char *scratch = nullptr;
    if (total > 0) {
      auto buffer = scratchFor(s, total);
      if (!buffer)
        return buffer.takeError();
      scratch = static_cast<char *>(*buffer);
    }
    auto copyParts = [&](const Message &m, bool into) -> llvm::Error {
      size_t at = m.offset;
      for (const Transfer *t : m.parts) {
        void *dst = into ? static_cast<void *>(scratch + at) : t->data;
        const void *src = into ? t->data : static_cast<const void *>(scratch + at);
        if (t->bytes() > 0)
          LOOM_CUDA(cudaMemcpyAsync(dst, src, t->bytes(), cudaMemcpyDeviceToDevice, s),
                    "cudaMemcpyAsync (exchange message)");
        at += aligned(t->bytes());
      }
      return llvm::Error::success();
    };
    for (const Message &m : out)
      if (m.packed())
        if (auto err = copyParts(m, /*into=*/true))
          return err;
    LOOM_NCCL(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t result = ncclSuccess;
    std::string what;
    // A message's bytes where it is packed, else its one tensor as it is.
    auto post = [&](const Message &m, bool send) {
      const Transfer &t = *m.parts.front();
      void *data = m.packed() ? static_cast<void *>(scratch + m.offset) : t.data;
      const size_t count = m.packed() ? m.bytes : size_t(t.count);
      const ncclDataType_t type = m.packed() ? ncclUint8 : ncclType(t.dtype);
      what = std::string(send ? "ncclSend (" : "ncclRecv (") + std::to_string(m.parts.size()) +
             " tensor(s) " + (send ? "to" : "from") + " rank " + std::to_string(m.peer) + ")";
      return send ? ncclSend(data, count, type, int(m.peer), world_, s)
                  : ncclRecv(data, count, type, int(m.peer), world_, s);
    };
    for (size_t i = 0; i < out.size() && result == ncclSuccess; ++i)
      result = post(out[i], /*send=*/true);
    for (size_t j = 0; j < in.size() && result == ncclSuccess; ++j)
      result = post(in[j], /*send=*/false);
    // The group is closed even after a failed call, or the next one nests in it.
    ncclResult_t ended = ncclGroupEnd();
    if (result != ncclSuccess)
      return ncclFailure(result, what.c_str());
    if (ended != ncclSuccess)
      return ncclFailure(ended, "ncclGroupEnd");
    for (const Message &m : in)
      if (m.packed())
        if (auto err = copyParts(m, /*into=*/false))
          return err;
    return llvm::Error::success();
  }

private:
  static llvm::Error noHost() {
    return llvm::createStringError(std::errc::not_supported,
                                   "this NCCL communicator has no host communicator");
  }

  /// Device scratch of at least `bytes` for work on `stream`; grows (rarely:
  /// the sizes repeat every step).
  llvm::Expected<void *> scratchFor(cudaStream_t stream, size_t bytes) {
    auto &[ptr, size] = scratch_[stream];
    if (size < bytes) {
      if (ptr) {
        LOOM_CUDA(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        cudaFree(ptr);
        ptr = nullptr;
      }
      cudaError_t r = cudaMalloc(&ptr, bytes);
      if (r != cudaSuccess)
        return cudaFailure(r, "cudaMalloc (collective scratch)");
      size = bytes;
    }
    return ptr;
  }

  int device_;
  ncclComm_t world_;
  Communicator *host_;
  std::map<std::vector<int64_t>, ncclComm_t> groups_;
  std::map<cudaStream_t, std::pair<void *, size_t>> scratch_;
};

/// Connects `comms[i]` (on `devices[i]`) to each of `peers[i]` in both
/// directions: one element each way in one NCCL group, then waits. NCCL
/// makes a point-to-point connection at the first transfer between a pair,
/// with both ranks' host threads taking part; made then, mid-step, a rank
/// can wait on a peer whose GPU is blocked in a send that rank has not
/// received yet. One caller may drive several GPUs (ranks as threads).
llvm::Error connectPeers(llvm::ArrayRef<ncclComm_t> comms, llvm::ArrayRef<int> devices,
                         llvm::ArrayRef<std::vector<int64_t>> peers) {
  size_t links = 0;
  for (const std::vector<int64_t> &p : peers)
    links += p.size();
  if (links == 0)
    return llvm::Error::success();
  std::vector<cudaStream_t> streams(comms.size(), nullptr);
  std::vector<float *> buffers(comms.size(), nullptr);
  auto release = [&] {
    for (size_t i = 0; i < comms.size(); ++i) {
      cudaSetDevice(devices[i]);
      if (streams[i])
        cudaStreamDestroy(streams[i]);
      cudaFree(buffers[i]);
    }
  };
  llvm::Error err = [&]() -> llvm::Error {
    for (size_t i = 0; i < comms.size(); ++i) {
      LOOM_CUDA(cudaSetDevice(devices[i]), "cudaSetDevice");
      LOOM_CUDA(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking),
                "cudaStreamCreate");
      size_t n = std::max<size_t>(1, 2 * peers[i].size());
      LOOM_CUDA(cudaMalloc(&buffers[i], n * sizeof(float)), "cudaMalloc");
      LOOM_CUDA(cudaMemset(buffers[i], 0, n * sizeof(float)), "cudaMemset");
    }
    LOOM_NCCL(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t result = ncclSuccess;
    for (size_t i = 0; i < comms.size() && result == ncclSuccess; ++i)
      for (size_t k = 0; k < peers[i].size() && result == ncclSuccess; ++k) {
        int peer = int(peers[i][k]);
        result = ncclSend(buffers[i] + 2 * k, 1, ncclFloat32, peer, comms[i], streams[i]);
        if (result == ncclSuccess)
          result = ncclRecv(buffers[i] + 2 * k + 1, 1, ncclFloat32, peer, comms[i], streams[i]);
      }
    ncclResult_t ended = ncclGroupEnd();
    if (result != ncclSuccess)
      return ncclFailure(result, "ncclSend/ncclRecv (connecting point-to-point peers)");
    if (ended != ncclSuccess)
      return ncclFailure(ended, "ncclGroupEnd (connecting point-to-point peers)");
    for (size_t i = 0; i < comms.size(); ++i) {
      LOOM_CUDA(cudaSetDevice(devices[i]), "cudaSetDevice");
      LOOM_CUDA(cudaStreamSynchronize(streams[i]),
                "cudaStreamSynchronize (connecting point-to-point peers)");
    }
    return llvm::Error::success();
  }();
  release();
  return err;
}

} // namespace

bool haveNccl() { return true; }

llvm::Expected<std::vector<std::unique_ptr<Communicator>>>
createNcclCommunicators(const Mesh &mesh, llvm::ArrayRef<int> devices,
                        llvm::ArrayRef<std::vector<std::string>> groups,
                        llvm::ArrayRef<std::vector<int64_t>> peers,
                        llvm::ArrayRef<Communicator *> hosts) {
  int n = int(mesh.numRanks());
  if (int(devices.size()) != n)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "%d ranks need %d GPUs, got %zu", n, n, devices.size());
  std::vector<ncclComm_t> comms(n);
  std::vector<int> devs(devices.begin(), devices.end());
  if (!peers.empty() && int(peers.size()) != n)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "%d ranks need %d peer lists, got %zu", n, n, peers.size());
  LOOM_NCCL(ncclCommInitAll(comms.data(), n, devs.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<Communicator>> result;
  std::vector<NcclCommunicator *> raw;
  for (int r = 0; r < n; ++r) {
    auto comm = std::make_unique<NcclCommunicator>(mesh, r, devs[r], comms[r],
                                                   r < int(hosts.size()) ? hosts[r] : nullptr);
    raw.push_back(comm.get());
    result.push_back(std::move(comm));
  }
  // One process drives every GPU: each group's communicators come from
  // ncclCommInitAll over its members' devices (splitting the world inside a
  // group call failed on the H200 machines with "unhandled cuda error").
  for (const std::vector<std::string> &axes : groups)
    for (int r = 0; r < n; ++r) {
      auto group = groupOf(mesh, r, axes);
      if (!group)
        return group.takeError();
      if (raw[r]->hasGroup(group->members))
        continue;
      std::vector<ncclComm_t> members(group->members.size());
      std::vector<int> memberDevs;
      for (int64_t m : group->members)
        memberDevs.push_back(devs[m]);
      LOOM_NCCL(ncclCommInitAll(members.data(), int(members.size()), memberDevs.data()),
                "ncclCommInitAll (group)");
      for (size_t i = 0; i < members.size(); ++i)
        raw[group->members[i]]->adoptGroup(group->members, members[i]);
    }
  if (!peers.empty())
    if (llvm::Error err = connectPeers(comms, devs, peers))
      return std::move(err);
  return result;
}

llvm::Expected<std::unique_ptr<Communicator>>
createNcclCommunicator(const Mesh &mesh, int device, Communicator &host,
                       llvm::ArrayRef<std::vector<std::string>> groups,
                       llvm::ArrayRef<int64_t> peers) {
  // Rank 0 makes the unique id; the host communicator (MPI) carries it.
  ncclUniqueId id;
  if (host.rank() == 0)
    LOOM_NCCL(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<std::string> allAxes = mesh.axes;
  static_assert(sizeof(ncclUniqueId) % 4 == 0);
  if (llvm::Error err = host.broadcast(&id, &id, DType::I32, {int64_t(sizeof(id) / 4)}, 0,
                                       allAxes))
    return std::move(err);
  LOOM_CUDA(cudaSetDevice(device), "cudaSetDevice");
  ncclComm_t world;
  LOOM_NCCL(ncclCommInitRank(&world, int(mesh.numRanks()), id, int(host.rank())),
            "ncclCommInitRank");
  auto comm = std::make_unique<NcclCommunicator>(mesh, host.rank(), device, world, &host);
  if (llvm::Error err = comm->splitGroups(groups))
    return std::move(err);
  std::vector<int64_t> mine(peers.begin(), peers.end());
  if (llvm::Error err = connectPeers({world}, {device}, {mine}))
    return std::move(err);
  return std::unique_ptr<Communicator>(std::move(comm));
}

} // namespace loom
