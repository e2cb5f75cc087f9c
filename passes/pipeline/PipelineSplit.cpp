// --loom-pipeline-split: the staged training step and its verified
// pipe.schedule become one function per pipeline rank, the rank's actions
// unrolled in schedule order. See Passes.td for the rules.
//
// Every op of the step is classified once:
//   - microbatch ops (one microbatch's forward, input or weight gradient on
//     one stage) run on their stage's rank, inside the schedule action that
//     names them;
//   - replicable ops (pure, reading only constants and the step's inputs:
//     slices of the token batch, masks, rotary tables) are cloned on demand
//     wherever they are read;
//   - the rest (parameters, gradient sums over microbatches, the optimizer,
//     the global gradient norm) run on the ranks that hold their stage
//     (pipe.stage = -1: every rank), after the action list, or as soon as
//     their operands exist when they sum weight gradients.
// Values cross ranks only where the schedule says: the boundary values of
// (stage, microbatch) travel with SEND_F/RECV_F, their gradients with
// SEND_B/RECV_B, and a run of consecutive transfers on a rank is one
// dist.exchange. Sums whose terms live on several ranks (the gradient norm,
// DualPipe's two copies of a weight gradient) are reassociated into one
// partial sum per rank, then combined: an all_reduce over the pipeline when
// every rank needs the total, else an exchange of partials, summed in rank
// order on every rank that needs it (so copies stay bitwise equal). A
// parameter read on several ranks (tied embeddings) is held, and updated,
// on each of them, its gradient combined the same way. A returned value
// that lives on some ranks only (the loss) is broadcast.

#include "dialects/dist/DistDialect.h"
#include "dialects/nn/NNDialect.h"
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeDialect.h"
#include "passes/pipeline/Passes.h"
#include "runtime/schedule/Schedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

#include <functional>
#include <map>
#include <tuple>

namespace loom {
#define GEN_PASS_DEF_PIPELINESPLIT
#include "passes/pipeline/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;
using pipeline::ActionKind;

namespace {

constexpr llvm::StringLiteral kAxis = "pp";

enum class Part { F, I, W };

/// How an op depends on the step's microbatches.
enum class MbState { None, Single, Mixed };

struct OpInfo {
  unsigned index = 0;
  MbState state = MbState::None;
  int64_t mb = -1; // Single: the training step's microbatch
  int64_t piece = 0;
  Part part = Part::F;
  bool replicable = false;
  // Single: the schedule's stage, the microbatch within its chain, the rank.
  int stage = -1, chainMb = -1, rank = -1;
  // Not Single, not replicable: the ranks that run it.
  SmallVector<int> home;
  bool treeInternal = false;
  bool treeRoot = false;
  SmallVector<Value> leaves; // treeRoot: the sum's terms, in order
};

class Splitter {
public:
  Splitter(ModuleOp module, func::FuncOp func, pipeline::Schedule schedule)
      : module_(module), func_(func), s_(std::move(schedule)) {}

  LogicalResult run();

private:
  friend class RankEmitter;
  LogicalResult classify();
  void shareTiedParameters();
  void findTrees();
  void findTransfers();

  bool isSingle(Operation *op) const { return info_.lookup(op).state == MbState::Single; }
  /// The ranks holding a value (every rank for block arguments and
  /// replicable values).
  SmallVector<int> homeOf(Value v) const;
  /// The rank whose partial sum takes `leaf`, a term of the sum `root`.
  int ownerOf(const OpInfo &root, Value leaf) const {
    Operation *def = leaf.getDefiningOp();
    if (!def || info_.find(def)->second.replicable)
      return root.home.front();
    return homeOf(leaf).front();
  }
  SmallVector<int> allRanks() const {
    SmallVector<int> all;
    for (int r = 0; r < s_.numRanks; ++r)
      all.push_back(r);
    return all;
  }

