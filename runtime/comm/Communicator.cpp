#include "runtime/comm/Communicator.h"

#include "runtime/support/FloatTypes.h"

#include "llvm/ADT/STLExtras.h"

#include <cstdlib>
#include <cstring>

namespace loom {

namespace {

int64_t product(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Row-major [outer, dim, inner] split of a shape around `dim`.
void splitAround(llvm::ArrayRef<int64_t> shape, int64_t dim, int64_t &outer,
                 int64_t &inner) {
  outer = product(shape.take_front(dim));
  inner = product(shape.drop_front(dim + 1));
}

/// out[i] = reduce over members m of inputs[m][i], i < count, member 0 first.
void reduceElements(DType dtype, ReduceOp op, llvm::ArrayRef<const uint8_t *> inputs,
                    int64_t count, uint8_t *out) {
  size_t size = dtypeSize(dtype);
  int64_t members = inputs.size();
  if (dtype == DType::I64 || dtype == DType::I32) {
    for (int64_t i = 0; i < count; ++i) {
      int64_t acc = 0;
      for (int64_t m = 0; m < members; ++m) {
        int64_t v;
        if (dtype == DType::I64) {
          std::memcpy(&v, inputs[m] + i * size, 8);
        } else {
          int32_t w;
          std::memcpy(&w, inputs[m] + i * size, 4);
          v = w;
        }
        acc = m == 0 ? v : op == ReduceOp::Max ? std::max(acc, v) : acc + v;
      }
      if (op == ReduceOp::Avg)
        acc /= members;
      if (dtype == DType::I64) {
        std::memcpy(out + i * size, &acc, 8);
      } else {
        int32_t w = static_cast<int32_t>(acc);
        std::memcpy(out + i * size, &w, 4);
      }
    }
    return;
  }
  // Floats accumulate in f32, in chunks so narrow types convert in bulk.
  constexpr int64_t kChunk = 4096;
  std::vector<float> acc(kChunk), values(kChunk);
  for (int64_t start = 0; start < count; start += kChunk) {
    int64_t n = std::min(kChunk, count - start);
    loadFloats(inputs[0], dtype, start, n, acc.data());
    for (int64_t m = 1; m < members; ++m) {
      loadFloats(inputs[m], dtype, start, n, values.data());
      if (op == ReduceOp::Max) {
        for (int64_t i = 0; i < n; ++i)
          acc[i] = values[i] > acc[i] ? values[i] : acc[i];
      } else {
        for (int64_t i = 0; i < n; ++i)
          acc[i] += values[i];
      }
    }
    if (op == ReduceOp::Avg)
      for (int64_t i = 0; i < n; ++i)
        acc[i] /= static_cast<float>(members);
    storeFloats(out, dtype, start, n, acc.data());
  }
}

} // namespace

size_t CollectiveOperands::inBytes() const {
  return in ? product(inShape) * dtypeSize(dtype) : 0;
}
size_t CollectiveOperands::outBytes() const {
  return out ? product(outShape) * dtypeSize(dtype) : 0;
}
size_t ExchangeBuffer::bytes() const { return product(shape) * dtypeSize(dtype); }
size_t Communicator::Transfer::bytes() const { return count * dtypeSize(dtype); }

void combineCollective(const CollectiveDesc &desc, const Group &group,
                       const CollectiveOperands &operands,
                       llvm::ArrayRef<const void *> memberInputs, void *out) {
  DType dtype = operands.dtype;
  size_t size = dtypeSize(dtype);
  int64_t g = group.size();
  auto bytesOf = [](const void *p) { return static_cast<const uint8_t *>(p); };
  auto *dst = static_cast<uint8_t *>(out);
  llvm::ArrayRef<int64_t> inShape = operands.inShape;
  switch (desc.kind) {
  case CollectiveKind::AllReduce: {
    std::vector<const uint8_t *> inputs;
    for (const void *p : memberInputs)
      inputs.push_back(bytesOf(p));
    reduceElements(dtype, desc.reduce, inputs, product(inShape), dst);
    return;
  }
  case CollectiveKind::AllGather: {
    int64_t outer, inner;
    splitAround(inShape, desc.dim, outer, inner);
    size_t chunk = inShape[desc.dim] * inner * size;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t m = 0; m < g; ++m)
        std::memcpy(dst + (o * g + m) * chunk, bytesOf(memberInputs[m]) + o * chunk,
                    chunk);
    return;
  }
  case CollectiveKind::ReduceScatter: {
    int64_t outer, inner;
    splitAround(inShape, desc.dim, outer, inner);
    int64_t chunk = inShape[desc.dim] / g * inner; // elements
    std::vector<const uint8_t *> inputs(g);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t m = 0; m < g; ++m)
        inputs[m] = bytesOf(memberInputs[m]) + ((o * g + group.index) * chunk) * size;
      reduceElements(dtype, desc.reduce, inputs, chunk, dst + o * chunk * size);
    }
    return;
  }
  case CollectiveKind::AllToAll: {
    TensorBlock piece;
    piece.offsets.assign(inShape.size(), 0);
    piece.shape.assign(inShape.begin(), inShape.end());
    piece.shape[desc.splitDim] /= g;
    piece.offsets[desc.splitDim] = group.index * piece.shape[desc.splitDim];
    std::vector<uint8_t> staging(product(piece.shape) * size);
    TensorBlock place;
    place.offsets.assign(inShape.size(), 0);
    place.shape = piece.shape;
    for (int64_t m = 0; m < g; ++m) {
      extractBlock(memberInputs[m], inShape, size, piece, staging.data());
      place.offsets[desc.concatDim] = m * piece.shape[desc.concatDim];
      insertBlock(dst, operands.outShape, size, place, staging.data());
    }
    return;
  }
  case CollectiveKind::Broadcast:
    std::memcpy(dst, memberInputs[desc.root], operands.outBytes());
    return;
  case CollectiveKind::Send:
  case CollectiveKind::Recv:
  case CollectiveKind::Exchange:
    return;
  }
}

