// cuDNN fused attention through the backend API; see CudnnAttention.h.
//
// Forward graph (scores S are [B, Hq, S, Skv], virtual f32):
//   S = Q x K^T                  matmul; K enters as K^T [B, Hkv, D, Skv]
//                                (strides swapped), Hkv broadcast to Hq
//   S = S * scale                pointwise MUL, scalar by value
//   [causal] r = row index (+ Skv - S), c = column index,
//            S = (r >= c) ? S : -inf     GEN_INDEX, ADD/SUB, CMP_GE, BINARY_SELECT
//   [window W] S = (c + W - (Skv - S) > r) ? S : -inf
//                                GEN_INDEX, ADD (f32 bound), CMP_GT, BINARY_SELECT
//                                (cuDNN's left-bound band: the sliding window)
//   M = max_row(S); E = exp(S - M); Z = sum_row(E)
//   Stats = M + log(Z)           f32 [B, Hq, S, 1], kept for the backward
//   P = E / Z                    virtual bf16/f16
//   O = P x V                    matmul
// Backward graph (O, Stats from the forward, saved by
// nn.attention_with_stats or recomputed by the forward graph; dO given):
//   Dsum = sum_row(dO * O) * 1   f32 [B, Hq, S, 1] (scratch)
//   P = exp(scale Q K^T [mask] - Stats)
//   dV = P^T x dO                (GQA: [B, Hq, Skv, Dv] then summed to Hkv)
//   dS = (dO x V^T - Dsum) * P * scale
//   dK = dS^T x Q                (GQA: summed to Hkv as dV)
//   dQacc = dS x K (f32 scratch); dQ = identity(dQacc)
// These are the patterns cuDNN's fused SDPA engines match (the same shapes
// NVIDIA's cudnn-frontend lowers its SDPA nodes to).
//
// Q, K, V, O, dO, dQ, dK and dV have the strides of their layouts
// (head-major or sequence-major, CudnnAttnLayout; K^T and V^T are the same
// memory with the last two strides swapped). Stats, Dsum and the dQ
// accumulator are Loom's own buffers, always contiguous [B, Hq, S, *].
//
// Plans are built once per (device, thread, shape, layouts, causal, window,
// scale, dtype) and kept for the life of the process; each call then costs one
// variant pack. The layouts are part of the key: strides are baked into a
// plan's tensor descriptors, so a head-major and a sequence-major call of one
// shape need (and get) different plans.

#include "kernels/cuda/CudnnAttention.h"

#include "llvm/Support/raw_ostream.h"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#if __has_include(<cudnn_graph.h>)
#define LOOM_HAVE_CUDNN_HEADERS 1
#include <cudnn_graph.h>
#endif

namespace loom::cuda {

namespace {

std::atomic<int> gPathOverride{-1};

AttentionPath pathFromEnvironment() {
  static const AttentionPath path = [] {
    const char *env = std::getenv("LOOM_ATTENTION");
    if (!env || !*env || !std::strcmp(env, "auto"))
      return AttentionPath::Auto;
    if (!std::strcmp(env, "loom"))
      return AttentionPath::Loom;
    if (!std::strcmp(env, "cudnn"))
      return AttentionPath::Cudnn;
    llvm::errs() << "loom: LOOM_ATTENTION=" << env
                 << " is not one of loom, cudnn, auto; using auto\n";
    return AttentionPath::Auto;
  }();
  return path;
}

} // namespace

AttentionPath attentionPath() {
  int o = gPathOverride.load(std::memory_order_relaxed);
  return o >= 0 ? static_cast<AttentionPath>(o) : pathFromEnvironment();
}

void setAttentionPath(AttentionPath path) {
  gPathOverride.store(static_cast<int>(path), std::memory_order_relaxed);
}

#ifndef LOOM_HAVE_CUDNN_HEADERS

bool cudnnAvailable(std::string *why) {
  if (why)
    *why = "this Loom was built without cuDNN's headers";
  return false;
}

llvm::Expected<bool> cudnnAttentionForward(DType dtype, const CudnnAttnArgs &, cudaStream_t) {
  if (attentionPath() == AttentionPath::Cudnn && (dtype == DType::BF16 || dtype == DType::F16))
    return llvm::createStringError(std::errc::not_supported,
                                   "LOOM_ATTENTION=cudnn, but this Loom was built without cuDNN");
  return false;
}

llvm::Expected<bool> cudnnAttentionBackward(DType dtype, const CudnnAttnArgs &a, cudaStream_t s) {
  return cudnnAttentionForward(dtype, a, s);
}

#else

namespace {

// --- the library, loaded at run time ---------------------------------------

struct CudnnApi {
  decltype(&::cudnnGetVersion) getVersion = nullptr;
  decltype(&::cudnnCreate) create = nullptr;
  decltype(&::cudnnSetStream) setStream = nullptr;
  decltype(&::cudnnGetErrorString) errorString = nullptr;
  decltype(&::cudnnGetLastErrorString) lastErrorString = nullptr;
  decltype(&::cudnnBackendCreateDescriptor) createDesc = nullptr;
  decltype(&::cudnnBackendDestroyDescriptor) destroyDesc = nullptr;
  decltype(&::cudnnBackendSetAttribute) setAttr = nullptr;
  decltype(&::cudnnBackendGetAttribute) getAttr = nullptr;
  decltype(&::cudnnBackendFinalize) finalize = nullptr;
  decltype(&::cudnnBackendExecute) execute = nullptr;
  size_t version = 0;
  std::string description; // the library and version, or why none loaded
  bool ok = false;
};

const CudnnApi &api() {
  static const CudnnApi loaded = [] {
    CudnnApi a;
    std::vector<std::string> candidates;
    if (const char *env = std::getenv("LOOM_CUDNN_LIBRARY"); env && *env)
      candidates.push_back(env); // that file alone
    else
      for (const char *name : {"libcudnn.so.9", "libcudnn.so", "/usr/local/cuda/lib64/libcudnn.so.9",
                               "/usr/local/cuda/lib/libcudnn.so.9",
                               "/usr/lib/x86_64-linux-gnu/libcudnn.so.9"})
        candidates.push_back(name);
    void *lib = nullptr;
    std::string tried, loadedName;
    for (const std::string &name : candidates) {
      lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) {
        loadedName = name;
        break;
      }
      const char *err = dlerror();
      tried += "\n  " + name + ": " + (err ? err : "not found");
    }
    if (!lib) {
      a.description = "libcudnn could not be loaded (set LD_LIBRARY_PATH or LOOM_CUDNN_LIBRARY):" + tried;
      return a;
    }
    bool missing = false;
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) {
        missing = true;
        a.description = loadedName + " lacks " + name;
      }
    };
    sym(a.getVersion, "cudnnGetVersion");
    sym(a.create, "cudnnCreate");
    sym(a.setStream, "cudnnSetStream");
    sym(a.errorString, "cudnnGetErrorString");
    sym(a.lastErrorString, "cudnnGetLastErrorString");
    sym(a.createDesc, "cudnnBackendCreateDescriptor");
    sym(a.destroyDesc, "cudnnBackendDestroyDescriptor");
    sym(a.setAttr, "cudnnBackendSetAttribute");
    sym(a.getAttr, "cudnnBackendGetAttribute");
    sym(a.finalize, "cudnnBackendFinalize");
    sym(a.execute, "cudnnBackendExecute");
    if (missing)
      return a;
    a.version = a.getVersion();
    if (a.version < 90000) {
      a.description = loadedName + " is cuDNN " + std::to_string(a.version) +
                      "; fused attention here needs cuDNN 9";
      return a;
    }
    a.description = loadedName + " (cuDNN " + std::to_string(a.version / 10000) + "." +
                    std::to_string(a.version / 100 % 100) + "." + std::to_string(a.version % 100) +
                    ")";
    a.ok = true;
    return a;
  }();
  return loaded;
}

