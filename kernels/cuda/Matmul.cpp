// nn.matmul through cuBLASLt: row-major operands with optional transposes
// and broadcast batch dims, f32/bf16/f16 with f32 accumulation (no TF32, so
// f32 results stay within f32 rounding of the CPU reference), with the bias
// and GELU epilogues fused by cuBLASLt. nn.scaled_matmul: FP8 operands with
// their scales (cuBLASLt's A/B scale pointers and modes: scalar, outer
// vector, VEC128, BLK128x128). Algorithms are chosen
// by cuBLASLt's heuristic once per shape and cached.

#include "kernels/cuda/CudaKernels.h"

#include "kernels/cpu/KernelSupport.h"
#include "kernels/cpu/OperandChecks.h"
#include "runtime/abi/Fp8Tiling.h"

#include <map>
#include <mutex>
#include <tuple>

namespace loom::cuda {
namespace {

using cpu::Tensor;

llvm::Error lastError(cublasStatus_t status, const char *what) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return llvm::Error::success();
  return llvm::createStringError(std::errc::io_error, "%s failed: %s", what,
                                 cublasLtGetStatusString(status));
}

std::optional<cudaDataType_t> cudaTypeOf(DType t) {
  switch (t) {
  case DType::F32: return CUDA_R_32F;
  case DType::BF16: return CUDA_R_16BF;
  case DType::F16: return CUDA_R_16F;
  case DType::F8E4M3FN: return CUDA_R_8F_E4M3;
  case DType::F8E5M2: return CUDA_R_8F_E5M2;
  default: return std::nullopt;
  }
}

/// One GEMM in cuBLASLt's column-major terms: C[n x m] = op(A)[n x k] op(B)[k x m].
struct GemmShape {
  cudaDataType_t type;                 // C's; A's and B's unless given below
  std::optional<cudaDataType_t> typeA, typeB;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool scaled = false;                 // A/B scale pointers (FP8)
  int scaleModeA = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int scaleModeB = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  bool transA, transB;
  int64_t n, m, k, lda, ldb, ldc;
  int64_t batch, strideA, strideB, strideC;
  auto key() const {
    return std::tie(type, typeA, typeB, epilogue, scaled, scaleModeA, scaleModeB, transA, transB,
                    n, m, k, lda, ldb, ldc, batch, strideA, strideB, strideC);
  }
  bool operator<(const GemmShape &o) const { return key() < o.key(); }
};

/// The workspace cuBLASLt may use for a GEMM: all of it, or for an FP8 GEMM
/// with tiled scales the first half (the second holds the scales as
/// cuBLASLt reads them).
size_t gemmWorkspace(const GemmShape &s, const LaunchContext &ctx) {
  const bool tiled = s.scaled && (s.scaleModeA != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
                                  s.scaleModeB != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
  return tiled ? ctx.workspaceBytes / 2 / 256 * 256 : ctx.workspaceBytes;
}

/// Descriptors and the chosen algorithm for one shape.
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

llvm::Expected<const GemmPlan *> planFor(const GemmShape &s, const LaunchContext &ctx) {
  static std::mutex mutex;
  static std::map<std::pair<cublasLtHandle_t, GemmShape>, GemmPlan> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(ctx.cublasLt, s);
  auto it = cache.find(key);
  if (it != cache.end())
    return &it->second;
  GemmPlan plan;
  cublasOperation_t opA = s.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = s.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (auto err = lastError(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                           "cublasLtMatmulDescCreate"))
    return std::move(err);
  cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA));
  cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB));
  if (s.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &s.epilogue,
                                   sizeof(s.epilogue));
    cudaDataType_t biasType = s.type;
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &biasType,
                                   sizeof(biasType));
  }
  if (s.scaled) {
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &s.scaleModeA,
                                   sizeof(s.scaleModeA));
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &s.scaleModeB,
                                   sizeof(s.scaleModeB));
    // The heuristic wants scale pointers for the non-scalar modes; each
    // launch sets the real ones.
    const void *placeholder = ctx.workspace;
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder,
                                   sizeof(placeholder));
    cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder,
                                   sizeof(placeholder));
  }
  // Stored shapes (column-major rows x cols) of A, B and C.
  int64_t aRows = s.transA ? s.k : s.n, aCols = s.transA ? s.n : s.k;
  int64_t bRows = s.transB ? s.m : s.k, bCols = s.transB ? s.k : s.m;
  auto layout = [&](cublasLtMatrixLayout_t *l, cudaDataType_t type, int64_t rows, int64_t cols,
                    int64_t ld, int64_t stride) -> llvm::Error {
    if (auto err = lastError(cublasLtMatrixLayoutCreate(l, type, rows, cols, ld),
                             "cublasLtMatrixLayoutCreate"))
      return err;
    if (s.batch > 1) {
      int32_t count = static_cast<int32_t>(s.batch);
      cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                       sizeof(count));
      cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                       &stride, sizeof(stride));
    }
    return llvm::Error::success();
  };
  if (auto err = layout(&plan.a, s.typeA.value_or(s.type), aRows, aCols, s.lda, s.strideA))
    return std::move(err);
  if (auto err = layout(&plan.b, s.typeB.value_or(s.type), bRows, bCols, s.ldb, s.strideB))
    return std::move(err);
  if (auto err = layout(&plan.c, s.type, s.n, s.m, s.ldc, s.strideC))
    return std::move(err);
  cublasLtMatmulPreference_t preference;
  cublasLtMatmulPreferenceCreate(&preference);
  size_t workspace = gemmWorkspace(s, ctx);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace, sizeof(workspace));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      ctx.cublasLt, plan.desc, plan.a, plan.b, plan.c, plan.c, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0)
    return llvm::createStringError(std::errc::not_supported,
                                   "cuBLASLt has no algorithm for this GEMM (%s)",
                                   cublasLtGetStatusString(status));
  plan.algo = result.algo;
  return &cache.emplace(key, plan).first->second;
}

