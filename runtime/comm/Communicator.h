#ifndef LOOM_RUNTIME_COMM_COMMUNICATOR_H
#define LOOM_RUNTIME_COMM_COMMUNICATOR_H

// Collectives between the ranks of a mesh, on raw typed buffers. One
// Communicator per rank; three implementations:
//   threads  ranks are threads of one process, meeting in shared memory
//   mpi      ranks are processes started by mpirun (built when MPI is found)
//   nccl     one GPU per rank (CUDA builds; bootstrapped through MPI or
//            in-process)
// Reductions on threads and MPI run in group order (member 0 first) with the
// accumulation of Collective.h, so their results are bitwise identical to
// each other and independent of timing.

#include "runtime/abi/Collective.h"
#include "runtime/abi/Mesh.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace loom {

/// One rank's operands of a collective. `in` is null for recv, `out` for send.
struct CollectiveOperands {
  DType dtype = DType::F32;
  const void *in = nullptr;
  std::vector<int64_t> inShape;
  void *out = nullptr;
  std::vector<int64_t> outShape;
  /// NCCL: the cudaStream_t to run on (null: the default stream).
  void *stream = nullptr;
  size_t inBytes() const;
  size_t outBytes() const;
};

/// One buffer of an exchange: `shape` elements of `dtype` at `data` (read
/// for a send, written for a receive).
struct ExchangeBuffer {
  DType dtype = DType::F32;
  void *data = nullptr;
  std::vector<int64_t> shape;
  size_t bytes() const;
};

class Communicator {
public:
  Communicator(Mesh mesh, int64_t rank) : mesh_(std::move(mesh)), rank_(rank) {}
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;

  const Mesh &mesh() const { return mesh_; }
  int64_t rank() const { return rank_; }
  int64_t numRanks() const { return mesh_.numRanks(); }

  /// Runs `desc` on this rank's operands; every member of the group must
  /// make the same call. Errors name the collective, the rank and the cause
  /// (bad shapes, a peer that never came within the timeout, an abort).
  llvm::Error run(const CollectiveDesc &desc, const CollectiveOperands &operands);

  /// A bucket: `desc` (all_reduce or reduce_scatter) on each of `operands`,
  /// input i into output i, issued together. NCCL enqueues them in one group
  /// on the operands' stream (one launch, no copies); threads and MPI run
  /// them one after another. Every member of the group makes the same call
  /// with the same number of tensors. Errors name the bucket entry.
  llvm::Error runBucket(const CollectiveDesc &desc,
                        llvm::ArrayRef<CollectiveOperands> operands);

  // The same, one call per kind.
  llvm::Error allReduce(const void *in, void *out, DType dtype,
                        llvm::ArrayRef<int64_t> shape, ReduceOp op,
                        llvm::ArrayRef<std::string> axes);
  llvm::Error allGather(const void *in, llvm::ArrayRef<int64_t> inShape,
                        void *out, DType dtype, int64_t dim,
                        llvm::ArrayRef<std::string> axes);
  llvm::Error reduceScatter(const void *in, llvm::ArrayRef<int64_t> inShape,
                            void *out, DType dtype, int64_t dim, ReduceOp op,
                            llvm::ArrayRef<std::string> axes);
  llvm::Error allToAll(const void *in, llvm::ArrayRef<int64_t> inShape,
                       void *out, DType dtype, int64_t splitDim,
                       int64_t concatDim, llvm::ArrayRef<std::string> axes);
  llvm::Error broadcast(const void *in, void *out, DType dtype,
                        llvm::ArrayRef<int64_t> shape, int64_t root,
                        llvm::ArrayRef<std::string> axes);
  llvm::Error send(const void *in, DType dtype, llvm::ArrayRef<int64_t> shape,
                   int64_t peer);
  llvm::Error recv(void *out, DType dtype, llvm::ArrayRef<int64_t> shape,
                   int64_t peer);

  /// One group of point-to-point transfers (an exchange `desc`): sends[i]
  /// goes to member desc.sendPeers[i] of this rank's group over desc.axes,
  /// recvs[j] comes from member desc.recvPeers[j]. All transfers are in
  /// flight at once, so two ranks that send to each other cannot deadlock;
  /// transfers between two ranks match in order (the k-th send from A to B,
  /// within or across exchanges, lands in B's k-th receive from A). Errors
  /// name the transfer and its peer. NCCL enqueues the transfers on `stream`
  /// (a cudaStream_t; null: the default stream) and returns; the others
  /// return once every transfer is done.
  llvm::Error exchange(const CollectiveDesc &desc, llvm::ArrayRef<ExchangeBuffer> sends,
                       llvm::ArrayRef<ExchangeBuffer> recvs, void *stream = nullptr);

  /// Seconds this rank has spent inside run, runBucket and exchange since it
  /// was created: waiting for its peers and moving data on threads and MPI;
  /// only enqueueing on NCCL, whose transfers run on the GPU.
  double collectiveSeconds() const { return double(collectiveNanos_.load()) * 1e-9; }

