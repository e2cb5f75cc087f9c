// loom-kernel-bench: times Loom's CUDA kernels at the 0.95B Llama's shapes
// (and a few at the 8B model's) and prints each one's achieved bandwidth or
// FLOP rate against a ceiling: for memory-bound kernels this GPU's
// device-to-device copy, measured first in the same run; for GEMMs and
// attention the bf16 GEMM rate measured on an H200 (795 TFLOP/s). Kernels
// Loom generates from fusion groups (nn.fused) have rows of their own.
//
//   loom-kernel-bench [--iterations N] [--calibration-out=FILE]
//
// With --calibration-out=FILE it prints no table: it measures this GPU's
// rates through the same launch path (cuda::launchKernel) and writes them to
// FILE (through FILE.tmp and a rename) for the planner:
//
//   {"schema": "loom-calibration/1", "device": <cudaDeviceProp.name>,
//    "gemm_tflops": {"bf16": median of the first seven gemm_points, "f32": 4096^3},
//    "gemm_points": [{"m", "n", "k", "dtype": "bf16", "tflops"}, ...],
//    "attention_tflops": {"forward", "backward"},
//    "attention_points": [{"batch", "seq", "heads", "head_dim", "forward",
//                          "backward"}, ...],
//    "memory_gbps": bf16 nn.add of 256M elements (inputs + output bytes),
//    "host_copy_gbps": 1 GiB pinned host -> device cudaMemcpy,
//    "launch_us": one nn.add of 1024 elements, back to back,
//    "graph_launch_us": the same add captured N times into one CUDA graph,
//                       per kernel of a replay}
//
// GEMMs are nn.matmul x[m, k] w[n, k]^T at 2mnk FLOPs; attention is
// nn.attention / nn.attention_grad, bf16 [B, S, H, D] = [B, 2048, 16, 128],
// causal, at 4BHS^2D/2 FLOPs forward and 2.5 times that backward. Each rate
// is the median over --iterations launches (after three warm-up launches)
// except launch_us, the mean of N = max(1000, --iterations) launches, and
// graph_launch_us, the median of five timed replays (after one warm-up) of
// the graph divided by N. Rates are 1e12 FLOP/s and 1e9 bytes/s; the two
// launch times are microseconds.

#include "kernels/cuda/CudaKernels.h"
#include "runtime/abi/NormWeightGrad.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

using namespace loom;
namespace cl = llvm::cl;

namespace {

cl::opt<int> iterations("iterations", cl::desc("timed launches per kernel"), cl::init(20));
cl::opt<std::string> filter("filter", cl::value_desc("TEXT"),
                            cl::desc("time only the rows whose name contains TEXT"));
cl::opt<std::string> calibrationOut(
    "calibration-out", cl::value_desc("FILE"),
    cl::desc("measure this GPU's rates with Loom's kernels and write them to FILE as JSON "
             "(loom-calibration/1) instead of printing the table"));

constexpr double kCopyCeiling = 4.2e12;  // bytes/s, measured device copy
constexpr double kGemmCeiling = 795e12;  // FLOP/s, measured bf16 GEMM

struct Buffer {
  cpu::Tensor tensor;
  size_t bytes;
};

[[noreturn]] void die(const std::string &message) {
  llvm::errs() << "loom-kernel-bench: error: " << message << "\n";
  std::exit(1);
}

Buffer make(DType dtype, std::vector<int64_t> shape, double scale = 1.0, int64_t intBound = 0) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  size_t bytes = size_t(n) * dtypeSize(dtype);
  std::vector<uint8_t> host(bytes);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::F32) {
      float v = float(scale) * uniform(rng);
      std::memcpy(&host[i * 4], &v, 4);
    } else if (dtype == DType::BF16) {
      float v = float(scale) * uniform(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      uint16_t b = uint16_t(bits >> 16);
      std::memcpy(&host[i * 2], &b, 2);
    } else if (dtype == DType::I64) {
      int64_t v = int64_t(rng() % uint64_t(intBound));
      std::memcpy(&host[i * 8], &v, 8);
    }
  }
  void *device = nullptr;
  if (cudaMalloc(&device, std::max<size_t>(bytes, 1)) != cudaSuccess)
    die("cudaMalloc failed");
  cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice);
  return {{device, dtype, shape}, bytes};
}

struct Case {
  std::string label;
  std::string kernel;
  std::vector<Buffer> inputs, outputs;
  cpu::KernelAttrs attrs;
  double flops = 0; // 0: a memory-bound kernel, judged by bytes moved
};

//===----------------------------------------------------------------------===//
// Calibration (--calibration-out)
//===----------------------------------------------------------------------===//

/// A device buffer of `shape` whose bytes are all `fill` (contents that do not
/// matter to the kernel's time; no host copy of a large tensor).
Buffer alloc(DType dtype, std::vector<int64_t> shape, int fill = 0) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  size_t bytes = size_t(n) * dtypeSize(dtype);
  void *device = nullptr;
  if (cudaMalloc(&device, std::max<size_t>(bytes, 1)) != cudaSuccess)
    die("cudaMalloc of " + std::to_string(bytes) + " bytes failed");
  if (cudaMemset(device, fill, bytes) != cudaSuccess)
    die("cudaMemset failed");
  return {{device, dtype, shape}, bytes};
}