/// Says, once per process, that cuDNN is unavailable and Loom's kernel runs.
void reportUnavailableOnce(const std::string &why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    llvm::errs() << "loom: cuDNN fused attention unavailable, using Loom's attention kernels: "
                 << why << "\n";
  });
}

// --- graph building ----------------------------------------------------------

using Desc = cudnnBackendDescriptor_t;

/// Owns every descriptor of one plan (kept for the plan's life).
struct DescPool {
  std::vector<Desc> all;
  ~DescPool() {
    if (api().ok)
      for (auto it = all.rbegin(); it != all.rend(); ++it)
        api().destroyDesc(*it);
  }
};

/// Builds one operation graph; the first failing call is remembered in `error`.
class GraphBuilder {
public:
  explicit GraphBuilder(DescPool &pool) : pool(pool) {}

  bool failed() const { return !error.empty(); }
  std::string error;

  Desc make(cudnnBackendDescriptorType_t type, const char *what) {
    if (failed())
      return nullptr;
    Desc d = nullptr;
    if (check(api().createDesc(type, &d), what))
      pool.all.push_back(d);
    return d;
  }
  void set(Desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void *value, const char *what) {
    if (!failed())
      check(api().setAttr(d, name, type, count, value), what);
  }
  void finalize(Desc d, const char *what) {
    if (!failed())
      check(api().finalize(d), what);
  }

  /// A tensor; uid < 0 makes a virtual one with a fresh uid.
  Desc tensor(int64_t uid, cudnnDataType_t type, std::array<int64_t, 4> dims,
              std::array<int64_t, 4> strides, bool byValue = false) {
    bool isVirtual = uid < 0;
    if (isVirtual)
      uid = nextVirtual++;
    Desc t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor");
    int64_t alignment = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "tensor dims");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "tensor strides");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment");
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &isVirtual, "tensor virtual");
    if (byValue)
      set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byValue, "tensor by value");
    finalize(t, "tensor finalize");
    return t;
  }
  /// A contiguous (row-major) tensor.
  Desc dense(int64_t uid, cudnnDataType_t type, std::array<int64_t, 4> dims) {
    return tensor(uid, type, dims, contiguous(dims));
  }
  /// A by-value scalar; one descriptor per uid however many ops read it.
  Desc scalar(int64_t uid, cudnnDataType_t type) {
    auto [it, inserted] = scalarDescs.try_emplace(uid, nullptr);
    if (inserted) {
      scalars.push_back(uid);
      it->second = tensor(uid, type, {1, 1, 1, 1}, {1, 1, 1, 1}, /*byValue=*/true);
    }
    return it->second;
  }
  static std::array<int64_t, 4> contiguous(std::array<int64_t, 4> d) {
    return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
  }

  /// y = mode(x[, b][, t]).
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math, Desc x, Desc y, Desc b = nullptr,
                 Desc t = nullptr, int64_t axis = -1) {
    Desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor");
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, "pointwise math");
    if (axis >= 0)
      set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    finalize(pw, "pointwise finalize");
    Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw,
        "pointwise op descriptor");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
    if (b)
      set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pointwise b");
    if (t)
      set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pointwise t");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
    float one = 1.f;
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha1");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha2");
    finalize(op, "pointwise operation finalize");
    ops.push_back(op);
  }

  void reduction(cudnnReduceTensorOp_t mode, Desc x, Desc y) {
    Desc r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction descriptor");
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction mode");
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "reduction type");
    finalize(r, "reduction finalize");
    Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, "reduction desc");
    finalize(op, "reduction operation finalize");
    ops.push_back(op);
  }

  void matmul(Desc a, Desc b, Desc c) {
    Desc m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul descriptor");
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul type");
    finalize(m, "matmul finalize");
    Desc op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul b");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, "matmul desc");
    finalize(op, "matmul operation finalize");
    ops.push_back(op);
  }

  void reshape(Desc x, Desc y) {
    Desc op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
    finalize(op, "reshape operation finalize");
    ops.push_back(op);
  }

  std::vector<Desc> ops;
  std::vector<int64_t> scalars; // uids of the by-value scalars used
  std::map<int64_t, Desc> scalarDescs;