const Group &Communicator::groupFor(const std::vector<std::string> &axes,
                                    llvm::Error &err) {
  auto it = groups_.find(axes);
  if (it != groups_.end())
    return it->second;
  auto group = groupOf(mesh_, rank_, axes);
  if (!group) {
    err = group.takeError();
    static const Group empty;
    return empty;
  }
  return groups_.emplace(axes, std::move(*group)).first->second;
}

class Communicator::CollectiveClock {
public:
  explicit CollectiveClock(Communicator &c) : c_(c), start_(std::chrono::steady_clock::now()) {}
  ~CollectiveClock() {
    c_.collectiveNanos_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now() - start_)
                               .count();
  }

private:
  Communicator &c_;
  std::chrono::steady_clock::time_point start_;
};

llvm::Error Communicator::run(const CollectiveDesc &desc,
                              const CollectiveOperands &operands) {
  CollectiveClock clock(*this);
  std::string label = collectiveKindName(desc.kind) + " on rank " + std::to_string(rank_);
  auto failure = [&](const std::string &problem) {
    return llvm::createStringError(std::errc::invalid_argument, "%s: %s",
                                   label.c_str(), problem.c_str());
  };
  bool isP2P = desc.kind == CollectiveKind::Send || desc.kind == CollectiveKind::Recv;
  const Group *group = nullptr;
  if (!isP2P) {
    llvm::Error err = llvm::Error::success();
    group = &groupFor(desc.axes, err);
    if (err)
      return failure(llvm::toString(std::move(err)));
  } else if (desc.peer < 0 || desc.peer >= numRanks() || desc.peer == rank_) {
    return failure("peer " + std::to_string(desc.peer) + " is not another rank of " +
                   std::to_string(numRanks()));
  }
  std::string problem = checkCollectiveTypes(
      desc, group ? group->size() : 0, operands.in ? &operands.dtype : nullptr,
      operands.in ? &operands.inShape : nullptr, operands.out ? &operands.dtype : nullptr,
      operands.out ? &operands.outShape : nullptr);
  if (!problem.empty())
    return failure(problem);
  llvm::Error err = isP2P ? runPointToPoint(desc, operands) : runGroup(desc, *group, operands);
  if (err)
    return failure(llvm::toString(std::move(err)));
  return llvm::Error::success();
}

llvm::Error Communicator::runBucket(const CollectiveDesc &desc,
                                    llvm::ArrayRef<CollectiveOperands> operands) {
  if (operands.size() == 1)
    return run(desc, operands[0]);
  CollectiveClock clock(*this);
  std::string label = collectiveKindName(desc.kind) + " bucket of " +
                      std::to_string(operands.size()) + " on rank " + std::to_string(rank_);
  auto failure = [&](const std::string &problem) {
    return llvm::createStringError(std::errc::invalid_argument, "%s: %s", label.c_str(),
                                   problem.c_str());
  };
  if (!isBucketable(desc.kind))
    return failure("only all_reduce and reduce_scatter take a bucket of several tensors");
  if (operands.empty())
    return failure("the bucket is empty");
  llvm::Error err = llvm::Error::success();
  const Group &group = groupFor(desc.axes, err);
  if (err)
    return failure(llvm::toString(std::move(err)));
  for (size_t i = 0; i < operands.size(); ++i) {
    const CollectiveOperands &o = operands[i];
    std::string problem = checkCollectiveTypes(
        desc, group.size(), o.in ? &o.dtype : nullptr, o.in ? &o.inShape : nullptr,
        o.out ? &o.dtype : nullptr, o.out ? &o.outShape : nullptr);
    if (!problem.empty())
      return failure("entry " + std::to_string(i) + ": " + problem);
  }
  if (llvm::Error failed = runGroupBucket(desc, group, operands))
    return failure(llvm::toString(std::move(failed)));
  return llvm::Error::success();
}

