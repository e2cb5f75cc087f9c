// loom-attention-bench: nn.attention and nn.attention_grad on cuDNN's fused
// attention (kernels/cuda/CudnnAttention.cpp) beside Loom's own kernels
// (FlashAttention.cu): first each path's results against the other's on
// grouped and plain heads, causal or not, odd lengths, head dims 64 and 128;
// the same for nn.attention_with_stats and nn.attention_grad_with_stats (the
// pair --loom-attention-stats makes: the backward reads the forward's output
// and lse), each path against Loom's plain kernels and cuDNN's lse against
// Loom's; then forward and backward TFLOP/s at the Llama shapes, with and
// without the saved statistics. Prints a table; run
// it on the GPU machine (docs/performance.md gives the command).
//
//   loom-attention-bench [--iterations N] [--check-only] [--auto-only] [--capture-only]

#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/CudnnAttention.h"
#include "runtime/support/FloatTypes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

using namespace loom;
namespace cl = llvm::cl;

namespace {

cl::opt<int> iterations("iterations", cl::desc("timed launches per case"), cl::init(20));
cl::opt<bool> checkOnly("check-only", cl::desc("only compare the two paths"), cl::init(false));
cl::opt<bool> autoOnly("auto-only",
                       cl::desc("run one problem twice on the default path (LOOM_ATTENTION) and "
                                "stop: shows the fallback where cuDNN cannot load"),
                       cl::init(false));
cl::opt<bool> captureOnly("capture-only",
                          cl::desc("first use of a shape inside a CUDA-graph capture, replayed, "
                                   "against Loom's kernel; then stop"),
                          cl::init(false));

cl::opt<std::string> timingProblems(
    "timing-problems", cl::value_desc("B,HQ,HKV,S,D[,WINDOW];..."),
    cl::desc("the causal bf16 problems to time, each with an optional sliding window "
             "(default: 4,16,16,2048,128;1,32,8,8192,128)"),
    cl::init("4,16,16,2048,128;1,32,8,8192,128"));
cl::opt<bool> cudnnOnly("cudnn-only", cl::desc("time only the cuDNN path"), cl::init(false));
cl::opt<std::string> inputInit("init",
                          cl::desc("the inputs' distribution: normal (mean 0, deviation 1, as "
                                   "bench/attention_torch.py's torch.randn) or uniform (-1, 1)"),
                          cl::init("normal"));

[[noreturn]] void die(const std::string &message) {
  llvm::errs() << "loom-attention-bench: error: " << message << "\n";
  std::exit(1);
}

struct DeviceBuffer {
  cpu::Tensor tensor;
  size_t bytes = 0;
};

DeviceBuffer make(DType dtype, std::vector<int64_t> shape, uint32_t seed, bool random = true) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  size_t bytes = size_t(n) * dtypeSize(dtype);
  std::vector<uint8_t> host(bytes);
  if (random) {
    // The distribution matters to timing, not only to values: the softmax's
    // probabilities are sparser for wider scores, and the tensor cores draw
    // less power on them, so back-to-back launches hold higher clocks.
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    bool isNormal = inputInit == "normal";
    for (int64_t i = 0; i < n; ++i)
      storeFromDouble(host.data(), dtype, i, isNormal ? normal(rng) : uniform(rng));
  }
  void *device = nullptr;
  if (cudaMalloc(&device, std::max<size_t>(bytes, 1)) != cudaSuccess)
    die("cudaMalloc failed");
  cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice);
  return {{device, dtype, shape}, bytes};
}

std::vector<double> download(const DeviceBuffer &b) {
  std::vector<uint8_t> host(b.bytes);
  cudaMemcpy(host.data(), b.tensor.data, b.bytes, cudaMemcpyDeviceToHost);
  int64_t n = int64_t(b.bytes / dtypeSize(b.tensor.dtype));
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out[size_t(i)] = loadAsDouble(host.data(), b.tensor.dtype, i);
  return out;
}