private:
  bool check(cudnnStatus_t status, const char *what) {
    if (status == CUDNN_STATUS_SUCCESS)
      return true;
    if (error.empty()) {
      char detail[512] = {0};
      api().lastErrorString(detail, sizeof(detail));
      error = std::string(what) + ": " + api().errorString(status) + (detail[0] ? " (" : "") +
              detail + (detail[0] ? ")" : "");
    }
    return false;
  }
  DescPool &pool;
  int64_t nextVirtual = 1000;
};

// Tensor uids shared by the graphs and their variant packs.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kKvLen, kQLen, kOne, kLeftBound,
  kDO, kDQ, kDK, kDV, kDsum, kDQAcc,
};

/// The operands with a caller-chosen layout, indexing PlanKey::layouts.
enum Operand : int { kOpQ, kOpK, kOpV, kOpO, kOpDO, kOpDQ, kOpDK, kOpDV, kNumOperands };

struct PlanKey {
  int device;
  DType dtype;
  bool backward;
  int64_t b, hq, hkv, s, skv, d, dv;
  bool causal;
  int64_t window; // 0: none
  uint64_t scaleBits;
  /// Each operand's {batch, head, row} strides (CudnnAttnLayout); zeros for
  /// the operands a forward graph does not have.
  std::array<std::array<int64_t, 3>, kNumOperands> layouts;
  auto tie() const {
    return std::tie(device, dtype, backward, b, hq, hkv, s, skv, d, dv, causal, window, scaleBits,
                    layouts);
  }
  bool operator<(const PlanKey &o) const { return tie() < o.tie(); }

  /// Operand `t`'s strides for its [B, H, S, D] dims.
  std::array<int64_t, 4> strides(Operand t) const {
    const auto &l = layouts[t];
    return {l[0], l[1], l[2], 1};
  }
  /// Operand `t`'s strides seen as [B, H, D, S] (K^T, V^T: same memory).
  std::array<int64_t, 4> transposedStrides(Operand t) const {
    const auto &l = layouts[t];
    return {l[0], l[1], 1, l[2]};
  }
};

struct Plan {
  DescPool pool;
  Desc plan = nullptr;
  int64_t workspace = 0;
  std::string error; // nonempty: cuDNN cannot run this problem
  // By-value scalars (the variant pack points at these).
  float scale = 1.f, negInf = -std::numeric_limits<float>::infinity(), one = 1.f;
  int32_t kvLen = 0, qLen = 0;
  /// The window's bound on column + bound > row: W - (Skv - S).
  float leftBound = 0.f;
  bool bottomRight = false;
  std::vector<int64_t> scalars; // which of them the graph uses
};

cudnnDataType_t cudnnType(DType t) {
  return t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

/// The row and column index of each score of `s` (int32, virtual).
std::pair<Desc, Desc> scoreIndices(GraphBuilder &g, Desc s, std::array<int64_t, 4> dims) {
  Desc row = g.dense(-1, CUDNN_DATA_INT32, dims);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s, row, nullptr, nullptr, 2);
  Desc col = g.dense(-1, CUDNN_DATA_INT32, dims);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s, col, nullptr, nullptr, 3);
  return {row, col};
}

/// The causal mask on scores `s` (virtual f32): (row [+ Skv - S] >= col) ? s : -inf.
Desc causalMask(GraphBuilder &g, Desc s, std::array<int64_t, 4> dims, const Plan &p) {
  auto [row, col] = scoreIndices(g, s, dims);
  if (p.bottomRight) {
    Desc plusKv = g.dense(-1, CUDNN_DATA_INT32, dims);
    g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, row, plusKv, g.scalar(kKvLen, CUDNN_DATA_INT32));
    Desc shifted = g.dense(-1, CUDNN_DATA_INT32, dims);
    g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, plusKv, shifted, g.scalar(kQLen, CUDNN_DATA_INT32));
    row = shifted;
  }
  Desc keep = g.dense(-1, CUDNN_DATA_BOOLEAN, dims);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, keep, col);
  Desc masked = g.dense(-1, CUDNN_DATA_FLOAT, dims);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, masked,
              g.scalar(kNegInf, CUDNN_DATA_FLOAT), keep);
  return masked;
}