llvm::Error launchMatmul(const KernelCall &call) {
  const Tensor &lhs = call.inputs[0], &rhs = call.inputs[1];
  const Tensor &out = call.outputs[0];
  if (lhs.shape.size() < 2 || rhs.shape.size() < 2)
    return cpu::detail::kernelError("operands must have rank >= 2");
  if (auto err = cpu::detail::checkMatmulDTypes(lhs, rhs, out))
    return err;
  std::optional<cudaDataType_t> type = cudaTypeOf(lhs.dtype);
  if (!type)
    return cpu::detail::kernelError("unsupported dtype " + llvm::Twine(dtypeName(lhs.dtype).data()) +
                                    " (f32, bf16, f16)");
  LOOM_ASSIGN_OR_RETURN(bool transA, call.attrs.getBool("transpose_lhs", false));
  LOOM_ASSIGN_OR_RETURN(bool transB, call.attrs.getBool("transpose_rhs", false));
  LOOM_ASSIGN_OR_RETURN(std::string epilogueName, call.attrs.getStr("epilogue", "none"));
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (epilogueName == "bias")
    epilogue = CUBLASLT_EPILOGUE_BIAS;
  else if (epilogueName == "gelu")
    epilogue = CUBLASLT_EPILOGUE_GELU;
  else if (epilogueName == "bias_gelu")
    epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  else if (epilogueName != "none" && epilogueName != "add")
    return cpu::detail::kernelError("unknown epilogue '" + epilogueName +
                                    "' (none, bias, gelu, bias_gelu, add)");
  const bool hasBias = epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
  // "add": the third operand is C, added with beta = 1 (one rounding).
  const bool hasAddend = epilogueName == "add";
  if ((hasBias || hasAddend) != (call.inputs.size() == 3))
    return cpu::detail::kernelError(
        hasBias     ? "epilogue '" + epilogueName + "' needs a bias operand"
        : hasAddend ? std::string("epilogue 'add' needs the operand to add")
                    : std::string("a third operand needs a bias or add epilogue"));
  if (hasAddend && (call.inputs[2].dtype != out.dtype || call.inputs[2].shape != out.shape))
    return cpu::detail::kernelError("the addend must have the result's shape " +
                                    cpu::detail::shapeToString(out.shape) + " and dtype");
  const char *addend = hasAddend ? static_cast<const char *>(call.inputs[2].data) : nullptr;
  if (hasBias && (call.inputs[2].dtype != out.dtype || call.inputs[2].shape.size() != 1 ||
                  call.inputs[2].shape[0] != out.shape.back()))
    return cpu::detail::kernelError("bias must be [" + llvm::Twine(out.shape.back()) +
                                    "] of the result's dtype");
  const void *biasData = hasBias ? call.inputs[2].data : nullptr;
  size_t lr = lhs.shape.size(), rr = rhs.shape.size();
  int64_t m = transA ? lhs.shape[lr - 1] : lhs.shape[lr - 2];
  int64_t k = transA ? lhs.shape[lr - 2] : lhs.shape[lr - 1];
  int64_t k2 = transB ? rhs.shape[rr - 1] : rhs.shape[rr - 2];
  int64_t n = transB ? rhs.shape[rr - 2] : rhs.shape[rr - 1];
  if (k != k2)
    return cpu::detail::kernelError("contraction sizes differ: " + llvm::Twine(k) + " and " +
                                    llvm::Twine(k2));
  std::vector<int64_t> lb(lhs.shape.begin(), lhs.shape.end() - 2);
  std::vector<int64_t> rb(rhs.shape.begin(), rhs.shape.end() - 2);
  std::vector<int64_t> ob(out.shape.begin(), out.shape.end() - 2);
  if (out.shape.size() < 2 || out.shape[out.shape.size() - 2] != m || out.shape.back() != n)
    return cpu::detail::kernelError("result shape " + cpu::detail::shapeToString(out.shape) +
                                    " does not match the operands");
  int64_t batch = cpu::detail::product(ob);
  int64_t lhsBatch = cpu::detail::product(lb), rhsBatch = cpu::detail::product(rb);
  size_t elem = dtypeSize(lhs.dtype);
  float alpha = 1.0f, beta = hasAddend ? 1.0f : 0.0f;
  if (k == 0) {
    // No products (a contraction over an empty dim, which cuBLASLt has no
    // algorithm for): the result is the addend, or zeros.
    if (hasBias || epilogue == CUBLASLT_EPILOGUE_GELU)
      return cpu::detail::kernelError("epilogue '" + epilogueName +
                                      "' over an empty contraction (K = 0)");
    size_t bytes = size_t(cpu::detail::product(out.shape)) * dtypeSize(out.dtype);
    if (bytes == 0)
      return llvm::Error::success();
    return addend ? cudaError(cudaMemcpyAsync(out.data, addend, bytes, cudaMemcpyDeviceToDevice,
                                              call.ctx.stream),
                              "cudaMemcpyAsync")
                  : cudaError(cudaMemsetAsync(out.data, 0, bytes, call.ctx.stream),
                              "cudaMemsetAsync");
  }

  // D = A B (+ C, the addend at D's offset).
  auto run = [&](const GemmShape &shape, const void *a, const void *b, void *c) -> llvm::Error {
    const void *cIn = c;
    if (addend)
      cIn = addend + (static_cast<const char *>(c) - static_cast<const char *>(out.data));
    auto plan = planFor(shape, call.ctx);
    if (!plan)
      return plan.takeError();
    if (biasData)
      cublasLtMatmulDescSetAttribute((*plan)->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &biasData,
                                     sizeof(biasData));
    return lastError(cublasLtMatmul(call.ctx.cublasLt, (*plan)->desc, &alpha, a, (*plan)->a, b,
                                    (*plan)->b, &beta, cIn, (*plan)->c, c, (*plan)->c,
                                    &(*plan)->algo, call.ctx.workspace, call.ctx.workspaceBytes,
                                    call.ctx.stream),
                     "cublasLtMatmul");
  };
  // Row-major C = op(L) op(R) is column-major C^T = op(R)^T op(L)^T: cuBLASLt's
  // A is our rhs, its B our lhs.
  GemmShape s;
  s.type = *cudaTypeOf(out.dtype);
  if (out.dtype != lhs.dtype)
    s.typeA = s.typeB = *type; // bf16/f16 operands, f32 result
  s.epilogue = epilogue;
  s.transA = transB;
  s.transB = transA;
  s.n = n;
  s.k = k;
  s.lda = transB ? k : n;
  s.ldb = transA ? m : k;
  s.ldc = n;
  if (rhsBatch == 1 && !transA) {
    // A shared weight: every batch of the lhs is more rows of one GEMM.
    s.m = m * lhsBatch;
    s.batch = 1;
    s.strideA = s.strideB = s.strideC = 0;
    if (lhsBatch != batch)
      return cpu::detail::kernelError("unexpected batch broadcast");
    return run(s, rhs.data, lhs.data, out.data);
  }
  s.m = m;
  bool lhsFull = lhsBatch == batch, rhsFull = rhsBatch == batch;
  if ((lhsFull || lhsBatch == 1) && (rhsFull || rhsBatch == 1) &&
      (lb.empty() || lhsBatch == 1 || lb == ob) && (rb.empty() || rhsBatch == 1 || rb == ob)) {
    s.batch = batch;
    s.strideA = rhsBatch == 1 ? 0 : k * n;
    s.strideB = lhsBatch == 1 ? 0 : m * k;
    s.strideC = m * n;
    return run(s, rhs.data, lhs.data, out.data);
  }
  // General broadcasting: one GEMM per output batch.
  s.batch = 1;
  s.strideA = s.strideB = s.strideC = 0;
  std::vector<int64_t> lbs = cpu::detail::contiguousStrides(lb);
  std::vector<int64_t> rbs = cpu::detail::contiguousStrides(rb);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t rem = i, lOff = 0, rOff = 0;
    for (int64_t d = static_cast<int64_t>(ob.size()) - 1; d >= 0; --d) {
      int64_t idx = rem % ob[d];
      rem /= ob[d];
      int64_t ld = d - (int64_t(ob.size()) - int64_t(lb.size()));
      int64_t rd = d - (int64_t(ob.size()) - int64_t(rb.size()));
      if (ld >= 0 && lb[ld] != 1)
        lOff += idx * lbs[ld];
      if (rd >= 0 && rb[rd] != 1)
        rOff += idx * rbs[rd];
    }
    const char *a = static_cast<const char *>(rhs.data) + rOff * k * n * elem;
    const char *b = static_cast<const char *>(lhs.data) + lOff * m * k * elem;
    char *c = static_cast<char *>(out.data) + i * m * n * dtypeSize(out.dtype);
    if (auto err = run(s, a, b, c))
      return err;
  }
  return llvm::Error::success();
}

} // namespace

