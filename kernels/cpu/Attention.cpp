// Rotary position embedding and scaled dot-product attention (causal,
// grouped-query), with or without its softmax statistics (logsumexp per
// query row, nn.attention_with_stats). Attention scores, softmax and the
// weighted sum of values accumulate in double.

#include "kernels/cpu/KernelSupport.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::cpu::detail {

llvm::Error runRope(const KernelCall &call) {
  const Tensor &x = call.inputs[0], &cosT = call.inputs[1], &sinT = call.inputs[2];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(RopePlan plan, checkRope(x, cosT, sinT, out, call.attrs));
  const bool interleaved = plan.interleaved;
  const int64_t seq = plan.seq, dim = plan.dim;
  return dispatchFloat(x.dtype, "input", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> xs(x), cs(cosT), ss(sinT);
    OutputArray<T> ys(out);
    const int64_t rows = seq * dim == 0 ? 0 : x.numElements() / dim;
    const int64_t half = dim / 2;
    parallelFor(call.ctx, rows, dim * 3, [&](int64_t begin, int64_t end) {
      // Rows are rotated through a scratch row so the output may alias x.
      std::vector<T> rotated(dim);
      for (int64_t row = begin; row < end; ++row) {
        const T *in = xs.data() + plan.rowOffset(row, /*in=*/true);
        const T *c = cs.data() + (row % seq) * dim;
        const T *s = ss.data() + (row % seq) * dim;
        if (interleaved) {
          for (int64_t i = 0; i < half; ++i) {
            const T x0 = in[2 * i], x1 = in[2 * i + 1];
            rotated[2 * i] = x0 * c[2 * i] - x1 * s[2 * i];
            rotated[2 * i + 1] = x1 * c[2 * i] + x0 * s[2 * i];
          }
        } else {
          for (int64_t d = 0; d < half; ++d)
            rotated[d] = in[d] * c[d] - in[d + half] * s[d];
          for (int64_t d = half; d < dim; ++d)
            rotated[d] = in[d] * c[d] + in[d - half] * s[d];
        }
        std::copy(rotated.begin(), rotated.end(), ys.data() + plan.rowOffset(row, /*in=*/false));
      }
    });
    ys.commit();
    return llvm::Error::success();
  });
}

namespace {

/// out = softmax(scale q k^T [mask]) v, and where `lse` is given, each query
/// row's natural logsumexp max + log(sum exp(s - max)) over the scores it
/// sees (-inf for a row that sees none). One code path for nn.attention and
/// nn.attention_with_stats, so their outputs are the same bits.
llvm::Error attentionForward(const KernelCall &call, const AttentionShape &s, const Tensor &q,
                             const Tensor &k, const Tensor &v, const Tensor &out,
                             const Tensor *lse) {
  const int64_t batch = s.batch, qHeads = s.qHeads, seq = s.seq, headDim = s.headDim;
  const int64_t kvHeads = s.kvHeads, kvSeq = s.kvSeq, valueDim = s.valueDim;
  const double scale = s.scale;
  const int64_t groupSize = qHeads / kvHeads;
  float *lseData = lse ? static_cast<float *>(lse->data) : nullptr;
  const AttentionLayout lq = s.layout(AttentionRole::Q), lk = s.layout(AttentionRole::K);
  const AttentionLayout lv = s.layout(AttentionRole::V), lo = s.layout(AttentionRole::Out);

  return dispatchFloat(q.dtype, "query", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> qs(q), ks(k), vs(v);
    const int64_t rows = batch * qHeads * seq;
    parallelFor(call.ctx, rows, kvSeq * (headDim + valueDim) * 2,
                [&](int64_t begin, int64_t end) {
      std::vector<double> scores(kvSeq), acc(valueDim);
      for (int64_t row = begin; row < end; ++row) {
        const int64_t i = row % seq;
        const int64_t head = (row / seq) % qHeads;
        const int64_t b = row / (seq * qHeads);
        const int64_t kvHead = head / groupSize;
        // Causal: query i sees keys j <= i + (kvSeq - seq), the end
        // aligned; a window also hides those W or more before that.
        const auto [first, visible] = s.visibleKeys(i);
        const T *qRow = qs.data() + lq.at(b, head, i);
        std::fill(acc.begin(), acc.end(), 0.0);
        double rowLse = -std::numeric_limits<double>::infinity();
        if (visible > first) {
          double maxScore = -std::numeric_limits<double>::infinity();
          for (int64_t j = first; j < visible; ++j) {
            const T *kRow = ks.data() + lk.at(b, kvHead, j);
            double dot = 0.0;
            for (int64_t d = 0; d < headDim; ++d)
              dot += static_cast<double>(qRow[d]) * kRow[d];
            scores[j] = dot * scale;
            maxScore = std::max(maxScore, scores[j]);
          }
          double sum = 0.0;
          for (int64_t j = first; j < visible; ++j) {
            const double weight = std::exp(scores[j] - maxScore);
            sum += weight;
            const T *vRow = vs.data() + lv.at(b, kvHead, j);
            for (int64_t d = 0; d < valueDim; ++d)
              acc[d] += weight * vRow[d];
          }
          for (int64_t d = 0; d < valueDim; ++d)
            acc[d] /= sum;
          rowLse = maxScore + std::log(sum);
        }
        // A query that sees no key (kvSeq < seq, causal) outputs zeros.
        const int64_t outRow = lo.at(b, head, i);
        for (int64_t d = 0; d < valueDim; ++d)
          storeFromDouble(out.data, out.dtype, outRow + d, acc[d]);
        if (lseData)
          lseData[row] = static_cast<float>(rowLse);
      }
    });
    return llvm::Error::success();
  });
}

} // namespace

llvm::Error runAttention(const KernelCall &call) {
  const Tensor &q = call.inputs[0], &k = call.inputs[1], &v = call.inputs[2];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(AttentionShape s, checkAttention(q, k, v, out, call.attrs));
  return attentionForward(call, s, q, k, v, out, nullptr);
}

llvm::Error runAttentionWithStats(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(AttentionShape s,
                        checkAttentionWithStats(call.inputs, call.outputs, call.attrs));
  return attentionForward(call, s, call.inputs[0], call.inputs[1], call.inputs[2],
                          call.outputs[0], &call.outputs[1]);
}

} // namespace loom::cpu::detail