/// The sliding window on causal scores `s` (virtual f32): a key W or more
/// before its query's last visible key is hidden, (col + W - (Skv - S) > row)
/// ? s : -inf. This is the band's left bound in the form cuDNN's fused
/// engines match (the bound a by-value f32 scalar added to the column).
Desc windowMask(GraphBuilder &g, Desc s, std::array<int64_t, 4> dims) {
  auto [row, col] = scoreIndices(g, s, dims);
  Desc bounded = g.dense(-1, CUDNN_DATA_FLOAT, dims);
  g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, col, bounded,
              g.scalar(kLeftBound, CUDNN_DATA_FLOAT));
  Desc keep = g.dense(-1, CUDNN_DATA_BOOLEAN, dims);
  g.pointwise(CUDNN_POINTWISE_CMP_GT, CUDNN_DATA_BOOLEAN, bounded, keep, row);
  Desc masked = g.dense(-1, CUDNN_DATA_FLOAT, dims);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, masked,
              g.scalar(kNegInf, CUDNN_DATA_FLOAT), keep);
  return masked;
}

/// The causal mask, then the window's where there is one.
Desc applyMasks(GraphBuilder &g, Desc s, std::array<int64_t, 4> dims, const PlanKey &k,
                const Plan &p) {
  if (!k.causal)
    return s;
  Desc masked = causalMask(g, s, dims, p);
  return k.window > 0 ? windowMask(g, masked, dims) : masked;
}

void buildForward(GraphBuilder &g, const PlanKey &k, const Plan &p) {
  const cudnnDataType_t io = cudnnType(k.dtype), f32 = CUDNN_DATA_FLOAT;
  const std::array<int64_t, 4> sDims = {k.b, k.hq, k.s, k.skv}, rowDims = {k.b, k.hq, k.s, 1};
  Desc q = g.tensor(kQ, io, {k.b, k.hq, k.s, k.d}, k.strides(kOpQ));
  Desc kt = g.tensor(kK, io, {k.b, k.hkv, k.d, k.skv}, k.transposedStrides(kOpK));
  Desc v = g.tensor(kV, io, {k.b, k.hkv, k.skv, k.dv}, k.strides(kOpV));
  Desc o = g.tensor(kO, io, {k.b, k.hq, k.s, k.dv}, k.strides(kOpO));
  Desc stats = g.dense(kStats, f32, rowDims);

  Desc s = g.dense(-1, f32, sDims);
  g.matmul(q, kt, s);
  Desc scaled = g.dense(-1, f32, sDims);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, s, scaled, g.scalar(kScale, f32));
  Desc logits = applyMasks(g, scaled, sDims, k, p);
  Desc mx = g.dense(-1, f32, rowDims);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, logits, mx);
  Desc centered = g.dense(-1, f32, sDims);
  g.pointwise(CUDNN_POINTWISE_SUB, f32, logits, centered, mx);
  Desc e = g.dense(-1, f32, sDims);
  g.pointwise(CUDNN_POINTWISE_EXP, f32, centered, e);
  Desc z = g.dense(-1, f32, rowDims);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  Desc logZ = g.dense(-1, f32, rowDims);
  g.pointwise(CUDNN_POINTWISE_LOG, f32, z, logZ);
  g.pointwise(CUDNN_POINTWISE_ADD, f32, mx, stats, logZ);
  Desc prob = g.dense(-1, io, sDims);
  g.pointwise(CUDNN_POINTWISE_DIV, f32, e, prob, z);
  g.matmul(prob, v, o);
}

