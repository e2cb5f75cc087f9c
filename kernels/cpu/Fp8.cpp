// FP8 quantization (dialects/nn/NNFp8Ops.td): nn.quantize, nn.dequantize,
// nn.amax and nn.fp8_scale, the CPU reference every FP8 recipe's emulation
// runs on. A scale (or amax) tensor tiles its tensor: rank 0 is one value,
// otherwise element i uses tile i_d / T_d in each dim, T_d the tile size of
// runtime/abi/Fp8Tiling.h (a power of two, the last tile ragged).

#include "kernels/cpu/KernelSupport.h"
#include "runtime/abi/Fp8Tiling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace loom::cpu::detail {

namespace {

/// For each element of a tensor of `shape`, the index of its tile in a
/// tiling of `tiles` (rank 0, or the tensor's rank dividing it).
struct Tiling {
  std::vector<int64_t> shape, tiles;

  /// The tile of each element, row-major.
  std::vector<int64_t> indices() const {
    int64_t n = 1;
    for (int64_t s : shape)
      n *= s;
    std::vector<int64_t> out(size_t(n), 0);
    if (tiles.empty() || n == 0)
      return out;
    const size_t rank = shape.size();
    std::vector<int64_t> coord(rank, 0), size(rank);
    for (size_t d = 0; d < rank; ++d)
      size[d] = fp8TileSize(shape[d], tiles[d]);
    for (int64_t e = 0; e < n; ++e) {
      int64_t tile = 0;
      for (size_t d = 0; d < rank; ++d)
        tile = tile * tiles[d] + coord[d] / size[d];
      out[size_t(e)] = tile;
      for (size_t d = rank; d-- > 0;) {
        if (++coord[d] < shape[d])
          break;
        coord[d] = 0;
      }
    }
    return out;
  }
};

float loadF32(const Tensor &t, int64_t i) { return float(loadAsDouble(t.data, t.dtype, i)); }

} // namespace

llvm::Error runQuantize(const KernelCall &call) {
  const Tensor &x = call.inputs[0], &scale = call.inputs[1], &q = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkFp8(Fp8Kernel::Quantize, call.inputs, call.outputs, call.attrs));
  const std::vector<int64_t> tile = Tiling{x.shape, scale.shape}.indices();
  const float *s = static_cast<const float *>(scale.data);
  const float limit = fp8MaxFinite(q.dtype);
  auto quantize = [&](float v, float by) {
    v /= by;
    return std::isnan(v) ? v : std::clamp(v, -limit, limit);
  };
  for (size_t i = 0; i < tile.size(); ++i)
    storeFromDouble(q.data, q.dtype, int64_t(i), double(quantize(loadF32(x, int64_t(i)), s[tile[i]])));
  if (call.outputs.size() < 2)
    return llvm::Error::success();
  // The transposed copy: element (.., c, r) of it is element (.., r, c) of
  // x, scaled by its own tile of the transposed scale (or the one scale).
  const Tensor &qT = call.outputs[1];
  const Tensor &scaleT = call.inputs.size() == 3 ? call.inputs[2] : scale;
  const std::vector<int64_t> tileT = Tiling{qT.shape, scaleT.shape}.indices();
  const float *sT = static_cast<const float *>(scaleT.data);
  const int64_t cols = x.shape.back(), rows = x.shape[x.shape.size() - 2];
  for (size_t i = 0; i < tileT.size(); ++i) {
    const int64_t e = int64_t(i), matrix = e / (rows * cols), c = e / rows % cols, r = e % rows;
    const float v = loadF32(x, (matrix * rows + r) * cols + c);
    storeFromDouble(qT.data, qT.dtype, e, double(quantize(v, sT[tileT[i]])));
  }
  return llvm::Error::success();
}

llvm::Error runDequantize(const KernelCall &call) {
  const Tensor &q = call.inputs[0], &scale = call.inputs[1], &x = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkFp8(Fp8Kernel::Dequantize, call.inputs, call.outputs, call.attrs));
  const Tiling tiling{q.shape, scale.shape};
  const std::vector<int64_t> tile = tiling.indices();
  const float *s = static_cast<const float *>(scale.data);
  for (size_t i = 0; i < tile.size(); ++i) {
    const float v = loadF32(q, int64_t(i)) * s[tile[i]]; // f32, then one rounding
    storeFromDouble(x.data, x.dtype, int64_t(i), double(v));
  }
  return llvm::Error::success();
}

