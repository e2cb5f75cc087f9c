#include "runtime/schedule/ScheduleAnalysis.h"
#include "runtime/schedule/ScheduleVerifier.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>

namespace loom::pipeline {

double ScheduleAnalysis::maxBubble() const {
  double m = 0;
  for (const RankAnalysis &r : ranks)
    m = std::max(m, r.bubble);
  return m;
}

int ScheduleAnalysis::maxPeakActivations() const {
  int m = 0;
  for (const RankAnalysis &r : ranks)
    m = std::max(m, r.peakActivations);
  return m;
}

std::string ScheduleAnalysis::format() const {
  std::string text = llvm::formatv("step time {0:F2}, model copies {1}\n", makespan,
                                   parameterCopies)
                         .str();
  text += "rank   busy      bubble    bubble%  peak-activations  parameters\n";
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankAnalysis &a = ranks[r];
    text += llvm::formatv("{0,-6} {1,-9:F2} {2,-9:F2} {3,-8:F1} {4,-17} {5:F2}x\n", r, a.busy,
                          a.bubble, makespan > 0 ? 100.0 * a.bubble / makespan : 0.0,
                          a.peakActivations, a.parameterCopies)
                .str();
  }
  return text;
}

llvm::Expected<ScheduleAnalysis> analyzeSchedule(const Schedule &s, const ScheduleCosts &costs,
                                                 bool verify) {
  if (verify)
    if (llvm::Error err = verifySchedule(s))
      return std::move(err);
  int mbs = s.microbatchesPerChain();
  auto idx = [&](int stage, int mb) { return size_t(stage) * mbs + mb; };
  std::vector<double> fEnd(s.numStages * mbs, -1), bEnd(s.numStages * mbs, -1);
  ScheduleAnalysis out;
  out.parameterCopies = s.parameterCopies();
  out.ranks.resize(s.numRanks);
  out.timeline.resize(s.numRanks);
  std::vector<size_t> pc(s.numRanks, 0);
  std::vector<double> clock(s.numRanks, 0);

  // When the input of one half of an action is ready, or -1 if not yet.
  auto inputReady = [&](int rank, bool forward, int stage, int mb) -> double {
    double t = 0;
    if (!forward) {
      t = fEnd[idx(stage, mb)];
      if (t < 0)
        return -1;
    }
    bool edge = forward ? s.isFirstInChain(stage) : s.isLastInChain(stage);
    if (edge)
      return t;
    int from = forward ? stage - 1 : stage + 1;
    double produced = forward ? fEnd[idx(from, mb)] : bEnd[idx(from, mb)];
    if (produced < 0)
      return -1;
    if (s.stageRank[from] != rank)
      produced += costs.comm;
    return std::max(t, produced);
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (int rank = 0; rank < s.numRanks; ++rank) {
      const auto &actions = s.ranks[rank];
      while (pc[rank] < actions.size()) {
        const Action &a = actions[pc[rank]];
        if (isComm(a.kind)) {
          ++pc[rank];
          continue;
        }
        double ready = 0, duration = 0;
        switch (a.kind) {
        case ActionKind::F:
          ready = inputReady(rank, true, a.stage, a.mb);
          duration = costs.f * costs.scale(a.stage);
          break;
        case ActionKind::B:
        case ActionKind::I:
          ready = inputReady(rank, false, a.stage, a.mb);
          duration = (a.kind == ActionKind::B ? costs.b : costs.i) * costs.scale(a.stage);
          break;
        case ActionKind::W:
          ready = bEnd[idx(a.stage, a.mb)];
          duration = costs.w * costs.scale(a.stage);
          break;
        case ActionKind::OverlapFB: {
          double f = inputReady(rank, true, a.stage, a.mb);
          double b = inputReady(rank, false, a.bStage, a.bMb);
          ready = (f < 0 || b < 0) ? -1 : std::max(f, b);
          duration = costs.fb * (costs.scale(a.stage) + costs.scale(a.bStage)) / 2;
          break;
        }
        default: break;
        }
        if (ready < 0)
          break;
        double start = std::max(clock[rank], ready), end = start + duration;
        clock[rank] = end;
        if (a.kind == ActionKind::F || a.kind == ActionKind::OverlapFB)
          fEnd[idx(a.stage, a.mb)] = end;
        if (a.kind == ActionKind::B || a.kind == ActionKind::I)
          bEnd[idx(a.stage, a.mb)] = end;
        if (a.kind == ActionKind::OverlapFB)
          bEnd[idx(a.bStage, a.bMb)] = end;
        out.timeline[rank].push_back({a, start, end});
        out.ranks[rank].busy += duration;
        ++pc[rank];
        progress = true;
      }
    }
  }
  for (int rank = 0; rank < s.numRanks; ++rank)
    if (pc[rank] < s.ranks[rank].size())
      return llvm::createStringError(llvm::formatv(
          "schedule analysis: rank {0} never runs {1} (its input never becomes ready)", rank,
          s.ranks[rank][pc[rank]].str()));
  for (int rank = 0; rank < s.numRanks; ++rank)
    out.makespan = std::max(out.makespan, clock[rank]);
  std::vector<int> stagesOn(s.numRanks, 0);
  for (int stage = 0; stage < s.numStages; ++stage)
    ++stagesOn[s.stageRank[stage]];
  for (int rank = 0; rank < s.numRanks; ++rank) {
    RankAnalysis &r = out.ranks[rank];
    r.bubble = out.makespan - r.busy;
    int live = 0;
    for (const TimedAction &t : out.timeline[rank]) {
      const Action &a = t.action;
      if (a.kind == ActionKind::F || a.kind == ActionKind::OverlapFB)
        r.peakActivations = std::max(r.peakActivations, ++live);
      if (a.kind == ActionKind::B || a.kind == ActionKind::I || a.kind == ActionKind::OverlapFB)
        --live;
    }
    r.parameterCopies = double(stagesOn[rank]) * s.numRanks / s.chainLength();
  }
  return out;
}