void buildBackward(GraphBuilder &g, const PlanKey &k, const Plan &p) {
  const cudnnDataType_t io = cudnnType(k.dtype), f32 = CUDNN_DATA_FLOAT;
  const std::array<int64_t, 4> sDims = {k.b, k.hq, k.s, k.skv}, rowDims = {k.b, k.hq, k.s, 1};
  const std::array<int64_t, 4> tDims = {k.b, k.hq, k.skv, k.s};
  const std::array<int64_t, 4> tStrides = {k.hq * k.s * k.skv, k.s * k.skv, 1, k.skv};
  const bool grouped = k.hq != k.hkv;
  Desc q = g.tensor(kQ, io, {k.b, k.hq, k.s, k.d}, k.strides(kOpQ));
  Desc kt = g.tensor(kK, io, {k.b, k.hkv, k.d, k.skv}, k.transposedStrides(kOpK));
  Desc vt = g.tensor(kV, io, {k.b, k.hkv, k.dv, k.skv}, k.transposedStrides(kOpV));
  Desc o = g.tensor(kO, io, {k.b, k.hq, k.s, k.dv}, k.strides(kOpO));
  Desc dO = g.tensor(kDO, io, {k.b, k.hq, k.s, k.dv}, k.strides(kOpDO));
  Desc stats = g.dense(kStats, f32, rowDims);
  Desc dQ = g.tensor(kDQ, io, {k.b, k.hq, k.s, k.d}, k.strides(kOpDQ));
  Desc dK = g.tensor(kDK, io, {k.b, k.hkv, k.skv, k.d}, k.strides(kOpDK));
  Desc dV = g.tensor(kDV, io, {k.b, k.hkv, k.skv, k.dv}, k.strides(kOpDV));
  Desc scale = g.scalar(kScale, f32);

  // Dsum = rowsum(dO * O) (times one: the dropout-free form of the pattern).
  Desc dOO = g.dense(-1, f32, {k.b, k.hq, k.s, k.dv});
  g.pointwise(CUDNN_POINTWISE_MUL, f32, dO, dOO, o);
  Desc rowSum = g.dense(-1, f32, rowDims);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, rowSum);
  Desc dsum = g.dense(kDsum, f32, rowDims);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, rowSum, dsum, g.scalar(kOne, f32));

  // P = exp(scale Q K^T [mask] - Stats).
  Desc s = g.dense(-1, f32, sDims);
  g.matmul(q, kt, s);
  Desc scaled = g.dense(-1, f32, sDims);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, s, scaled, scale);
  Desc centered = g.dense(-1, f32, sDims);
  g.pointwise(CUDNN_POINTWISE_SUB, f32, scaled, centered, stats);
  Desc logits = applyMasks(g, centered, sDims, k, p);
  Desc prob = g.dense(-1, f32, sDims);
  g.pointwise(CUDNN_POINTWISE_EXP, f32, logits, prob);

  // dV = P^T dO (summed over the query heads of a KV head).
  Desc probT = g.tensor(-1, io, tDims, tStrides);
  g.reshape(prob, probT);
  if (!grouped) {
    g.matmul(probT, dO, dV);
  } else {
    Desc full = g.dense(-1, io, {k.b, k.hq, k.skv, k.dv});
    g.matmul(probT, dO, full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, dV);
  }

  // dS = (dO V^T - Dsum) * P * scale.
  Desc dP = g.dense(-1, f32, sDims);
  g.matmul(dO, vt, dP);
  Desc dPc = g.dense(-1, f32, sDims);
  g.pointwise(CUDNN_POINTWISE_SUB, f32, dP, dPc, dsum);
  Desc dSu = g.dense(-1, f32, sDims);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, dPc, dSu, prob);
  Desc dS = g.dense(-1, f32, sDims);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, dSu, dS, scale);

  // dK = dS^T Q.
  Desc dST = g.tensor(-1, io, tDims, tStrides);
  g.reshape(dS, dST);
  if (!grouped) {
    g.matmul(dST, q, dK);
  } else {
    Desc full = g.dense(-1, io, {k.b, k.hq, k.skv, k.d});
    g.matmul(dST, q, full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, dK);
  }

  // dQ = dS K, accumulated in f32 scratch (contiguous [B, Hq, S, D], whatever
  // dQ's layout: the identity op below writes dQ through its strides). K
  // seen untransposed: K's own memory and strides.
  Desc kNat = g.tensor(-1, io, {k.b, k.hkv, k.skv, k.d}, k.strides(kOpK));
  g.reshape(kt, kNat);
  Desc dQAcc = g.dense(kDQAcc, f32, {k.b, k.hq, k.s, k.d});
  g.matmul(dS, kNat, dQAcc);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, f32, dQAcc, dQ);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
/// Finalizes the operation graph and takes the first engine configuration
/// (heuristics mode A, then the fallback list) that makes a plan.
void makePlan(GraphBuilder &g, cudnnHandle_t handle, Plan &p) {
  Desc graph = g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(g.ops.size()),
        g.ops.data(), "graph operations");
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
  g.finalize(graph, "operation graph finalize");
  std::string tries;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    if (g.failed())
      return;
    Desc heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    g.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph,
          "heuristics graph");
    g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    g.finalize(heur, "heuristics finalize");
    if (g.failed()) {
      tries += " [heuristics: " + g.error + "]";
      g.error.clear();
      continue;
    }
    int64_t count = 0;
    if (api().getAttr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                      nullptr) != CUDNN_STATUS_SUCCESS)
      count = 0;
    std::vector<Desc> configs(size_t(std::max<int64_t>(count, 0)));
    for (Desc &c : configs)
      c = g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    if (g.failed())
      return;
    int64_t got = 0;
    if (count > 0 && api().getAttr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   count, &got, configs.data()) != CUDNN_STATUS_SUCCESS)
      got = 0;
    for (int64_t i = 0; i < got; ++i) {
      Desc plan = nullptr;
      if (api().createDesc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
        continue;
      cudnnStatus_t st = api().setAttr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      if (st == CUDNN_STATUS_SUCCESS)
        st = api().setAttr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[size_t(i)]);
      if (st == CUDNN_STATUS_SUCCESS)
        st = api().finalize(plan);
      int64_t ws = 0, n = 0;
      if (st == CUDNN_STATUS_SUCCESS)
        st = api().getAttr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
      if (st == CUDNN_STATUS_SUCCESS) {
        p.pool.all.push_back(plan);
        p.plan = plan;
        p.workspace = ws;
        return;
      }
      char detail[256] = {0};
      api().lastErrorString(detail, sizeof(detail));
      if (tries.size() < 600)
        tries += std::string(" [engine config ") + std::to_string(i) + ": " + api().errorString(st) +
                 (detail[0] ? std::string(" ") + detail : std::string()) + "]";
      api().destroyDesc(plan);
    }
  }
  if (!g.failed())
    g.error = "no cuDNN engine runs this graph:" + (tries.empty() ? std::string(" none offered") : tries);
}
#pragma GCC diagnostic pop

// --- per-thread state: handle and plans ------------------------------------

/// Relaxes this thread's stream-capture mode while cuDNN sets up (handle,
/// heuristics, plan finalization may allocate or load modules), so a first
/// use inside a CUDA-graph capture does not invalidate it. Loom runs a step
/// eagerly before capturing, so this is a safeguard.
class RelaxedCapture {
public:
  RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode); }
  ~RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode); }

private:
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
};

