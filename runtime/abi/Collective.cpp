#include "runtime/abi/Collective.h"

#include <algorithm>

namespace loom {

namespace {
constexpr const char *kCollectiveNames[kNumCollectiveKinds] = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
    "broadcast",  "send",       "recv",       "exchange", "gather_rows", "scatter_rows"};
constexpr const char *kReduceNames[kNumReduceOps] = {"sum", "max", "avg"};
} // namespace

std::string collectiveKindName(CollectiveKind kind) {
  int k = static_cast<int>(kind);
  return k < kNumCollectiveKinds ? kCollectiveNames[k]
                                 : "kind(" + std::to_string(k) + ")";
}

std::optional<CollectiveKind> parseCollectiveKind(std::string_view name) {
  for (int k = 0; k < kNumCollectiveKinds; ++k)
    if (name == kCollectiveNames[k])
      return static_cast<CollectiveKind>(k);
  return std::nullopt;
}

std::string reduceOpName(ReduceOp op) {
  int k = static_cast<int>(op);
  return k < kNumReduceOps ? kReduceNames[k] : "reduce(" + std::to_string(k) + ")";
}

std::optional<ReduceOp> parseReduceOp(std::string_view name) {
  for (int k = 0; k < kNumReduceOps; ++k)
    if (name == kReduceNames[k])
      return static_cast<ReduceOp>(k);
  return std::nullopt;
}

bool isBucketable(CollectiveKind kind) {
  return kind == CollectiveKind::AllReduce || kind == CollectiveKind::ReduceScatter;
}

bool isCollectiveDType(DType dtype) {
  return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16 ||
         dtype == DType::I64 || dtype == DType::I32 || dtype == DType::F8E4M3FN ||
         dtype == DType::F8E5M2;
}

bool isReducedDType(DType dtype) {
  return isCollectiveDType(dtype) && dtype != DType::F8E4M3FN && dtype != DType::F8E5M2;
}

namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace

