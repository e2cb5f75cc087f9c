// loom-plan's cost model and search (Planner.h).

#include "passes/planning/Planner.h"

#include "runtime/schedule/ScheduleAnalysis.h"
#include "runtime/schedule/ScheduleGenerators.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

namespace loom::planning {

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument, "%s", message.str().c_str());
}

constexpr double kGiB = double(1ull << 30);

/// A required number of `object`: its absence or a non-positive value is an
/// error naming the file and the field.
llvm::Expected<double> number(const llvm::json::Object &object, llvm::StringRef key,
                              llvm::StringRef path, llvm::StringRef where, bool positive = true) {
  std::optional<double> v = object.getNumber(key);
  std::string field = where.empty() ? key.str() : (where + "." + key).str();
  if (!v)
    return error("'" + path + "': the field \"" + field + "\" is missing or not a number");
  if (!std::isfinite(*v) || (positive ? *v <= 0 : *v < 0))
    return error("'" + path + "': \"" + field + "\" must be " +
                 (positive ? "a positive number" : "a number >= 0") + ", got " +
                 llvm::formatv("{0}", *v).str());
  return *v;
}

} // namespace

namespace {
void flatCurves(Calibration &c) {
  c.gemmBf16 = RateCurve{c.gemmTflopsBf16, 0};
  c.attentionForward = RateCurve{c.attentionForwardTflops, 0};
  c.attentionBackward = RateCurve{c.attentionBackwardTflops, 0};
}
} // namespace

Cluster defaultCluster() {
  Cluster c;
  c.name = "built-in: one node of 8 H200s";
  c.gpusPerNode = 8;
  c.nodes = 1;
  c.gpuMemoryGiB = 140;
  c.peakTflops = 989;
  // Rates measured on an H200 (bench/calibration/h200.json).
  c.gemmTflops = 792;
  c.memoryGBps = 4056;
  c.hostCopyGBps = 55;
  c.intraNode = {360, 5};  // NVLink 4 through NVSwitch, as NCCL's bus bandwidth
  c.interNode = {45, 10};  // one 400 Gb/s NIC per GPU
  return c;
}

Calibration defaultCalibration() {
  Calibration c;
  // loom-kernel-bench --calibration-out on an H200 (of nvidia-h200-x4),
  // 2026-11-26 (bench/calibration/h200.json); the curves fitted as
  // parseCalibration fits them.
  c.device = "built-in (an H200)";
  c.gemmTflopsBf16 = 792;
  c.gemmTflopsF32 = 50;
  c.attentionForwardTflops = 476;
  c.attentionBackwardTflops = 292;
  c.memoryGBps = 4056;
  c.launchUs = 5.7;
  c.graphLaunchUs = 1.24;
  c.gemmBf16 = RateCurve{804, 6.2};
  c.attentionForward = RateCurve{581, 26.5};
  c.attentionBackward = RateCurve{343, 88.0};
  return c;
}

llvm::Expected<Cluster> parseCluster(llvm::StringRef text, llvm::StringRef path) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return error("'" + path + "' is not JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *o = parsed->getAsObject();
  if (!o)
    return error("'" + path + "': a cluster file is a JSON object (see docs/planning.md)");
  Cluster c;
  c.name = o->getString("name").value_or(llvm::sys::path::filename(path)).str();
  auto get = [&](llvm::StringRef key, double &out, const llvm::json::Object &obj,
                 llvm::StringRef where) -> llvm::Error {
    auto v = number(obj, key, path, where);
    if (!v)
      return v.takeError();
    out = *v;
    return llvm::Error::success();
  };
  double gpus = 0, nodes = 0;
  for (auto [key, out] : {std::pair<llvm::StringRef, double *>{"gpus_per_node", &gpus},
                          {"nodes", &nodes},
                          {"gpu_memory_gib", &c.gpuMemoryGiB},
                          {"peak_tflops", &c.peakTflops},
                          {"gemm_tflops", &c.gemmTflops},
                          {"memory_gbps", &c.memoryGBps},
                          {"host_copy_gbps", &c.hostCopyGBps}})
    if (llvm::Error err = get(key, *out, *o, ""))
      return std::move(err);
  if (gpus != std::floor(gpus) || nodes != std::floor(nodes))
    return error("'" + path + "': \"gpus_per_node\" and \"nodes\" must be whole numbers");
  c.gpusPerNode = int64_t(gpus);
  c.nodes = int64_t(nodes);
  if (o->get("runtime_gib")) {
    auto runtime = number(*o, "runtime_gib", path, "", /*positive=*/false);
    if (!runtime)
      return runtime.takeError();
    c.runtimeGiB = *runtime;
  }
  for (auto [key, link] : {std::pair<llvm::StringRef, Link *>{"intra_node", &c.intraNode},
                           {"inter_node", &c.interNode}}) {
    const llvm::json::Object *l = o->getObject(key);
    if (!l)
      return error("'" + path + "': the field \"" + key + "\" (an object with bandwidth_gbps "
                   "and latency_us) is missing");
    if (llvm::Error err = get("bandwidth_gbps", link->bandwidthGBps, *l, key))
      return std::move(err);
    auto latency = number(*l, "latency_us", path, key, /*positive=*/false);
    if (!latency)
      return latency.takeError();
    link->latencyUs = *latency;
  }
  return c;
}