struct Problem {
  int64_t b, hq, hkv, s, skv, d;
  bool causal;
  DType dtype = DType::BF16;
  int64_t window = 0; // a sliding window (with causal), 0 for none
  std::string label() const {
    std::string r = "[" + std::to_string(b) + "," + std::to_string(hq) + "q/" + std::to_string(hkv) +
                    "kv," + std::to_string(s) + (skv != s ? "x" + std::to_string(skv) : "") + "," +
                    std::to_string(d) + "]" + (causal ? " causal" : "") +
                    (window ? " window " + std::to_string(window) : "") +
                    (dtype == DType::F16 ? " f16" : " bf16");
    return r;
  }
  /// Two GEMMs over the scores each query sees: half of them causal (a
  /// square problem), min(i + 1, W) for query i under a window W.
  double fwdFlops() const {
    if (causal && window > 0 && window < s && s == skv)
      return 4.0 * b * hq * d * (double(window) * (window + 1) / 2 + double(s - window) * window);
    return 4.0 * b * hq * s * skv * d * (causal ? 0.5 : 1.0);
  }
};

struct Buffers {
  DeviceBuffer q, k, v, dout, out, dq, dk, dv, lse;
  explicit Buffers(const Problem &p)
      : q(make(p.dtype, {p.b, p.hq, p.s, p.d}, 1)), k(make(p.dtype, {p.b, p.hkv, p.skv, p.d}, 2)),
        v(make(p.dtype, {p.b, p.hkv, p.skv, p.d}, 3)), dout(make(p.dtype, {p.b, p.hq, p.s, p.d}, 4)),
        out(make(p.dtype, {p.b, p.hq, p.s, p.d}, 0, false)),
        dq(make(p.dtype, {p.b, p.hq, p.s, p.d}, 0, false)),
        dk(make(p.dtype, {p.b, p.hkv, p.skv, p.d}, 0, false)),
        dv(make(p.dtype, {p.b, p.hkv, p.skv, p.d}, 0, false)),
        lse(make(DType::F32, {p.b, p.hq, p.s}, 0, false)) {}
  ~Buffers() {
    for (DeviceBuffer *b : {&q, &k, &v, &dout, &out, &dq, &dk, &dv, &lse})
      cudaFree(b->tensor.data);
  }
  void clearResults() {
    for (DeviceBuffer *b : {&out, &dq, &dk, &dv, &lse})
      cudaMemset(b->tensor.data, 0, b->bytes);
  }
};

cpu::KernelAttrs attrsOf(const Problem &p) {
  cpu::KernelAttrs a;
  a.set("causal", int64_t(p.causal)).set("scale", 1.0 / std::sqrt(double(p.d)));
  if (p.window > 0)
    a.set("window", p.window);
  return a;
}

void runForward(const Problem &p, Buffers &b, const cuda::LaunchContext &ctx) {
  if (llvm::Error err = cuda::launchKernel("nn.attention", {b.q.tensor, b.k.tensor, b.v.tensor},
                                           {b.out.tensor}, attrsOf(p), ctx))
    die(llvm::toString(std::move(err)));
}

void runBackward(const Problem &p, Buffers &b, const cuda::LaunchContext &ctx) {
  if (llvm::Error err = cuda::launchKernel(
          "nn.attention_grad", {b.q.tensor, b.k.tensor, b.v.tensor, b.dout.tensor},
          {b.dq.tensor, b.dk.tensor, b.dv.tensor}, attrsOf(p), ctx))
    die(llvm::toString(std::move(err)));
}

/// The pair --loom-attention-stats makes: the forward also writes lse, the
/// backward reads it and the output instead of running the forward again.
llvm::Error runForwardWithStats(const Problem &p, Buffers &b, const cuda::LaunchContext &ctx) {
  return cuda::launchKernel("nn.attention_with_stats", {b.q.tensor, b.k.tensor, b.v.tensor},
                            {b.out.tensor, b.lse.tensor}, attrsOf(p), ctx);
}