llvm::Error Communicator::runGroupBucket(const CollectiveDesc &desc, const Group &group,
                                         llvm::ArrayRef<CollectiveOperands> operands) {
  for (size_t i = 0; i < operands.size(); ++i)
    if (llvm::Error err = runGroup(desc, group, operands[i]))
      return llvm::createStringError(std::errc::invalid_argument, "entry %zu: %s", i,
                                     llvm::toString(std::move(err)).c_str());
  return llvm::Error::success();
}

llvm::Error Communicator::runPointToPoint(const CollectiveDesc &desc,
                                          const CollectiveOperands &operands) {
  if (desc.kind == CollectiveKind::Send)
    return sendBytes(operands.in, operands.inBytes(), desc.peer);
  return recvBytes(operands.out, operands.outBytes(), desc.peer);
}

llvm::Error Communicator::exchange(const CollectiveDesc &desc,
                                   llvm::ArrayRef<ExchangeBuffer> sends,
                                   llvm::ArrayRef<ExchangeBuffer> recvs, void *stream) {
  CollectiveClock clock(*this);
  std::string label = "exchange on rank " + std::to_string(rank_);
  auto failure = [&](const std::string &problem) {
    return llvm::createStringError(std::errc::invalid_argument, "%s: %s", label.c_str(),
                                   problem.c_str());
  };
  if (desc.kind != CollectiveKind::Exchange)
    return failure("the description is a " + collectiveKindName(desc.kind) +
                   ", not an exchange");
  llvm::Error err = llvm::Error::success();
  const Group &group = groupFor(desc.axes, err);
  if (err)
    return failure(llvm::toString(std::move(err)));
  std::vector<DType> sendTypes, recvTypes;
  for (const ExchangeBuffer &b : sends)
    sendTypes.push_back(b.dtype);
  for (const ExchangeBuffer &b : recvs)
    recvTypes.push_back(b.dtype);
  std::string problem = checkExchange(desc, group.size(), sendTypes, recvTypes);
  if (!problem.empty())
    return failure(problem);
  // Group indices become absolute ranks.
  std::vector<Transfer> transfers[2];
  for (bool sending : {true, false}) {
    llvm::ArrayRef<ExchangeBuffer> buffers = sending ? sends : recvs;
    const std::vector<int64_t> &peers = sending ? desc.sendPeers : desc.recvPeers;
    for (size_t i = 0; i < buffers.size(); ++i) {
      const ExchangeBuffer &b = buffers[i];
      std::string which = std::string(sending ? "send " : "receive ") + std::to_string(i);
      if (llvm::any_of(b.shape, [](int64_t d) { return d < 0; }))
        return failure(which + ": the shape has a negative dimension");
      if (!b.data && b.bytes() > 0)
        return failure(which + ": no memory for " + std::to_string(b.bytes()) + " bytes");
      transfers[sending ? 0 : 1].push_back(
          {group.members[peers[i]], b.dtype, b.data, product(b.shape)});
    }
  }
  if (llvm::Error failed = runExchange(transfers[0], transfers[1], stream))
    return failure(llvm::toString(std::move(failed)));
  return llvm::Error::success();
}

llvm::Error Communicator::runExchange(llvm::ArrayRef<Transfer> sends,
                                      llvm::ArrayRef<Transfer> recvs, void *) {
  for (size_t i = 0; i < sends.size(); ++i)
    if (llvm::Error err = sendBytes(sends[i].data, sends[i].bytes(), sends[i].peer))
      return llvm::createStringError(std::errc::io_error, "send %zu to rank %lld: %s", i,
                                     (long long)sends[i].peer,
                                     llvm::toString(std::move(err)).c_str());
  for (size_t j = 0; j < recvs.size(); ++j)
    if (llvm::Error err = recvBytes(recvs[j].data, recvs[j].bytes(), recvs[j].peer))
      return llvm::createStringError(std::errc::io_error, "receive %zu from rank %lld: %s", j,
                                     (long long)recvs[j].peer,
                                     llvm::toString(std::move(err)).c_str());
  return llvm::Error::success();
}