  /// Raw bytes between two ranks (checkpoint gathering); sizes must match.
  virtual llvm::Error sendBytes(const void *data, size_t bytes, int64_t peer) = 0;
  virtual llvm::Error recvBytes(void *data, size_t bytes, int64_t peer) = 0;
  /// Waits for every rank of the mesh.
  virtual llvm::Error barrier() = 0;

  /// Gives up: peers waiting on this rank fail promptly instead of timing
  /// out (threads), or the whole job ends (MPI).
  virtual void abort(const std::string &reason) = 0;

protected:
  /// A collective over `group` (send/recv excluded); operands are checked.
  virtual llvm::Error runGroup(const CollectiveDesc &desc, const Group &group,
                               const CollectiveOperands &operands) = 0;
  /// A checked bucket over `group`; by default runGroup on each entry in
  /// order (every rank makes the calls in the same order).
  virtual llvm::Error runGroupBucket(const CollectiveDesc &desc, const Group &group,
                                     llvm::ArrayRef<CollectiveOperands> operands);
  /// send/recv; by default raw bytes through sendBytes/recvBytes.
  virtual llvm::Error runPointToPoint(const CollectiveDesc &desc,
                                      const CollectiveOperands &operands);
  /// One transfer of an exchange, its peer resolved to an absolute rank.
  struct Transfer {
    int64_t peer = 0;
    DType dtype = DType::F32;
    void *data = nullptr;
    int64_t count = 0; // elements
    size_t bytes() const;
  };
  /// The transfers of a checked exchange, all posted before any is waited
  /// for. By default every send (sendBytes), then every receive: right only
  /// where sendBytes never blocks (threads buffer what they send).
  virtual llvm::Error runExchange(llvm::ArrayRef<Transfer> sends,
                                  llvm::ArrayRef<Transfer> recvs, void *stream);
  const Group &groupFor(const std::vector<std::string> &axes, llvm::Error &err);

private:
  Mesh mesh_;
  int64_t rank_;
  std::map<std::vector<std::string>, Group> groups_;
  std::atomic<int64_t> collectiveNanos_{0};
  /// Adds the time from its creation to its end to collectiveNanos_.
  class CollectiveClock;
};

/// This rank's output of `desc` from every member's input, in group order:
/// what each implementation computes once the inputs are at hand.
void combineCollective(const CollectiveDesc &desc, const Group &group,
                       const CollectiveOperands &operands,
                       llvm::ArrayRef<const void *> memberInputs, void *out);

/// One communicator per rank of `mesh`, for one thread each. A wait longer
/// than `timeout` (a peer that died or never calls) fails with an error.
std::vector<std::unique_ptr<Communicator>>
createThreadCommunicators(const Mesh &mesh, std::chrono::milliseconds timeout =
                                                std::chrono::minutes(10));

/// Whether this process was started by mpirun/srun (OMPI_COMM_WORLD_RANK,
/// PMI_RANK or PMIX_RANK in the environment).
bool launchedUnderMpi();
/// Whether this build has the MPI communicator.
bool haveMpi();
/// This process's communicator under mpirun: initializes MPI and checks that
/// the job has as many processes as the mesh has ranks. A wait longer than
/// `timeout` fails, naming the ranks that never came.
llvm::Expected<std::unique_ptr<Communicator>>
createMpiCommunicator(const Mesh &mesh,
                      std::chrono::milliseconds timeout = std::chrono::minutes(10));

/// Whether this build has the NCCL communicator (CUDA builds).
bool haveNccl();
/// One NCCL communicator per rank of `mesh` in this process, rank r on GPU
/// `devices[r]`, with the sub-group communicators of `groups` (every axes
/// list the executable's collectives use). `hosts[r]` (optional) carries
/// rank r's host-memory traffic (checkpoint gathering). `peers[r]` lists
/// the ranks that rank r sends to or receives from point to point (the
/// relation must be symmetric): those connections are made here, before any
/// work runs. NCCL otherwise connects a pair at its first transfer, with
/// both host threads taking part, and a rank whose GPU is blocked in a
/// large send can then wait forever on a peer that is itself connecting.
llvm::Expected<std::vector<std::unique_ptr<Communicator>>>
createNcclCommunicators(const Mesh &mesh, llvm::ArrayRef<int> devices,
                        llvm::ArrayRef<std::vector<std::string>> groups,
                        llvm::ArrayRef<std::vector<int64_t>> peers,
                        llvm::ArrayRef<Communicator *> hosts);
/// This process's NCCL communicator under mpirun on GPU `device`: `host`
/// (the MPI communicator) carries the unique id from rank 0 and the host
/// traffic; it must outlive the result. `peers`: this rank's point-to-point
/// peers, connected here (see createNcclCommunicators).
llvm::Expected<std::unique_ptr<Communicator>>
createNcclCommunicator(const Mesh &mesh, int device, Communicator &host,
                       llvm::ArrayRef<std::vector<std::string>> groups,
                       llvm::ArrayRef<int64_t> peers);

} // namespace loom

#endif
