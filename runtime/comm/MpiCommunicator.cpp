// Ranks as MPI processes (mpirun). A group's collective gathers every
// member's input (MPI_Allgather over a communicator of the group, created on
// first use by its members alone) and combines it locally in group order, so
// results are bitwise those of the thread communicator.
//
// Every operation is nonblocking underneath and waited for until a deadline
// (--comm-timeout): a peer that never comes makes the call fail, naming the
// ranks that did not arrive, and loom-run then ends the job (MPI_Abort)
// instead of hanging. To know who arrived, a group collective is preceded
// by a one-byte arrival message from every member to every other, on the
// group's own communicator.

#include "runtime/comm/Communicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <functional>
#include <thread>

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
constexpr int kArrivalTag = 18;

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(Mesh mesh, int64_t rank, std::chrono::milliseconds timeout)
      : Communicator(std::move(mesh), rank), timeout_(timeout) {}
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
    std::vector<MPI_Request> requests(1);
    LOOM_MPI_CHECK(MPI_Isend(data, int(bytes), MPI_BYTE, int(peer), kPointToPointTag,
                             MPI_COMM_WORLD, &requests[0]),
                   "MPI_Isend to rank " + std::to_string(peer));
    return waitFor(requests, nullptr, [&](size_t) { return "rank " + std::to_string(peer) +
                                                           " to receive"; });
  }

  llvm::Error recvBytes(void *data, size_t bytes, int64_t peer) override {
    if (bytes > INT_MAX)
      return tooLarge(bytes);
    std::vector<MPI_Request> requests(1);
    std::vector<MPI_Status> statuses(1);
    LOOM_MPI_CHECK(MPI_Irecv(data, int(bytes), MPI_BYTE, int(peer), kPointToPointTag,
                             MPI_COMM_WORLD, &requests[0]),
                   "MPI_Irecv from rank " + std::to_string(peer));
    if (llvm::Error err = waitFor(requests, &statuses, [&](size_t) {
          return "a message from rank " + std::to_string(peer);
        }))
      return err;
    int count = 0;
    MPI_Get_count(&statuses[0], MPI_BYTE, &count);
    if (size_t(count) != bytes)
      return llvm::createStringError(std::errc::invalid_argument,
                                     "rank %lld sent %d bytes, expected %zu",
                                     (long long)peer, count, bytes);
    return llvm::Error::success();
  }

  llvm::Error barrier() override {
    std::vector<MPI_Request> requests(1);
    LOOM_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &requests[0]), "MPI_Ibarrier");
    return waitFor(requests, nullptr, [](size_t) { return std::string("every rank at a barrier"); });
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
    if (llvm::Error err = awaitArrivals(group, comm))
      return err;
    std::vector<MPI_Request> requests(1);
    auto describe = [&](size_t) {
      return "the " + collectiveKindName(desc.kind) + " of group [" + memberList(group) +
             "] to complete";
    };
    if (desc.kind == CollectiveKind::Broadcast) {
      if (group.index == desc.root && operands.out != operands.in)
        std::memcpy(operands.out, operands.in, inBytes);
      LOOM_MPI_CHECK(MPI_Ibcast(operands.out, int(inBytes), MPI_BYTE, int(desc.root), comm,
                                &requests[0]),
                     "MPI_Ibcast");
      return waitFor(requests, nullptr, describe);
    }
    std::vector<uint8_t> gathered(inBytes * group.size());
    LOOM_MPI_CHECK(MPI_Iallgather(operands.in, int(inBytes), MPI_BYTE, gathered.data(),
                                  int(inBytes), MPI_BYTE, comm, &requests[0]),
                   "MPI_Iallgather");
    if (llvm::Error err = waitFor(requests, nullptr, describe))
      return err;
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
    if (llvm::Error err = waitFor(requests, &statuses, [&](size_t k) {
          bool sending = k < numSends;
          const Transfer &t = sending ? sends[k] : recvs[k - numSends];
          return std::string(sending ? "rank " : "a transfer from rank ") +
                 std::to_string(t.peer) + (sending ? " to take a transfer" : "");
        }))
      return err;
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
  /// Waits until every request is done or the timeout passes. On a
  /// timeout, the error names what `pending(k)` says of each request k not
  /// done ("a message from rank 3"); the requests are left to MPI_Abort.
  llvm::Error waitFor(std::vector<MPI_Request> &requests, std::vector<MPI_Status> *statuses,
                      const std::function<std::string(size_t)> &pending) {
    std::vector<MPI_Status> own(requests.size());
    std::vector<MPI_Status> &status = statuses ? *statuses : own;
    auto start = std::chrono::steady_clock::now();
    auto deadline = start + timeout_;
    while (true) {
      int done = 0;
      int code = MPI_Testall(int(requests.size()), requests.data(), &done, status.data());
      if (code == MPI_ERR_IN_STATUS) {
        for (size_t k = 0; k < status.size(); ++k)
          if (status[k].MPI_ERROR != MPI_SUCCESS && status[k].MPI_ERROR != MPI_ERR_PENDING)
            return mpiFailure(status[k].MPI_ERROR, "waiting for " + pending(k));
      }
      if (code != MPI_SUCCESS)
        return mpiFailure(code, "MPI_Testall");
      if (done)
        return llvm::Error::success();
      auto now = std::chrono::steady_clock::now();
      if (now > deadline)
        break;
      // Spin for the first millisecond (most collectives), then poll.
      if (now - start > std::chrono::milliseconds(1))
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::string missing;
    for (size_t k = 0; k < requests.size(); ++k) {
      int flag = 0;
      if (requests[k] != MPI_REQUEST_NULL)
        MPI_Test(&requests[k], &flag, MPI_STATUS_IGNORE);
      if (!flag && requests[k] != MPI_REQUEST_NULL)
        missing += (missing.empty() ? "" : ", ") + pending(k);
    }
    return llvm::createStringError(std::errc::timed_out,
                                   "timed out after %lld ms (--comm-timeout) waiting for %s",
                                   (long long)timeout_.count(), missing.c_str());
  }

  static std::string memberList(const Group &group) {
    std::string list;
    for (int64_t m : group.members)
      list += (list.empty() ? "" : ", ") + std::to_string(m);
    return list;
  }

  /// Every member of `group` tells every other it has reached this
  /// collective; returns once all have, or names the ranks that did not
  /// within the timeout.
  llvm::Error awaitArrivals(const Group &group, MPI_Comm comm) {
    if (group.size() < 2)
      return llvm::Error::success();
    static const uint8_t token = 1;
    std::vector<uint8_t> received(group.size());
    std::vector<MPI_Request> recvRequests, sendRequests;
    std::vector<int64_t> from;
    for (int64_t m = 0; m < group.size(); ++m) {
      if (m == group.index)
        continue;
      MPI_Request request;
      LOOM_MPI_CHECK(MPI_Irecv(&received[m], 1, MPI_BYTE, int(m), kArrivalTag, comm, &request),
                     "MPI_Irecv (arrival)");
      recvRequests.push_back(request);
      from.push_back(group.members[m]);
      LOOM_MPI_CHECK(MPI_Isend(&token, 1, MPI_BYTE, int(m), kArrivalTag, comm, &request),
                     "MPI_Isend (arrival)");
      sendRequests.push_back(request);
    }
    if (llvm::Error err = waitFor(recvRequests, nullptr, [&](size_t k) {
          return "rank " + std::to_string(from[k]);
        })) {
      std::string text = llvm::toString(std::move(err));
      return llvm::createStringError(std::errc::timed_out, "%s to join (group [%s])",
                                     text.c_str(), memberList(group).c_str());
    }
    // One-byte sends complete eagerly once their receive is posted.
    return waitFor(sendRequests, nullptr, [&](size_t k) {
      return "rank " + std::to_string(from[k]) + " to take an arrival message";
    });
  }

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
  std::chrono::milliseconds timeout_;
};

} // namespace

bool haveMpi() { return true; }

llvm::Expected<std::unique_ptr<Communicator>>
createMpiCommunicator(const Mesh &mesh, std::chrono::milliseconds timeout) {
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
  return std::make_unique<MpiCommunicator>(mesh, rank, timeout);
}

} // namespace loom