RateCurve RateCurve::fit(const std::vector<std::pair<double, double>> &points, double fallback) {
  RateCurve flat{fallback, 0};
  // seconds = t0 + flops * s: least squares over (flops, seconds).
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [flops, tflops] : points) {
    if (flops <= 0 || tflops <= 0)
      continue;
    double x = flops, y = flops / (tflops * 1e12);
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  double det = n * sxx - sx * sx;
  if (n < 2 || det <= 1e-12 * sxx * n)
    return flat;
  double slope = (n * sxy - sx * sy) / det;
  double t0 = (sy - slope * sx) / n;
  if (slope <= 0)
    return flat;
  if (t0 < 0) { // no fixed part: the rate through the origin
    slope = sxy / sxx;
    t0 = 0;
  }
  return RateCurve{1.0 / (slope * 1e12), t0 * 1e6};
}

llvm::Expected<Calibration> parseCalibration(llvm::StringRef text, llvm::StringRef path) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return error("'" + path + "' is not JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *o = parsed->getAsObject();
  if (!o || o->getString("schema") != "loom-calibration/1")
    return error("'" + path + "' is not a calibration file (\"schema\": "
                 "\"loom-calibration/1\", written by loom-kernel-bench --calibration-out)");
  Calibration c = defaultCalibration();
  c.device = o->getString("device").value_or("?").str();
  const llvm::json::Object *gemm = o->getObject("gemm_tflops");
  if (!gemm)
    return error("'" + path + "': the field \"gemm_tflops\" is missing");
  auto bf16 = number(*gemm, "bf16", path, "gemm_tflops");
  if (!bf16)
    return bf16.takeError();
  c.gemmTflopsBf16 = *bf16;
  if (gemm->getNumber("f32"))
    c.gemmTflopsF32 = *gemm->getNumber("f32");
  if (const llvm::json::Object *att = o->getObject("attention_tflops")) {
    auto f = number(*att, "forward", path, "attention_tflops");
    auto b = number(*att, "backward", path, "attention_tflops");
    if (!f)
      return f.takeError();
    if (!b)
      return b.takeError();
    c.attentionForwardTflops = *f;
    c.attentionBackwardTflops = *b;
  }
  auto bw = number(*o, "memory_gbps", path, "");
  if (!bw)
    return bw.takeError();
  c.memoryGBps = *bw;
  if (o->getNumber("launch_us"))
    c.launchUs = *o->getNumber("launch_us");
  if (o->getNumber("graph_launch_us"))
    c.graphLaunchUs = *o->getNumber("graph_launch_us");
  flatCurves(c);
  // Points of several sizes give each rate a fixed part per kernel.
  auto field = [&](const llvm::json::Object &p, llvm::StringRef key,
                   llvm::StringRef where) -> llvm::Expected<double> {
    return number(p, key, path, where);
  };
  if (const llvm::json::Array *gemms = o->getArray("gemm_points")) {
    std::vector<std::pair<double, double>> pts;
    for (const llvm::json::Value &v : *gemms) {
      const llvm::json::Object *p = v.getAsObject();
      if (!p)
        return error("'" + path + "': each of \"gemm_points\" is an object {m, n, k, dtype, tflops}");
      if (p->getString("dtype").value_or("bf16") != "bf16")
        continue;
      double mnk[3], tflops;
      const char *keys[3] = {"m", "n", "k"};
      for (int i = 0; i < 3; ++i) {
        auto x = field(*p, keys[i], "gemm_points");
        if (!x)
          return x.takeError();
        mnk[i] = *x;
      }
      auto t = field(*p, "tflops", "gemm_points");
      if (!t)
        return t.takeError();
      tflops = *t;
      pts.push_back({2 * mnk[0] * mnk[1] * mnk[2], tflops});
    }
    c.gemmBf16 = RateCurve::fit(pts, c.gemmTflopsBf16);
  }
  if (const llvm::json::Array *atts = o->getArray("attention_points")) {
    std::vector<std::pair<double, double>> fwd, bwd;
    for (const llvm::json::Value &v : *atts) {
      const llvm::json::Object *p = v.getAsObject();
      if (!p)
        return error("'" + path + "': each of \"attention_points\" is an object {batch, seq, "
                     "heads, head_dim, forward, backward}");
      double dims[4];
      const char *keys[4] = {"batch", "seq", "heads", "head_dim"};
      for (int i = 0; i < 4; ++i) {
        auto x = field(*p, keys[i], "attention_points");
        if (!x)
          return x.takeError();
        dims[i] = *x;
      }
      auto f = field(*p, "forward", "attention_points");
      auto b = field(*p, "backward", "attention_points");
      if (!f)
        return f.takeError();
      if (!b)
        return b.takeError();
      double forwardFlops = 4 * dims[0] * dims[2] * dims[1] * dims[1] * dims[3] / 2; // causal
      fwd.push_back({forwardFlops, *f});
      bwd.push_back({2.5 * forwardFlops, *b});
    }
    c.attentionForward = RateCurve::fit(fwd, c.attentionForwardTflops);
    c.attentionBackward = RateCurve::fit(bwd, c.attentionBackwardTflops);
  }
  return c;
}