/// The largest cost --schedule-costs takes: times far beyond it lose the
/// precision the timeline needs (infinity never ends it).
constexpr double kMaxScheduleCost = 1e9;

llvm::Expected<ScheduleCosts> parseScheduleCosts(llvm::StringRef text) {
  ScheduleCosts costs;
  llvm::SmallVector<llvm::StringRef> fields;
  text.split(fields, ',', -1, false);
  for (llvm::StringRef field : fields) {
    auto [key, value] = field.split('=');
    double number = 0;
    if (value.trim().getAsDouble(number) || !std::isfinite(number) || number < 0 ||
        number > kMaxScheduleCost)
      return llvm::createStringError("schedule costs: '" + field +
                                     "' needs a finite non-negative number of at most 1e9 (like "
                                     "f=1,b=2,i=1,w=1,fb=3,comm=0)");
    key = key.trim();
    double *slot = key == "f"      ? &costs.f
                   : key == "b"    ? &costs.b
                   : key == "i"    ? &costs.i
                   : key == "w"    ? &costs.w
                   : key == "fb"   ? &costs.fb
                   : key == "comm" ? &costs.comm
                                   : nullptr;
    if (!slot)
      return llvm::createStringError("schedule costs: unknown cost '" + key +
                                     "' (expected f, b, i, w, fb, comm)");
    *slot = number;
  }
  return costs;
}