llvm::Error runBackwardWithStats(const Problem &p, Buffers &b, const cuda::LaunchContext &ctx) {
  return cuda::launchKernel(
      "nn.attention_grad_with_stats",
      {b.q.tensor, b.k.tensor, b.v.tensor, b.out.tensor, b.lse.tensor, b.dout.tensor},
      {b.dq.tensor, b.dk.tensor, b.dv.tensor}, attrsOf(p), ctx);
}

/// max |a - b| / max |b|.
double relError(const std::vector<double> &a, const std::vector<double> &b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]))
      return INFINITY;
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

/// Milliseconds between two events around what `enqueue` puts on `stream`.
double eventMs(const std::function<void()> &enqueue, cudaStream_t stream, const char *what) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  enqueue();
  cudaEventRecord(stop, stream);
  if (cudaEventSynchronize(stop) != cudaSuccess)
    die(std::string(what) + " failed");
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

/// The mean of `iterations` launches back to back, after three warm-ups.
double timeMs(const std::function<void()> &fn, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i)
    fn();
  return eventMs([&] {
           for (int i = 0; i < iterations; ++i)
             fn();
         },
         stream, "a timed launch") /
         iterations;
}

/// Each launch timed alone (events around it, a synchronize between):
/// {min, median} in ms, so clocks that sag under a long run show.
std::pair<double, double> singleLaunchMs(const std::function<void()> &fn, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i)
    fn();
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i)
    ms.push_back(eventMs(fn, stream, "a timed launch"));
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2]};
}

/// The same launches captured into one CUDA graph and replayed, as a
/// training step runs them: no per-launch host work between kernels.
double graphTimeMs(const std::function<void()> &fn, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i)
    fn(); // plans and scratch pools exist before the capture
  if (cudaStreamSynchronize(stream) != cudaSuccess)
    die("a warm-up launch failed");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
    die("cudaStreamBeginCapture failed");
  for (int i = 0; i < iterations; ++i)
    fn();
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess ||
      cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
    die("capturing the launches failed");
  cudaGraphLaunch(exec, stream); // warm-up replay
  double ms = eventMs([&] { cudaGraphLaunch(exec, stream); }, stream, "a replayed launch");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms / iterations;
}

} // namespace