std::string Layout::describe() const {
  std::string s = llvm::formatv("tp {0}{1}, pp {2}", tp, sp() ? " (sp)" : "", pp).str();
  if (pp > 1)
    s += " " + schedule + (vpp > 1 ? " vpp " + std::to_string(vpp) : "");
  s += llvm::formatv(", dp {0}{1}{2}, {3} microbatch{4} of {5}, recompute {6}", dp,
                     ep > 1 ? ", ep " + std::to_string(ep) : std::string(),
                     zero1() ? " (zero1)" : "", microbatches, microbatches == 1 ? "" : "es",
                     microbatchSize, recompute)
           .str();
  if (offload)
    s += ", offload";
  if (paddingLayers > 0)
    s += llvm::formatv(", {0} padding layer{1}", paddingLayers, paddingLayers == 1 ? "" : "s")
             .str();
  return s;
}

namespace {

/// One op's time on the calibrated GPU: compute-bound ops (more than 16
/// FLOPs per byte moved) at their rate, the rest at memory bandwidth, plus
/// the gap between kernels.
double opSeconds(const OpWork &op, const Calibration &cal, bool bf16) {
  double memory = op.bytes / (cal.memoryGBps * 1e9);
  double seconds = memory;
  if (op.flops > 16 * op.bytes) {
    RateCurve rate = bf16 ? cal.gemmBf16 : RateCurve{std::max(cal.gemmTflopsF32, 1.0), 0};
    llvm::StringRef name = op.name;
    if (name.starts_with("nn.attention_grad"))
      rate = cal.attentionBackward;
    else if (name.starts_with("nn.attention"))
      rate = cal.attentionForward;
    seconds = std::max(memory, rate.seconds(op.flops));
  }
  return seconds;
}

/// The phase's work, one sequence; its kernels' launch gaps are counted
/// apart (they do not grow with the microbatch).
double phaseSeconds(const PhaseWork &phase, const Calibration &cal, bool bf16) {
  double s = 0;
  for (const OpWork &op : phase.ops)
    s += opSeconds(op, cal, bf16);
  return s;
}
double phaseGaps(const PhaseWork &phase, const Calibration &cal) {
  return double(phase.ops.size()) * cal.graphLaunchUs * 1e-6;
}

/// A figure of the probes as a + c * layers + d * batch + e * layers *
/// batch: at `layers` layers (of a stage) and `batch` sequences.
struct Bilinear {
  double a = 0, c = 0, d = 0, e = 0;
  static Bilinear fit(const std::vector<Probe> &p, llvm::function_ref<double(const Probe &)> f) {
    // p: (1, 1), (2, 1), (1, 2), (2, 2)
    Bilinear b;
    double f11 = f(p[0]), f21 = f(p[1]), f12 = f(p[2]), f22 = f(p[3]);
    b.e = f22 - f21 - f12 + f11;
    b.c = f21 - f11 - b.e;
    b.d = f12 - f11 - b.e;
    b.a = f11 - b.c - b.d - b.e;
    return b;
  }
  /// The layers' part and the rest's, at `batch`.
  double layer(double batch) const { return std::max(0.0, c + e * batch); }
  double rest(double batch) const { return std::max(0.0, a + d * batch); }
};

struct Costs {
  Bilinear f, i, w;          // seconds
  Bilinear scratch;          // the scratch arena
  Bilinear activations;      // the most activations live at once
  Bilinear otherAtActivationPeak; // the rest of the scratch then
  double optPerParam = 0;    // optimizer seconds per parameter
  double persistentPerParam = 0;
  double flopsPerSequence = 0; // the whole model's step (no recompute), for MFU
};

Costs costsOf(const ModelProfile &profile, const std::string &mode, const Calibration &cal,
              bool bf16) {
  const std::vector<Probe> &p = profile.probes.at(mode);
  Costs c;
  auto seconds = [&](const PhaseWork Probe::*phase) {
    return Bilinear::fit(p, [&](const Probe &q) {
      return phaseSeconds(q.*phase, cal, bf16) + phaseGaps(q.*phase, cal);
    });
  };
  c.f = seconds(&Probe::forward);
  c.i = seconds(&Probe::inputGrad);
  c.w = seconds(&Probe::weightGrad);
  c.scratch = Bilinear::fit(p, [](const Probe &q) { return q.scratch; });
  c.activations = Bilinear::fit(p, [](const Probe &q) { return q.activationPeak; });
  c.otherAtActivationPeak = Bilinear::fit(
      p, [](const Probe &q) { return q.liveAtActivationPeak - q.activationPeak; });
  double params1 = std::max(p[0].trainableBytes / 4.0, 1.0);
  c.optPerParam = (phaseSeconds(p[0].optimizer, cal, bf16) + phaseGaps(p[0].optimizer, cal)) /
                  params1;
  c.persistentPerParam = p[0].persistent / params1;
  const std::vector<Probe> &plain = profile.probes.count("none") ? profile.probes.at("none") : p;
  Bilinear flops = Bilinear::fit(plain, [](const Probe &q) {
    return q.forward.flops() + q.inputGrad.flops() + q.weightGrad.flops();
  });
  c.flopsPerSequence = flops.rest(1) + double(profile.numLayers) * flops.layer(1);
  return c;
}

double ringSeconds(double bytes, int64_t n, const Link &link, double passes) {
  if (n <= 1)
    return 0;
  return passes * (double(n - 1) * link.latencyUs * 1e-6 +
                   double(n - 1) / double(n) * bytes / (link.bandwidthGBps * 1e9));
}

} // namespace

