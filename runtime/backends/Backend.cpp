// What every backend shares: collectives and exchanges through the attached
// communicator.

#include "runtime/backends/Backend.h"

#include "runtime/support/FloatTypes.h"

#include <cstring>

namespace loom {

namespace {

llvm::Error noCommunicator(const CollectiveDesc &desc) {
  return llvm::createStringError(std::errc::invalid_argument,
                                 "%s needs a communicator, and none is attached",
                                 collectiveKindName(desc.kind).c_str());
}

std::vector<ExchangeBuffer> exchangeBuffers(llvm::ArrayRef<DeviceTensor> tensors) {
  std::vector<ExchangeBuffer> buffers;
  for (const DeviceTensor &t : tensors)
    buffers.push_back({t.dtype, t.data, t.shape});
  return buffers;
}

} // namespace

namespace {
/// A copy already in host memory.
class ReadyHostCopy final : public PendingHostCopy {
public:
  std::vector<std::vector<uint8_t>> regions;
  llvm::Error wait() override { return llvm::Error::success(); }
  const uint8_t *region(size_t i) const override { return regions[i].data(); }
};
} // namespace

llvm::Expected<std::unique_ptr<PendingHostCopy>>
Backend::copyToHostAsync(llvm::ArrayRef<std::pair<const void *, size_t>> regions,
                         llvm::ArrayRef<size_t>) {
  auto copy = std::make_unique<ReadyHostCopy>();
  for (auto [address, bytes] : regions) {
    copy->regions.emplace_back(bytes);
    if (auto err = copyToHost(copy->regions.back().data(), address, bytes))
      return std::move(err);
  }
  return std::unique_ptr<PendingHostCopy>(std::move(copy));
}

llvm::Error Backend::launch(std::string_view kernel, llvm::ArrayRef<DeviceTensor> inputs,
                            llvm::ArrayRef<DeviceTensor> outputs, const KernelAttrs &attrs,
                            unsigned stream) {
  std::optional<KernelId> id = findKernel(kernel);
  if (!id)
    return llvm::createStringError(std::errc::invalid_argument, "unknown kernel '%s'",
                                   std::string(kernel).c_str());
  return launch(*id, inputs, outputs, attrs, stream);
}

llvm::Error Backend::collective(const CollectiveDesc &desc, const DeviceTensor *in,
                                const DeviceTensor *out, unsigned stream) {
  if (!communicator_)
    return noCommunicator(desc);
  CollectiveOperands operands;
  operands.dtype = in ? in->dtype : out ? out->dtype : DType::F32;
  if (in)
    operands.inShape = in->shape;
  if (out)
    operands.outShape = out->shape;
  if (name() == "cpu") { // host memory: the communicator works in place
    operands.in = in ? in->data : nullptr;
    operands.out = out ? out->data : nullptr;
    return communicator_->run(desc, operands);
  }
  // Device memory: wait for the stream's work, run on host copies.
  if (auto err = synchronize())
    return err;
  std::vector<uint8_t> hostIn(in ? in->sizeInBytes() : 0), hostOut(out ? out->sizeInBytes() : 0);
  if (in)
    if (auto err = copyToHost(hostIn.data(), in->data, hostIn.size()))
      return err;
  operands.in = in ? hostIn.data() : nullptr;
  operands.out = out ? hostOut.data() : nullptr;
  if (auto err = communicator_->run(desc, operands))
    return err;
  if (out)
    return copyToDevice(out->data, hostOut.data(), hostOut.size());
  return llvm::Error::success();
}

llvm::Error Backend::collectiveBucket(const CollectiveDesc &desc,
                                      llvm::ArrayRef<DeviceTensor> ins,
                                      llvm::ArrayRef<DeviceTensor> outs, unsigned) {
  if (!communicator_)
    return noCommunicator(desc);
  if (ins.size() != outs.size())
    return llvm::createStringError(std::errc::invalid_argument,
                                   "%s bucket: %zu inputs but %zu outputs",
                                   collectiveKindName(desc.kind).c_str(), ins.size(), outs.size());
  bool host = name() == "cpu"; // host memory: the communicator works in place
  if (!host)
    if (auto err = synchronize())
      return err;
  std::vector<std::vector<uint8_t>> hostIns, hostOuts;
  std::vector<CollectiveOperands> operands(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) {
    CollectiveOperands &o = operands[i];
    o.dtype = ins[i].dtype;
    o.inShape = ins[i].shape;
    o.outShape = outs[i].shape;
    if (host) {
      o.in = ins[i].data;
      o.out = outs[i].data;
      continue;
    }
    hostIns.emplace_back(ins[i].sizeInBytes());
    hostOuts.emplace_back(outs[i].sizeInBytes());
    if (auto err = copyToHost(hostIns.back().data(), ins[i].data, hostIns.back().size()))
      return err;
    o.in = hostIns.back().data();
    o.out = hostOuts.back().data();
  }
  if (auto err = communicator_->runBucket(desc, operands))
    return err;
  if (!host)
    for (size_t i = 0; i < outs.size(); ++i)
      if (auto err = copyToDevice(outs[i].data, hostOuts[i].data(), hostOuts[i].size()))
        return err;
  return llvm::Error::success();
}

llvm::Error Backend::exchangeUnstaged(const CollectiveDesc &desc,
                                      llvm::ArrayRef<DeviceTensor> sends,
                                      llvm::ArrayRef<DeviceTensor> recvs, void *commStream) {
  if (!communicator_)
    return noCommunicator(desc);
  return communicator_->exchange(desc, exchangeBuffers(sends), exchangeBuffers(recvs),
                                 commStream);
}

llvm::Error Backend::exchange(const CollectiveDesc &desc, llvm::ArrayRef<DeviceTensor> sends,
                              llvm::ArrayRef<DeviceTensor> recvs, unsigned) {
  if (!communicator_)
    return noCommunicator(desc);
  // Device memory: wait for the streams' work, exchange host copies.
  if (auto err = synchronize())
    return err;
  std::vector<std::vector<uint8_t>> hostSends, hostRecvs;
  std::vector<DeviceTensor> stagedSends, stagedRecvs;
  for (const DeviceTensor &t : sends) {
    hostSends.emplace_back(t.sizeInBytes());
    if (auto err = copyToHost(hostSends.back().data(), t.data, hostSends.back().size()))
      return err;
  }
  for (const DeviceTensor &t : recvs)
    hostRecvs.emplace_back(t.sizeInBytes());
  for (size_t i = 0; i < sends.size(); ++i)
    stagedSends.push_back({hostSends[i].data(), sends[i].dtype, sends[i].shape});
  for (size_t j = 0; j < recvs.size(); ++j)
    stagedRecvs.push_back({hostRecvs[j].data(), recvs[j].dtype, recvs[j].shape});
  if (auto err = exchangeUnstaged(desc, stagedSends, stagedRecvs, nullptr))
    return err;
  for (size_t j = 0; j < recvs.size(); ++j)
    if (auto err = copyToDevice(recvs[j].data, hostRecvs[j].data(), hostRecvs[j].size()))
      return err;
  return llvm::Error::success();
}

namespace {
/// An i32 or i64 tensor's values as int64 (host memory).
std::vector<int64_t> indexValues(const std::vector<uint8_t> &bytes, DType dtype) {
  std::vector<int64_t> values;
  if (dtype == DType::I32) {
    values.resize(bytes.size() / 4);
    for (size_t i = 0; i < values.size(); ++i) {
      int32_t v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      values[i] = v;
    }
  } else {
    values.resize(bytes.size() / 8);
    std::memcpy(values.data(), bytes.data(), values.size() * 8);
  }
  return values;
}
} // namespace

llvm::Expected<Backend::RowMoves>
Backend::planRowMoves(const CollectiveDesc &desc, const DeviceTensor &data,
                      const DeviceTensor &rows, const DeviceTensor &ranges,
                      const DeviceTensor &out) {
  if (!communicator_)
    return noCommunicator(desc);
  const bool scatter = desc.kind == CollectiveKind::ScatterRows;
  std::string problem =
      checkGatherRows(desc, 0, {data.dtype, data.shape}, {rows.dtype, rows.shape},
                      {ranges.dtype, ranges.shape}, {out.dtype, out.shape});
  if (!problem.empty())
    return llvm::createStringError(std::errc::invalid_argument, "%s", problem.c_str());
  auto group = groupOf(communicator_->mesh(), communicator_->rank(), desc.axes);
  if (!group)
    return group.takeError();
  RowMoves moves;
  moves.me = group->index;
  moves.members = group->size();
  if (ranges.shape[0] != moves.members)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "%s: ranges name %lld members, the group has %lld",
                                   collectiveKindName(desc.kind).c_str(),
                                   (long long)ranges.shape[0], (long long)moves.members);
  if (auto err = synchronize())
    return std::move(err);
  std::vector<uint8_t> rowsHost(rows.sizeInBytes()), rangesHost(ranges.sizeInBytes());
  if (auto err = copyToHost(rowsHost.data(), rows.data, rowsHost.size()))
    return std::move(err);
  if (auto err = copyToHost(rangesHost.data(), ranges.data, rangesHost.size()))
    return std::move(err);
  // The rows of the split tensor each member holds: data's (gather) or
  // out's (scatter).
  RowExchangePlan plan;
  problem = planGatherRows(moves.me, moves.members, scatter ? out.shape[0] : data.shape[0],
                           indexValues(rowsHost, rows.dtype),
                           indexValues(rangesHost, ranges.dtype), plan);
  if (!problem.empty())
    return llvm::createStringError(std::errc::invalid_argument, "%s: %s",
                                   collectiveKindName(desc.kind).c_str(), problem.c_str());
  // A gather sends plan.sends[q] (rows of data) to q and receives
  // plan.receives[q] (rows of out) from it; a scatter the transpose: it
  // sends plan.receives[q] (rows of y) to q and receives, from q, values
  // for plan.sends[q] (rows of out).
  moves.sent = scatter ? std::move(plan.receives) : std::move(plan.sends);
  moves.placed = scatter ? std::move(plan.sends) : std::move(plan.receives);
  return moves;
}