void release(std::vector<Buffer> &buffers) {
  for (Buffer &b : buffers)
    cudaFree(b.tensor.data);
  buffers.clear();
}

double median(std::vector<double> values) {
  if (values.empty())
    die("no samples to take the median of");
  std::sort(values.begin(), values.end());
  size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

/// `amount` per second in units of `unit`; a measurement that is not a
/// positive finite rate is an error (JSON has no infinity).
double rate(const std::string &what, double amount, double seconds, double unit) {
  double r = amount / seconds / unit;
  if (!(seconds > 0) || !std::isfinite(r))
    die(what + ": no usable time measured");
  return r;
}

/// The median seconds of one `launch` (which enqueues on ctx.stream) over
/// --iterations timed calls after three warm-up calls; each call is timed
/// between its own pair of events.
double medianSeconds(const cuda::LaunchContext &ctx, const std::string &what,
                     llvm::function_ref<void()> launch) {
  for (int i = 0; i < 3; ++i)
    launch();
  std::vector<cudaEvent_t> events(size_t(iterations) + 1);
  for (cudaEvent_t &e : events)
    if (cudaEventCreate(&e) != cudaSuccess)
      die("cudaEventCreate failed");
  cudaEventRecord(events[0], ctx.stream);
  for (int i = 0; i < iterations; ++i) {
    launch();
    cudaEventRecord(events[i + 1], ctx.stream);
  }
  if (cudaEventSynchronize(events.back()) != cudaSuccess || cudaGetLastError() != cudaSuccess)
    die(what + ": the kernel failed");
  std::vector<double> seconds;
  for (int i = 0; i < iterations; ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, events[i], events[i + 1]);
    seconds.push_back(ms / 1e3);
  }
  for (cudaEvent_t e : events)
    cudaEventDestroy(e);
  return median(std::move(seconds));
}

/// The median seconds of Loom's kernel `kernel` on these buffers.
double timeKernel(const cuda::LaunchContext &ctx, const std::string &what, llvm::StringRef kernel,
                  const std::vector<Buffer> &inputs, const std::vector<Buffer> &outputs,
                  const cpu::KernelAttrs &attrs) {
  std::vector<cpu::Tensor> in, out;
  for (const Buffer &b : inputs)
    in.push_back(b.tensor);
  for (const Buffer &b : outputs)
    out.push_back(b.tensor);
  return medianSeconds(ctx, what, [&] {
    if (llvm::Error err = cuda::launchKernel(kernel, in, out, attrs, ctx))
      die(llvm::toString(std::move(err)));
  });
}

/// TFLOP/s of nn.matmul x[m, k] w[n, k]^T (a linear layer's forward, with
/// Loom's [out, in] weights) in `dtype`, on random operands.
double gemmTflops(const cuda::LaunchContext &ctx, DType dtype, int64_t m, int64_t n, int64_t k) {
  std::string what = "matmul " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                     std::to_string(k) + " " + dtypeName(dtype).data();
  cpu::KernelAttrs a;
  a.set("transpose_lhs", int64_t(0)).set("transpose_rhs", int64_t(1));
  std::vector<Buffer> in{make(dtype, {m, k}), make(dtype, {n, k})}, out{alloc(dtype, {m, n})};
  double seconds = timeKernel(ctx, what, "nn.matmul", in, out, a);
  release(in);
  release(out);
  return rate(what, 2.0 * m * n * k, seconds, 1e12);
}