std::string compileFlags(const Layout &l, const SearchOptions &options) {
  std::string f = llvm::formatv("--mode=train --target={0} --precision={1} --batch {2} "
                                "--microbatches {3}",
                                options.target, options.precision, options.globalBatch,
                                l.microbatches)
                      .str();
  if (l.tp > 1)
    f += llvm::formatv(" --tp {0} --sp", l.tp).str();
  if (l.dp > 1)
    f += llvm::formatv(" --dp {0}", l.dp).str();
  if (l.ep > 1)
    f += llvm::formatv(" --ep {0}", l.ep).str();
  if (l.zero1())
    f += " --zero1";
  if (l.pp > 1) {
    f += llvm::formatv(" --pp {0} --schedule {1}", l.pp, l.schedule).str();
    if (l.vpp > 1)
      f += llvm::formatv(" --vpp {0}", l.vpp).str();
    if (l.paddingLayers > 0)
      f += " --pp-layout even";
  }
  if (l.recompute != "none")
    f += " --recompute=" + l.recompute;
  if (l.offload)
    f += " --offload-activations=all";
  return f;
}

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0)
      out.push_back(d);
  return out;
}

} // namespace

llvm::Expected<SearchResult> search(const ModelProfile &profile, const Cluster &cluster,
                                    const Calibration &cal, const SearchOptions &options) {
  auto start = std::chrono::steady_clock::now();
  SearchResult result;
  const bool bf16 = options.precision == "bf16";
  const int64_t n = cluster.gpus(), layers = profile.numLayers;
  const double seq = double(profile.seq), elt = bf16 ? 2.0 : 4.0;
  const double actBytes = seq * double(profile.hidden) * elt; // one sequence's residual
  const double budget = cluster.gpuMemoryGiB * kGiB;
  std::map<std::string, Costs> costs;
  for (const auto &[mode, probes] : profile.probes)
    costs.emplace(mode, costsOf(profile, mode, cal, bf16));

  struct ScheduleVariant {
    std::string name;
    pipeline::ScheduleKind kind;
    int64_t vpp;
  };
  std::vector<ScheduleVariant> variants = {
      {"1f1b", pipeline::ScheduleKind::OneFOneB, 1},
      {"interleaved", pipeline::ScheduleKind::Interleaved, 2},
      {"interleaved", pipeline::ScheduleKind::Interleaved, 4},
      {"zb-h1", pipeline::ScheduleKind::ZBH1, 1},
      {"dualpipe", pipeline::ScheduleKind::DualPipe, 1},
      {"dualpipev", pipeline::ScheduleKind::DualPipeV, 1}};
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, std::optional<pipeline::Schedule>>
      schedules;
  auto linkFor = [&](int64_t stride, int64_t size) {
    return stride * size <= cluster.gpusPerNode ? cluster.intraNode : cluster.interNode;
  };

  for (int64_t tp : divisors(n)) {
    if ((options.tp && tp != options.tp) || tp > cluster.gpusPerNode ||
        profile.hidden % tp != 0 || llvm::is_contained(options.excludedTp, tp))
      continue;
    // Pipeline and expert-parallel ranks (ep: a mixture-of-experts model's,
    // dividing its experts); the rest are data-parallel.
    std::vector<std::pair<int64_t, int64_t>> ppEp;
    for (int64_t pp : divisors(n / tp))
      for (int64_t ep : divisors(n / (tp * pp)))
        if ((!options.ep || ep == options.ep) &&
            (ep == 1 || (profile.experts > 0 && profile.experts % ep == 0)))
          ppEp.push_back({pp, ep});
    for (const std::pair<int64_t, int64_t> &ranks : ppEp) {
      const int64_t pp = ranks.first, ep = ranks.second;
      if ((options.pp && pp != options.pp) || pp > layers)
        continue;
      int64_t dp = n / (tp * pp * ep);
      if ((options.dp && dp != options.dp) || options.globalBatch % (dp * ep) != 0)
        continue;
      int64_t perRank = options.globalBatch / (dp * ep);
      // A mixture-of-experts model's dispatch ranks (every data rank: the
      // routing sorts the whole microbatch's choices) and the ranks that
      // split its experts (ep, and dp where the experts divide over both).
      // The tensor-parallel ranks split the experts too where they divide
      // further (each then sums its experts' part of the tokens' outputs
      // over tp, as a row-parallel layer does).
      const bool moe = profile.experts > 0 && profile.moeLayers > 0;
      const int64_t dispatchRanks = moe ? dp * ep : 1;
      const int64_t expertRanks = moe && profile.experts % (dp * ep) == 0 ? dp * ep : ep;
      const int64_t expertReplicas = dp * ep / expertRanks;
      const int64_t expertTp =
          moe && tp > 1 && profile.experts % (expertRanks * tp) == 0 ? tp : 1;
      for (int64_t m : divisors(perRank)) {
        if ((options.microbatches && m != options.microbatches) || m > options.maxMicrobatches)
          continue;
        if (pp > 1 && m < pp)
          continue;
        int64_t b = perRank / m;
        std::vector<ScheduleVariant> here;
        if (pp == 1)
          here.push_back({"", pipeline::ScheduleKind::OneFOneB, 1});
        else
          for (const ScheduleVariant &v : variants)
            if ((options.schedule.empty() || v.name == options.schedule) &&
                (!options.vpp || v.vpp == options.vpp) && pp * v.vpp <= layers)
              here.push_back(v);
        for (const ScheduleVariant &variant : here) {
          // Generated and verified once for every tp and recompute.
          const pipeline::Schedule *schedule = nullptr;
          if (pp > 1) {
            auto key = std::make_tuple(int(variant.kind), pp, variant.vpp, m);
            auto it = schedules.find(key);
            if (it == schedules.end()) {
              auto s = pipeline::generateSchedule(variant.kind, int(pp), int(variant.vpp), int(m),
                                                  /*verify=*/false);
              std::optional<pipeline::Schedule> generated;
              if (s)
                generated = std::move(*s);
              else
                llvm::consumeError(s.takeError());
              it = schedules.emplace(key, std::move(generated)).first;
            }
            if (!it->second)
              continue;
            schedule = &*it->second;
          }
          for (const auto &[mode, c] : costs)
          for (bool offload : {false, true}) {
            if (!options.recompute.empty() && mode != options.recompute)
              continue;
            if (!options.offload.empty() && offload != (options.offload == "all"))
              continue;
            ++result.searched;
            Layout l{tp, pp, dp, variant.vpp, ep, variant.name, m, b, mode, offload};
            PlanResult plan;
            plan.layout = l;
            // Model pieces: the schedule's chain, the same number of layer
            // slots each; where the layers do not divide, the empty slots
            // (padding) go last, then first, beside the head and the
            // embedding, as --pp-layout even places them. The first piece
            // has the embedding, the last the head (the rest of the model,
            // half each).
            int64_t pieces = schedule ? schedule->chainLength() : 1;
            int64_t slots = (layers + pieces - 1) / pieces;
            int64_t padding = slots * pieces - layers;
            std::vector<double> pieceLayers(pieces, double(slots));
            for (int64_t i = 0; i < padding; ++i)
              pieceLayers[i % 2 == 0 ? pieces - 1 - i / 2 : i / 2] -= 1;
            plan.layout.paddingLayers = padding;
            auto restShare = [&](int64_t i) {
              return pieces == 1 ? 1.0 : (i == 0 || i == pieces - 1) ? 0.5 : 0.0;
            };
            const double bd = double(b);
            auto pieceCost = [&](const Bilinear &x, int64_t i) {
              return (pieceLayers[i] * x.layer(bd) + restShare(i) * x.rest(bd)) / double(tp);
            };
            // Tensor parallelism: work split over tp, and per layer 4
            // all-gathers and reduce-scatters of the residual each way
            // (again in the backward for a fully recomputed layer).
            Link tpLink = linkFor(1, tp);
            double tpCollective = ringSeconds(bd * actBytes, tp, tpLink, 1.0);
            double tpForward = 4 * tpCollective, tpBackward = (mode == "full" ? 8 : 4) * tpCollective;
            // Expert parallelism (the all-gather dispatcher, docs/moe.md),
            // per layer with experts. The routing sorts the microbatch's choices over every data
            // rank (dp and ep), so the dispatch gathers the tokens over all
            // of them; the experts are split over ep, and over dp too where
            // they divide (docs/moe.md), and the combine reduce-scatters the
            // tokens' outputs over the ranks that split them. The backward
            // gathers the output gradient and reduce-scatters the input's.
            const double moeShare =
                layers > 0 ? double(profile.moeLayers) / double(layers) : 0.0;
            double epForward = 0, epBackward = 0;
            if (dispatchRanks > 1) {
              const double rows = bd * seq * double(dispatchRanks);
              const double tokens = rows * double(profile.hidden) * elt;
              const double gather =
                  ringSeconds(tokens, dispatchRanks, linkFor(tp, dispatchRanks), 1.0);
              const double combine =
                  expertRanks > 1
                      ? ringSeconds(tokens, expertRanks, linkFor(tp, expertRanks), 1.0)
                      : 0.0;
              epForward = moeShare * (gather + combine);
              epBackward = moeShare * (gather + combine);
            }
            if (expertTp > 1) {
              const double overTp = moeShare * ringSeconds(bd * actBytes, tp, tpLink, 2.0);
              epForward += overTp;
              epBackward += overTp;
            }
            double meanPiece = 0, fMean = 0, iMean = 0, wMean = 0;
            std::vector<double> pieceWork(pieces);
            for (int64_t i = 0; i < pieces; ++i) {
              pieceWork[i] = pieceCost(c.f, i) + pieceCost(c.i, i) + pieceCost(c.w, i);
              meanPiece += pieceWork[i] / double(pieces);
              fMean += pieceCost(c.f, i) / double(pieces);
              iMean += pieceCost(c.i, i) / double(pieces);
              wMean += pieceCost(c.w, i) / double(pieces);
            }
            double layersPerPiece = double(layers) / double(pieces);
            pipeline::ScheduleCosts sc;
            sc.f = fMean + layersPerPiece * (tpForward + epForward);
            sc.i = iMean + layersPerPiece * (tpBackward + epBackward);
            sc.w = wMean;
            // Offload: each layer's saved activations go to the host and
            // back on the copy stream, beside the compute; only what the
            // copies take beyond a microbatch's forward and backward shows.
            if (offload) {
              double bytes = layersPerPiece * c.activations.layer(bd) / double(tp);
              double copy = 2.0 * bytes / (cluster.hostCopyGBps * 1e9);
              double exposed = std::max(0.0, copy - (sc.f + sc.i + sc.w));
              sc.i += exposed;
            }
            sc.b = sc.i + sc.w;
            sc.fb = sc.f + sc.b;
            Link ppLink = linkFor(tp, pp);
            sc.comm = pp > 1 ? ppLink.latencyUs * 1e-6 +
                                   double(b) * actBytes / double(tp) / (ppLink.bandwidthGBps * 1e9)
                             : 0;
            double makespan = 0, bubble = 0;
            int peakActs = 1;
            double paramCopies = 1;
            if (schedule) {
              sc.stageScale.resize(schedule->numStages);
              for (int s = 0; s < schedule->numStages; ++s)
                sc.stageScale[s] =
                    meanPiece > 0 ? pieceWork[schedule->stageChunk(s)] / meanPiece : 1.0;
              auto analysis = pipeline::analyzeSchedule(*schedule, sc, /*verify=*/false);
              if (!analysis) {
                llvm::consumeError(analysis.takeError());
                continue;
              }
              makespan = analysis->makespan;
              bubble = analysis->maxBubble() / std::max(makespan, 1e-12);
              peakActs = analysis->maxPeakActivations();
              for (const pipeline::RankAnalysis &r : analysis->ranks)
                paramCopies = std::max(paramCopies, r.parameterCopies);
            } else {
              makespan = double(m) * (sc.f + sc.b);
            }
            // Data parallelism: the gradients reduced (f32), or with ZeRO-1
            // reduce-scattered and the weights gathered: the same bytes. The
            // experts' weights are split over expertRanks (and tp where they
            // divide), replicated over the other data ranks
            // (expertReplicas); the rest split over tp and replicated over
            // dp and ep, which reduce their gradients together.
            const double expertRank =
                profile.expertParameters / double(expertRanks * expertTp * pp) * paramCopies;
            const double denseRank = (profile.parameters - profile.expertParameters) /
                                     double(tp * pp) * paramCopies;
            double rankParams = denseRank + expertRank;
            Link dpLink = linkFor(tp * pp, dp * ep);
            double dpSeconds = ringSeconds(denseRank * 4.0, dp * ep, dpLink, 2.0);
            if (expertRank > 0 && expertReplicas > 1)
              dpSeconds += ringSeconds(expertRank * 4.0, expertReplicas,
                                       linkFor(tp * pp * ep, expertReplicas), 2.0);
            double optSeconds = c.optPerParam * (denseRank / double(dp * ep) +
                                                 expertRank / double(expertReplicas));
            // A schedule that holds each stage on two ranks (DualPipe)
            // exchanges the two partial weight gradients (f32) over the
            // pipeline's link and sums them (read two, write one).
            double copiesSeconds = 0;
            if (paramCopies > 1)
              copiesSeconds = ppLink.latencyUs * 1e-6 +
                              rankParams * 4.0 / (ppLink.bandwidthGBps * 1e9) +
                              rankParams * 12.0 / (cal.memoryGBps * 1e9);
            plan.computeSeconds = makespan;
            plan.copiesSeconds = copiesSeconds;
            plan.tpCommSeconds = double(m) * layers / double(pp) * (tpForward + tpBackward);
            plan.epCommSeconds = double(m) * layers / double(pp) * (epForward + epBackward);
            plan.dpCommSeconds = dpSeconds;
            plan.optimizerSeconds = optSeconds;
            plan.stepSeconds = makespan + dpSeconds + optSeconds + copiesSeconds;
            plan.bubble = bubble;
            plan.tokensPerSecond = double(options.globalBatch) * seq / plan.stepSeconds;
            plan.mfu = c.flopsPerSequence * double(options.globalBatch) /
                       (plan.stepSeconds * double(n) * cluster.peakTflops * 1e12);
            // Memory: the planner's persistent bytes per parameter (ZeRO-1
            // splits the moments, 8 of them); the planner's scratch for the
            // rank's layers at this microbatch, plus the layers' part again
            // for each further microbatch in flight; the runtime's own
            // (predictCudaMemory: context, workspace, kernel images, the
            // attention's pool scratch).
            double persistent = c.persistentPerParam * rankParams;
            if (l.zero1())
              persistent -= 8.0 * (denseRank * (1.0 - 1.0 / double(dp * ep)) +
                                   expertRank * (1.0 - 1.0 / double(expertReplicas)));
            double stageLayers = double(layers) / double(pp) * paramCopies;
            double restOnRank = pp == 1 ? 1.0 : 0.5;
            // Two candidates for the peak: where the probes peak (the
            // head's gradients), and where the saved activations do (the
            // end of the forward), which grows with the layers.
            auto at = [&](const Bilinear &x) {
              return (stageLayers * x.layer(bd) + restOnRank * x.rest(bd)) / double(tp);
            };
            double inFlight = double(std::max(0, peakActs - 1)) * layersPerPiece *
                              c.activations.layer(bd) / double(tp);
            double scratch = std::max(at(c.scratch), at(c.activations) +
                                                         at(c.otherAtActivationPeak)) +
                             inFlight;
            if (offload) {
              // The device keeps about two layers' activations (the one
              // being copied out, the one brought back); the rest is host.
              double keep = 2.0 * c.activations.layer(bd) / double(tp);
              scratch = std::max(at(c.scratch) - at(c.activations),
                                 at(c.otherAtActivationPeak)) +
                        keep;
            }
            // A rank holds every dispatch rank's routed rows through its
            // experts' GEMMs (zeros for the others' experts): dp x ep - 1
            // more of them per layer with experts, the probes' one rank
            // aside.
            if (dispatchRanks > 1)
              scratch += double(dispatchRanks - 1) * bd * seq * double(profile.topK) *
                         double(profile.routedRowElements) * elt * stageLayers * moeShare;
            double runtime = cluster.runtimeGiB * kGiB +
                             2.0 * bd * actBytes / elt * 4.0 / double(tp);
            plan.peakMemoryBytes = persistent + scratch + runtime;
            plan.fits = plan.peakMemoryBytes <= budget;
            (plan.fits ? result.plans : result.rejected).push_back(std::move(plan));
          }
        }
      }
    }
  }
  auto faster = [](const PlanResult &a, const PlanResult &b) {
    if (a.stepSeconds != b.stepSeconds)
      return a.stepSeconds < b.stepSeconds;
    return a.peakMemoryBytes < b.peakMemoryBytes;
  };
  std::stable_sort(result.plans.begin(), result.plans.end(), faster);
  std::stable_sort(result.rejected.begin(), result.rejected.end(), faster);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

} // namespace loom::planning
