// nn.matmul: batched, broadcasting, optional transposes; blocked for cache
// and register reuse, threaded over output tiles.
//
// Every output element is accumulated from zero in increasing k, in the
// compute type, whatever tile or thread computes it: the tiling only decides
// which elements are computed together, so results do not depend on the
// thread count.

#include "kernels/cpu/KernelSupport.h"
#include "runtime/abi/Fp8Tiling.h"

#include <algorithm>

namespace loom::cpu::detail {

namespace {

// Output tile a task computes, and the k block kept hot in cache.
constexpr int64_t kTileRows = 64;
constexpr int64_t kTileCols = 64;
constexpr int64_t kBlockK = 512;
// Register block: kMicroRows x kMicroCols accumulators.
constexpr int kMicroRows = 4;
constexpr int kMicroCols = 16;

/// C[r][j] (+)= sum_k A[r][k] * B[k][j] for a full register block.
template <typename T>
void microKernel(const T *a, int64_t lda, const T *b, int64_t ldb, T *c,
                 int64_t ldc, int64_t kBegin, int64_t kEnd) {
  T acc[kMicroRows][kMicroCols];
  for (int r = 0; r < kMicroRows; ++r)
    for (int j = 0; j < kMicroCols; ++j)
      acc[r][j] = c[r * ldc + j];
  for (int64_t k = kBegin; k < kEnd; ++k) {
    const T *bRow = b + k * ldb;
    for (int r = 0; r < kMicroRows; ++r) {
      const T aValue = a[r * lda + k];
      for (int j = 0; j < kMicroCols; ++j)
        acc[r][j] += aValue * bRow[j];
    }
  }
  for (int r = 0; r < kMicroRows; ++r)
    for (int j = 0; j < kMicroCols; ++j)
      c[r * ldc + j] = acc[r][j];
}

/// The same arithmetic for a partial block at the tile's edge.
template <typename T>
void edgeKernel(const T *a, int64_t lda, const T *b, int64_t ldb, T *c,
                int64_t ldc, int64_t rows, int64_t cols, int64_t kBegin,
                int64_t kEnd) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      T acc = c[r * ldc + j];
      for (int64_t k = kBegin; k < kEnd; ++k)
        acc += a[r * lda + k] * b[k * ldb + j];
      c[r * ldc + j] = acc;
    }
  }
}

/// One output tile: rows [i0, i1), cols [j0, j1) of C = A B with A [M, K]
/// and B [K, N] row-major.
template <typename T>
void computeTile(const T *a, const T *b, T *c, int64_t n, int64_t k,
                 int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t i = i0; i < i1; ++i)
    std::fill(c + i * n + j0, c + i * n + j1, T(0));
  for (int64_t kb = 0; kb < k; kb += kBlockK) {
    const int64_t kEnd = std::min(k, kb + kBlockK);
    for (int64_t j = j0; j < j1; j += kMicroCols) {
      const int64_t cols = std::min<int64_t>(kMicroCols, j1 - j);
      for (int64_t i = i0; i < i1; i += kMicroRows) {
        const int64_t rows = std::min<int64_t>(kMicroRows, i1 - i);
        if (rows == kMicroRows && cols == kMicroCols)
          microKernel(a + i * k, k, b + j, n, c + i * n + j, n, kb, kEnd);
        else
          edgeKernel(a + i * k, k, b + j, n, c + i * n + j, n, rows, cols, kb, kEnd);
      }
    }
  }
}

/// Copies matrix `index` of `tensor` (a stack of [rows, cols] matrices) into
/// `dst` as T, transposed when `transpose` (so dst is [cols, rows]).
template <typename T>
void packMatrix(const Tensor &tensor, int64_t index, int64_t rows, int64_t cols,
                bool transpose, T *dst) {
  const int64_t base = index * rows * cols;
  if (!transpose) {
    if constexpr (std::is_same_v<T, float>)
      loadFloats(tensor.data, tensor.dtype, base, rows * cols, dst);
    else
      loadDoubles(tensor.data, tensor.dtype, base, rows * cols, dst);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t col = 0; col < cols; ++col)
      dst[col * rows + r] = loadElement<T>(tensor.data, tensor.dtype, base + r * cols + col);
}

struct MatmulShape {
  int64_t m = 0, n = 0, k = 0;
  std::vector<int64_t> batchShape;              // the output's batch dims
  std::vector<int64_t> aBatchStride, bBatchStride; // in matrices, per batch dim
  int64_t aMatrices = 0, bMatrices = 0, batches = 0;
};