llvm::Error gemmRowMajor(const LaunchContext &ctx, DType in, DType out, const void *a, bool transA,
                         const void *b, bool transB, void *c, int64_t m, int64_t n, int64_t k,
                         bool accumulate) {
  std::optional<cudaDataType_t> inType = cudaTypeOf(in), outType = cudaTypeOf(out);
  if (!inType || !outType)
    return cpu::detail::kernelError("GEMM types " + llvm::Twine(dtypeName(in).data()) + " -> " +
                                    dtypeName(out).data() + " are not f32, bf16 or f16");
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  GemmShape s;
  s.type = *outType;
  if (out != in)
    s.typeA = s.typeB = *inType;
  s.transA = transB;
  s.transB = transA;
  s.n = n;
  s.m = m;
  s.k = k;
  s.lda = transB ? k : n;
  s.ldb = transA ? m : k;
  s.ldc = n;
  s.batch = 1;
  s.strideA = s.strideB = s.strideC = 0;
  LOOM_ASSIGN_OR_RETURN(const GemmPlan *plan, planFor(s, ctx));
  float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  return lastError(cublasLtMatmul(ctx.cublasLt, plan->desc, &alpha, b, plan->a, a, plan->b, &beta,
                                  c, plan->c, c, plan->c, &plan->algo, ctx.workspace,
                                  ctx.workspaceBytes, ctx.stream),
                   "cublasLtMatmul");
}