  ModuleOp module_;
  func::FuncOp func_;
  pipeline::Schedule s_;
  SmallVector<Operation *> ops_; // the body, in order, without the return
  llvm::DenseMap<Operation *, OpInfo> info_;
  // (stage, chain microbatch, part) -> its ops in program order.
  std::map<std::tuple<int, int, Part>, SmallVector<Operation *>> actionOps_;
  // (stage, chain microbatch) -> what SEND_F / SEND_B of it carry, in order.
  std::map<std::pair<int, int>, SmallVector<Value>> sendF_, sendB_;
};

LogicalResult Splitter::classify() {
  int64_t L = s_.chainLength();
  int64_t perChain = s_.microbatchesPerChain();
  for (Operation &op : func_.getBody().front()) {
    if (isa<func::ReturnOp>(op))
      continue;
    OpInfo in;
    in.index = ops_.size();
    ops_.push_back(&op);
    std::optional<int64_t> stage = pipe::getStage(&op);
    if (!stage)
      return op.emitError("has no pipe.stage: run --loom-pipeline-partition on the training "
                          "step before --loom-pipeline-split");
    in.piece = *stage;
    if (in.piece >= L)
      return op.emitError("pipe.stage ") << in.piece << " is not a piece of a chain of " << L
                                         << " stages";
    if (std::optional<loom::BackwardKind> part = loom::getBackwardKind(&op))
      in.part = *part == loom::BackwardKind::Weight ? Part::W : Part::I;
    // A pure op of constants and step inputs is replicable even when the
    // training step copied it per microbatch (a cast of the rotary table):
    // computing it where it is read beats sending it.
    bool ofConstants = isMemoryEffectFree(&op) && !isa<nn::ParameterOp>(op) &&
                       op.getNumRegions() == 0 &&
                       llvm::all_of(op.getOperands(), [&](Value v) {
                         Operation *def = v.getDefiningOp();
                         return !def || info_[def].replicable;
                       });
    if (ofConstants) {
      in.state = MbState::None;
    } else if (std::optional<int64_t> mb = loom::getMicrobatch(&op)) {
      in.state = MbState::Single;
      in.mb = *mb;
    } else {
      bool tiedTerm =
          isa<nn::AddOp>(op) && loom::getBackwardKind(&op) == loom::BackwardKind::Weight;
      int firstStage = -1;
      for (Value operand : op.getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!def)
          continue;
        const OpInfo &d = info_[def];
        if (d.state == MbState::Mixed ||
            (d.state == MbState::Single && in.state == MbState::Single && d.mb != in.mb)) {
          in.state = MbState::Mixed;
          break;
        }
        if (d.state == MbState::Single) {
          // One microbatch's terms of a tied weight's gradient from two
          // stages (the embedding's and the head's): their sum combines
          // stages, like a sum over microbatches, and runs where the weight
          // is held.
          if (in.state == MbState::Single && d.stage != firstStage && tiedTerm) {
            in.state = MbState::Mixed;
            break;
          }
          in.state = MbState::Single;
          in.mb = d.mb;
          firstStage = d.stage;
        }
      }
    }
    // An op that combines stages (pipe.stage = -1) runs where a sum over
    // microbatches would, even when it reads one microbatch: with a single
    // microbatch, the step's loss and gradient norm read only microbatch 0.
    if (in.state == MbState::Single && in.piece < 0)
      in.state = MbState::Mixed;
    // An op of one microbatch runs in the last part that computes its
    // operands (the square of a weight gradient, with one microbatch, in
    // the weight-gradient part).
    if (in.state == MbState::Single && !loom::getBackwardKind(&op))
      for (Value operand : op.getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && info_[def].state == MbState::Single)
          in.part = std::max(in.part, info_[def].part);
    if (in.state == MbState::Single) {
      if (in.mb < 0 || in.mb >= s_.numMicrobatches)
        return op.emitError("microbatch ") << in.mb << " is not one of the schedule's "
                                           << s_.numMicrobatches;
      int64_t chain = in.mb / perChain;
      in.chainMb = in.mb % perChain;
      in.stage = chain * L + in.piece;
      in.rank = s_.stageRank[in.stage];
      actionOps_[{in.stage, in.chainMb, in.part}].push_back(&op);
    } else {
      in.replicable = in.state == MbState::None && isMemoryEffectFree(&op) &&
                      !isa<nn::ParameterOp>(op) && op.getNumRegions() == 0;
      if (!in.replicable) {
        if (in.piece < 0) {
          in.home = allRanks();
        } else {
          for (int c = 0; c < s_.numChains; ++c)
            in.home.push_back(s_.stageRank[c * L + in.piece]);
          llvm::sort(in.home);
          in.home.erase(std::unique(in.home.begin(), in.home.end()), in.home.end());
        }
      }
    }
    info_[&op] = std::move(in);
  }
  shareTiedParameters();
  return success();
}

static bool covers(ArrayRef<int> have, ArrayRef<int> need) {
  return llvm::all_of(need, [&](int r) { return llvm::is_contained(have, r); });
}

/// A parameter read on stages of several ranks (tied embeddings: the
/// embedding on the first stage, the head on the last) is held by each of
/// those ranks, and so is its update (the gradient's total, the clipped
/// gradient, AdamW and its moments): every holder sums the same partial
/// gradients in the same order and takes the same step, so the copies,
/// which start equal (the initializer is seeded by name), stay bitwise
/// equal. The gradient norm still reads the total on one rank only.
void Splitter::shareTiedParameters() {
  for (Operation *op : ops_) {
    if (!isa<nn::ParameterOp>(op))
      continue;
    SmallVector<int> holders = info_[op].home;
    for (Operation *user : op->getUsers()) {
      auto it = info_.find(user);
      if (it == info_.end())
        continue;
      const OpInfo &u = it->second;
      if (u.state == MbState::Single)
        holders.push_back(u.rank);
      else if (!u.replicable)
        holders.append(u.home.begin(), u.home.end());
    }
    llvm::sort(holders);
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    if (covers(info_[op].home, holders))
      continue;
    // Sharding after the split must shard every copy alike.
    pipe::setHolders(op, SmallVector<int64_t>(holders.begin(), holders.end()));
    // The update: the parameter, what reads it once per step, and what
    // those read that is not per microbatch or already on every holder.
    llvm::SetVector<Operation *> update;
    SmallVector<Operation *> work;
    auto widen = [&](Operation *x) {
      const OpInfo &i = info_[x];
      if (i.state == MbState::Single || i.replicable || covers(i.home, holders))
        return;
      if (update.insert(x))
        work.push_back(x);
    };
    widen(op);
    while (!work.empty()) {
      Operation *x = work.pop_back_val();
      if (isa<nn::ParameterOp>(x)) // the weight and its moments
        for (Operation *user : x->getUsers())
          if (info_.count(user))
            widen(user);
      for (Value operand : x->getOperands())
        if (Operation *def = operand.getDefiningOp())
          widen(def);
    }
    for (Operation *x : update) {
      SmallVector<int> &home = info_[x].home;
      home.append(holders.begin(), holders.end());
      llvm::sort(home);
      home.erase(std::unique(home.begin(), home.end()), home.end());
    }
  }
}

SmallVector<int> Splitter::homeOf(Value v) const {
  Operation *def = v.getDefiningOp();
  if (!def)
    return allRanks();
  const OpInfo &d = info_.find(def)->second;
  if (d.replicable)
    return allRanks();
  if (d.state == MbState::Single)
    return {d.rank};
  return d.home;
}

void Splitter::findTrees() {
  auto inTree = [&](Operation *op) {
    const OpInfo &i = info_[op];
    return isa<nn::AddOp>(op) && i.state == MbState::Mixed;
  };
  auto isInternal = [&](Operation *op) {
    if (!inTree(op) || !op->getResult(0).hasOneUse())
      return false;
    Operation *user = *op->getResult(0).getUsers().begin();
    return inTree(user) && user->getResult(0).getType() == op->getResult(0).getType();
  };
  for (Operation *op : ops_) {
    if (!inTree(op) || isInternal(op))
      continue;
    SmallVector<Value> leaves;
    std::function<void(Value)> collect = [&](Value v) {
      Operation *def = v.getDefiningOp();
      if (def && isInternal(def) && info_[def].state == MbState::Mixed) {
        for (Value operand : def->getOperands())
          collect(operand);
        return;
      }
      leaves.push_back(v);
    };
    for (Value operand : op->getOperands())
      collect(operand);
    OpInfo &root = info_[op];
    bool cross = llvm::any_of(leaves, [&](Value v) { return !covers(homeOf(v), root.home); });
    if (!cross)
      continue;
    root.treeRoot = true;
    root.leaves = std::move(leaves);
    std::function<void(Operation *)> mark = [&](Operation *node) {
      for (Value operand : node->getOperands())
        if (Operation *def = operand.getDefiningOp(); def && isInternal(def)) {
          info_[def].treeInternal = true;
          mark(def);
        }
    };
    mark(op);
  }
}

void Splitter::findTransfers() {
  for (Operation *op : ops_) {
    const OpInfo &d = info_[op];
    if (d.state != MbState::Single)
      continue;
    for (Value v : op->getResults()) {
      // The stages of this microbatch that read v, and their ranks.
      SmallVector<std::pair<int, int>> users; // (stage, rank)
      for (Operation *user : v.getUsers()) {
        auto it = info_.find(user);
        if (it == info_.end() || it->second.state != MbState::Single)
          continue;
        users.push_back({it->second.stage, it->second.rank});
      }
      auto needsBeyond = [&](int k, bool forward) {
        return llvm::any_of(users, [&](auto u) {
          return (forward ? u.first > k : u.first < k) && u.second != d.rank;
        });
      };
      int chainStart = d.stage - d.stage % s_.chainLength();
      int chainEnd = chainStart + s_.chainLength();
      for (int k = d.stage; k + 1 < chainEnd; ++k)
        if (s_.stageRank[k] != s_.stageRank[k + 1] && needsBeyond(k, true))
          sendF_[{k, d.chainMb}].push_back(v);
      for (int k = d.stage; k > chainStart; --k)
        if (s_.stageRank[k] != s_.stageRank[k - 1] && needsBeyond(k, false))
          sendB_[{k, d.chainMb}].push_back(v);
    }
  }
}

/// Builds one rank's function.
class RankEmitter {
public:
  RankEmitter(Splitter &s, int rank, func::FuncOp fn)
      : s_(s), rank_(rank), fn_(fn), b_(fn.getContext()) {
    b_.setInsertionPointToStart(&fn.getBody().front());
    for (auto [from, to] : llvm::zip(s.func_.getArguments(), fn.getArguments()))
      map_.map(from, to);
  }