llvm::Expected<MatmulShape> inferShape(const Tensor &a, const Tensor &b,
                                       const Tensor &out, bool transA, bool transB) {
  const size_t aRank = a.shape.size(), bRank = b.shape.size();
  if (aRank < 2 || bRank < 2)
    return kernelError("operands must have rank >= 2, got lhs " +
                       shapeToString(a.shape) + " and rhs " + shapeToString(b.shape));
  MatmulShape shape;
  shape.m = transA ? a.shape[aRank - 1] : a.shape[aRank - 2];
  shape.k = transA ? a.shape[aRank - 2] : a.shape[aRank - 1];
  const int64_t kB = transB ? b.shape[bRank - 1] : b.shape[bRank - 2];
  shape.n = transB ? b.shape[bRank - 2] : b.shape[bRank - 1];
  if (shape.k != kB)
    return kernelError("contraction sizes differ: lhs " + shapeToString(a.shape) +
                       " gives K=" + llvm::Twine(shape.k) + ", rhs " +
                       shapeToString(b.shape) + " gives K=" + llvm::Twine(kB));
  const size_t outRank = std::max(aRank, bRank);
  llvm::ArrayRef<int64_t> aBatch(a.shape.data(), aRank - 2);
  llvm::ArrayRef<int64_t> bBatch(b.shape.data(), bRank - 2);
  std::vector<int64_t> expected(outRank, 1);
  for (size_t d = 0; d + 2 < outRank; ++d) {
    const int64_t aDim = d + aRank >= outRank ? aBatch[d + aRank - outRank] : 1;
    const int64_t bDim = d + bRank >= outRank ? bBatch[d + bRank - outRank] : 1;
    if (aDim != bDim && aDim != 1 && bDim != 1)
      return kernelError("batch dims of lhs " + shapeToString(a.shape) + " and rhs " +
                         shapeToString(b.shape) + " do not broadcast");
    expected[d] = aDim == 1 ? bDim : aDim;
  }
  expected[outRank - 2] = shape.m;
  expected[outRank - 1] = shape.n;
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  shape.batchShape.assign(expected.begin(), expected.end() - 2);
  LOOM_ASSIGN_OR_RETURN(shape.aBatchStride,
                        broadcastStrides(aBatch, shape.batchShape, "lhs batch"));
  LOOM_ASSIGN_OR_RETURN(shape.bBatchStride,
                        broadcastStrides(bBatch, shape.batchShape, "rhs batch"));
  shape.aMatrices = product(aBatch);
  shape.bMatrices = product(bBatch);
  shape.batches = product(shape.batchShape);
  return shape;
}

template <typename T>
void matmulAs(const KernelCall &call, const MatmulShape &shape, bool transA,
              bool transB) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.outputs[0];
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  // Pack each distinct operand matrix once, as row-major A [M, K], B [K, N].
  std::vector<T> packedA(shape.aMatrices * m * k), packedB(shape.bMatrices * k * n);
  parallelFor(call.ctx, shape.aMatrices, m * k, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      packMatrix(a, i, transA ? k : m, transA ? m : k, transA, packedA.data() + i * m * k);
  });
  parallelFor(call.ctx, shape.bMatrices, k * n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      packMatrix(b, i, transB ? n : k, transB ? k : n, transB, packedB.data() + i * k * n);
  });

  OutputArray<T> result(out);
  const int64_t rowTiles = (m + kTileRows - 1) / kTileRows;
  const int64_t colTiles = (n + kTileCols - 1) / kTileCols;
  const int64_t tilesPerBatch = rowTiles * colTiles;
  const int64_t tileCost = kTileRows * kTileCols * std::max<int64_t>(k, 1) * 2;
  parallelFor(call.ctx, shape.batches * tilesPerBatch, tileCost,
              [&](int64_t begin, int64_t end) {
                for (int64_t task = begin; task < end; ++task) {
                  const int64_t batch = task / tilesPerBatch;
                  const int64_t tile = task % tilesPerBatch;
                  // Which operand matrices this output batch reads.
                  int64_t aIndex = 0, bIndex = 0, rest = batch;
                  for (int64_t d = static_cast<int64_t>(shape.batchShape.size()) - 1;
                       d >= 0; --d) {
                    const int64_t idx = rest % shape.batchShape[d];
                    rest /= shape.batchShape[d];
                    aIndex += idx * shape.aBatchStride[d];
                    bIndex += idx * shape.bBatchStride[d];
                  }
                  const int64_t i0 = (tile / colTiles) * kTileRows;
                  const int64_t j0 = (tile % colTiles) * kTileCols;
                  computeTile(packedA.data() + aIndex * m * k,
                              packedB.data() + bIndex * k * n,
                              result.data() + batch * m * n, n, k, i0,
                              std::min(m, i0 + kTileRows), j0,
                              std::min(n, j0 + kTileCols));
                }
              });
  result.commit();
}

} // namespace