struct DeviceState {
  cudnnHandle_t handle = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

/// cuDNN handles are not to be shared between threads (Loom runs one rank
/// per thread), so each thread keeps its own handle and plans per device;
/// they live until the process ends (never destroyed: teardown order at exit
/// is not ours to rely on).
llvm::Expected<DeviceState *> deviceState(int device) {
  thread_local std::map<int, DeviceState *> states;
  DeviceState *&state = states[device];
  if (!state) {
    RelaxedCapture relaxed;
    auto fresh = std::make_unique<DeviceState>();
    cudnnStatus_t st = api().create(&fresh->handle);
    if (st != CUDNN_STATUS_SUCCESS)
      return llvm::createStringError(std::errc::io_error, "cudnnCreate: %s", api().errorString(st));
    state = fresh.release();
  }
  return state;
}

/// ", sequence-major q k ..." for the operands of `key` not stored as
/// contiguous [B, H, S, D] (for messages); empty when there are none.
std::string seqMajorOperands(const PlanKey &key) {
  static const char *const names[kNumOperands] = {"q", "k", "v", "o", "dO", "dQ", "dK", "dV"};
  std::string listed;
  for (int t = 0; t < kNumOperands; ++t) {
    // Head-major rows are one row (D elements) apart; sequence-major ones a
    // whole position (H rows) apart. Zeros: not an operand of this graph.
    const int64_t dim = t == kOpV || t == kOpO || t == kOpDO || t == kOpDV ? key.dv : key.d;
    const int64_t rowStride = key.layouts[size_t(t)][2];
    if (rowStride != 0 && rowStride != dim)
      listed += std::string(" ") + names[t];
  }
  return listed.empty() ? listed : ", sequence-major" + listed;
}

llvm::Expected<const Plan *> getPlan(const PlanKey &key, cudaStream_t stream) {
  (void)stream;
  auto stateOr = deviceState(key.device);
  if (!stateOr)
    return stateOr.takeError();
  DeviceState &state = **stateOr;
  auto it = state.plans.find(key);
  if (it != state.plans.end())
    return it->second.get();
  RelaxedCapture relaxed;
  auto plan = std::make_unique<Plan>();
  double scale;
  std::memcpy(&scale, &key.scaleBits, sizeof scale);
  plan->scale = float(scale);
  plan->kvLen = int32_t(key.skv);
  plan->qLen = int32_t(key.s);
  plan->bottomRight = key.causal && key.s != key.skv;
  plan->leftBound = float(key.window - (key.skv - key.s));
  if (api().version < 91000)
    plan->negInf = std::numeric_limits<float>::lowest(); // older cuDNN prefers it
  GraphBuilder g(plan->pool);
  if (key.backward)
    buildBackward(g, key, *plan);
  else
    buildForward(g, key, *plan);
  if (!g.failed())
    makePlan(g, state.handle, *plan);
  plan->scalars = g.scalars;
  if (g.failed() || !plan->plan) {
    plan->error = g.error.empty() ? "no plan" : g.error;
    plan->plan = nullptr;
    std::string shape = std::string(key.backward ? "backward" : "forward") + " [B=" +
                        std::to_string(key.b) + ", Hq=" + std::to_string(key.hq) + ", Hkv=" +
                        std::to_string(key.hkv) + ", S=" + std::to_string(key.s) + ", Skv=" +
                        std::to_string(key.skv) + ", D=" + std::to_string(key.d) + ", Dv=" +
                        std::to_string(key.dv) + (key.causal ? ", causal" : "") +
                        (key.window > 0 ? ", window=" + std::to_string(key.window) : "") +
                        seqMajorOperands(key) + "]";
    llvm::errs() << "loom: cuDNN attention cannot run the " << shape
                 << ", using Loom's kernel for it: " << plan->error << "\n";
  }
  const Plan *result = plan.get();
  state.plans.emplace(key, std::move(plan));
  return result;
}

llvm::Error execute(const Plan &plan, cudnnHandle_t handle, cudaStream_t stream,
                    std::vector<std::pair<int64_t, void *>> tensors, void *workspace) {
  Plan &p = const_cast<Plan &>(plan);
  for (int64_t uid : p.scalars) {
    void *value = uid == kScale    ? static_cast<void *>(&p.scale)
                  : uid == kNegInf ? static_cast<void *>(&p.negInf)
                  : uid == kOne    ? static_cast<void *>(&p.one)
                  : uid == kKvLen  ? static_cast<void *>(&p.kvLen)
                  : uid == kLeftBound ? static_cast<void *>(&p.leftBound)
                                   : static_cast<void *>(&p.qLen);
    tensors.push_back({uid, value});
  }
  std::vector<int64_t> uids;
  std::vector<void *> pointers;
  for (auto &[uid, ptr] : tensors) {
    uids.push_back(uid);
    pointers.push_back(ptr);
  }
  if (api().setStream(handle, stream) != CUDNN_STATUS_SUCCESS)
    return llvm::createStringError(std::errc::io_error, "cudnnSetStream failed");
  Desc pack = nullptr;
  cudnnStatus_t st = api().createDesc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (st == CUDNN_STATUS_SUCCESS)
    st = api().setAttr(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()),
                       uids.data());
  if (st == CUDNN_STATUS_SUCCESS)
    st = api().setAttr(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                       int64_t(pointers.size()), pointers.data());
  if (st == CUDNN_STATUS_SUCCESS)
    st = api().setAttr(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (st == CUDNN_STATUS_SUCCESS)
    st = api().finalize(pack);
  if (st == CUDNN_STATUS_SUCCESS)
    st = api().execute(handle, p.plan, pack);
  if (pack)
    api().destroyDesc(pack);
  if (st != CUDNN_STATUS_SUCCESS) {
    char detail[512] = {0};
    api().lastErrorString(detail, sizeof(detail));
    return llvm::createStringError(std::errc::io_error, "cudnnBackendExecute: %s %s",
                                   api().errorString(st), static_cast<const char *>(detail));
  }
  return llvm::Error::success();
}

size_t roundUp(size_t n) { return (n + 255) / 256 * 256; }

/// Scratch from the stream-ordered pool, released (stream-ordered) when done.
class Scratch {
public:
  explicit Scratch(cudaStream_t stream) : stream(stream) {}
  ~Scratch() {
    if (base)
      (void)cudaFreeAsync(base, stream);
  }
  llvm::Error allocate(size_t bytes) {
    if (bytes == 0)
      return llvm::Error::success();
    cudaError_t st = cudaMallocAsync(&base, bytes, stream);
    if (st != cudaSuccess) {
      base = nullptr;
      return llvm::createStringError(std::errc::not_enough_memory,
                                     "cudaMallocAsync (cuDNN attention scratch, %zu bytes): %s",
                                     bytes, cudaGetErrorString(st));
    }
    return llvm::Error::success();
  }
  char *at(size_t offset) const { return base ? static_cast<char *>(base) + offset : nullptr; }

private:
  cudaStream_t stream;
  void *base = nullptr;
};

/// Why cuDNN is not used for this problem (empty: it is, as far as the
/// shape rules go; engines may still decline).
std::string unsupportedReason(const CudnnAttnArgs &a) {
  if (a.batch <= 0 || a.qHeads <= 0 || a.seq <= 0 || a.kvSeq <= 0)
    return "an empty problem";
  if (a.kvHeads <= 0 || a.qHeads % a.kvHeads != 0)
    return "query heads not a multiple of key/value heads";
  if (a.headDim % 8 != 0 || a.valueDim % 8 != 0 || a.headDim > 256 || a.valueDim > 256)
    return "head dims must be multiples of 8, at most 256";
  if (a.causal && a.seq > a.kvSeq)
    return "causal with more queries than keys (rows with no key)";
  if (a.window > 0 && !a.causal)
    return "a sliding window without causal";
  if (a.seq > INT32_MAX || a.kvSeq > INT32_MAX)
    return "sequence too long";
  for (const void *p : std::initializer_list<const void *>{a.q, a.k, a.v, a.out, a.dout, a.dq,
                                                            a.dk, a.dv, a.lse})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      return "operands not 16-byte aligned";
  return "";
}

/// Common gate: whether to try cuDNN at all (false: the caller falls back).
llvm::Expected<bool> shouldTry(DType dtype, const CudnnAttnArgs &a) {
  if (dtype != DType::BF16 && dtype != DType::F16)
    return false;
  AttentionPath path = attentionPath();
  if (path == AttentionPath::Loom)
    return false;
  if (!api().ok) {
    if (path == AttentionPath::Cudnn)
      return llvm::createStringError(std::errc::not_supported, "LOOM_ATTENTION=cudnn, but %s",
                                     api().description.c_str());
    reportUnavailableOnce(api().description);
    return false;
  }
  std::string why = unsupportedReason(a);
  if (!why.empty()) {
    if (path == AttentionPath::Cudnn)
      return llvm::createStringError(std::errc::not_supported,
                                     "LOOM_ATTENTION=cudnn, but cuDNN attention does not take %s",
                                     why.c_str());
    return false;
  }
  return true;
}

PlanKey makeKey(int device, DType dtype, bool backward, const CudnnAttnArgs &a) {
  PlanKey k{};
  k.device = device;
  k.dtype = dtype;
  k.backward = backward;
  k.b = a.batch;
  k.hq = a.qHeads;
  k.hkv = a.kvHeads;
  k.s = a.seq;
  k.skv = a.kvSeq;
  k.d = a.headDim;
  k.dv = a.valueDim;
  k.causal = a.causal;
  // A window as long as the keys hides none of them.
  k.window = a.window > 0 && a.window < a.kvSeq ? a.window : 0;
  std::memcpy(&k.scaleBits, &a.scale, sizeof a.scale);
  auto strides = [](const CudnnAttnLayout &l) { return std::array<int64_t, 3>{l.batch, l.head, l.row}; };
  k.layouts[kOpQ] = strides(a.qLayout);
  k.layouts[kOpK] = strides(a.kLayout);
  k.layouts[kOpV] = strides(a.vLayout);
  k.layouts[kOpO] = strides(a.outLayout);
  // A forward graph has no gradients: leaving their layouts out of its key
  // lets nn.attention and a backward's recomputed forward share a plan.
  if (backward) {
    k.layouts[kOpDO] = strides(a.doutLayout);
    k.layouts[kOpDQ] = strides(a.dqLayout);
    k.layouts[kOpDK] = strides(a.dkLayout);
    k.layouts[kOpDV] = strides(a.dvLayout);
  }
  return k;
}

llvm::Error declined(const Plan &plan) {
  return llvm::createStringError(std::errc::not_supported,
                                 "LOOM_ATTENTION=cudnn, but cuDNN cannot run it: %s",
                                 plan.error.c_str());
}

} // namespace

