#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleAnalysis.h"
#include "runtime/schedule/ScheduleVerifier.h"
#include "runtime/support/UserFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <limits>
#include <tuple>

namespace loom::pipeline {

llvm::StringRef actionKindName(ActionKind kind) {
  switch (kind) {
  case ActionKind::F: return "F";
  case ActionKind::B: return "B";
  case ActionKind::I: return "I";
  case ActionKind::W: return "W";
  case ActionKind::SendF: return "SEND_F";
  case ActionKind::RecvF: return "RECV_F";
  case ActionKind::SendB: return "SEND_B";
  case ActionKind::RecvB: return "RECV_B";
  case ActionKind::OverlapFB: return "OVERLAP_F_B";
  }
  return "?";
}

bool isComm(ActionKind kind) {
  return kind == ActionKind::SendF || kind == ActionKind::RecvF || kind == ActionKind::SendB ||
         kind == ActionKind::RecvB;
}
bool isCompute(ActionKind kind) { return !isComm(kind); }

std::string Action::str() const {
  if (kind == ActionKind::OverlapFB)
    return llvm::formatv("({0}F{1};{2}B{3})OVERLAP_F_B", stage, mb, bStage, bMb).str();
  return llvm::formatv("{0}{1}{2}", stage, actionKindName(kind), mb).str();
}

static llvm::Error parseError(llvm::StringRef text, const llvm::Twine &why) {
  return llvm::createStringError("bad pipeline action '" + text + "': " + why);
}

llvm::Expected<Action> Action::parse(llvm::StringRef text) {
  llvm::StringRef s = text.trim();
  if (s.consume_front("(")) {
    // (<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B
    if (!s.consume_back(")OVERLAP_F_B"))
      return parseError(text, "expected '(xFy;uBv)OVERLAP_F_B'");
    auto [first, second] = s.split(';');
    auto f = Action::parse(first);
    if (!f)
      return f.takeError();
    auto b = Action::parse(second);
    if (!b)
      return b.takeError();
    if (f->kind != ActionKind::F || b->kind != ActionKind::B)
      return parseError(text, "an overlapped pair is an F then a B");
    return Action::overlap(f->stage, f->mb, b->stage, b->mb);
  }
  size_t digits = 0;
  while (digits < s.size() && llvm::isDigit(s[digits]))
    ++digits;
  if (digits == 0)
    return parseError(text, "expected a stage index first");
  int stage = 0, mb = 0;
  if (s.substr(0, digits).getAsInteger(10, stage) || stage > kMaxScheduleIndex)
    return parseError(text, "stage index " + s.substr(0, digits) + " is out of range (at most " +
                                llvm::Twine(kMaxScheduleIndex) + ")");
  s = s.drop_front(digits);
  static const std::pair<llvm::StringRef, ActionKind> kinds[] = {
      {"SEND_F", ActionKind::SendF}, {"RECV_F", ActionKind::RecvF},
      {"SEND_B", ActionKind::SendB}, {"RECV_B", ActionKind::RecvB},
      {"F", ActionKind::F},          {"B", ActionKind::B},
      {"I", ActionKind::I},          {"W", ActionKind::W}};
  for (auto &[name, kind] : kinds) {
    if (!s.consume_front(name))
      continue;
    if (s.empty() || s.getAsInteger(10, mb) || mb < 0)
      return parseError(text, "expected a microbatch index after '" + name + "'");
    if (mb > kMaxScheduleIndex)
      return parseError(text, "microbatch index " + s + " is out of range (at most " +
                                  llvm::Twine(kMaxScheduleIndex) + ")");
    return Action::make(kind, stage, mb);
  }
  return parseError(text, "unknown action kind (expected F, B, I, W, SEND_F, RECV_F, SEND_B, "
                          "RECV_B or OVERLAP_F_B)");
}

llvm::StringRef scheduleKindName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::OneFOneB: return "1f1b";
  case ScheduleKind::Interleaved: return "interleaved";
  case ScheduleKind::ZBH1: return "zb-h1";
  case ScheduleKind::DualPipe: return "dualpipe";
  case ScheduleKind::DualPipeV: return "dualpipev";
  case ScheduleKind::Custom: return "custom";
  }
  return "custom";
}

llvm::Expected<ScheduleKind> parseScheduleKind(llvm::StringRef name) {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::Interleaved, ScheduleKind::ZBH1,
                            ScheduleKind::DualPipe, ScheduleKind::DualPipeV, ScheduleKind::Custom})
    if (scheduleKindName(kind) == name)
      return kind;
  return llvm::createStringError("unknown schedule '" + name +
                                 "' (expected 1f1b, interleaved, zb-h1, dualpipe or dualpipev)");
}

void removeCommunication(Schedule &schedule) {
  for (auto &actions : schedule.ranks)
    llvm::erase_if(actions, [](const Action &a) { return isComm(a.kind); });
}

