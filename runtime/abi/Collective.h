#ifndef LOOM_RUNTIME_ABI_COLLECTIVE_H
#define LOOM_RUNTIME_ABI_COLLECTIVE_H

// What a collective is, as plain data shared by the rt dialect's verifier,
// the executable format and the communicators: its kind, group, reduction
// and dimensions, and the shapes it accepts.

#include "runtime/abi/DType.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

/// The collectives (names as in `rt.collective`). Within a group of G ranks:
///   all_reduce      out = reduce over members of in (same shape)
///   all_gather      out = members' `in` concatenated along `dim` (x G)
///   reduce_scatter  out = block `index` along `dim` of the reduction (/ G)
///   all_to_all      in split along `splitDim` into G blocks, block j to
///                   member j; out = received blocks concatenated along
///                   `concatDim`
///   broadcast       out = `in` of member `root`
///   send / recv     to / from absolute rank `peer` (no group)
///   exchange        input i to member `sendPeers[i]`, output j from member
///                   `recvPeers[j]`, all in flight at once; transfers between
///                   two ranks match in order (any number of inputs and
///                   outputs, at least one of either)
///   gather_rows     inputs x [n, ...], rows [R] and ranges [G, 2] (i32 or
///                   i64, the same on every member); member p's output
///                   [R, ...] holds, at each row i in [ranges[p][0],
///                   ranges[p][1]), row rows[i] of the members' x
///                   concatenated along dim 0, and zeros elsewhere: each
///                   member receives only the rows its range names, from
///                   their holders (a data-dependent all-to-all)
///   scatter_rows    its transpose: inputs y [R, ...], rows, ranges; member
///                   q's output [n, ...] holds at row t the sum, over members
///                   p in group order and rows i of p's range in order with
///                   rows[i] == q * n + t, of p's y[i] (f32 accumulation)
enum class CollectiveKind : uint8_t {
  AllReduce = 0,
  AllGather = 1,
  ReduceScatter = 2,
  AllToAll = 3,
  Broadcast = 4,
  Send = 5,
  Recv = 6,
  Exchange = 7,
  GatherRows = 8,
  ScatterRows = 9,
};
constexpr int kNumCollectiveKinds = 10;

/// Sums and averages reduce in group order, accumulating f32, f16 and bf16 in
/// f32 and integers in i64, so results do not depend on timing.
enum class ReduceOp : uint8_t { Sum = 0, Max = 1, Avg = 2 };
constexpr int kNumReduceOps = 3;

/// "all_reduce", ..., "exchange" and "sum", "max", "avg": the rt dialect's
/// spellings; "kind(N)" for an out-of-range value.
std::string collectiveKindName(CollectiveKind kind);
std::optional<CollectiveKind> parseCollectiveKind(std::string_view name);
std::string reduceOpName(ReduceOp op);
std::optional<ReduceOp> parseReduceOp(std::string_view name);

struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::AllReduce;
  std::vector<std::string> axes; // the mesh axes the group spans
  ReduceOp reduce = ReduceOp::Sum;
  int64_t dim = 0;       // all_gather, reduce_scatter
  int64_t splitDim = 0;  // all_to_all
  int64_t concatDim = 0; // all_to_all
  int64_t root = 0;      // broadcast: index within the group
  int64_t peer = 0;      // send/recv: absolute rank
  // exchange: per input / per output, the peer's index within the group.
  std::vector<int64_t> sendPeers, recvPeers;
};

/// Whether one collective of `kind` may carry a bucket of several tensors
/// (input i reduced into output i, all issued together): all_reduce and
/// reduce_scatter, which bucket data-parallel gradients.
bool isBucketable(CollectiveKind kind);

/// Whether collectives move this element type (f32, bf16, f16, i64, i32,
/// and the FP8 types, moved as bytes).
bool isCollectiveDType(DType dtype);
/// Whether collectives reduce it (all but the FP8 types: each FP8 tensor
/// has its own scale, so their values do not add).
bool isReducedDType(DType dtype);

/// Checks a collective's operands: `in`/`out` are null when absent. For a
/// group of `groupSize` ranks (0: unknown, check only what does not depend
/// on it). Returns "" or a one-line problem ("all_gather along dim 1: ...").
/// An exchange is refused here: checkExchange takes its lists.
std::string checkCollectiveTypes(const CollectiveDesc &desc, int64_t groupSize,
                                 const DType *inType,
                                 const std::vector<int64_t> *inShape,
                                 const DType *outType,
                                 const std::vector<int64_t> *outShape);

/// Checks an exchange: a peer list per side as long as its buffers
/// (`sendTypes`, `recvTypes`: their element types), at least one transfer,
/// every peer an index in a group of `groupSize` (0: unknown) and every
/// element type one collectives move. Returns "" or a one-line problem
/// naming the transfer ("exchange: send 1: peer 4 is not an index in a group
/// of 2").
std::string checkExchange(const CollectiveDesc &desc, int64_t groupSize,
                          const std::vector<DType> &sendTypes,
                          const std::vector<DType> &recvTypes);

/// One operand's element type and shape.
struct OperandType {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// Checks a gather_rows: x [n, ...], rows [R] and ranges [G, 2] of i32 or
/// i64, output [R, ...] of x's type, for a group of `groupSize` (0:
/// unknown); or a scatter_rows: y [R, ...] of a type collectives reduce,
/// rows and ranges, output [n, ...]. Returns "" or a one-line problem.
std::string checkGatherRows(const CollectiveDesc &desc, int64_t groupSize,
                            const OperandType &x, const OperandType &rows,
                            const OperandType &ranges, const OperandType &out);

/// What one member of a gather_rows sends and receives, from the rows and
/// ranges every member holds: sends[q] lists the local rows of x (in
/// order) that member q's range names, receives[q] the output rows (in
/// order) that come from member q (this member's own included, at
/// q = `member`). Rows outside [0, n * G) are an error naming the first.
struct RowExchangePlan {
  std::vector<std::vector<int64_t>> sends, receives;
};
/// `rows` and `ranges` are host copies of the operands, as int64.
std::string planGatherRows(int64_t member, int64_t groupSize, int64_t localRows,
                           const std::vector<int64_t> &rows,
                           const std::vector<int64_t> &ranges, RowExchangePlan &plan);

} // namespace loom

#endif
