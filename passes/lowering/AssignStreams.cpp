// --loom-assign-streams: puts work on streams by role and synchronizes the
// streams with events where their byte ranges meet (see Passes.td).

#include "passes/lowering/Passes.h"
#include "dialects/loom/LoomDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

namespace loom {
#define GEN_PASS_DEF_ASSIGNSTREAMS
#include "passes/lowering/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// Bytes of one arena that an op touches.
struct ByteRange {
  int arena; // 0 persistent, 1 scratch, 2 host
  int64_t begin, end;
  bool overlaps(const ByteRange &o) const {
    return arena == o.arena && begin < o.end && o.begin < end;
  }
};

struct Access {
  Operation *op;
  unsigned stream;
  SmallVector<ByteRange> reads, writes;
  // Waits already in the program before this op: (waiting stream, recording
  // stream, position in `accesses` of the last op the event covers).
  SmallVector<std::tuple<unsigned, unsigned, int64_t>> priorWaits;
};

/// The stream a collective runs on, by the role of its mesh axes: tensor
/// parallelism is latency-critical and gets its own stream, data parallelism
/// overlaps with the backward pass on another, pipeline transfers on a third.
std::string commStreamFor(rt::CollectiveOp op) {
  rt::CollectiveKind kind = op.getKind();
  if (kind == rt::CollectiveKind::Send || kind == rt::CollectiveKind::Recv)
    return "pp_comm";
  SmallVector<StringRef> axes;
  if (std::optional<ArrayAttr> list = op.getAxes())
    for (Attribute a : *list)
      axes.push_back(cast<StringAttr>(a).getValue());
  for (StringRef role : {"tp", "dp", "pp"})
    if (llvm::is_contained(axes, role))
      return (role + "_comm").str();
  return axes.empty() ? std::string("comm") : (axes.front() + "_comm").str();
}

bool anyOverlap(ArrayRef<ByteRange> a, ArrayRef<ByteRange> b) {
  for (const ByteRange &x : a)
    for (const ByteRange &y : b)
      if (x.overlaps(y))
        return true;
  return false;
}

struct AssignStreamsPass
    : public loom::impl::AssignStreamsBase<AssignStreamsPass> {
  void runOnOperation() override {
    getOperation().walk([&](rt::ProgramOp program) {
      if (failed(assign(program)))
        signalPassFailure();
    });
  }

  LogicalResult assign(rt::ProgramOp program) {
    Builder b(program.getContext());
    SmallVector<std::string> streams;
    for (Attribute s : program.getStreams())
      streams.push_back(cast<StringAttr>(s).str());
    auto streamIndex = [&](StringRef name) -> unsigned {
      auto it = llvm::find(streams, name);
      if (it != streams.end())
        return it - streams.begin();
      streams.push_back(name.str());
      return streams.size() - 1;
    };

    auto rangeOf = [&](Value buffer) -> FailureOr<ByteRange> {
      Value root = rt::rootBuffer(buffer);
      std::optional<int64_t> offset = rt::plannedOffset(root);
      if (!offset)
        return failure();
      return ByteRange{rt::isPersistent(root) ? 0 : rt::isHost(root) ? 2 : 1, *offset,
                       *offset + rt::bufferBytes(cast<MemRefType>(buffer.getType()))};
    };

    SmallVector<Access> accesses;
    // Events already in the program (a second run, or hand-written IR): what
    // each covers, so that the waits on them count as synchronization.
    llvm::DenseMap<int64_t, std::pair<unsigned, int64_t>> recorded;
    llvm::DenseMap<unsigned, int64_t> lastOnStream;
    SmallVector<std::tuple<unsigned, unsigned, int64_t>> pendingWaits;
    for (Operation &op : program.getBlock()) {
      if (auto record = dyn_cast<rt::RecordEventOp>(op)) {
        unsigned stream = streamIndex(record.getStream());
        auto last = lastOnStream.find(stream);
        recorded[record.getEventAttr().getInt()] = {
            stream, last == lastOnStream.end() ? -1 : last->second};
        continue;
      }
      if (auto wait = dyn_cast<rt::WaitEventOp>(op)) {
        auto it = recorded.find(wait.getEventAttr().getInt());
        if (it != recorded.end() && it->second.second >= 0)
          pendingWaits.push_back({streamIndex(wait.getStream()),
                                  it->second.first, it->second.second});
        continue;
      }
      Access access{&op, 0, {}, {}, {}};
      ValueRange reads, writes;
      if (auto kernel = dyn_cast<rt::KernelOp>(op)) {
        if (!kernel.getStream())
          kernel.setStreamAttr(b.getStringAttr("compute"));
        access.stream = streamIndex(*kernel.getStream());
        reads = kernel.getInputs();
        writes = kernel.getOutputs();
      } else if (auto collective = dyn_cast<rt::CollectiveOp>(op)) {
        if (!collective.getStream())
          collective.setStreamAttr(b.getStringAttr(commStreamFor(collective)));
        access.stream = streamIndex(*collective.getStream());
        reads = collective.getInputs();
        writes = collective.getOutputs();
      } else if (auto copy = dyn_cast<rt::CopyOp>(op)) {
        if (!copy.getStream())
          copy.setStreamAttr(b.getStringAttr(
              loom::isHostCopy(copy) ? "host_copy" : "compute"));
        access.stream = streamIndex(*copy.getStream());
        reads = copy->getOperands().take_front(1);
        writes = copy->getOperands().drop_front(1);
      } else {
        continue;
      }
      for (auto [values, ranges] : {std::pair{reads, &access.reads},
                                    std::pair{writes, &access.writes}})
        for (Value v : values) {
          FailureOr<ByteRange> r = rangeOf(v);
          if (failed(r))
            return op.emitOpError("uses a buffer without a planned offset; "
                                  "run --loom-plan-memory first");
          ranges->push_back(*r);
        }
      access.priorWaits = std::move(pendingWaits);
      pendingWaits.clear();
      lastOnStream[access.stream] = accesses.size();
      accesses.push_back(std::move(access));
    }

    // waitedFor[s][t]: position (in `accesses`) of the latest op on stream
    // t that stream s has already waited for.
    size_t n = streams.size();
    std::vector<std::vector<int64_t>> waitedFor(n, std::vector<int64_t>(n, -1));
    llvm::DenseMap<Operation *, int64_t> eventAfter;
    int64_t numEvents = program.getNumEvents().value_or(0);
    for (size_t i = 0; i < accesses.size(); ++i) {
      Access &current = accesses[i];
      for (auto [waiter, recorder, position] : current.priorWaits)
        if (waiter != recorder)
          waitedFor[waiter][recorder] =
              std::max(waitedFor[waiter][recorder], position);
      for (unsigned other = 0; other < n; ++other) {
        if (other == current.stream)
          continue;
        int64_t latest = -1;
        for (int64_t j = i - 1; j > waitedFor[current.stream][other]; --j) {
          Access &earlier = accesses[j];
          if (earlier.stream != other)
            continue;
          if (anyOverlap(earlier.writes, current.reads) ||
              anyOverlap(earlier.writes, current.writes) ||
              anyOverlap(earlier.reads, current.writes)) {
            latest = j;
            break;
          }
        }
        if (latest < 0)
          continue;
        Operation *producer = accesses[latest].op;
        auto [it, inserted] = eventAfter.try_emplace(producer, numEvents);
        if (inserted) {
          OpBuilder after(producer->getContext());
          after.setInsertionPointAfter(producer);
          after.create<rt::RecordEventOp>(producer->getLoc(),
                                          after.getI64IntegerAttr(numEvents++),
                                          after.getStringAttr(streams[other]));
        }
        OpBuilder before(current.op);
        before.create<rt::WaitEventOp>(current.op->getLoc(),
                                       before.getI64IntegerAttr(it->second),
                                       before.getStringAttr(streams[current.stream]));
        waitedFor[current.stream][other] = latest;
      }
    }
    program.setStreamsAttr(b.getStrArrayAttr(
        SmallVector<StringRef>(streams.begin(), streams.end())));
    program.setNumEventsAttr(b.getI64IntegerAttr(numEvents));
    return success();
  }
};

} // namespace