std::string checkCollectiveTypes(const CollectiveDesc &desc, int64_t groupSize,
                                 const DType *inType,
                                 const std::vector<int64_t> *inShape,
                                 const DType *outType,
                                 const std::vector<int64_t> *outShape) {
  std::string name = collectiveKindName(desc.kind);
  if (static_cast<int>(desc.kind) >= kNumCollectiveKinds)
    return "invalid collective kind " + std::to_string(int(desc.kind));
  if (static_cast<int>(desc.reduce) >= kNumReduceOps)
    return name + ": invalid reduction " + std::to_string(int(desc.reduce));
  if (desc.kind == CollectiveKind::Exchange)
    return name + " moves lists of buffers, not one input and one output";
  if (desc.kind == CollectiveKind::GatherRows || desc.kind == CollectiveKind::ScatterRows)
    return name + " takes three inputs (the rows, their indices and the ranges), not one";
  if (!desc.sendPeers.empty() || !desc.recvPeers.empty())
    return name + " takes no send or receive peers (only an exchange does)";
  bool wantsIn = desc.kind != CollectiveKind::Recv;
  bool wantsOut = desc.kind != CollectiveKind::Send;
  if (bool(inShape) != wantsIn || bool(outShape) != wantsOut)
    return name + " takes " + (wantsIn ? "one input" : "no input") + " and " +
           (wantsOut ? "one output" : "no output");
  const bool reduces =
      desc.kind == CollectiveKind::AllReduce || desc.kind == CollectiveKind::ReduceScatter;
  for (const DType *type : {inType, outType}) {
    if (type && !isCollectiveDType(*type))
      return name + ": element type " + std::string(dtypeName(*type)) +
             " is not one collectives move (f32, bf16, f16, i64, i32, f8E4M3FN, f8E5M2)";
    // FP8 values (each with its scale) are moved as they are, never summed.
    if (type && reduces && !isReducedDType(*type))
      return name + ": element type " + std::string(dtypeName(*type)) +
             " is moved but not reduced (f32, bf16, f16, i64, i32)";
  }
  if (inType && outType && *inType != *outType)
    return name + ": input is " + std::string(dtypeName(*inType)) +
           " but output is " + std::string(dtypeName(*outType));
  if (!inShape || !outShape)
    return "";
  const std::vector<int64_t> &in = *inShape, &out = *outShape;
  auto dimOk = [&](int64_t dim) {
    return dim >= 0 && dim < static_cast<int64_t>(in.size());
  };
  auto mismatch = [&](const std::string &expected) {
    return name + ": input " + shapeText(in) + " and output " +
           shapeText(out) + " " + expected;
  };
  switch (desc.kind) {
  case CollectiveKind::AllReduce:
  case CollectiveKind::Broadcast:
    if (in != out)
      return mismatch("must have the same shape");
    if (desc.kind == CollectiveKind::Broadcast &&
        (desc.root < 0 || (groupSize > 0 && desc.root >= groupSize)))
      return name + ": root " + std::to_string(desc.root) +
             " is not an index in a group of " + std::to_string(groupSize);
    return "";
  case CollectiveKind::AllGather:
  case CollectiveKind::ReduceScatter: {
    if (!dimOk(desc.dim))
      return name + ": dim " + std::to_string(desc.dim) +
             " is out of range for rank " + std::to_string(in.size());
    if (in.size() != out.size())
      return mismatch("must have the same rank");
    bool gather = desc.kind == CollectiveKind::AllGather;
    const std::vector<int64_t> &small = gather ? in : out;
    const std::vector<int64_t> &large = gather ? out : in;
    for (size_t d = 0; d < in.size(); ++d) {
      if (static_cast<int64_t>(d) == desc.dim) {
        if (groupSize > 0 && large[d] != small[d] * groupSize)
          return mismatch("differ along dim " + std::to_string(d) + ": " +
                          (gather ? "output" : "input") + " must be " +
                          std::to_string(small[d] * groupSize) +
                          " (the group has " + std::to_string(groupSize) +
                          " ranks)");
      } else if (in[d] != out[d]) {
        return mismatch("must agree outside dim " + std::to_string(desc.dim));
      }
    }
    return "";
  }
  case CollectiveKind::AllToAll: {
    if (!dimOk(desc.splitDim) || !dimOk(desc.concatDim))
      return name + ": split_dim " + std::to_string(desc.splitDim) +
             " or concat_dim " + std::to_string(desc.concatDim) +
             " is out of range for rank " + std::to_string(in.size());
    if (in.size() != out.size())
      return mismatch("must have the same rank");
    if (groupSize <= 0)
      return "";
    std::vector<int64_t> expected = in;
    if (expected[desc.splitDim] % groupSize != 0)
      return name + ": split_dim " + std::to_string(desc.splitDim) + " (" +
             std::to_string(in[desc.splitDim]) + ") does not divide into " +
             std::to_string(groupSize) + " blocks";
    expected[desc.splitDim] /= groupSize;
    expected[desc.concatDim] *= groupSize;
    if (out != expected)
      return mismatch("do not match: the output must be " +
                      shapeText(expected));
    return "";
  }
  case CollectiveKind::Send:
  case CollectiveKind::Recv:
  case CollectiveKind::Exchange:
  case CollectiveKind::GatherRows:
  case CollectiveKind::ScatterRows:
    return "";
  }
  return "";
}