llvm::Error Backend::moveRows(const CollectiveDesc &desc, const DeviceTensor &data,
                              const DeviceTensor &rows, const DeviceTensor &ranges,
                              const DeviceTensor &out, unsigned) {
  auto moves = planRowMoves(desc, data, rows, ranges, out);
  if (!moves)
    return moves.takeError();
  const bool scatter = desc.kind == CollectiveKind::ScatterRows;
  const int64_t me = moves->me, members = moves->members;
  const std::vector<std::vector<int64_t>> &sent = moves->sent, &placed = moves->placed;
  std::vector<uint8_t> dataHost(data.sizeInBytes());
  if (auto err = copyToHost(dataHost.data(), data.data, dataHost.size()))
    return err;
  const int64_t rowElements = data.shape[0] > 0 ? data.numElements() / data.shape[0] : 0;
  const size_t rowBytes = rowElements * dtypeSize(data.dtype);
  CollectiveDesc exchange;
  exchange.kind = CollectiveKind::Exchange;
  exchange.axes = desc.axes;
  std::vector<std::vector<uint8_t>> packed, received(members);
  std::vector<DeviceTensor> sends, recvs;
  auto rowShape = [&](size_t count) {
    std::vector<int64_t> shape = data.shape;
    shape[0] = static_cast<int64_t>(count);
    return shape;
  };
  for (int64_t q = 0; q < members; ++q) {
    if (q == me)
      continue;
    if (!sent[q].empty()) {
      std::vector<uint8_t> &buffer = packed.emplace_back(sent[q].size() * rowBytes);
      for (size_t k = 0; k < sent[q].size(); ++k)
        std::memcpy(buffer.data() + k * rowBytes, dataHost.data() + sent[q][k] * rowBytes,
                    rowBytes);
      exchange.sendPeers.push_back(q);
    }
    if (!placed[q].empty()) {
      received[q].resize(placed[q].size() * rowBytes);
      exchange.recvPeers.push_back(q);
    }
  }
  for (std::vector<uint8_t> &buffer : packed)
    sends.push_back({buffer.data(), data.dtype, rowShape(buffer.size() / rowBytes)});
  for (int64_t q : exchange.recvPeers)
    recvs.push_back({received[q].data(), data.dtype, rowShape(placed[q].size())});
  if (rowBytes > 0 && (!sends.empty() || !recvs.empty()))
    if (auto err = exchangeUnstaged(exchange, sends, recvs, nullptr))
      return err;
  // This member's own rows need no transfer.
  {
    std::vector<uint8_t> &own = received[me];
    own.resize(placed[me].size() * rowBytes);
    for (size_t k = 0; k < sent[me].size(); ++k)
      std::memcpy(own.data() + k * rowBytes, dataHost.data() + sent[me][k] * rowBytes,
                  rowBytes);
  }
  std::vector<uint8_t> outHost(out.sizeInBytes(), 0);
  if (!scatter) {
    for (int64_t q = 0; q < members; ++q)
      for (size_t k = 0; k < placed[q].size(); ++k)
        std::memcpy(outHost.data() + placed[q][k] * rowBytes, received[q].data() + k * rowBytes,
                    rowBytes);
    return copyToDevice(out.data, outHost.data(), outHost.size());
  }
  // Sums, members in group order and each member's rows in order.
  const bool integer = data.dtype == DType::I64 || data.dtype == DType::I32;
  std::vector<double> sums(static_cast<size_t>(out.numElements()), 0.0);
  std::vector<float> values(rowElements);
  for (int64_t q = 0; q < members; ++q)
    for (size_t k = 0; k < placed[q].size(); ++k) {
      double *target = sums.data() + placed[q][k] * rowElements;
      const uint8_t *row = received[q].data() + k * rowBytes;
      if (integer) {
        for (int64_t e = 0; e < rowElements; ++e) {
          int64_t v;
          if (data.dtype == DType::I64) {
            std::memcpy(&v, row + 8 * e, 8);
          } else {
            int32_t w;
            std::memcpy(&w, row + 4 * e, 4);
            v = w;
          }
          target[e] += static_cast<double>(v);
        }
      } else {
        loadFloats(row, data.dtype, 0, rowElements, values.data());
        // f32 accumulation, as the reductions of Communicator.cpp.
        for (int64_t e = 0; e < rowElements; ++e)
          target[e] = static_cast<float>(static_cast<float>(target[e]) + values[e]);
      }
    }
  if (integer) {
    for (int64_t e = 0; e < out.numElements(); ++e) {
      const int64_t v = static_cast<int64_t>(sums[e]);
      if (data.dtype == DType::I64) {
        std::memcpy(outHost.data() + 8 * e, &v, 8);
      } else {
        const int32_t w = static_cast<int32_t>(v);
        std::memcpy(outHost.data() + 4 * e, &w, 4);
      }
    }
  } else {
    std::vector<float> narrow(sums.begin(), sums.end());
    storeFloats(outHost.data(), data.dtype, 0, out.numElements(), narrow.data());
  }
  return copyToDevice(out.data, outHost.data(), outHost.size());
}

} // namespace loom