namespace {
/// A transfer's place in the one order every rank posts its transfers in:
/// the time its tensor is produced under unit-ish costs, then who made it.
struct TransferKey {
  double time;
  int rank;
  size_t index;
  int half;
  bool operator<(const TransferKey &o) const {
    return std::tie(time, rank, index, half) < std::tie(o.time, o.rank, o.index, o.half);
  }
};
} // namespace

llvm::Error insertCommunication(Schedule &schedule) {
  removeCommunication(schedule);
  auto timed = analyzeSchedule(schedule);
  if (!timed)
    return timed.takeError();
  const Schedule &s = schedule;
  std::vector<std::vector<std::pair<TransferKey, Action>>> comms(s.numRanks);
  for (int rank = 0; rank < s.numRanks; ++rank) {
    const auto &timeline = timed->timeline[rank];
    for (size_t j = 0; j < timeline.size(); ++j) {
      const Action &a = timeline[j].action;
      auto add = [&](bool forward, int stage, int mb, int half) {
        bool edge = forward ? s.isLastInChain(stage) : s.isFirstInChain(stage);
        if (edge)
          return;
        int to = forward ? stage + 1 : stage - 1;
        int peer = s.stageRank[to];
        if (peer == rank)
          return;
        TransferKey key{timeline[j].end, rank, j, half};
        comms[rank].push_back(
            {key, Action::make(forward ? ActionKind::SendF : ActionKind::SendB, stage, mb)});
        comms[peer].push_back(
            {key, Action::make(forward ? ActionKind::RecvF : ActionKind::RecvB, to, mb)});
      };
      if (a.kind == ActionKind::F || a.kind == ActionKind::OverlapFB)
        add(true, a.stage, a.mb, 0);
      if (a.kind == ActionKind::B || a.kind == ActionKind::I)
        add(false, a.stage, a.mb, 1);
      if (a.kind == ActionKind::OverlapFB)
        add(false, a.bStage, a.bMb, 1);
    }
  }
  // Every rank posts its transfers in the one global order (no cycle of
  // waits can form), each before the first compute that starts at or after
  // the tensor exists: a send right after its producer, a receive before its
  // consumer.
  for (int rank = 0; rank < s.numRanks; ++rank) {
    auto &list = comms[rank];
    std::stable_sort(list.begin(), list.end(),
                     [](const auto &x, const auto &y) { return x.first < y.first; });
    std::vector<Action> out;
    size_t next = 0;
    for (const TimedAction &t : timed->timeline[rank]) {
      while (next < list.size() && list[next].first.time <= t.start)
        out.push_back(list[next++].second);
      out.push_back(t.action);
    }
    while (next < list.size())
      out.push_back(list[next++].second);
    schedule.ranks[rank] = std::move(out);
  }
  return llvm::Error::success();
}

std::string exportCsv(const Schedule &schedule, CsvHeader header) {
  std::string text;
  if (header == CsvHeader::Always || schedule.numChains != 1)
    text += llvm::formatv("# loom-schedule kind={0} ranks={1} stages={2} microbatches={3} "
                          "chains={4}\n",
                          scheduleKindName(schedule.kind), schedule.numRanks, schedule.numStages,
                          schedule.numMicrobatches, schedule.numChains)
                .str();
  for (const auto &actions : schedule.ranks) {
    llvm::SmallVector<std::string> cells;
    for (const Action &a : actions)
      cells.push_back(a.str());
    text += llvm::join(cells, ",") + "\n";
  }
  return text;
}