std::string scheduleToJson(const Schedule &s, const ScheduleAnalysis &a, const ScheduleCosts &c) {
  llvm::json::Array ranks;
  for (int r = 0; r < s.numRanks; ++r) {
    llvm::json::Array actions;
    for (const Action &act : s.ranks[r])
      actions.push_back(act.str());
    const RankAnalysis &ra = a.ranks[r];
    ranks.push_back(llvm::json::Object{{"rank", r},
                                       {"busy", ra.busy},
                                       {"bubble", ra.bubble},
                                       {"peak_activations", ra.peakActivations},
                                       {"parameters", ra.parameterCopies},
                                       {"actions", std::move(actions)}});
  }
  llvm::json::Array stageRanks;
  for (int r : s.stageRank)
    stageRanks.push_back(r);
  llvm::json::Object out{
      {"kind", scheduleKindName(s.kind)},
      {"ranks", s.numRanks},
      {"stages", s.numStages},
      {"microbatches", s.numMicrobatches},
      {"chains", s.numChains},
      {"stage_ranks", std::move(stageRanks)},
      {"costs", llvm::json::Object{{"f", c.f}, {"b", c.b}, {"i", c.i}, {"w", c.w}, {"fb", c.fb},
                                   {"comm", c.comm}}},
      {"step_time", a.makespan},
      {"model_copies", a.parameterCopies},
      {"per_rank", std::move(ranks)}};
  return llvm::formatv("{0:2}", llvm::json::Value(std::move(out))).str();
}

namespace {
/// Box colors by kind; a rank's later stages (the V's return leg, later
/// virtual stages) in a darker shade.
const char *fillOf(ActionKind kind, bool laterStage) {
  switch (kind) {
  case ActionKind::F: return laterStage ? "#1f4e79" : "#4e79a7";
  case ActionKind::B: return laterStage ? "#2e6b25" : "#59a14f";
  case ActionKind::I: return laterStage ? "#4f9a43" : "#8cd17d";
  case ActionKind::W: return laterStage ? "#7b4b6e" : "#b07aa1";
  default: return "#999999";
  }
}
} // namespace