  LogicalResult run();

private:
  LogicalResult ensure(Value v);
  LogicalResult emitOp(Operation *op);
  LogicalResult emitPart(int stage, int mb, ArrayRef<Part> parts);
  LogicalResult emitTransfers(ArrayRef<pipeline::Action> run);
  LogicalResult emitTree(Operation *root);
  void drain();
  Value zeros(Type type, Location loc) {
    auto tensor = cast<RankedTensorType>(type);
    return b_.create<nn::ConstantOp>(loc, tensor, cast<ElementsAttr>(b_.getZeroAttr(tensor)))
        .getResult();
  }
  ArrayAttr axes() { return b_.getStrArrayAttr({kAxis}); }
  bool runsHere(const OpInfo &i) const { return llvm::is_contained(i.home, rank_); }

  Splitter &s_;
  int rank_;
  func::FuncOp fn_;
  OpBuilder b_;
  IRMapping map_;
  llvm::DenseSet<Operation *> emitted_;
};

LogicalResult RankEmitter::ensure(Value v) {
  if (map_.contains(v))
    return success();
  Operation *def = v.getDefiningOp();
  const OpInfo &d = s_.info_[def];
  if (d.treeRoot && runsHere(d)) {
    if (failed(emitTree(def)))
      return failure();
    return success();
  }
  if (d.replicable || (d.state != MbState::Single && !d.treeInternal && runsHere(d)))
    return emitOp(def);
  std::string where;
  for (int r : s_.homeOf(v))
    where += (where.empty() ? "" : ", ") + std::to_string(r);
  return def->emitError("pipeline rank ")
         << rank_ << " reads this value, which is computed on rank(s) " << where
         << ", and no transfer of the schedule carries it there";
}

LogicalResult RankEmitter::emitOp(Operation *op) {
  for (Value operand : op->getOperands())
    if (failed(ensure(operand)))
      return failure();
  b_.clone(*op, map_);
  emitted_.insert(op);
  return success();
}

LogicalResult RankEmitter::emitPart(int stage, int mb, ArrayRef<Part> parts) {
  SmallVector<Operation *> list;
  for (Part p : parts) {
    auto it = s_.actionOps_.find({stage, mb, p});
    if (it != s_.actionOps_.end())
      list.append(it->second.begin(), it->second.end());
  }
  llvm::sort(list, [&](Operation *a, Operation *b) {
    return s_.info_[a].index < s_.info_[b].index;
  });
  for (Operation *op : list)
    if (!emitted_.contains(op) && failed(emitOp(op)))
      return failure();
  return success();
}

LogicalResult RankEmitter::emitTransfers(ArrayRef<pipeline::Action> run) {
  SmallVector<Value> sendValues, recvValues; // original values
  SmallVector<int64_t> sendPeers, recvPeers;
  auto flush = [&]() -> LogicalResult {
    if (sendValues.empty() && recvValues.empty())
      return success();
    SmallVector<Value> inputs;
    SmallVector<Type> types;
    for (Value v : sendValues) {
      if (failed(ensure(v)))
        return failure();
      inputs.push_back(map_.lookup(v));
    }
    for (Value v : recvValues)
      types.push_back(v.getType());
    auto ex = b_.create<dist::ExchangeOp>(s_.func_.getLoc(), types, inputs, axes(),
                                          b_.getDenseI64ArrayAttr(sendPeers),
                                          b_.getDenseI64ArrayAttr(recvPeers));
    for (auto [v, r] : llvm::zip(recvValues, ex.getResults()))
      if (!map_.contains(v)) // a rank that computed v itself keeps its own
        map_.map(v, r);
    sendValues.clear();
    recvValues.clear();
    sendPeers.clear();
    recvPeers.clear();
    return success();
  };
  for (const pipeline::Action &a : run) {
    auto values = [&](auto &table, int stage) -> ArrayRef<Value> {
      auto it = table.find({stage, a.mb});
      return it == table.end() ? ArrayRef<Value>() : ArrayRef<Value>(it->second);
    };
    switch (a.kind) {
    case ActionKind::SendF:
    case ActionKind::SendB: {
      bool f = a.kind == ActionKind::SendF;
      int peer = s_.s_.stageRank[a.stage + (f ? 1 : -1)];
      // One transfer's values per peer and direction in an exchange: NCCL
      // sends them as one message (NcclCommunicator::runExchange), and the
      // peer receives the same values as one.
      if (!values(f ? s_.sendF_ : s_.sendB_, a.stage).empty() &&
          llvm::is_contained(sendPeers, peer) && failed(flush()))
        return failure();
      for (Value v : values(f ? s_.sendF_ : s_.sendB_, a.stage)) {
        // A value received in this group cannot leave in it.
        if (!map_.contains(v) && llvm::is_contained(recvValues, v) && failed(flush()))
          return failure();
        sendValues.push_back(v);
        sendPeers.push_back(peer);
      }
      break;
    }
    case ActionKind::RecvF:
    case ActionKind::RecvB: {
      bool f = a.kind == ActionKind::RecvF;
      int from = a.stage + (f ? -1 : 1);
      if (!values(f ? s_.sendF_ : s_.sendB_, from).empty() &&
          llvm::is_contained(recvPeers, int64_t(s_.s_.stageRank[from])) && failed(flush()))
        return failure();
      for (Value v : values(f ? s_.sendF_ : s_.sendB_, from)) {
        recvValues.push_back(v);
        recvPeers.push_back(s_.s_.stageRank[from]);
      }
      break;
    }
    default:
      break;
    }
  }
  return flush();
}

LogicalResult RankEmitter::emitTree(Operation *root) {
  const OpInfo &info = s_.info_[root];
  Location loc = root->getLoc();
  Type type = root->getResult(0).getType();
  SmallVector<int> dest = info.home;
  SmallVector<int> owners;
  for (Value leaf : info.leaves)
    owners.push_back(s_.ownerOf(info, leaf));
  // acc += term, with the root's own add (its type and attributes).
  auto accumulate = [&](Value &acc, Value term) {
    if (!acc) {
      acc = term;
      return;
    }
    Operation *add = b_.clone(*root);
    add->setOperands({acc, term});
    acc = add->getResult(0);
  };
  // This rank's partial sum, in the terms' order.
  Value partial;
  for (auto [leaf, owner] : llvm::zip(info.leaves, owners)) {
    if (owner != rank_)
      continue;
    if (failed(ensure(leaf)))
      return failure();
    accumulate(partial, map_.lookup(leaf));
  }
  llvm::sort(owners);
  owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
  bool here = llvm::is_contained(dest, rank_);
  Value total;
  if (int(dest.size()) == s_.s_.numRanks) {
    auto reduce = b_.create<dist::AllReduceOp>(
        loc, ValueRange{partial ? partial : zeros(type, loc)}, axes(),
        dist::ReduceKindAttr::get(b_.getContext(), dist::ReduceKind::Sum));
    total = reduce.getResult(0);
  } else {
    SmallVector<Value> inputs;
    SmallVector<int64_t> sendPeers, recvPeers;
    SmallVector<Type> types;
    if (partial)
      for (int d : dest)
        if (d != rank_) {
          inputs.push_back(partial);
          sendPeers.push_back(d);
        }
    if (here)
      for (int o : owners)
        if (o != rank_) {
          types.push_back(type);
          recvPeers.push_back(o);
        }
    SmallVector<Value> received;
    if (!inputs.empty() || !types.empty()) {
      auto ex = b_.create<dist::ExchangeOp>(loc, types, inputs, axes(),
                                            b_.getDenseI64ArrayAttr(sendPeers),
                                            b_.getDenseI64ArrayAttr(recvPeers));
      received.assign(ex.getResults().begin(), ex.getResults().end());
    }
    if (!here)
      return success();
    // Every destination sums the partials in rank order: equal copies.
    unsigned next = 0;
    for (int o : owners)
      accumulate(total, o == rank_ ? partial : received[next++]);
  }
  map_.map(root->getResult(0), total);
  emitted_.insert(root);
  return success();
}

void RankEmitter::drain() {
  for (Operation *op : s_.ops_) {
    const OpInfo &i = s_.info_[op];
    if (emitted_.contains(op) || i.state == MbState::Single || i.replicable || i.treeInternal ||
        i.treeRoot || !runsHere(i) || !loom::isBackward(op))
      continue;
    bool ready = llvm::all_of(op->getOperands(), [&](Value v) {
      if (map_.contains(v))
        return true;
      Operation *def = v.getDefiningOp();
      return !def || s_.info_[def].replicable;
    });
    if (ready)
      (void)emitOp(op);
  }
}

LogicalResult RankEmitter::run() {
  ArrayRef<pipeline::Action> actions = s_.s_.ranks[rank_];
  for (size_t i = 0; i < actions.size();) {
    const pipeline::Action &a = actions[i];
    if (pipeline::isComm(a.kind)) {
      size_t end = i;
      while (end < actions.size() && pipeline::isComm(actions[end].kind))
        ++end;
      if (failed(emitTransfers(actions.slice(i, end - i))))
        return failure();
      i = end;
      continue;
    }
    LogicalResult ok = success();
    switch (a.kind) {
    case ActionKind::F:
      ok = emitPart(a.stage, a.mb, {Part::F});
      break;
    case ActionKind::I:
      ok = emitPart(a.stage, a.mb, {Part::I});
      break;
    case ActionKind::W:
      ok = emitPart(a.stage, a.mb, {Part::W});
      break;
    case ActionKind::B:
      ok = emitPart(a.stage, a.mb, {Part::I, Part::W});
      break;
    case ActionKind::OverlapFB: {
      // The backward half on a stream of its own: the two halves are
      // independent, so the GPU runs them concurrently.
      ok = emitPart(a.stage, a.mb, {Part::F});
      if (succeeded(ok)) {
        auto &ops = fn_.getBody().front().getOperations();
        size_t before = ops.size();
        ok = emitPart(a.bStage, a.bMb, {Part::I, Part::W});
        for (Operation &op : llvm::make_range(std::next(ops.begin(), before), ops.end()))
          if (isa<nn::NNDialect>(op.getDialect()) && !isa<nn::ParameterOp, nn::ConstantOp>(op))
            loom::setStream(&op, "compute_b");
      }
      break;
    }
    default:
      break;
    }
    if (failed(ok))
      return failure();
    drain();
    ++i;
  }
  // After the list: what combines microbatches and stages, in program order.
  for (Operation *op : s_.ops_) {
    if (emitted_.contains(op))
      continue;
    const OpInfo &i = s_.info_[op];
    if (i.state == MbState::Single) {
      if (i.rank == rank_)
        return op->emitError("pipeline rank ")
               << rank_ << ": the schedule never runs stage " << i.stage << ", microbatch "
               << i.chainMb << (i.part == Part::F ? " (F)" : i.part == Part::I ? " (I)" : " (W)");
      continue;
    }
    if (i.replicable || i.treeInternal)
      continue;
    if (i.treeRoot) {
      // Owners of terms take part even where the total is not needed.
      bool owner = llvm::any_of(i.leaves, [&](Value v) { return s_.ownerOf(i, v) == rank_; });
      if ((owner || runsHere(i)) && failed(emitTree(op)))
        return failure();
      continue;
    }
    if (runsHere(i) && failed(emitOp(op)))
      return failure();
  }
  // Every rank returns every result: one held elsewhere is broadcast.
  auto ret = cast<func::ReturnOp>(s_.func_.getBody().front().getTerminator());
  SmallVector<Value> results;
  for (Value v : ret.getOperands()) {
    SmallVector<int> home = s_.homeOf(v);
    if (int(home.size()) == s_.s_.numRanks) {
      if (failed(ensure(v)))
        return failure();
      results.push_back(map_.lookup(v));
      continue;
    }
    Value in;
    if (home.front() == rank_) {
      if (failed(ensure(v)))
        return failure();
      in = map_.lookup(v);
    } else {
      in = zeros(v.getType(), ret.getLoc());
    }
    results.push_back(b_.create<dist::BroadcastOp>(ret.getLoc(), v.getType(), in, axes(),
                                                   b_.getI64IntegerAttr(home.front()))
                          .getResult());
  }
  b_.create<func::ReturnOp>(ret.getLoc(), results);
  return success();
}

LogicalResult Splitter::run() {
  if (failed(classify()))
    return failure();
  findTrees();
  findTransfers();
  OpBuilder b(module_.getContext());
  b.setInsertionPoint(func_);
  SmallVector<func::FuncOp> functions;
  for (int r = 0; r < s_.numRanks; ++r) {
    auto fn = b.create<func::FuncOp>(func_.getLoc(),
                                     (func_.getName() + "_pp" + llvm::Twine(r)).str(),
                                     func_.getFunctionType());
    fn.setAllArgAttrs(func_.getAllArgAttrs());
    fn.setAllResultAttrs(func_.getAllResultAttrs());
    pipe::setRank(fn, r);
    fn.addEntryBlock();
    RankEmitter emitter(*this, r, fn);
    if (failed(emitter.run()))
      return failure();
    functions.push_back(fn);
  }
  return success();
}

struct PipelineSplitPass : public loom::impl::PipelineSplitBase<PipelineSplitPass> {
  using PipelineSplitBase::PipelineSplitBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto schedules = llvm::to_vector(module.getOps<pipe::ScheduleOp>());
    if (schedules.size() != 1) {
      module.emitError("--loom-pipeline-split needs exactly one pipe.schedule (run "
                       "--loom-pipeline-schedule first), found ")
          << schedules.size();
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>(entry);
    if (!func || !func.getBody().hasOneBlock()) {
      module.emitError("no single-block function named '") << entry << "' to split";
      return signalPassFailure();
    }
    pipeline::Schedule schedule = pipe::scheduleFromOp(schedules.front());
    // The CSV travels into the executable (loom-inspect draws it); the
    // header keeps the schedule's kind, which the actions alone do not tell.
    pipe::setScheduleCsv(module, pipeline::exportCsv(schedule, pipeline::CsvHeader::Always));
    int numRanks = schedule.numRanks;
    Splitter splitter(module, func, std::move(schedule));
    if (failed(splitter.run()))
      return signalPassFailure();
    func.erase();
    schedules.front().erase();
    MLIRContext *ctx = module.getContext();
    dist::setMesh(module,
                  dist::MeshAttr::get(ctx, {StringAttr::get(ctx, kAxis)}, {int64_t(numRanks)}));
  }
};

} // namespace