llvm::Expected<Schedule> importCsv(llvm::StringRef text) {
  Schedule s;
  int headerStages = 0, headerMicrobatches = 0, headerRanks = 0;
  llvm::SmallVector<llvm::StringRef> lines;
  text.split(lines, '\n');
  int lineNo = 0;
  for (llvm::StringRef line : lines) {
    ++lineNo;
    line = line.trim();
    if (line.consume_front("#")) {
      llvm::SmallVector<llvm::StringRef> fields;
      line.trim().split(fields, ' ', -1, false);
      if (fields.empty() || fields[0] != "loom-schedule")
        continue;
      for (llvm::StringRef field : llvm::drop_begin(fields)) {
        auto [key, value] = field.split('=');
        int number = 0;
        if (key == "kind") {
          auto kind = parseScheduleKind(value);
          if (!kind)
            return kind.takeError();
          s.kind = *kind;
        } else if (value.getAsInteger(10, number) || number <= 0 ||
                   number > kMaxScheduleIndex + 1) {
          return llvm::createStringError(llvm::formatv(
              "schedule CSV line {0}: '{1}' needs a positive integer of at most {2}", lineNo,
              field, kMaxScheduleIndex + 1));
        } else if (key == "ranks") {
          headerRanks = number;
        } else if (key == "stages") {
          headerStages = number;
        } else if (key == "microbatches") {
          headerMicrobatches = number;
        } else if (key == "chains") {
          s.numChains = number;
        }
      }
      continue;
    }
    if (line.empty() && lineNo == int(lines.size()))
      continue; // the final newline
    std::vector<Action> actions;
    llvm::SmallVector<llvm::StringRef> cells;
    line.split(cells, ',');
    for (llvm::StringRef cell : cells) {
      cell = cell.trim().trim('"');
      if (cell.empty() || cell == "None")
        continue; // an idle slot in PyTorch's compute-only tables
      llvm::StringRef rest = cell.ltrim("0123456789");
      if (rest == "UNSHARD" || rest == "RESHARD" || rest == "REDUCE_GRAD")
        continue; // FSDP bookkeeping, not pipeline dataflow
      auto action = Action::parse(cell);
      if (!action)
        return llvm::createStringError(llvm::formatv("schedule CSV line {0}: {1}", lineNo,
                                                     llvm::toString(action.takeError())));
      actions.push_back(*action);
    }
    s.ranks.push_back(std::move(actions));
  }
  s.numRanks = int(s.ranks.size());
  if (s.numRanks == 0)
    return llvm::createStringError("schedule CSV has no rows (one row per rank expected)");
  if (headerRanks && headerRanks != s.numRanks)
    return llvm::createStringError(llvm::formatv(
        "schedule CSV header says {0} ranks but has {1} rows", headerRanks, s.numRanks));
  int maxStage = -1, maxMb = -1;
  for (const auto &actions : s.ranks)
    for (const Action &a : actions) {
      maxStage = std::max({maxStage, a.stage, a.bStage});
      maxMb = std::max({maxMb, a.mb, a.bMb});
    }
  // In 64 bits: an index of INT_MAX must not wrap the counts.
  const int64_t numStages = headerStages ? headerStages : int64_t(maxStage) + 1;
  if (numStages <= 0 || numStages % s.numChains != 0)
    return llvm::createStringError(llvm::formatv(
        "schedule CSV: {0} stages do not split into {1} chains", numStages, s.numChains));
  const int64_t numMicrobatches =
      headerMicrobatches ? headerMicrobatches : (int64_t(maxMb) + 1) * s.numChains;
  if (numMicrobatches > std::numeric_limits<int>::max())
    return llvm::createStringError(
        llvm::formatv("schedule CSV: {0} microbatches is too many", numMicrobatches));
  // Every microbatch of a chain runs forward through each of the chain's
  // stages: at least stages x microbatches / chains actions holding an F.
  // Fewer actions than that cannot verify; refuse before sizing tables by
  // the (possibly huge) indices.
  int64_t forwards = 0;
  for (const auto &actions : s.ranks)
    for (const Action &a : actions)
      forwards += a.kind == ActionKind::F || a.kind == ActionKind::OverlapFB;
  if (numStages * numMicrobatches / s.numChains > forwards)
    return llvm::createStringError(llvm::formatv(
        "schedule CSV: {0} stages and {1} microbatches need {2} forward actions, the file "
        "has {3}",
        numStages, numMicrobatches, numStages * numMicrobatches / s.numChains, forwards));
  s.numStages = int(numStages);
  s.numMicrobatches = int(numMicrobatches);
  // Each stage runs where its compute actions are.
  s.stageRank.assign(s.numStages, -1);
  for (int rank = 0; rank < s.numRanks; ++rank)
    for (const Action &a : s.ranks[rank]) {
      if (isComm(a.kind))
        continue;
      for (int stage : {a.stage, a.bStage}) {
        if (stage < 0 || stage >= s.numStages)
          continue;
        if (s.stageRank[stage] != -1 && s.stageRank[stage] != rank)
          return llvm::createStringError(llvm::formatv(
              "schedule CSV: stage {0} computes on ranks {1} and {2}; a stage lives on one rank",
              stage, s.stageRank[stage], rank));
        s.stageRank[stage] = rank;
      }
    }
  for (int stage = 0; stage < s.numStages; ++stage)
    if (s.stageRank[stage] == -1)
      return llvm::createStringError(
          llvm::formatv("schedule CSV: stage {0} has no compute action on any rank", stage));
  if (llvm::Error err = verifySchedule(s))
    return std::move(err);
  return s;
}

llvm::Expected<Schedule> readScheduleFile(llvm::StringRef path) {
  auto buffer = openRegularFile(path.str());
  if (!buffer)
    return llvm::createStringError("cannot read " + llvm::toString(buffer.takeError()));
  auto s = importCsv((*buffer)->getBuffer());
  if (!s)
    return llvm::createStringError("'" + path + "': " + llvm::toString(s.takeError()));
  return s;
}

std::string formatScheduleTable(const Schedule &schedule, bool withComm) {
  std::string text;
  for (int rank = 0; rank < schedule.numRanks; ++rank) {
    text += llvm::formatv("rank {0}:", rank).str();
    for (const Action &a : schedule.ranks[rank])
      if (withComm || isCompute(a.kind))
        text += " " + a.str();
    text += "\n";
  }
  return text;
}

} // namespace loom::pipeline