std::string checkGatherRows(const CollectiveDesc &desc, int64_t groupSize,
                            const OperandType &x, const OperandType &rows,
                            const OperandType &ranges, const OperandType &out) {
  const bool scatter = desc.kind == CollectiveKind::ScatterRows;
  const std::string name = collectiveKindName(desc.kind);
  if (desc.kind != CollectiveKind::GatherRows && !scatter)
    return name + " is not a gather_rows or scatter_rows";
  if (!isCollectiveDType(x.dtype))
    return name + ": element type " + std::string(dtypeName(x.dtype)) +
           " is not one collectives move (f32, bf16, f16, i64, i32, f8E4M3FN, f8E5M2)";
  if (scatter && !isReducedDType(x.dtype))
    return name + ": element type " + std::string(dtypeName(x.dtype)) +
           " is moved but not added (f32, bf16, f16, i64, i32)";
  if (out.dtype != x.dtype)
    return name + ": input is " + std::string(dtypeName(x.dtype)) + " but output is " +
           std::string(dtypeName(out.dtype));
  for (const OperandType *index : {&rows, &ranges})
    if (index->dtype != DType::I32 && index->dtype != DType::I64)
      return name + ": " + (index == &rows ? "rows" : "ranges") + " must be i32 or i64, got " +
             std::string(dtypeName(index->dtype));
  if (x.shape.empty() || out.shape.empty())
    return name + ": its input and output must have a row dim, got a scalar";
  if (rows.shape.size() != 1)
    return name + ": rows must be 1-D, got " + shapeText(rows.shape);
  if (ranges.shape.size() != 2 || ranges.shape[1] != 2 ||
      (groupSize > 0 && ranges.shape[0] != groupSize))
    return name + ": ranges must be [" +
           (groupSize > 0 ? std::to_string(groupSize) : std::string("group")) +
           "x2] (each member's first and end row), got " + shapeText(ranges.shape);
  if (scatter) {
    if (x.shape[0] != rows.shape[0])
      return name + ": y has " + std::to_string(x.shape[0]) + " rows but rows names " +
             std::to_string(rows.shape[0]);
    if (std::vector<int64_t>(x.shape.begin() + 1, x.shape.end()) !=
        std::vector<int64_t>(out.shape.begin() + 1, out.shape.end()))
      return name + ": output " + shapeText(out.shape) + " and y " + shapeText(x.shape) +
             " must agree past the row dim";
    return "";
  }
  std::vector<int64_t> expected = x.shape;
  expected[0] = rows.shape[0];
  if (out.shape != expected)
    return name + ": output " + shapeText(out.shape) + " should be " + shapeText(expected) +
           " (a row of x for each of the " + std::to_string(rows.shape[0]) + " rows)";
  return "";
}

std::string planGatherRows(int64_t member, int64_t groupSize, int64_t localRows,
                           const std::vector<int64_t> &rows,
                           const std::vector<int64_t> &ranges, RowExchangePlan &plan) {
  const int64_t count = static_cast<int64_t>(rows.size());
  plan.sends.assign(groupSize, {});
  plan.receives.assign(groupSize, {});
  for (int64_t q = 0; q < groupSize; ++q) {
    const int64_t begin = std::max<int64_t>(ranges[2 * q], 0),
                  end = std::min<int64_t>(ranges[2 * q + 1], count);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = rows[i];
      if (row < 0 || row >= localRows * groupSize)
        return "row " + std::to_string(i) + " names row " + std::to_string(row) + " of " +
               std::to_string(localRows * groupSize);
      const int64_t holder = row / localRows;
      if (holder == member)
        plan.sends[q].push_back(row - holder * localRows);
      if (q == member)
        plan.receives[holder].push_back(i);
    }
  }
  return "";
}

std::string checkExchange(const CollectiveDesc &desc, int64_t groupSize,
                          const std::vector<DType> &sendTypes,
                          const std::vector<DType> &recvTypes) {
  const std::string name = "exchange";
  if (desc.kind != CollectiveKind::Exchange)
    return collectiveKindName(desc.kind) + " is not an exchange";
  if (desc.sendPeers.size() != sendTypes.size())
    return name + ": " + std::to_string(sendTypes.size()) + " send buffer(s) but " +
           std::to_string(desc.sendPeers.size()) + " send peer(s)";
  if (desc.recvPeers.size() != recvTypes.size())
    return name + ": " + std::to_string(recvTypes.size()) + " receive buffer(s) but " +
           std::to_string(desc.recvPeers.size()) + " receive peer(s)";
  if (sendTypes.empty() && recvTypes.empty())
    return name + " transfers nothing (no send and no receive)";
  for (bool sending : {true, false}) {
    const std::vector<int64_t> &peers = sending ? desc.sendPeers : desc.recvPeers;
    const std::vector<DType> &types = sending ? sendTypes : recvTypes;
    for (size_t i = 0; i < peers.size(); ++i) {
      std::string which = name + ": " + (sending ? "send " : "receive ") + std::to_string(i);
      if (peers[i] < 0 || (groupSize > 0 && peers[i] >= groupSize))
        return which + ": peer " + std::to_string(peers[i]) + " is not an index in a group" +
               (groupSize > 0 ? " of " + std::to_string(groupSize) : std::string());
      if (!isCollectiveDType(types[i]))
        return which + ": element type " + std::string(dtypeName(types[i])) +
               " is not one collectives move (f32, bf16, f16, i64, i32, f8E4M3FN, f8E5M2)";
    }
  }
  return "";
}

} // namespace loom