bool cudnnAvailable(std::string *why) {
  if (why)
    *why = api().description;
  return api().ok;
}

llvm::Expected<bool> cudnnAttentionForward(DType dtype, const CudnnAttnArgs &a,
                                           cudaStream_t stream) {
  CudnnAttnArgs fa = a;
  fa.dout = fa.dq = fa.dk = fa.dv = nullptr;
  auto go = shouldTry(dtype, fa);
  if (!go || !*go)
    return go;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return false;
  auto planOr = getPlan(makeKey(device, dtype, false, a), stream);
  if (!planOr)
    return planOr.takeError();
  const Plan &plan = **planOr;
  if (!plan.plan) {
    if (attentionPath() == AttentionPath::Cudnn)
      return declined(plan);
    return false;
  }
  // The statistics go to the caller's lse (nn.attention_with_stats) or to
  // scratch (nn.attention: the graph computes them either way).
  const size_t statsBytes =
      a.lse ? 0 : roundUp(size_t(a.batch * a.qHeads * a.seq) * sizeof(float));
  Scratch scratch(stream);
  if (llvm::Error err = scratch.allocate(statsBytes + roundUp(size_t(plan.workspace))))
    return std::move(err);
  DeviceState *state = cantFail(deviceState(device));
  void *stats = a.lse ? static_cast<void *>(a.lse) : scratch.at(0);
  if (llvm::Error err = execute(plan, state->handle, stream,
                                {{kQ, const_cast<void *>(a.q)},
                                 {kK, const_cast<void *>(a.k)},
                                 {kV, const_cast<void *>(a.v)},
                                 {kO, a.out},
                                 {kStats, stats}},
                                scratch.at(statsBytes)))
    return std::move(err);
  return true;
}

