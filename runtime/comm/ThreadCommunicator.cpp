// Ranks as threads of one process. Each collective is two rendezvous per
// group: all members post their input pointers, each member computes its own
// output from all inputs (into private memory, since an output may be a
// peer's input), and once every member has read, each writes its output.
// An exchange's sends are synchronous: the exchange returns only once each
// peer has taken its message. That is how NCCL moves a message larger than
// its buffers (the receiver must be running the matching receive), so a
// schedule whose transfers only complete because sends are buffered fails
// here, on the CPU, with a timeout naming the waiting ranks, instead of
// hanging on GPUs.

#include "runtime/comm/Communicator.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

namespace loom {

namespace {

llvm::Error failure(const std::string &message) {
  return llvm::createStringError(std::errc::timed_out, message.c_str());
}

/// What the threads of one process share.
class ThreadWorld {
public:
  ThreadWorld(int64_t numRanks, std::chrono::milliseconds timeout)
      : numRanks(numRanks), timeout(timeout) {}

  struct Rendezvous {
    std::vector<const void *> inputs;
    int64_t arrived = 0, departed = 0;
    uint64_t generation = 0;
    bool ready = false;
    CollectiveKind kind = CollectiveKind::AllReduce;
    size_t inBytes = 0;
  };

  const int64_t numRanks;
  const std::chrono::milliseconds timeout;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::vector<int64_t>, Rendezvous> rendezvous; // by member list
  struct Message {
    std::vector<uint8_t> bytes;
    bool *taken = nullptr; // set by the receiver (synchronous sends)
  };
  std::map<std::pair<int64_t, int64_t>, std::deque<Message>> mailboxes;
  bool aborted = false;
  std::string abortReason;
};

std::string memberList(const std::vector<int64_t> &members) {
  std::string text;
  for (int64_t m : members)
    text += (text.empty() ? "" : ", ") + std::to_string(m);
  return text;
}

class ThreadCommunicator final : public Communicator {
public:
  ThreadCommunicator(Mesh mesh, int64_t rank, std::shared_ptr<ThreadWorld> world)
      : Communicator(std::move(mesh), rank), world_(std::move(world)) {}

  std::string name() const override { return "threads"; }

  llvm::Error sendBytes(const void *data, size_t bytes, int64_t peer) override {
    std::lock_guard<std::mutex> lock(world_->mutex);
    if (world_->aborted)
      return abortedError();
    const auto *p = static_cast<const uint8_t *>(data);
    world_->mailboxes[{rank(), peer}].push_back({{p, p + bytes}, nullptr});
    world_->changed.notify_all();
    return llvm::Error::success();
  }

  llvm::Error recvBytes(void *data, size_t bytes, int64_t peer) override {
    std::unique_lock<std::mutex> lock(world_->mutex);
    auto &box = world_->mailboxes[{peer, rank()}];
    if (!waitFor(lock, [&] { return !box.empty(); }))
      return world_->aborted ? abortedError()
                             : timeoutError("a message from rank " + std::to_string(peer));
    ThreadWorld::Message taken = std::move(box.front());
    box.pop_front();
    if (taken.taken) {
      *taken.taken = true;
      world_->changed.notify_all();
    }
    std::vector<uint8_t> &message = taken.bytes;
    if (message.size() != bytes)
      return failure("rank " + std::to_string(peer) + " sent " +
                     std::to_string(message.size()) + " bytes, rank " +
                     std::to_string(rank()) + " expected " + std::to_string(bytes));
    std::memcpy(data, message.data(), bytes);
    return llvm::Error::success();
  }

  llvm::Error barrier() override {
    Group all;
    for (int64_t r = 0; r < numRanks(); ++r)
      all.members.push_back(r);
    all.index = rank();
    CollectiveDesc desc;
    desc.kind = CollectiveKind::Broadcast;
    return rendezvous(desc, all, nullptr, 0, [](llvm::ArrayRef<const void *>) {});
  }

  void abort(const std::string &reason) override {
    std::lock_guard<std::mutex> lock(world_->mutex);
    if (!world_->aborted) {
      world_->aborted = true;
      world_->abortReason = "rank " + std::to_string(rank()) + " failed: " + reason;
    }
    world_->changed.notify_all();
  }

protected:
  /// Posts every send, takes every receive, then waits until each peer has
  /// taken what this rank sent.
  llvm::Error runExchange(llvm::ArrayRef<Transfer> sends, llvm::ArrayRef<Transfer> recvs,
                          void *) override {
    std::unique_ptr<bool[]> taken(new bool[sends.size()]());
    {
      std::lock_guard<std::mutex> lock(world_->mutex);
      if (world_->aborted)
        return abortedError();
      for (size_t i = 0; i < sends.size(); ++i) {
        const auto *p = static_cast<const uint8_t *>(sends[i].data);
        world_->mailboxes[{rank(), sends[i].peer}].push_back(
            {{p, p + sends[i].bytes()}, &taken[i]});
      }
      world_->changed.notify_all();
    }
    llvm::Error err = llvm::Error::success();
    for (size_t j = 0; j < recvs.size() && !err; ++j)
      if (llvm::Error failed = recvBytes(recvs[j].data, recvs[j].bytes(), recvs[j].peer))
        err = llvm::createStringError(std::errc::io_error, "receive %zu from rank %lld: %s", j,
                                      (long long)recvs[j].peer,
                                      llvm::toString(std::move(failed)).c_str());
    std::unique_lock<std::mutex> lock(world_->mutex);
    if (!err) {
      auto firstUntaken = [&] {
        size_t i = 0;
        while (i < sends.size() && taken[i])
          ++i;
        return i;
      };
      waitFor(lock, [&] { return firstUntaken() == sends.size(); });
      // Sends a peer took are done, even if that peer failed afterwards.
      if (size_t waiting = firstUntaken(); waiting < sends.size())
        err = world_->aborted
                  ? abortedError()
                  : timeoutError("rank " + std::to_string(sends[waiting].peer) +
                                 " to receive send " + std::to_string(waiting));
    }
    // Messages nobody took must not outlive `taken`.
    for (size_t i = 0; i < sends.size(); ++i)
      if (!taken[i]) {
        auto &box = world_->mailboxes[{rank(), sends[i].peer}];
        for (ThreadWorld::Message &m : box)
          if (m.taken == &taken[i])
            m.taken = nullptr;
      }
    if (err && !world_->aborted) {
      // The peers stop waiting for this rank.
      std::string text = llvm::toString(std::move(err));
      world_->aborted = true;
      world_->abortReason = "rank " + std::to_string(rank()) + ": " + text;
      world_->changed.notify_all();
      return failure(text);
    }
    return err;
  }