/// Measures the rates of loom-calibration/1 and writes them to `path`
/// through path.tmp and a rename.
void calibrate(cuda::LaunchContext &ctx, const std::string &path) {
  const std::string tmp = path + ".tmp";
  auto openTmp = [&](std::error_code &ec) {
    return std::make_unique<llvm::raw_fd_ostream>(tmp, ec, llvm::sys::fs::OF_Text);
  };
  {
    // Fail before minutes of measuring if the file cannot be written.
    std::error_code ec;
    openTmp(ec);
    if (ec)
      die("cannot write " + tmp + ": " + ec.message());
    llvm::sys::fs::remove(tmp);
  }

  int device = 0;
  cudaDeviceProp props{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&props, device) != cudaSuccess)
    die("cannot read the CUDA device's properties");
  ctx.multiprocessors = props.multiProcessorCount; // as the CUDA backend sets it

  // GEMMs at the training step's shapes (0.95B Llama: hidden 2048, QKV 6144,
  // MLP 5632 and its fused 11264, vocabulary 32000) and two squarer ones.
  // The first seven set gemm_tflops; the rest are the same layers' GEMMs at
  // one and two sequences (1,024-4,096 rows) and their weight gradients
  // (tokens as the reduction), where a GEMM fills the GPU less: the planner
  // fits a fixed time per GEMM and a rate to all of them.
  struct Point {
    int64_t m, n, k;
    double tflops = 0;
  };
  std::vector<Point> points{{8192, 2048, 2048},  {8192, 6144, 2048},  {8192, 2048, 5632},
                            {8192, 11264, 2048}, {8192, 32000, 2048}, {4096, 4096, 4096},
                            {16384, 2048, 2048},
                            {1024, 2048, 2048},  {1024, 6144, 2048},  {1024, 11264, 2048},
                            {1024, 2048, 5632},  {2048, 2048, 2048},  {2048, 6144, 2048},
                            {2048, 11264, 2048}, {2048, 2048, 5632},  {2048, 32000, 2048},
                            {4096, 2048, 2048},  {4096, 11264, 2048}, {6144, 2048, 2048},
                            {5632, 2048, 2048},  {11264, 2048, 2048}, {2048, 5632, 2048}};
  const size_t largePoints = 7;
  std::vector<double> bf16Rates;
  for (size_t i = 0; i < points.size(); ++i) {
    Point &p = points[i];
    p.tflops = gemmTflops(ctx, DType::BF16, p.m, p.n, p.k);
    if (i < largePoints)
      bf16Rates.push_back(p.tflops);
  }
  const double gemmBf16 = median(bf16Rates);
  const double gemmF32 = gemmTflops(ctx, DType::F32, 4096, 4096, 4096);

  // Attention, every tensor [B, S, H, D] (seq_major: all of the call's), at
  // one, two and four sequences; attention_tflops is the last.
  const int64_t S = 2048, H = 16, D = 128;
  struct AttentionPoint {
    int64_t batch;
    double forward = 0, backward = 0;
  };
  std::vector<AttentionPoint> attentionPoints{{1}, {2}, {4}};
  for (AttentionPoint &p : attentionPoints) {
    const int64_t B = p.batch;
    const double forwardFlops = 4.0 * B * H * S * S * D / 2; // causal: half the scores
    auto act = [&] { return make(DType::BF16, {B, S, H, D}); };
    cpu::KernelAttrs a;
    a.set("causal", int64_t(1)).set("scale", 1.0 / std::sqrt(double(D)));
    cpu::KernelAttrs fa = a, ga = a;
    fa.set("seq_major", int64_t(0b1111));    // q, k, v, out
    ga.set("seq_major", int64_t(0b1111111)); // q, k, v, dOut, dq, dk, dv
    std::vector<Buffer> qkv{act(), act(), act()}, out{alloc(DType::BF16, {B, S, H, D})};
    p.forward = rate("attention", forwardFlops,
                     timeKernel(ctx, "attention", "nn.attention", qkv, out, fa), 1e12);
    std::vector<Buffer> gradIn = qkv;
    gradIn.push_back(act());
    std::vector<Buffer> grads{alloc(DType::BF16, {B, S, H, D}), alloc(DType::BF16, {B, S, H, D}),
                              alloc(DType::BF16, {B, S, H, D})};
    p.backward =
        rate("attention_grad", 2.5 * forwardFlops,
             timeKernel(ctx, "attention_grad", "nn.attention_grad", gradIn, grads, ga), 1e12);
    release(gradIn); // q, k, v and dOut
    release(out);
    release(grads);
  }
  const double attnForward = attentionPoints.back().forward;
  const double attnBackward = attentionPoints.back().backward;

  // Device memory: a bf16 add over 256M elements (1.5 GiB moved).
  double memoryGbps;
  {
    const std::vector<int64_t> shape{16384, 16384};
    std::vector<Buffer> in{alloc(DType::BF16, shape, 0x3c), alloc(DType::BF16, shape, 0x3d)};
    std::vector<Buffer> out{alloc(DType::BF16, shape)};
    double bytes = double(in[0].bytes + in[1].bytes + out[0].bytes);
    memoryGbps = rate("add", bytes, timeKernel(ctx, "add", "nn.add", in, out, {}), 1e9);
    release(in);
    release(out);
  }

  // Host to device: 1 GiB from pinned memory.
  double hostCopyGbps;
  {
    const size_t bytes = size_t(1) << 30;
    void *host = nullptr, *dev = nullptr;
    if (cudaHostAlloc(&host, bytes, cudaHostAllocDefault) != cudaSuccess)
      die("cudaHostAlloc of 1 GiB failed");
    std::memset(host, 0x3c, bytes);
    if (cudaMalloc(&dev, bytes) != cudaSuccess)
      die("cudaMalloc of 1 GiB failed");
    double seconds = medianSeconds(ctx, "host copy", [&] {
      if (cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, ctx.stream) != cudaSuccess)
        die("cudaMemcpyAsync failed");
    });
    hostCopyGbps = rate("host copy", double(bytes), seconds, 1e9);
    cudaFree(dev);
    cudaFreeHost(host);
  }

  // Launch overhead: a tiny add, back to back, between one pair of events.
  double launchUs, graphLaunchUs;
  {
    std::vector<Buffer> bufs{alloc(DType::BF16, {1024}), alloc(DType::BF16, {1024}),
                             alloc(DType::BF16, {1024})};
    std::vector<cpu::Tensor> in{bufs[0].tensor, bufs[1].tensor}, out{bufs[2].tensor};
    auto launch = [&] {
      if (llvm::Error err = cuda::launchKernel("nn.add", in, out, {}, ctx))
        die(llvm::toString(std::move(err)));
    };
    const int launches = std::max(1000, int(iterations));
    for (int i = 0; i < 10; ++i)
      launch();
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, ctx.stream);
    for (int i = 0; i < launches; ++i)
      launch();
    cudaEventRecord(stop, ctx.stream);
    if (cudaEventSynchronize(stop) != cudaSuccess || cudaGetLastError() != cudaSuccess)
      die("tiny add: the kernel failed");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    launchUs = 1.0 / rate("tiny add", launches, ms / 1e3, 1e6); // microseconds a launch
    cudaEventDestroy(start);
    cudaEventDestroy(stop);

    // The same launches captured into one CUDA graph: the per-kernel cost of
    // a replay, the median of five timed replays after one warm-up.
    auto check = [](cudaError_t status, const char *call) {
      if (status != cudaSuccess)
        die(std::string("tiny add graph: ") + call + " failed: " + cudaGetErrorString(status));
    };
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal),
          "cudaStreamBeginCapture");
    for (int i = 0; i < launches; ++i)
      launch();
    check(cudaStreamEndCapture(ctx.stream, &graph), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    check(cudaGraphLaunch(exec, ctx.stream), "cudaGraphLaunch"); // warm-up
    check(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize");
    const int replays = 5;
    std::vector<cudaEvent_t> events(replays + 1);
    for (cudaEvent_t &e : events)
      check(cudaEventCreate(&e), "cudaEventCreate");
    check(cudaEventRecord(events[0], ctx.stream), "cudaEventRecord");
    for (int i = 0; i < replays; ++i) {
      check(cudaGraphLaunch(exec, ctx.stream), "cudaGraphLaunch");
      check(cudaEventRecord(events[i + 1], ctx.stream), "cudaEventRecord");
    }
    check(cudaEventSynchronize(events.back()), "cudaEventSynchronize");
    check(cudaGetLastError(), "graph replay");
    std::vector<double> seconds;
    for (int i = 0; i < replays; ++i) {
      float replayMs = 0;
      check(cudaEventElapsedTime(&replayMs, events[i], events[i + 1]), "cudaEventElapsedTime");
      seconds.push_back(replayMs / 1e3);
    }
    for (cudaEvent_t e : events)
      check(cudaEventDestroy(e), "cudaEventDestroy");
    check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
    check(cudaGraphDestroy(graph), "cudaGraphDestroy");
    graphLaunchUs =
        1.0 / rate("tiny add graph", launches, median(std::move(seconds)), 1e6); // per kernel
    release(bufs);
  }

  std::error_code ec;
  std::unique_ptr<llvm::raw_fd_ostream> os = openTmp(ec);
  if (ec)
    die("cannot write " + tmp + ": " + ec.message());
  {
    llvm::json::OStream json(*os, /*IndentSize=*/2);
    json.object([&] {
      json.attribute("schema", "loom-calibration/1");
      json.attribute("device", props.name);
      json.attributeObject("gemm_tflops", [&] {
        json.attribute("bf16", gemmBf16);
        json.attribute("f32", gemmF32);
      });
      json.attributeArray("gemm_points", [&] {
        for (const Point &p : points)
          json.object([&] {
            json.attribute("m", p.m);
            json.attribute("n", p.n);
            json.attribute("k", p.k);
            json.attribute("dtype", "bf16");
            json.attribute("tflops", p.tflops);
          });
      });
      json.attributeObject("attention_tflops", [&] {
        json.attribute("forward", attnForward);
        json.attribute("backward", attnBackward);
      });
      json.attributeArray("attention_points", [&] {
        for (const AttentionPoint &p : attentionPoints)
          json.object([&] {
            json.attribute("batch", p.batch);
            json.attribute("seq", S);
            json.attribute("heads", H);
            json.attribute("head_dim", D);
            json.attribute("forward", p.forward);
            json.attribute("backward", p.backward);
          });
      });
      json.attribute("memory_gbps", memoryGbps);
      json.attribute("host_copy_gbps", hostCopyGbps);
      json.attribute("launch_us", launchUs);
      json.attribute("graph_launch_us", graphLaunchUs);
    });
  }
  *os << "\n";
  os->close();
  if (os->has_error()) {
    std::string message = os->error().message();
    os->clear_error();
    llvm::sys::fs::remove(tmp);
    die("cannot write " + tmp + ": " + message);
  }
  if (std::error_code rc = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    die("cannot rename " + tmp + " to " + path + ": " + rc.message());
  }
  llvm::outs() << "loom-kernel-bench: wrote " << path << " (" << props.name << ")\n";
}

} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "loom-kernel-bench: Loom's CUDA kernels against this GPU's copy bandwidth and an H200's GEMM rate\n");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    die("no CUDA device");
  cuda::LaunchContext ctx;
  cudaStreamCreate(&ctx.stream);
  cublasLtCreate(&ctx.cublasLt);
  ctx.workspaceBytes = size_t(32) << 20;
  cudaMalloc(&ctx.workspace, ctx.workspaceBytes);
  cudaMalloc(reinterpret_cast<void **>(&ctx.counters), cuda::kCounterWords * sizeof(unsigned));
  cudaMemset(ctx.counters, 0, cuda::kCounterWords * sizeof(unsigned));
  if (iterations < 1)
    die("--iterations must be at least 1");
  if (!calibrationOut.empty()) {
    calibrate(ctx, calibrationOut);
    return 0;
  }

  const int64_t B = 4, S = 2048, H = 16, D = 128, M = B * S, Hid = 2048, F = 5632, V = 32000;
  std::vector<Case> cases;
  auto bf16 = [](std::vector<int64_t> s) { return make(DType::BF16, s); };
  auto f32 = [](std::vector<int64_t> s) { return make(DType::F32, s); };
  {
    Case c{"add [8192, 2048] bf16", "nn.add", {bf16({M, Hid}), bf16({M, Hid})}, {bf16({M, Hid})}, {}};
    cases.push_back(std::move(c));
  }
  cases.push_back({"mul [8192, 5632] bf16", "nn.mul", {bf16({M, F}), bf16({M, F})}, {bf16({M, F})}, {}});
  cases.push_back({"silu [8192, 5632] bf16", "nn.silu", {bf16({M, F})}, {bf16({M, F})}, {}});
  cases.push_back({"cast f32->bf16 [5632, 2048]", "nn.cast", {f32({F, Hid})}, {bf16({F, Hid})}, {}});
  cases.push_back({"cast bf16->f32 [5632, 2048]", "nn.cast", {bf16({F, Hid})}, {f32({F, Hid})}, {}});
  {
    cpu::KernelAttrs a;
    a.set("epsilon", 1e-5).set("has_weight", int64_t(1));
    cases.push_back({"rms_norm [8192, 2048] bf16", "nn.rms_norm", {bf16({M, Hid}), bf16({Hid})}, {bf16({M, Hid})}, a});
    cases.push_back({"rms_norm_grad [8192, 2048] bf16", "nn.rms_norm_grad",
                     {bf16({M, Hid}), bf16({M, Hid}), bf16({Hid})}, {bf16({M, Hid})}, a});
  }
  {
    cpu::KernelAttrs a;
    a.set("dims", std::vector<int64_t>{0}).set("keepdim", int64_t(0));
    cases.push_back({"reduce_sum rows->[2048] bf16", "nn.reduce_sum", {bf16({M, Hid})}, {bf16({Hid})}, a});
  }
  {
    cpu::KernelAttrs a;
    a.set("beta1", 0.9).set("beta2", 0.95).set("epsilon", 1e-8).set("weight_decay", 0.1);
    Buffer lr = f32({}), step = f32({});
    float one = 1e-3f, t = 3.0f;
    cudaMemcpy(lr.tensor.data, &one, 4, cudaMemcpyHostToDevice);
    cudaMemcpy(step.tensor.data, &t, 4, cudaMemcpyHostToDevice);
    Buffer p = f32({F, Hid}), g = f32({F, Hid}), m = f32({F, Hid}), v = f32({F, Hid});
    cases.push_back({"adamw [5632, 2048] f32 (in place)", "nn.adamw", {p, g, m, v, lr, step}, {p, m, v}, a});
  }
  {
    cpu::KernelAttrs a;
    a.set("ignore_index", int64_t(-100)).set("reduction", std::string("mean"));
    cases.push_back({"cross_entropy [8192, 32000] bf16", "nn.cross_entropy",
                     {bf16({M, V}), make(DType::I64, {M}, 1, V)}, {f32({})}, a});
    cases.push_back({"cross_entropy_grad [8192, 32000] bf16", "nn.cross_entropy_grad",
                     {bf16({M, V}), make(DType::I64, {M}, 1, V), f32({})}, {bf16({M, V})}, a});
    // The vocabulary-parallel loss at TP2: each rank's block of 16000 classes.
    cpu::KernelAttrs block = a;
    block.set("vocab_start", V / 2);
    cases.push_back({"cross_entropy_stats [8192, 16000] bf16", "nn.cross_entropy_stats",
                     {bf16({M, V / 2}), make(DType::I64, {M}, 1, V)}, {f32({M, 3})}, block});
    cases.push_back({"cross_entropy_block_grad [8192, 16000]", "nn.cross_entropy_block_grad",
                     {bf16({M, V / 2}), make(DType::I64, {M}, 1, V), f32({}), f32({M, 6})},
                     {bf16({M, V / 2})}, block});
  }
  {
    cpu::KernelAttrs a;
    a.set("permutation", std::vector<int64_t>{0, 2, 1, 3});
    cases.push_back({"transpose [4,2048,16,128] bf16", "nn.transpose", {bf16({B, S, H, D})}, {bf16({B, H, S, D})}, a});
  }
  {
    cpu::KernelAttrs a;
    a.set("transpose_lhs", int64_t(0)).set("transpose_rhs", int64_t(1));
    Case c{"matmul [8192,2048]x[5632,2048]^T bf16", "nn.matmul", {bf16({M, Hid}), bf16({F, Hid})}, {bf16({M, F})}, a};
    c.flops = 2.0 * M * Hid * F;
    cases.push_back(std::move(c));
    Case w{"matmul dW [8192,5632]^T x [8192,2048]", "nn.matmul", {bf16({M, F}), bf16({M, Hid})}, {bf16({F, Hid})}, {}};
    w.attrs.set("transpose_lhs", int64_t(1)).set("transpose_rhs", int64_t(0));
    w.flops = 2.0 * M * Hid * F;
    cases.push_back(std::move(w));
  }
  // The experts' grouped GEMMs (issue 21) beside the dense GEMM of the same
  // FLOPs: Mixtral-shaped (8 experts of FFN 5632, top-2 of 8192 tokens) and
  // DeepSeek-shaped (64 experts of FFN 1408, top-6), rows spread evenly.
  for (auto [label, E, rows, ffn] :
       {std::tuple<const char *, int64_t, int64_t, int64_t>{"8x", 8, 2 * M, F},
        {"64x", 64, 6 * M, 1408}}) {
    std::vector<int64_t> ends(E);
    for (int64_t e = 0; e < E; ++e)
      ends[e] = rows * (e + 1) / E;
    Buffer offsets = alloc(DType::I64, {E});
    cudaMemcpy(offsets.tensor.data, ends.data(), E * sizeof(int64_t), cudaMemcpyHostToDevice);
    std::string shape = "[" + std::to_string(rows) + ",2048] " + label + "[2048," +
                        std::to_string(ffn) + "]";
    Case g{"grouped_matmul " + shape, "nn.grouped_matmul",
           {bf16({rows, Hid}), bf16({E, Hid, ffn}), offsets}, {bf16({rows, ffn})}, {}};
    g.flops = 2.0 * rows * Hid * ffn;
    cases.push_back(std::move(g));
    // transformers' layout: the weight [E, N, K], read transposed in place.
    Case t{"grouped_matmul w^T " + shape, "nn.grouped_matmul",
           {bf16({rows, Hid}), bf16({E, ffn, Hid}), offsets}, {bf16({rows, ffn})}, {}};
    t.attrs.set("transpose_weight", int64_t(1));
    t.flops = 2.0 * rows * Hid * ffn;
    cases.push_back(std::move(t));
    Case w{"grouped_matmul_weight_grad " + shape, "nn.grouped_matmul_weight_grad",
           {bf16({rows, Hid}), bf16({rows, ffn}), offsets}, {bf16({E, Hid, ffn})}, {}};
    w.flops = 2.0 * rows * Hid * ffn;
    cases.push_back(std::move(w));
    cpu::KernelAttrs a;
    a.set("transpose_lhs", int64_t(0)).set("transpose_rhs", int64_t(1));
    Case d{"matmul (same FLOPs) [" + std::to_string(rows) + ",2048]x[" + std::to_string(ffn) +
               ",2048]^T",
           "nn.matmul", {bf16({rows, Hid}), bf16({ffn, Hid})}, {bf16({rows, ffn})}, a};
    d.flops = 2.0 * rows * Hid * ffn;
    cases.push_back(std::move(d));
  }
  {
    cpu::KernelAttrs a;
    a.set("causal", int64_t(1)).set("scale", 1.0 / std::sqrt(double(D)));
    Case c{"attention [4,16,2048,128] causal", "nn.attention",
           {bf16({B, H, S, D}), bf16({B, H, S, D}), bf16({B, H, S, D})}, {bf16({B, H, S, D})}, a};
    c.flops = 4.0 * B * H * S * S * D / 2; // causal: half the scores
    cases.push_back(std::move(c));
    Case g{"attention_grad [4,16,2048,128] causal", "nn.attention_grad",
           {bf16({B, H, S, D}), bf16({B, H, S, D}), bf16({B, H, S, D}), bf16({B, H, S, D})},
           {bf16({B, H, S, D}), bf16({B, H, S, D}), bf16({B, H, S, D})}, a};
    g.flops = 2.5 * 4.0 * B * H * S * S * D / 2;
    cases.push_back(std::move(g));
    // The pair --loom-attention-stats makes: the forward also writes its
    // row logsumexp, and the backward reads it and the output (shared
    // buffers: the forward runs first) instead of running the forward again.
    Buffer q = bf16({B, H, S, D}), k = bf16({B, H, S, D}), v = bf16({B, H, S, D});
    Buffer out = bf16({B, H, S, D}), lse = f32({B, H, S});
    Case fs{"attention+lse [4,16,2048,128] causal", "nn.attention_with_stats", {q, k, v},
            {out, lse}, a};
    fs.flops = 4.0 * B * H * S * S * D / 2;
    cases.push_back(std::move(fs));
    Case gs{"attn_grad saved lse [4,16,2048,128]", "nn.attention_grad_with_stats",
            {q, k, v, out, lse, bf16({B, H, S, D})},
            {bf16({B, H, S, D}), bf16({B, H, S, D}), bf16({B, H, S, D})}, a};
    gs.flops = 2.5 * 4.0 * B * H * S * S * D / 2;
    cases.push_back(std::move(gs));
  }

  // The kernels the 0.95B training step runs since the fourth round, at its
  // shapes: SwiGLU and its gradient as one kernel each, a norm gradient that
  // adds the residual's gradient, the norm weight gradient (x and dy read
  // once), rope writing attention's layout, and attention reading the value
  // and writing its output sequence-major (seq_major; no transposes).
  cases.push_back({"swiglu [8192, 5632] bf16 (2 outputs)", "nn.swiglu",
                   {bf16({M, F}), bf16({M, F})}, {bf16({M, F}), bf16({M, F})}, {}});
  cases.push_back({"swiglu_grad [8192, 5632] bf16", "nn.swiglu_grad",
                   {bf16({M, F}), bf16({M, F}), bf16({M, F}), bf16({M, F})},
                   {bf16({M, F}), bf16({M, F})}, {}});
  {
    cpu::KernelAttrs a;
    a.set("epsilon", 1e-5).set("has_weight", int64_t(1)).set("has_addend", int64_t(1));
    cases.push_back({"rms_norm_grad + addend [8192, 2048] bf16", "nn.rms_norm_grad",
                     {bf16({M, Hid}), bf16({M, Hid}), bf16({Hid}), bf16({M, Hid})},
                     {bf16({M, Hid})}, a});
    cpu::KernelAttrs w;
    w.set("epsilon", 1e-5);
    cases.push_back({"norm_weight_grad [8192, 2048] bf16 -> f32", "nn.norm_weight_grad",
                     {bf16({M, Hid}), bf16({M, Hid})},
                     {f32({Hid}), f32({normWeightGradScratch(M, Hid)})}, w});
    // The same three at the 8B model's hidden size.
    const int64_t H8 = 4096;
    cpu::KernelAttrs fwd;
    fwd.set("epsilon", 1e-5).set("has_weight", int64_t(1));
    cases.push_back({"rms_norm [8192, 4096] bf16", "nn.rms_norm", {bf16({M, H8}), bf16({H8})},
                     {bf16({M, H8})}, fwd});
    cases.push_back({"rms_norm_grad + addend [8192, 4096] bf16", "nn.rms_norm_grad",
                     {bf16({M, H8}), bf16({M, H8}), bf16({H8}), bf16({M, H8})},
                     {bf16({M, H8})}, a});
    cases.push_back({"norm_weight_grad [8192, 4096] bf16 -> f32", "nn.norm_weight_grad",
                     {bf16({M, H8}), bf16({M, H8})},
                     {f32({H8}), f32({normWeightGradScratch(M, H8)})}, w});
  }
  {
    cpu::KernelAttrs a;
    a.set("transpose", std::string("input")).set("interleaved", int64_t(0));
    cases.push_back({"rope [4,2048,16,128] -> [4,16,2048,128] bf16", "nn.rope",
                     {bf16({B, S, H, D}), bf16({S, D}), bf16({S, D})}, {bf16({B, H, S, D})}, a});
  }
  {
    cpu::KernelAttrs a;
    a.set("causal", int64_t(1)).set("scale", 1.0 / std::sqrt(double(D)));
    Buffer q = bf16({B, H, S, D}), k = bf16({B, H, S, D}), v = bf16({B, S, H, D});
    Buffer out = bf16({B, S, H, D}), lse = f32({B, H, S});
    cpu::KernelAttrs fa = a;
    fa.set("seq_major", int64_t(0b1100)); // v and out
    Case fs{"attention+lse, v/out [B,S,H,D]", "nn.attention_with_stats", {q, k, v}, {out, lse}, fa};
    fs.flops = 4.0 * B * H * S * S * D / 2;
    cases.push_back(std::move(fs));
    cpu::KernelAttrs ga = a;
    ga.set("seq_major", int64_t(0b100101100)); // v, out, dOut, dv
    Case gs{"attn_grad saved lse, v/out/dO/dv [B,S,H,D]", "nn.attention_grad_with_stats",
            {q, k, v, out, lse, bf16({B, S, H, D})},
            {bf16({B, H, S, D}), bf16({B, H, S, D}), bf16({B, S, H, D})}, ga};
    gs.flops = 2.5 * 4.0 * B * H * S * S * D / 2;
    cases.push_back(std::move(gs));
  }

  // FP8 quantization (issue 20) at the 0.95B step's activation shape: one
  // scale with the transposed copy (tensorwise), and 1 x 128 tiles of x and
  // of the copy (blockwise).
  {
    auto e4m3 = [](std::vector<int64_t> s) { return make(DType::F8E4M3FN, s); };
    Buffer one = alloc(DType::F32, {}, 0x3c);
    cases.push_back({"quantize [8192, 2048] bf16 -> e4m3 + transposed", "nn.quantize",
                     {bf16({M, Hid}), one}, {e4m3({M, Hid}), e4m3({Hid, M})}, {}});
    cases.push_back({"quantize 1x128 tiles [8192, 2048] + transposed", "nn.quantize",
                     {bf16({M, Hid}), alloc(DType::F32, {M, Hid / 128}, 0x3c),
                      alloc(DType::F32, {Hid, M / 128}, 0x3c)},
                     {e4m3({M, Hid}), e4m3({Hid, M})}, {}});
    // The amax each current-scaling quantize reads first: the whole tensor
    // (tensorwise), 1 x 128 row segments and 128 x 1 column tiles
    // (blockwise's tiles of x and of its transposed copy).
    // Blockwise's whole chain in one kernel (--loom-fuse-fp8-quantize): x
    // read once for both amaxes, the scales, q and its transposed copy.
    {
      cpu::KernelAttrs f;
      f.set("format", std::string("e4m3"));
      cases.push_back({"quantize_tiles 1x128 [8192, 2048] + transposed", "nn.quantize_tiles",
                       {bf16({M, Hid})},
                       {e4m3({M, Hid}), e4m3({Hid, M}), f32({M, Hid / 128}), f32({Hid, M / 128})},
                       f});
      // Tensorwise's whole chain: the amax and its scale in one launch,
      // then the quantization with its copy.
      cases.push_back({"quantize_tensor [8192, 2048] + transposed", "nn.quantize_tensor",
                       {bf16({M, Hid})}, {e4m3({M, Hid}), e4m3({Hid, M}), f32({})}, f});
      cases.push_back({"quantize_tensor [8192, 5632] + transposed", "nn.quantize_tensor",
                       {bf16({M, F})}, {e4m3({M, F}), e4m3({F, M}), f32({})}, f});
    }
    cases.push_back({"amax [8192, 2048] bf16 (one scale)", "nn.amax", {bf16({M, Hid})},
                     {f32({})}, {}});
    cases.push_back({"amax 1x128 tiles [8192, 2048] bf16", "nn.amax", {bf16({M, Hid})},
                     {f32({M, Hid / 128})}, {}});
    cases.push_back({"amax 128x1 tiles [8192, 2048] bf16", "nn.amax", {bf16({M, Hid})},
                     {f32({M / 128, Hid})}, {}});
  }

  // Kernels Loom generates from fusion groups (--fuse; nn.fused with the
  // group's body), at the 0.95B step's shapes: the groups that pass makes
  // there (SwiGLU and its gradient's product, the residual gradients' sum)
  // and a cast feeding a product.
  auto fused = [&](std::string label, std::string body, std::vector<Buffer> in,
                   std::vector<Buffer> out) {
    cpu::KernelAttrs a;
    a.set("body", body);
    cases.push_back({"generated: " + label, "nn.fused", std::move(in), std::move(out), a});
  };
  {
    const std::string mf = "[" + std::to_string(M) + "," + std::to_string(F) + "]";
    const std::string mh = "[" + std::to_string(M) + "," + std::to_string(Hid) + "]";
    fused("silu, mul " + mf + " bf16 (2 outputs)",
          "(bf16" + mf + ",bf16" + mf + "){%0=nn.silu(%i0):bf16" + mf + ";%1=nn.mul(%0,%i1):bf16" +
              mf + ";yield %0,%1}",
          {bf16({M, F}), bf16({M, F})}, {bf16({M, F}), bf16({M, F})});
    fused("mul, silu_grad " + mf + " bf16",
          "(bf16" + mf + ",bf16" + mf + ",bf16" + mf + "){%0=nn.mul(%i0,%i1):bf16" + mf +
              ";%1=nn.silu_grad(%i2,%0):bf16" + mf + ";yield %1}",
          {bf16({M, F}), bf16({M, F}), bf16({M, F})}, {bf16({M, F})});
    fused("add, add " + mh + " bf16",
          "(bf16" + mh + ",bf16" + mh + ",bf16" + mh + "){%0=nn.add(%i0,%i1):bf16" + mh +
              ";%1=nn.add(%0,%i2):bf16" + mh + ";yield %1}",
          {bf16({M, Hid}), bf16({M, Hid}), bf16({M, Hid})}, {bf16({M, Hid})});
    fused("cast f32->bf16, mul " + mh,
          "(f32" + mh + ",bf16" + mh + "){%0=nn.cast(%i0):bf16" + mh + ";%1=nn.mul(%0,%i1):bf16" +
              mh + ";yield %1}",
          {f32({M, Hid}), bf16({M, Hid})}, {bf16({M, Hid})});
  }

  // The ceiling for memory-bound kernels: this GPU's device-to-device copy
  // (1 GiB, bytes read plus written), measured here, in this run.
  double copyCeiling = kCopyCeiling;
  {
    const size_t bytes = size_t(1) << 30;
    void *from = nullptr, *to = nullptr;
    if (cudaMalloc(&from, bytes) != cudaSuccess || cudaMalloc(&to, bytes) != cudaSuccess)
      die("cudaMalloc of 1 GiB failed");
    cudaMemset(from, 0x3c, bytes);
    double seconds = medianSeconds(ctx, "device copy", [&] {
      if (cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, ctx.stream) != cudaSuccess)
        die("cudaMemcpyAsync failed");
    });
    copyCeiling = 2.0 * double(bytes) / seconds;
    cudaFree(from);
    cudaFree(to);
  }
  cudaDeviceProp props{};
  cudaGetDeviceProperties(&props, 0);
  llvm::outs() << props.name << ": device copy " << llvm::format("%.2f", copyCeiling / 1e12)
               << " TB/s (read + written, 1 GiB cudaMemcpyAsync), the ceiling of the memory-bound "
                  "rows; GEMM rows against 795 TFLOP/s (an H200's bf16 GEMM)\n";
  llvm::outs() << "kernel                                    time (us)         rate   ceiling\n";
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (Case &c : cases) {
    if (!filter.empty() && c.label.find(filter) == std::string::npos)
      continue;
    std::vector<cpu::Tensor> in, out;
    size_t bytes = 0;
    for (Buffer &b : c.inputs) {
      in.push_back(b.tensor);
      bytes += b.bytes;
    }
    for (Buffer &b : c.outputs) {
      out.push_back(b.tensor);
      bytes += b.bytes;
    }
    for (int i = 0; i < 3; ++i)
      if (llvm::Error err = cuda::launchKernel(c.kernel, in, out, c.attrs, ctx))
        die(llvm::toString(std::move(err)));
    cudaEventRecord(start, ctx.stream);
    for (int i = 0; i < iterations; ++i)
      if (llvm::Error err = cuda::launchKernel(c.kernel, in, out, c.attrs, ctx))
        die(llvm::toString(std::move(err)));
    cudaEventRecord(stop, ctx.stream);
    if (cudaEventSynchronize(stop) != cudaSuccess)
      die(c.label + ": the kernel failed");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    double seconds = ms / 1e3 / iterations;
    if (c.flops > 0)
      llvm::outs() << llvm::format("%-40s %10.1f %8.0f TF/s %8.0f%%\n", c.label.c_str(), seconds * 1e6,
                                   c.flops / seconds / 1e12, 100 * c.flops / seconds / kGemmCeiling);
    else
      llvm::outs() << llvm::format("%-40s %10.1f %8.2f TB/s %8.0f%%\n", c.label.c_str(), seconds * 1e6,
                                   bytes / seconds / 1e12, 100 * bytes / seconds / copyCeiling);
  }
  return 0;
}