llvm::Expected<bool> cudnnAttentionBackward(DType dtype, const CudnnAttnArgs &a,
                                            cudaStream_t stream) {
  auto go = shouldTry(dtype, a);
  if (!go || !*go)
    return go;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return false;
  // With the forward's saved out and lse the backward graph runs alone;
  // without them the forward graph recomputes both into scratch first. The
  // recomputed O takes dO's layout (the backward reads the two side by side
  // for Dsum = rowsum(dO * O)); it is as large in either layout.
  const bool saved = a.lse != nullptr && a.out != nullptr;
  CudnnAttnArgs ba = a;
  if (!saved)
    ba.outLayout = a.doutLayout;
  const Plan *fwd = nullptr;
  if (!saved) {
    auto fwdOr = getPlan(makeKey(device, dtype, false, ba), stream);
    if (!fwdOr)
      return fwdOr.takeError();
    fwd = *fwdOr;
  }
  auto bwdOr = getPlan(makeKey(device, dtype, true, ba), stream);
  if (!bwdOr)
    return bwdOr.takeError();
  const Plan &bwd = **bwdOr;
  if ((fwd && !fwd->plan) || !bwd.plan) {
    if (attentionPath() == AttentionPath::Cudnn)
      return declined(fwd && !fwd->plan ? *fwd : bwd);
    return false;
  }
  const size_t rows = size_t(a.batch * a.qHeads * a.seq);
  const size_t elem = 2; // bf16 / f16
  // Scratch: O and Stats (recomputed; none when saved), Dsum, the dQ
  // accumulator, then the larger of the plans' workspaces.
  const size_t oBytes = saved ? 0 : roundUp(rows * size_t(a.valueDim) * elem);
  const size_t rowBytes = roundUp(rows * sizeof(float));
  const size_t statsBytes = saved ? 0 : rowBytes;
  const size_t accBytes = roundUp(rows * size_t(a.headDim) * sizeof(float));
  const size_t wsBytes =
      roundUp(size_t(std::max(fwd ? fwd->workspace : int64_t(0), bwd.workspace)));
  Scratch scratch(stream);
  if (llvm::Error err = scratch.allocate(oBytes + statsBytes + rowBytes + accBytes + wsBytes))
    return std::move(err);
  void *o = saved ? a.out : scratch.at(0);
  void *stats = saved ? static_cast<void *>(a.lse) : scratch.at(oBytes);
  void *dsum = scratch.at(oBytes + statsBytes);
  void *acc = scratch.at(oBytes + statsBytes + rowBytes);
  void *ws = scratch.at(oBytes + statsBytes + rowBytes + accBytes);
  DeviceState *state = cantFail(deviceState(device));
  void *q = const_cast<void *>(a.q), *k = const_cast<void *>(a.k), *v = const_cast<void *>(a.v);
  // cuDNN before 9.6 leaves zeroing the dQ accumulator to its caller.
  if (api().version < 90600)
    if (cudaError_t st = cudaMemsetAsync(acc, 0, accBytes, stream); st != cudaSuccess)
      return llvm::createStringError(std::errc::io_error, "cudaMemsetAsync: %s", cudaGetErrorString(st));
  if (fwd)
    if (llvm::Error err = execute(*fwd, state->handle, stream,
                                  {{kQ, q}, {kK, k}, {kV, v}, {kO, o}, {kStats, stats}}, ws))
      return std::move(err);
  if (llvm::Error err = execute(bwd, state->handle, stream,
                                {{kQ, q},
                                 {kK, k},
                                 {kV, v},
                                 {kO, o},
                                 {kDO, const_cast<void *>(a.dout)},
                                 {kStats, stats},
                                 {kDQ, a.dq},
                                 {kDK, a.dk},
                                 {kDV, a.dv},
                                 {kDsum, dsum},
                                 {kDQAcc, acc}},
                                ws))
    return std::move(err);
  return true;
}

#endif // LOOM_HAVE_CUDNN_HEADERS

} // namespace loom::cuda
