// nn.attention_grad and nn.attention_grad_with_stats: the gradients of
// scaled dot-product attention with respect to query, key and value. The
// probabilities are recomputed from q and k (the reference does not use the
// saved statistics); everything accumulates in double.
//
// With P = softmax(scale q k^T) per query row and dO the output's gradient:
//   dP_j = dO . v_j,  dS_j = P_j (dP_j - sum_l P_l dP_l)
//   dq   = scale sum_j dS_j k_j
//   dk_j = scale sum_(query rows) dS_j q,  dv_j = sum_(query rows) P_j dO
// One task owns one (batch, KV head): it walks the query heads that share
// the KV head and their rows in a fixed order, so dk and dv are summed in
// the same order for any thread count.

#include "kernels/cpu/KernelSupport.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::cpu::detail {

namespace {

llvm::Error attentionBackward(const KernelCall &call, const AttentionShape &s, const Tensor &q,
                              const Tensor &k, const Tensor &v, const Tensor &dOut) {
  const Tensor &dq = call.outputs[0], &dk = call.outputs[1], &dv = call.outputs[2];
  const int64_t batch = s.batch, qHeads = s.qHeads, seq = s.seq, headDim = s.headDim;
  const int64_t kvHeads = s.kvHeads, kvSeq = s.kvSeq, valueDim = s.valueDim;
  const double scale = s.scale;
  const int64_t groupSize = qHeads / kvHeads;
  using R = AttentionRole;
  const AttentionLayout lq = s.layout(R::Q), lk = s.layout(R::K), lv = s.layout(R::V);
  const AttentionLayout lg = s.layout(R::Grad), ldq = s.layout(R::DQ), ldk = s.layout(R::DK);
  const AttentionLayout ldv = s.layout(R::DV);

  return dispatchFloat(q.dtype, "query", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> qs(q), ks(k), vs(v), dos(dOut);
    const int64_t tasks = batch * kvHeads;
    const int64_t cost = groupSize * seq * kvSeq * (headDim + valueDim) * 4 + 1;
    parallelFor(call.ctx, tasks, cost, [&](int64_t begin, int64_t end) {
      std::vector<double> probs(kvSeq), dProbs(kvSeq), dqRow(headDim);
      std::vector<double> dkAcc(kvSeq * headDim), dvAcc(kvSeq * valueDim);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / kvHeads, kvHead = task % kvHeads;
        std::fill(dkAcc.begin(), dkAcc.end(), 0.0);
        std::fill(dvAcc.begin(), dvAcc.end(), 0.0);
        for (int64_t g = 0; g < groupSize; ++g) {
          const int64_t head = kvHead * groupSize + g;
          for (int64_t i = 0; i < seq; ++i) {
            // The keys the forward's query i saw.
            const auto [first, visible] = s.visibleKeys(i);
            const T *qRow = qs.data() + lq.at(b, head, i);
            const T *doRow = dos.data() + lg.at(b, head, i);
            std::fill(dqRow.begin(), dqRow.end(), 0.0);
            if (visible > first) {
              double maxScore = -std::numeric_limits<double>::infinity();
              for (int64_t j = first; j < visible; ++j) {
                const T *kRow = ks.data() + lk.at(b, kvHead, j);
                double dot = 0.0;
                for (int64_t d = 0; d < headDim; ++d)
                  dot += static_cast<double>(qRow[d]) * kRow[d];
                probs[j] = dot * scale;
                maxScore = std::max(maxScore, probs[j]);
              }
              double sum = 0.0;
              for (int64_t j = first; j < visible; ++j) {
                probs[j] = std::exp(probs[j] - maxScore);
                sum += probs[j];
              }
              double weightedDProb = 0.0; // sum_j P_j dP_j = dO . O
              for (int64_t j = first; j < visible; ++j) {
                probs[j] /= sum;
                const T *vRow = vs.data() + lv.at(b, kvHead, j);
                double dot = 0.0;
                for (int64_t d = 0; d < valueDim; ++d)
                  dot += static_cast<double>(doRow[d]) * vRow[d];
                dProbs[j] = dot;
                weightedDProb += probs[j] * dot;
              }
              for (int64_t j = first; j < visible; ++j) {
                const double dScore = probs[j] * (dProbs[j] - weightedDProb);
                const T *kRow = ks.data() + lk.at(b, kvHead, j);
                for (int64_t d = 0; d < headDim; ++d) {
                  dqRow[d] += dScore * kRow[d];
                  dkAcc[j * headDim + d] += scale * dScore * qRow[d];
                }
                for (int64_t d = 0; d < valueDim; ++d)
                  dvAcc[j * valueDim + d] += probs[j] * doRow[d];
              }
            }
            // A query that sees no key output zeros: its gradient is zero.
            const int64_t dqRowStart = ldq.at(b, head, i);
            for (int64_t d = 0; d < headDim; ++d)
              storeFromDouble(dq.data, dq.dtype, dqRowStart + d, scale * dqRow[d]);
          }
        }
        for (int64_t j = 0; j < kvSeq; ++j) {
          const int64_t dkRow = ldk.at(b, kvHead, j), dvRow = ldv.at(b, kvHead, j);
          for (int64_t d = 0; d < headDim; ++d)
            storeFromDouble(dk.data, dk.dtype, dkRow + d, dkAcc[j * headDim + d]);
          for (int64_t d = 0; d < valueDim; ++d)
            storeFromDouble(dv.data, dv.dtype, dvRow + d, dvAcc[j * valueDim + d]);
        }
      }
    });
    return llvm::Error::success();
  });
}

} // namespace

llvm::Error runAttentionGrad(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(AttentionShape s,
                        checkAttentionGrad(call.inputs, call.outputs, call.attrs));
  return attentionBackward(call, s, call.inputs[0], call.inputs[1], call.inputs[2],
                           call.inputs[3]);
}

// The saved output and statistics are checked and then not read: the
// probabilities are recomputed exactly as nn.attention_grad recomputes them,
// so a training step gives the same bits with and without
// --loom-attention-stats (exp(s - lse) would round differently from
// exp(s - max) / sum).
llvm::Error runAttentionGradWithStats(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(AttentionShape s,
                        checkAttentionGradWithStats(call.inputs, call.outputs, call.attrs));
  return attentionBackward(call, s, call.inputs[0], call.inputs[1], call.inputs[2],
                           call.inputs[5]);
}

} // namespace loom::cpu::detail