  llvm::Error runGroup(const CollectiveDesc &desc, const Group &group,
                       const CollectiveOperands &operands) override {
    std::vector<uint8_t> result(operands.outBytes());
    if (llvm::Error err = rendezvous(
            desc, group, operands.in, operands.inBytes(),
            [&](llvm::ArrayRef<const void *> inputs) {
              combineCollective(desc, group, operands, inputs, result.data());
            }))
      return err;
    if (!result.empty())
      std::memcpy(operands.out, result.data(), result.size());
    return llvm::Error::success();
  }

private:
  template <typename Predicate>
  bool waitFor(std::unique_lock<std::mutex> &lock, Predicate done) {
    auto deadline = std::chrono::steady_clock::now() + world_->timeout;
    return world_->changed.wait_until(lock, deadline, [&] {
      return world_->aborted || done();
    }) && !world_->aborted;
  }

  llvm::Error abortedError() const {
    return failure("aborted (" + world_->abortReason + ")");
  }
  llvm::Error timeoutError(const std::string &what) const {
    return failure("timed out after " + std::to_string(world_->timeout.count()) +
                   " ms waiting for " + what);
  }

  /// Posts `in`, waits for every member, calls `compute` with all inputs
  /// (group order), then waits until every member has computed.
  template <typename Compute>
  llvm::Error rendezvous(const CollectiveDesc &desc, const Group &group,
                         const void *in, size_t inBytes, Compute compute) {
    std::unique_lock<std::mutex> lock(world_->mutex);
    ThreadWorld::Rendezvous &point = world_->rendezvous[group.members];
    if (point.inputs.empty())
      point.inputs.assign(group.size(), nullptr);
    auto fail = [&](llvm::Error err) {
      // A rendezvous left half-done would mislead the next caller: give up.
      if (!world_->aborted) {
        world_->aborted = true;
        world_->abortReason = "rank " + std::to_string(rank()) + ": " +
                              llvm::toString(std::move(err));
        world_->changed.notify_all();
        return failure(world_->abortReason);
      }
      llvm::consumeError(std::move(err));
      return abortedError();
    };
    // A previous collective of this group may still be draining.
    if (!waitFor(lock, [&] { return !point.ready; }))
      return fail(world_->aborted ? abortedError()
                                  : timeoutError("the previous collective of ranks [" +
                                                 memberList(group.members) + "]"));
    if (point.arrived == 0) {
      point.kind = desc.kind;
      point.inBytes = inBytes;
    } else if (point.kind != desc.kind || point.inBytes != inBytes) {
      return fail(failure("ranks [" + memberList(group.members) +
                          "] disagree: this rank calls " + collectiveKindName(desc.kind) +
                          " on " + std::to_string(inBytes) + " bytes, a peer " +
                          collectiveKindName(point.kind) + " on " +
                          std::to_string(point.inBytes) + " bytes"));
    }
    point.inputs[group.index] = in;
    uint64_t generation = point.generation;
    if (++point.arrived == group.size()) {
      point.ready = true;
      world_->changed.notify_all();
    } else if (!waitFor(lock, [&] { return point.ready && point.generation == generation; })) {
      if (world_->aborted)
        return abortedError();
      std::string missing;
      for (int64_t m = 0; m < group.size(); ++m)
        if (!point.inputs[m])
          missing += (missing.empty() ? "" : ", ") + std::to_string(group.members[m]);
      return fail(timeoutError("rank(s) " + missing + " to join (group [" +
                               memberList(group.members) + "])"));
    }
    std::vector<const void *> inputs = point.inputs;
    lock.unlock();
    compute(inputs);
    lock.lock();
    if (++point.departed == group.size()) {
      point.arrived = point.departed = 0;
      point.ready = false;
      std::fill(point.inputs.begin(), point.inputs.end(), nullptr);
      ++point.generation;
      world_->changed.notify_all();
    } else if (!waitFor(lock, [&] { return point.generation != generation; })) {
      if (world_->aborted)
        return abortedError();
      return fail(timeoutError("ranks [" + memberList(group.members) +
                               "] to finish reading"));
    }
    return llvm::Error::success();
  }

  std::shared_ptr<ThreadWorld> world_;
};

} // namespace

std::vector<std::unique_ptr<Communicator>>
createThreadCommunicators(const Mesh &mesh, std::chrono::milliseconds timeout) {
  auto world = std::make_shared<ThreadWorld>(mesh.numRanks(), timeout);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int64_t r = 0; r < mesh.numRanks(); ++r)
    ranks.push_back(std::make_unique<ThreadCommunicator>(mesh, r, world));
  return ranks;
}

} // namespace loom