llvm::Error runAmax(const KernelCall &call) {
  const Tensor &x = call.inputs[0], &amax = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkFp8(Fp8Kernel::Amax, call.inputs, call.outputs, call.attrs));
  const Tiling tiling{x.shape, amax.shape};
  const std::vector<int64_t> tile = tiling.indices();
  float *out = static_cast<float *>(amax.data);
  std::fill(out, out + amax.numElements(), 0.0f);
  for (size_t i = 0; i < tile.size(); ++i) {
    const float v = std::fabs(loadF32(x, int64_t(i)));
    float &m = out[tile[i]];
    if (std::isnan(v) || std::isnan(m))
      m = std::numeric_limits<float>::quiet_NaN();
    else
      m = std::max(m, v);
  }
  return llvm::Error::success();
}

llvm::Error runFp8Scale(const KernelCall &call) {
  const Tensor &amax = call.inputs[0], &scale = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkFp8(Fp8Kernel::Scale, call.inputs, call.outputs, call.attrs));
  const std::string format = cantFail(call.attrs.getStr("format"));
  const int64_t margin = cantFail(call.attrs.getInt("margin", 0));
  const float limit = fp8MaxFinite(format == "e4m3" ? DType::F8E4M3FN : DType::F8E5M2);
  const float headroom = std::ldexp(1.0f, int(margin));
  const float *a = static_cast<const float *>(amax.data);
  float *s = static_cast<float *>(scale.data);
  for (int64_t i = 0, n = amax.numElements(); i < n; ++i) {
    if (!std::isfinite(a[i]))
      s[i] = std::numeric_limits<float>::quiet_NaN();
    else if (a[i] == 0.0f)
      s[i] = 1.0f;
    else
      s[i] = a[i] * headroom / limit;
  }
  return llvm::Error::success();
}

llvm::Error runQuantizeTiles(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkQuantizeTiles(call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0];
  const Tensor &q = call.outputs[0], &qT = call.outputs[1];
  const Tensor &scale = call.outputs[2], &scaleT = call.outputs[3];
  // The amax of the transposed copy's tiles is that of x transposed.
  const int64_t rows = x.shape[0], cols = x.shape[1], bytes = int64_t(dtypeSize(x.dtype));
  std::vector<uint8_t> transposed(size_t(rows * cols * bytes));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(&transposed[size_t((c * rows + r) * bytes)],
                  static_cast<const uint8_t *>(x.data) + (r * cols + c) * bytes, size_t(bytes));
  Tensor xT = x;
  xT.data = transposed.data();
  xT.shape = {cols, rows};
  KernelAttrs none;
  auto run = [&](KernelFn fn, KernelId id, std::vector<Tensor> in, std::vector<Tensor> out,
                 const KernelAttrs &attrs) {
    return fn(KernelCall{call.name, id, in, out, attrs, call.ctx});
  };
  // amax into the scale buffers, then the scales in place (elementwise).
  const std::pair<const Tensor *, const Tensor *> pairs[] = {{&x, &scale}, {&xT, &scaleT}};
  for (auto [in, out] : pairs) {
    LOOM_RETURN_IF_ERROR(run(runAmax, KernelId::Amax, std::vector<Tensor>{*in},
                             std::vector<Tensor>{*out}, none));
    LOOM_RETURN_IF_ERROR(run(runFp8Scale, KernelId::Fp8Scale, std::vector<Tensor>{*out},
                             std::vector<Tensor>{*out}, call.attrs));
  }
  KernelAttrs transposedScale;
  transposedScale.set("has_transposed_scale", int64_t(1));
  return run(runQuantize, KernelId::Quantize, std::vector<Tensor>{x, scale, scaleT},
             std::vector<Tensor>{q, qT}, transposedScale);
}

llvm::Error runQuantizeTensor(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkQuantizeTensor(call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0];
  const Tensor &q = call.outputs[0], &qT = call.outputs[1], &scale = call.outputs[2];
  // The amax into the scale's buffer, the scale in place, the quantization.
  KernelAttrs none, one;
  one.set("has_transposed_scale", int64_t(0));
  LOOM_RETURN_IF_ERROR(runAmax(KernelCall{call.name, KernelId::Amax, {x}, {scale}, none, call.ctx}));
  LOOM_RETURN_IF_ERROR(
      runFp8Scale(KernelCall{call.name, KernelId::Fp8Scale, {scale}, {scale}, call.attrs, call.ctx}));
  const Tensor ins[] = {x, scale};
  const Tensor outs[] = {q, qT};
  return runQuantize(KernelCall{call.name, KernelId::Quantize, ins, outs, one, call.ctx});
}

} // namespace loom::cpu::detail
