// Ranks as MPI processes (mpirun). A group's collective gathers every
// member's input (MPI_Allgather over a communicator of the group, created on
// first use by its members alone) and combines it locally in group order, so
// results are bitwise those of the thread communicator.

#include "runtime/comm/Communicator.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>

namespace loom {

namespace {

llvm::Error mpiFailure(int code, const std::string &what) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return llvm::createStringError(std::errc::io_error, "%s failed: %s", what.c_str(),
                                 std::string(text, length).c_str());
}

#define LOOM_MPI_CHECK(call, what)                                             \
  do {                                                                         \
    int code_ = (call);                                                        \
    if (code_ != MPI_SUCCESS)                                                  \
      return mpiFailure(code_, what);                                          \
  } while (0)

constexpr int kPointToPointTag = 17;

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(Mesh mesh, int64_t rank) : Communicator(std::move(mesh), rank) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      for (auto &[members, comm] : comms_)
        MPI_Comm_free(&comm);
  }

  std::string name() const override { return "mpi"; }

  llvm::Error sendBytes(const void *data, size_t bytes, int64_t peer) override {
    if (bytes > INT_MAX)
      return tooLarge(bytes);
    LOOM_MPI_CHECK(MPI_Send(data, int(bytes), MPI_BYTE, int(peer), kPointToPointTag,
                            MPI_COMM_WORLD),
                   "MPI_Send to rank " + std::to_string(peer));
    return llvm::Error::success();
  }

  llvm::Error recvBytes(void *data, size_t bytes, int64_t peer) override {
    if (bytes > INT_MAX)
      return tooLarge(bytes);
    MPI_Status status;
    LOOM_MPI_CHECK(MPI_Recv(data, int(bytes), MPI_BYTE, int(peer), kPointToPointTag,
                            MPI_COMM_WORLD, &status),
                   "MPI_Recv from rank " + std::to_string(peer));
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (size_t(count) != bytes)
      return llvm::createStringError(std::errc::invalid_argument,
                                     "rank %lld sent %d bytes, expected %zu",
                                     (long long)peer, count, bytes);
    return llvm::Error::success();
  }

  llvm::Error barrier() override {
    LOOM_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    return llvm::Error::success();
  }

  void abort(const std::string &reason) override {
    std::fprintf(stderr, "loom: rank %lld aborts the MPI job: %s\n", (long long)rank(),
                 reason.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

protected:
  llvm::Error runGroup(const CollectiveDesc &desc, const Group &group,
                       const CollectiveOperands &operands) override {
    MPI_Comm comm;
    if (llvm::Error err = communicatorOf(group, comm))
      return err;
    size_t inBytes = operands.inBytes();
    if (inBytes * group.size() > INT_MAX)
      return tooLarge(inBytes * group.size());
    if (desc.kind == CollectiveKind::Broadcast) {
      if (group.index == desc.root && operands.out != operands.in)
        std::memcpy(operands.out, operands.in, inBytes);
      LOOM_MPI_CHECK(MPI_Bcast(operands.out, int(inBytes), MPI_BYTE, int(desc.root), comm),
                     "MPI_Bcast");
      return llvm::Error::success();
    }
    std::vector<uint8_t> gathered(inBytes * group.size());
    LOOM_MPI_CHECK(MPI_Allgather(operands.in, int(inBytes), MPI_BYTE, gathered.data(),
                                 int(inBytes), MPI_BYTE, comm),
                   "MPI_Allgather");
    std::vector<const void *> inputs;
    for (int64_t m = 0; m < group.size(); ++m)
      inputs.push_back(gathered.data() + m * inBytes);
    combineCollective(desc, group, operands, inputs, operands.out);
    return llvm::Error::success();
  }

  // Nonblocking sends and receives, then one wait: a blocking MPI_Send of a
  // large message waits for its receive (rendezvous), so two ranks sending
  // to each other first would deadlock. The tag is sendBytes's, and MPI
  // keeps messages between two ranks with one tag in order.
  llvm::Error runExchange(llvm::ArrayRef<Transfer> sends, llvm::ArrayRef<Transfer> recvs,
                          void *) override {
    for (llvm::ArrayRef<Transfer> side : {sends, recvs})
      for (const Transfer &t : side)
        if (t.bytes() > INT_MAX)
          return tooLarge(t.bytes());
    size_t numSends = sends.size();
    std::vector<MPI_Request> requests;
    requests.reserve(numSends + recvs.size());
    auto describe = [&](size_t k) {
      bool sending = k < numSends;
      const Transfer &t = sending ? sends[k] : recvs[k - numSends];
      return std::string(sending ? "send " : "receive ") +
             std::to_string(sending ? k : k - numSends) + (sending ? " to" : " from") +
             " rank " + std::to_string(t.peer);
    };
    for (size_t k = 0; k < numSends + recvs.size(); ++k) {
      bool sending = k < numSends;
      const Transfer &t = sending ? sends[k] : recvs[k - numSends];
      MPI_Request request;
      int code = sending ? MPI_Isend(t.data, int(t.bytes()), MPI_BYTE, int(t.peer),
                                     kPointToPointTag, MPI_COMM_WORLD, &request)
                         : MPI_Irecv(t.data, int(t.bytes()), MPI_BYTE, int(t.peer),
                                     kPointToPointTag, MPI_COMM_WORLD, &request);
      if (code != MPI_SUCCESS) {
        // What was posted cannot complete as intended: let it go.
        for (size_t p = 0; p < requests.size(); ++p) {
          if (p >= numSends)
            MPI_Cancel(&requests[p]);
          MPI_Request_free(&requests[p]);
        }
        return mpiFailure(code, (sending ? "MPI_Isend (" : "MPI_Irecv (") + describe(k) + ")");
      }
      requests.push_back(request);
    }
    std::vector<MPI_Status> statuses(requests.size());
    int code = MPI_Waitall(int(requests.size()), requests.data(), statuses.data());
    if (code == MPI_ERR_IN_STATUS) {
      for (size_t k = 0; k < statuses.size(); ++k)
        if (statuses[k].MPI_ERROR != MPI_SUCCESS && statuses[k].MPI_ERROR != MPI_ERR_PENDING)
          return mpiFailure(statuses[k].MPI_ERROR, "MPI_Waitall (" + describe(k) + ")");
    }
    if (code != MPI_SUCCESS)
      return mpiFailure(code, "MPI_Waitall");
    for (size_t j = 0; j < recvs.size(); ++j) {
      int count = 0;
      MPI_Get_count(&statuses[numSends + j], MPI_BYTE, &count);
      if (size_t(count) != recvs[j].bytes())
        return llvm::createStringError(std::errc::invalid_argument,
                                       "receive %zu: rank %lld sent %d bytes, expected %zu", j,
                                       (long long)recvs[j].peer, count, recvs[j].bytes());
    }
    return llvm::Error::success();
  }

private:
  static llvm::Error tooLarge(size_t bytes) {
    return llvm::createStringError(std::errc::value_too_large,
                                   "%zu bytes exceed what one MPI call moves (2 GiB)",
                                   bytes);
  }

  /// The group's communicator, its ranks in group order. MPI_Comm_create_group
  /// involves the members only, so groups form lazily.
  llvm::Error communicatorOf(const Group &group, MPI_Comm &comm) {
    auto it = comms_.find(group.members);
    if (it != comms_.end()) {
      comm = it->second;
      return llvm::Error::success();
    }
    MPI_Group world, members;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> ranks(group.members.begin(), group.members.end());
    MPI_Group_incl(world, int(ranks.size()), ranks.data(), &members);
    uint64_t hash = 1469598103934665603ull;
    for (int r : ranks)
      hash = (hash ^ uint64_t(r)) * 1099511628211ull;
    int code = MPI_Comm_create_group(MPI_COMM_WORLD, members, int(hash % 32000), &comm);
    MPI_Group_free(&members);
    MPI_Group_free(&world);
    if (code != MPI_SUCCESS)
      return mpiFailure(code, "MPI_Comm_create_group");
    comms_[group.members] = comm;
    return llvm::Error::success();
  }

  std::map<std::vector<int64_t>, MPI_Comm> comms_;
};

} // namespace

bool haveMpi() { return true; }

llvm::Expected<std::unique_ptr<Communicator>> createMpiCommunicator(const Mesh &mesh) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (code != MPI_SUCCESS)
      return mpiFailure(code, "MPI_Init_thread");
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized)
        MPI_Finalize();
    });
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (size != mesh.numRanks())
    return llvm::createStringError(
        std::errc::invalid_argument,
        "the executable's mesh has %lld ranks but mpirun started %d processes "
        "(run it with mpirun -np %lld)",
        (long long)mesh.numRanks(), size, (long long)mesh.numRanks());
  return std::make_unique<MpiCommunicator>(mesh, rank);
}

} // namespace loom