llvm::Error runMatmul(const KernelCall &call) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkMatmulDTypes(a, b, out));
  LOOM_ASSIGN_OR_RETURN(bool transA, call.attrs.getBool("transpose_lhs", false));
  LOOM_ASSIGN_OR_RETURN(bool transB, call.attrs.getBool("transpose_rhs", false));
  LOOM_ASSIGN_OR_RETURN(MatmulShape shape, inferShape(a, b, out, transA, transB));
  LOOM_ASSIGN_OR_RETURN(std::string epilogue, call.attrs.getStr("epilogue", "none"));
  const bool bias = epilogue == "bias" || epilogue == "bias_gelu";
  const bool gelu = epilogue == "gelu" || epilogue == "bias_gelu";
  const bool addend = epilogue == "add";
  if (!bias && !gelu && !addend && epilogue != "none")
    return kernelError("unknown epilogue '" + epilogue + "' (none, bias, gelu, bias_gelu, add)");
  if ((bias || addend) != (call.inputs.size() == 3))
    return kernelError(bias     ? "epilogue '" + epilogue + "' needs a bias operand"
                       : addend ? std::string("epilogue 'add' needs the operand to add")
                                : std::string("a third operand needs a bias or add epilogue"));
  if (addend) {
    const Tensor &c = call.inputs[2];
    LOOM_RETURN_IF_ERROR(checkSameDType(c, "addend", out, "output"));
    if (c.shape != out.shape)
      return kernelError("addend shape " + shapeToString(c.shape) + " should be the result's " +
                         shapeToString(out.shape));
  }
  if (bias) {
    const Tensor &biasT = call.inputs[2];
    LOOM_RETURN_IF_ERROR(checkSameDType(biasT, "bias", out, "output"));
    if (biasT.shape.size() != 1 || biasT.shape[0] != out.shape.back())
      return kernelError("bias shape " + shapeToString(biasT.shape) + " should be [" +
                         std::to_string(out.shape.back()) + "]");
  }
  LOOM_RETURN_IF_ERROR(dispatchFloat(out.dtype, "operands", [&](auto tag) {
    matmulAs<decltype(tag)>(call, shape, transA, transB);
    return llvm::Error::success();
  }));
  // The reference epilogue is the unfused kernels, in place on the result.
  if (bias || addend)
    LOOM_RETURN_IF_ERROR(runKernel("nn.add", {out, call.inputs[2]}, {out}, {}, call.ctx));
  if (gelu) {
    KernelAttrs tanh;
    tanh.set("approximate", std::string("tanh"));
    LOOM_RETURN_IF_ERROR(runKernel("nn.gelu", {out}, {out}, tanh, call.ctx));
  }
  return llvm::Error::success();
}

llvm::Error runScaledMatmul(const KernelCall &call) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1];
  const Tensor &scaleA = call.inputs[2], &scaleB = call.inputs[3], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkScaledMatmul(a, b, scaleA, scaleB, out));
  const int64_t m = a.shape[0], n = b.shape[0], k = a.shape[1];
  // f8 values and their products are exact in f32; each K tile's sum runs
  // in k order, then the tiles' scaled sums in tile order.
  std::vector<float> av(m * k), bv(n * k);
  for (int64_t i = 0; i < m * k; ++i)
    av[i] = static_cast<float>(loadAsDouble(a.data, a.dtype, i));
  for (int64_t i = 0; i < n * k; ++i)
    bv[i] = static_cast<float>(loadAsDouble(b.data, b.dtype, i));
  // A scale's tile of row `row` and K tile `t` (a tiling of [rows, K]).
  struct Scales {
    const float *data;
    int64_t kTiles = 1, rowSize;
    Scales(const Tensor &s, int64_t rows)
        : data(static_cast<const float *>(s.data)), rowSize(std::max<int64_t>(rows, 1)) {
      if (s.shape.empty())
        return;
      kTiles = s.shape[1];
      rowSize = fp8TileSize(rows, s.shape[0]);
    }
    float at(int64_t row, int64_t t) const {
      return data[(row / rowSize) * kTiles + (kTiles == 1 ? 0 : t)];
    }
  };
  const Scales sa(scaleA, m), sb(scaleB, n);
  const int64_t tiles = std::max(sa.kTiles, sb.kTiles);
  const int64_t tileK = fp8TileSize(k, tiles);
  parallelFor(call.ctx, m, n * k, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0;
        for (int64_t t = 0; t < tiles; ++t) {
          float part = 0;
          for (int64_t c = t * tileK, e = std::min(k, c + tileK); c < e; ++c)
            part += av[i * k + c] * bv[j * k + c];
          acc += part * (sa.at(i, t) * sb.at(j, t));
        }
        storeFromDouble(out.data, out.dtype, i * n + j, acc);
      }
  });
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