int main(int argc, char **argv) {
  llvm::sys::PrintStackTraceOnErrorSignal(argv[0]);
  cl::ParseCommandLineOptions(argc, argv, "loom-attention-bench: cuDNN attention beside Loom's\n");
  llvm::outs().SetUnbuffered(); // rows appear as they are timed
  if (inputInit != "normal" && inputInit != "uniform")
    die("--init: '" + inputInit + "' is not normal or uniform");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    die("no CUDA device");
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::string why;
  bool have = cuda::cudnnAvailable(&why);
  llvm::outs() << "device: " << prop.name << "\ncuDNN: " << (have ? "" : "UNAVAILABLE: ") << why
               << "\n";
  cuda::LaunchContext ctx;
  cudaStreamCreate(&ctx.stream);

  if (autoOnly) {
    Problem p{1, 8, 2, 1000, 1000, 128, true};
    Buffers b(p);
    for (int i = 0; i < 2; ++i) {
      runForward(p, b, ctx);
      runBackward(p, b, ctx);
    }
    if (cudaStreamSynchronize(ctx.stream) != cudaSuccess)
      die("the default path faulted");
    auto out = download(b.out), dq = download(b.dq);
    cuda::setAttentionPath(cuda::AttentionPath::Loom);
    runForward(p, b, ctx);
    runBackward(p, b, ctx);
    cudaStreamSynchronize(ctx.stream);
    llvm::outs() << "default path on " << p.label() << ", twice: ran; against Loom's kernel out "
                 << llvm::format("%.2e", relError(out, download(b.out))) << ", dq "
                 << llvm::format("%.2e", relError(dq, download(b.dq))) << "\n";
    return 0;
  }

  if (captureOnly) {
    Problem p{1, 8, 2, 777, 777, 64, true}; // a shape no plan exists for yet
    Buffers b(p);
    cuda::setAttentionPath(cuda::AttentionPath::Cudnn);
    if (cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
      die("cudaStreamBeginCapture");
    runForward(p, b, ctx);
    runBackward(p, b, ctx);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaError_t st = cudaStreamEndCapture(ctx.stream, &graph);
    if (st == cudaSuccess)
      st = cudaGraphInstantiate(&exec, graph, 0);
    if (st == cudaSuccess)
      st = cudaGraphLaunch(exec, ctx.stream);
    if (st == cudaSuccess)
      st = cudaStreamSynchronize(ctx.stream);
    if (st != cudaSuccess)
      die(std::string("capture and replay: ") + cudaGetErrorString(st));
    auto out = download(b.out), dq = download(b.dq), dk = download(b.dk);
    cuda::setAttentionPath(cuda::AttentionPath::Loom);
    runForward(p, b, ctx);
    runBackward(p, b, ctx);
    cudaStreamSynchronize(ctx.stream);
    llvm::outs() << "captured on first use and replayed, " << p.label()
                 << ": against Loom's kernel out " << llvm::format("%.2e", relError(out, download(b.out)))
                 << ", dq " << llvm::format("%.2e", relError(dq, download(b.dq))) << ", dk "
                 << llvm::format("%.2e", relError(dk, download(b.dk))) << "\n";
    return 0;
  }

  // --- agreement of the two paths ---
  std::vector<Problem> checks = {
      {1, 32, 8, 1000, 1000, 128, true},  {1, 32, 8, 1000, 1000, 128, false},
      {2, 16, 16, 1000, 1000, 64, true},  {2, 16, 16, 1000, 1000, 64, false},
      {1, 8, 2, 1000, 1000, 64, true},    {2, 16, 16, 1024, 1024, 128, true},
      {1, 8, 8, 300, 1000, 128, true},    {1, 8, 8, 300, 1000, 64, false},
      {1, 32, 8, 1000, 1000, 128, true, DType::F16},
      // Sliding windows (cuDNN's band left bound): shorter than a tile,
      // spanning several, and with more keys than queries.
      {1, 32, 8, 1000, 1000, 128, true, DType::BF16, 256},
      {2, 16, 16, 1024, 1024, 64, true, DType::BF16, 40},
      {1, 8, 8, 300, 1000, 128, true, DType::BF16, 333},
      {1, 8, 2, 1000, 1000, 64, true, DType::F16, 3},
  };
  llvm::outs() << "\ncheck (cuDNN against Loom's kernel: max|diff| / max|loom|)\n"
               << "problem                                  out        dq        dk        dv  verdict\n";
  bool allPass = true;
  for (const Problem &p : checks) {
    Buffers b(p);
    cuda::setAttentionPath(cuda::AttentionPath::Loom);
    runForward(p, b, ctx);
    runBackward(p, b, ctx);
    cudaStreamSynchronize(ctx.stream);
    auto refOut = download(b.out), refDq = download(b.dq), refDk = download(b.dk),
         refDv = download(b.dv);
    cuda::setAttentionPath(cuda::AttentionPath::Cudnn);
    cudaMemset(b.out.tensor.data, 0, b.out.bytes);
    cudaMemset(b.dq.tensor.data, 0, b.dq.bytes);
    cudaMemset(b.dk.tensor.data, 0, b.dk.bytes);
    cudaMemset(b.dv.tensor.data, 0, b.dv.bytes);
    llvm::Error err = llvm::Error::success();
    {
      cpu::KernelAttrs a = attrsOf(p);
      err = cuda::launchKernel("nn.attention", {b.q.tensor, b.k.tensor, b.v.tensor}, {b.out.tensor},
                               a, ctx);
      if (!err)
        err = cuda::launchKernel("nn.attention_grad",
                                 {b.q.tensor, b.k.tensor, b.v.tensor, b.dout.tensor},
                                 {b.dq.tensor, b.dk.tensor, b.dv.tensor}, a, ctx);
      if (!err && cudaStreamSynchronize(ctx.stream) != cudaSuccess)
        die("the cuDNN path faulted on " + p.label());
    }
    if (err) {
      llvm::outs() << llvm::format("%-34s ", p.label().c_str()) << "cuDNN declined: "
                   << llvm::toString(std::move(err)) << "\n";
      allPass = false;
      continue;
    }
    double e[4] = {relError(download(b.out), refOut), relError(download(b.dq), refDq),
                   relError(download(b.dk), refDk), relError(download(b.dv), refDv)};
    bool pass = true;
    for (double x : e)
      pass &= x < 2e-2;
    allPass &= pass;
    llvm::outs() << llvm::format("%-34s %9.2e %9.2e %9.2e %9.2e  %s\n", p.label().c_str(), e[0],
                                 e[1], e[2], e[3], static_cast<const char *>(pass ? "PASS" : "FAIL"));
  }
  // --- the saved-statistics pair on each path, against Loom's plain kernels ---
  llvm::outs() << "\ncheck (nn.attention_with_stats + nn.attention_grad_with_stats on each path "
                  "against Loom's nn.attention / nn.attention_grad; lse: cuDNN's against Loom's)\n"
               << "problem                            path         out       lse        dq        "
                  "dk        dv  verdict\n";
  for (const Problem &p : checks) {
    Buffers b(p);
    cuda::setAttentionPath(cuda::AttentionPath::Loom);
    runForward(p, b, ctx);
    runBackward(p, b, ctx);
    cudaStreamSynchronize(ctx.stream);
    auto refOut = download(b.out), refDq = download(b.dq), refDk = download(b.dk),
         refDv = download(b.dv);
    std::vector<double> loomLse;
    for (auto [path, name] : {std::pair{cuda::AttentionPath::Loom, "loom"},
                              std::pair{cuda::AttentionPath::Cudnn, "cudnn"}}) {
      cuda::setAttentionPath(path);
      b.clearResults();
      llvm::Error err = runForwardWithStats(p, b, ctx);
      if (!err)
        err = runBackwardWithStats(p, b, ctx);
      if (!err && cudaStreamSynchronize(ctx.stream) != cudaSuccess)
        die(std::string("the ") + name + " path with statistics faulted on " + p.label());
      if (err) {
        llvm::outs() << llvm::format("%-34s %-6s ", p.label().c_str(), name) << "declined: "
                     << llvm::toString(std::move(err)) << "\n";
        allPass = false;
        continue;
      }
      std::vector<double> lse = download(b.lse);
      bool finite = true;
      for (double x : lse)
        finite &= std::isfinite(x);
      if (path == cuda::AttentionPath::Loom)
        loomLse = lse;
      double e[5] = {relError(download(b.out), refOut), finite ? relError(lse, loomLse) : INFINITY,
                     relError(download(b.dq), refDq), relError(download(b.dk), refDk),
                     relError(download(b.dv), refDv)};
      bool pass = e[1] < 1e-3;
      for (double x : {e[0], e[2], e[3], e[4]})
        pass &= x < 2e-2;
      allPass &= pass;
      llvm::outs() << llvm::format("%-34s %-6s %9.2e %9.2e %9.2e %9.2e %9.2e  %s\n",
                                   p.label().c_str(), name, e[0], e[1], e[2], e[3], e[4],
                                   static_cast<const char *>(pass ? "PASS" : "FAIL"));
    }
  }
  llvm::outs() << (allPass ? "all checks pass\n" : "SOME CHECKS FAILED\n");
  if (checkOnly)
    return allPass ? 0 : 1;

  // --- timings ---
  std::vector<Problem> timed;
  for (llvm::StringRef rest = timingProblems; !rest.empty();) {
    auto [one, tail] = rest.split(';');
    rest = tail;
    llvm::SmallVector<llvm::StringRef> f;
    one.split(f, ',');
    int64_t v[6] = {0, 0, 0, 0, 0, 0};
    if ((f.size() != 5 && f.size() != 6) || llvm::any_of(llvm::seq(0, int(f.size())), [&](int i) {
          return f[size_t(i)].trim().getAsInteger(10, v[i]) || v[i] <= 0;
        }))
      die("--timing-problems: '" + one.str() + "' is not B,HQ,HKV,S,D[,WINDOW]");
    Problem p{v[0], v[1], v[2], v[3], v[3], v[4], true};
    p.window = v[5];
    timed.push_back(p);
  }
  llvm::outs() << "\ntiming (" << iterations.getValue()
               << " launches each; backward FLOPs = 2.5 x forward; Loom's and cuDNN's "
                  "nn.attention_grad both recompute the forward inside)\n"
               << "problem                            path     fwd (ms)  fwd TF/s   bwd (ms)  bwd TF/s\n";
  for (const Problem &p : timed) {
    Buffers b(p);
    for (auto [path, name] : {std::pair{cuda::AttentionPath::Loom, "loom"},
                              std::pair{cuda::AttentionPath::Cudnn, "cudnn"}}) {
      if (cudnnOnly && path == cuda::AttentionPath::Loom)
        continue;
      cuda::setAttentionPath(path);
      auto check = [&](llvm::Error err) {
        if (err)
          die(llvm::toString(std::move(err)));
      };
      // The two forwards back to back (same plan on cuDNN), then the two
      // backwards, so clocks that sag under the long backwards do not
      // favour one of a pair.
      double f = timeMs([&] { runForward(p, b, ctx); }, ctx.stream);
      double fs = timeMs([&] { check(runForwardWithStats(p, b, ctx)); }, ctx.stream);
      double g = timeMs([&] { runBackward(p, b, ctx); }, ctx.stream);
      double gs = timeMs([&] { check(runBackwardWithStats(p, b, ctx)); }, ctx.stream);
      llvm::outs() << llvm::format("%-34s %-6s %10.3f %9.0f %10.3f %9.0f\n", p.label().c_str(),
                                   static_cast<const char *>(name),
                                   f, p.fwdFlops() / f / 1e9, g, 2.5 * p.fwdFlops() / g / 1e9);
      if (path == cuda::AttentionPath::Cudnn)
        llvm::outs() << llvm::format("%-34s %-6s %10s %9s %10.3f %9.0f   (bwd minus one fwd)\n",
                                     static_cast<const char *>(""), static_cast<const char *>("cudnn"),
                                     static_cast<const char *>(""), static_cast<const char *>(""), g - f, 2.5 * p.fwdFlops() / (g - f) / 1e9);
      // The saved-statistics pair: the forward writes lse, the backward
      // runs no forward.
      llvm::outs() << llvm::format("%-34s %-6s %10.3f %9.0f %10.3f %9.0f   (with saved lse)\n",
                                   static_cast<const char *>(""),
                                   static_cast<const char *>(name), fs, p.fwdFlops() / fs / 1e9,
                                   gs, 2.5 * p.fwdFlops() / gs / 1e9);
      auto [fmin, fmed] = singleLaunchMs([&] { check(runForwardWithStats(p, b, ctx)); }, ctx.stream);
      auto [gmin, gmed] = singleLaunchMs([&] { check(runBackwardWithStats(p, b, ctx)); }, ctx.stream);
      llvm::outs() << llvm::format(
          "%-34s %-6s %10.3f %9.0f %10.3f %9.0f   (with saved lse, one launch at a time: min; "
          "median %.3f / %.3f)\n",
          static_cast<const char *>(""), static_cast<const char *>(name), fmin,
          p.fwdFlops() / fmin / 1e9, gmin, 2.5 * p.fwdFlops() / gmin / 1e9, fmed, gmed);
      double fg = graphTimeMs([&] { check(runForwardWithStats(p, b, ctx)); }, ctx.stream);
      double gg = graphTimeMs([&] { check(runBackwardWithStats(p, b, ctx)); }, ctx.stream);
      llvm::outs() << llvm::format(
          "%-34s %-6s %10.3f %9.0f %10.3f %9.0f   (with saved lse, replayed as one CUDA graph)\n",
          static_cast<const char *>(""), static_cast<const char *>(name), fg,
          p.fwdFlops() / fg / 1e9, gg, 2.5 * p.fwdFlops() / gg / 1e9);
    }
  }
  return allPass ? 0 : 1;
}