std::string renderScheduleSvg(const Schedule &s, const ScheduleAnalysis &analysis) {
  const double left = 70, top = 40, rowHeight = 34, boxHeight = 26, width = 1200;
  double scale = analysis.makespan > 0 ? (width - left - 20) / analysis.makespan : 1;
  double height = top + rowHeight * s.numRanks + 64;
  // Each rank's first stage; boxes of its other stages are darker.
  std::vector<int> firstStage(s.numRanks, -1);
  for (int stage = s.numStages - 1; stage >= 0; --stage)
    firstStage[s.stageRank[stage]] = stage;
  bool severalStages = s.numStages > s.numRanks;
  std::string svg;
  svg += llvm::formatv("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
                       "font-family=\"sans-serif\" font-size=\"11\">\n",
                       width, height)
             .str();
  svg += llvm::formatv("<title>{0} schedule: {1} ranks, {2} stages, {3} microbatches</title>\n",
                       scheduleKindName(s.kind), s.numRanks, s.numStages, s.numMicrobatches)
             .str();
  svg += llvm::formatv("<text x=\"{0}\" y=\"18\" font-size=\"13\">{1}: {2} ranks, {3} stages, {4} "
                       "microbatches, step {5:F1}, max bubble {6:F1}</text>\n",
                       left, scheduleKindName(s.kind), s.numRanks, s.numStages,
                       s.numMicrobatches, analysis.makespan, analysis.maxBubble())
             .str();
  for (int rank = 0; rank < s.numRanks; ++rank) {
    double y = top + rank * rowHeight;
    svg += llvm::formatv("<g class=\"rank\" data-rank=\"{0}\">\n", rank).str();
    svg += llvm::formatv("<text x=\"8\" y=\"{0}\">rank {1}</text>\n", y + boxHeight * 0.65, rank)
               .str();
    for (const TimedAction &t : analysis.timeline[rank]) {
      const Action &a = t.action;
      double x = left + t.start * scale, w = std::max(1.0, (t.end - t.start) * scale);
      std::string label = std::to_string(a.mb);
      if (a.kind == ActionKind::OverlapFB) {
        svg += llvm::formatv("<g class=\"action\" data-action=\"{0}\"><title>{0} [{1:F2}, {2:F2}]"
                             "</title>\n",
                             a.str(), t.start, t.end)
                   .str();
        svg += llvm::formatv("<rect x=\"{0:F2}\" y=\"{1:F2}\" width=\"{2:F2}\" height=\"{3:F2}\" "
                             "fill=\"{4}\" stroke=\"#f28e2b\" stroke-width=\"2\"/>\n",
                             x, y, w, boxHeight / 2,
                             fillOf(ActionKind::F, a.stage != firstStage[rank]))
                   .str();
        svg += llvm::formatv("<rect x=\"{0:F2}\" y=\"{1:F2}\" width=\"{2:F2}\" height=\"{3:F2}\" "
                             "fill=\"{4}\" stroke=\"#f28e2b\" stroke-width=\"2\"/>\n",
                             x, y + boxHeight / 2, w, boxHeight / 2,
                             fillOf(ActionKind::B, a.bStage != firstStage[rank]))
                   .str();
        svg += llvm::formatv("<text x=\"{0:F2}\" y=\"{1:F2}\" text-anchor=\"middle\" "
                             "fill=\"white\" font-size=\"9\">{2}</text>\n",
                             x + w / 2, y + boxHeight / 2 - 3, a.mb)
                   .str();
        svg += llvm::formatv("<text x=\"{0:F2}\" y=\"{1:F2}\" text-anchor=\"middle\" "
                             "fill=\"white\" font-size=\"9\">{2}</text>\n</g>\n",
                             x + w / 2, y + boxHeight - 3, a.bMb)
                   .str();
        continue;
      }
      svg += llvm::formatv("<g class=\"action\" data-action=\"{0}\"><title>{0} [{1:F2}, {2:F2}]"
                           "</title><rect x=\"{3:F2}\" y=\"{4:F2}\" width=\"{5:F2}\" "
                           "height=\"{6:F2}\" fill=\"{7}\" stroke=\"white\"/>"
                           "<text x=\"{8:F2}\" y=\"{9:F2}\" text-anchor=\"middle\" "
                           "fill=\"white\">{10}</text></g>\n",
                           a.str(), t.start, t.end, x, y, w, boxHeight,
                           fillOf(a.kind, a.stage != firstStage[rank]),
                           x + w / 2, y + boxHeight * 0.65, label)
                 .str();
    }
    svg += "</g>\n";
  }
  // Time axis: about ten ticks at round values.
  double axisY = top + rowHeight * s.numRanks + 8;
  svg += llvm::formatv("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n",
                       left, axisY, left + analysis.makespan * scale)
             .str();
  double step = analysis.makespan > 0 ? std::pow(10.0, std::floor(std::log10(analysis.makespan / 10)))
                                      : 1;
  if (analysis.makespan / step > 20)
    step *= 2.5;
  for (double t = 0; t <= analysis.makespan + 1e-9 && step > 0; t += step)
    svg += llvm::formatv("<text class=\"tick\" x=\"{0:F2}\" y=\"{1}\" text-anchor=\"middle\">{2}"
                         "</text>\n",
                         left + t * scale, axisY + 14, t)
               .str();
  // Legend.
  double legendY = axisY + 30, x = left;
  auto key = [&](const char *fill, const char *stroke, llvm::StringRef label) {
    svg += llvm::formatv("<g class=\"legend\"><rect x=\"{0:F2}\" y=\"{1:F2}\" width=\"14\" "
                         "height=\"14\" fill=\"{2}\" stroke=\"{3}\" stroke-width=\"2\"/>"
                         "<text x=\"{4:F2}\" y=\"{5:F2}\">{6}</text></g>\n",
                         x, legendY - 11, fill, stroke, x + 18, legendY, label)
               .str();
    x += 26 + 6.5 * label.size();
  };
  key(fillOf(ActionKind::F, false), "white", "F forward");
  key(fillOf(ActionKind::B, false), "white", "B full backward");
  key(fillOf(ActionKind::I, false), "white", "I input gradient");
  key(fillOf(ActionKind::W, false), "white", "W weight gradient");
  key("white", "#f28e2b", "OVERLAP_F_B (F over B)");
  if (severalStages)
    key(fillOf(ActionKind::F, true), "white", "darker: a rank's later stage");
  svg += "</svg>\n";
  return svg;
}

} // namespace loom::pipeline