namespace {
std::vector<int64_t> vec(llvm::ArrayRef<int64_t> a) { return {a.begin(), a.end()}; }
std::vector<std::string> vec(llvm::ArrayRef<std::string> a) { return {a.begin(), a.end()}; }
} // namespace

llvm::Error Communicator::allReduce(const void *in, void *out, DType dtype,
                                    llvm::ArrayRef<int64_t> shape, ReduceOp op,
                                    llvm::ArrayRef<std::string> axes) {
  CollectiveDesc desc;
  desc.kind = CollectiveKind::AllReduce;
  desc.axes = vec(axes);
  desc.reduce = op;
  return run(desc, {dtype, in, vec(shape), out, vec(shape)});
}

llvm::Error Communicator::allGather(const void *in, llvm::ArrayRef<int64_t> inShape,
                                    void *out, DType dtype, int64_t dim,
                                    llvm::ArrayRef<std::string> axes) {
  CollectiveDesc desc;
  desc.kind = CollectiveKind::AllGather;
  desc.axes = vec(axes);
  desc.dim = dim;
  std::vector<int64_t> outShape = vec(inShape);
  llvm::Error err = llvm::Error::success();
  const Group &group = groupFor(desc.axes, err);
  if (err)
    return err;
  if (dim >= 0 && dim < int64_t(outShape.size()))
    outShape[dim] *= group.size();
  return run(desc, {dtype, in, vec(inShape), out, outShape});
}

llvm::Error Communicator::reduceScatter(const void *in, llvm::ArrayRef<int64_t> inShape,
                                        void *out, DType dtype, int64_t dim, ReduceOp op,
                                        llvm::ArrayRef<std::string> axes) {
  CollectiveDesc desc;
  desc.kind = CollectiveKind::ReduceScatter;
  desc.axes = vec(axes);
  desc.dim = dim;
  desc.reduce = op;
  std::vector<int64_t> outShape = vec(inShape);
  llvm::Error err = llvm::Error::success();
  const Group &group = groupFor(desc.axes, err);
  if (err)
    return err;
  if (dim >= 0 && dim < int64_t(outShape.size()))
    outShape[dim] /= group.size();
  return run(desc, {dtype, in, vec(inShape), out, outShape});
}

llvm::Error Communicator::allToAll(const void *in, llvm::ArrayRef<int64_t> inShape,
                                   void *out, DType dtype, int64_t splitDim,
                                   int64_t concatDim, llvm::ArrayRef<std::string> axes) {
  CollectiveDesc desc;
  desc.kind = CollectiveKind::AllToAll;
  desc.axes = vec(axes);
  desc.splitDim = splitDim;
  desc.concatDim = concatDim;
  std::vector<int64_t> outShape = vec(inShape);
  llvm::Error err = llvm::Error::success();
  const Group &group = groupFor(desc.axes, err);
  if (err)
    return err;
  int64_t rank = outShape.size();
  if (splitDim >= 0 && splitDim < rank && concatDim >= 0 && concatDim < rank) {
    outShape[splitDim] /= group.size();
    outShape[concatDim] *= group.size();
  }
  return run(desc, {dtype, in, vec(inShape), out, outShape});
}

llvm::Error Communicator::broadcast(const void *in, void *out, DType dtype,
                                    llvm::ArrayRef<int64_t> shape, int64_t root,
                                    llvm::ArrayRef<std::string> axes) {
  CollectiveDesc desc;
  desc.kind = CollectiveKind::Broadcast;
  desc.axes = vec(axes);
  desc.root = root;
  return run(desc, {dtype, in, vec(shape), out, vec(shape)});
}

llvm::Error Communicator::send(const void *in, DType dtype, llvm::ArrayRef<int64_t> shape,
                               int64_t peer) {
  CollectiveDesc desc;
  desc.kind = CollectiveKind::Send;
  desc.peer = peer;
  return run(desc, {dtype, in, vec(shape), nullptr, {}});
}

llvm::Error Communicator::recv(void *out, DType dtype, llvm::ArrayRef<int64_t> shape,
                               int64_t peer) {
  CollectiveDesc desc;
  desc.kind = CollectiveKind::Recv;
  desc.peer = peer;
  return run(desc, {dtype, nullptr, {}, out, vec(shape)});
}

bool launchedUnderMpi() {
  return std::getenv("OMPI_COMM_WORLD_RANK") || std::getenv("PMI_RANK") ||
         std::getenv("PMIX_RANK");
}

} // namespace loom