namespace {

/// An FP8 operand [rows, k]'s scales as cuBLASLt will read them.
struct OperandScales {
  int64_t scaleRows = 1, scaleCols = 1, rowTile; // the tiling (rank 0: one tile)
  bool scalar = true, kTiled = false;
  bool blockRows = true; // constant over every 128 rows: BLK128x128 can hold it
  Fp8ScaleLayout layout = Fp8ScaleLayout::OuterVec;
  int64_t ld = 0, floats = 0;

  OperandScales(const Tensor &scale, int64_t rows) : rowTile(std::max<int64_t>(rows, 1)) {
    if (scale.shape.empty())
      return;
    scaleRows = scale.shape[0];
    scaleCols = scale.shape[1];
    scalar = scaleRows == 1 && scaleCols == 1;
    kTiled = scaleCols > 1;
    rowTile = fp8TileSize(rows, scaleRows);
    blockRows = scaleRows == 1 || rowTile >= kFp8Block;
  }
};

llvm::Error launchScaledMatmul(const KernelCall &call) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1];
  const Tensor &scaleA = call.inputs[2], &scaleB = call.inputs[3], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(cpu::detail::checkScaledMatmul(a, b, scaleA, scaleB, out));
  const int64_t m = a.shape[0], n = b.shape[0], k = a.shape[1];
  // FP8 tensor cores read 16-byte rows.
  if (k % 16 != 0 || n % 16 != 0)
    return cpu::detail::kernelError("FP8 GEMMs need K and N to be multiples of 16, got K = " +
                                    llvm::Twine(k) + ", N = " + llvm::Twine(n));
  // Column-major: C^T [n x m] = B' [n x k] A' [k x m], with B (our b, [N, K]
  // row-major) transposed and A (our a) not: the TN layout FP8 requires.
  // cuBLASLt's A is our b, its B our a.
  OperandScales sa(scaleA, m), sb(scaleB, n);
  const bool tiled = !(sa.scalar && sb.scalar);
  if (tiled) {
    if (sa.kTiled || sb.kTiled) {
      // Tiles along K are 128 elements (the last ragged): cuBLASLt's
      // VEC128 for a tile per row, BLK128x128 for a tile per 128 rows (at
      // most one operand; the other, our a, per row).
      const int64_t kt = std::max(sa.scaleCols, sb.scaleCols);
      if (fp8TileSize(k, kt) != kFp8Block)
        return cpu::detail::kernelError(
            "an FP8 GEMM's scales along K must be 1 x 128 tiles or 128 x 128 blocks on CUDA; got " +
            llvm::Twine(kt) + " tiles of K = " + llvm::Twine(k));
      sb.layout = sb.blockRows ? Fp8ScaleLayout::Blk128 : Fp8ScaleLayout::Vec128;
      sa.layout = sa.blockRows && sb.layout != Fp8ScaleLayout::Blk128 ? Fp8ScaleLayout::Blk128
                                                                      : Fp8ScaleLayout::Vec128;
    }
    auto size = [&](OperandScales &o, int64_t rows) {
      switch (o.layout) {
      case Fp8ScaleLayout::OuterVec:
        o.ld = rows;
        o.floats = rows;
        break;
      case Fp8ScaleLayout::Vec128:
        o.ld = (rows + 3) / 4 * 4;
        o.floats = o.ld * fp8Tiles(k, kFp8Block);
        break;
      case Fp8ScaleLayout::Blk128:
        o.ld = (fp8Tiles(k, kFp8Block) + 3) / 4 * 4;
        o.floats = o.ld * fp8Tiles(rows, kFp8Block);
        break;
      }
    };
    size(sa, m);
    size(sb, n);
    if (sa.layout == Fp8ScaleLayout::Vec128 && m % 4 != 0)
      return cpu::detail::kernelError("a 1 x 128-tiled FP8 operand needs a multiple of 4 rows on "
                                      "CUDA, got " + llvm::Twine(m));
  }
  auto modeOf = [&](const OperandScales &o) -> int {
    if (!tiled)
      return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    switch (o.layout) {
    case Fp8ScaleLayout::OuterVec: return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case Fp8ScaleLayout::Vec128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case Fp8ScaleLayout::Blk128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    }
    return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  };
  GemmShape s;
  s.type = *cudaTypeOf(out.dtype);
  s.typeA = *cudaTypeOf(b.dtype);
  s.typeB = *cudaTypeOf(a.dtype);
  s.scaled = true;
  s.scaleModeA = modeOf(sb);
  s.scaleModeB = modeOf(sa);
  s.transA = true;
  s.transB = false;
  s.n = n;
  s.m = m;
  s.k = k;
  s.lda = k;
  s.ldb = k;
  s.ldc = n;
  s.batch = 1;
  s.strideA = s.strideB = s.strideC = 0;
  auto plan = planFor(s, call.ctx);
  if (!plan)
    return plan.takeError();
  const void *aScale = scaleB.data, *bScale = scaleA.data;
  const size_t workspace = gemmWorkspace(s, call.ctx);
  if (tiled) {
    // The scales as cuBLASLt reads them, in the workspace's second half.
    float *dst = reinterpret_cast<float *>(static_cast<char *>(call.ctx.workspace) + workspace);
    const size_t floats = size_t((sa.floats + 63) / 64 * 64 + sb.floats);
    if (floats * sizeof(float) > call.ctx.workspaceBytes - workspace)
      return cpu::detail::kernelError("an FP8 GEMM's scales (" + llvm::Twine(floats) +
                                      " floats) exceed the GEMM workspace");
    float *dstA = dst, *dstB = dst + (sa.floats + 63) / 64 * 64;
    LOOM_RETURN_IF_ERROR(writeFp8Scales(call.ctx, static_cast<const float *>(scaleA.data),
                                        sa.scaleCols, sa.rowTile, m, k, sa.layout,
                                        dstA, sa.ld));
    LOOM_RETURN_IF_ERROR(writeFp8Scales(call.ctx, static_cast<const float *>(scaleB.data),
                                        sb.scaleCols, sb.rowTile, n, k, sb.layout,
                                        dstB, sb.ld));
    aScale = dstB;
    bScale = dstA;
  }
  cublasLtMatmulDescSetAttribute((*plan)->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &aScale,
                                 sizeof(aScale));
  cublasLtMatmulDescSetAttribute((*plan)->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &bScale,
                                 sizeof(bScale));
  float alpha = 1.0f, beta = 0.0f;
  return lastError(cublasLtMatmul(call.ctx.cublasLt, (*plan)->desc, &alpha, b.data, (*plan)->a,
                                  a.data, (*plan)->b, &beta, out.data, (*plan)->c, out.data,
                                  (*plan)->c, &(*plan)->algo, call.ctx.workspace, workspace,
                                  call.ctx.stream),
                   "cublasLtMatmul (FP8)");
}

} // namespace

void registerMatmulKernels(KernelRegistry &registry) {
  registry.add(KernelId::Matmul, launchMatmul);
  registry.add(KernelId::ScaledMatmul, launchScaledMatmul);
}

} // namespace loom::cuda
