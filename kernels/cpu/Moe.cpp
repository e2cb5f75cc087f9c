// Mixture-of-experts kernels: nn.router, nn.topk and nn.sort (rows along
// the last dim), nn.grouped_matmul and its weight gradient (one GEMM per group of
// rows, the groups given by running row counts).

#include "kernels/cpu/KernelSupport.h"
#include "kernels/cpu/OperandChecks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace loom::cpu::detail {
namespace {

/// Rows of a tensor along its last dim.
struct Rows {
  int64_t count = 0, length = 0;
};

llvm::Expected<Rows> rowsOf(const Tensor &input, const char *kernel) {
  if (input.shape.empty())
    return kernelError(llvm::Twine(kernel) + ": takes a tensor of rank 1 or more, got a scalar");
  Rows r;
  r.length = input.shape.back();
  r.count = r.length == 0 ? 0 : input.numElements() / r.length;
  return r;
}

llvm::Error checkRowOutputs(const Tensor &input, const Tensor &values, const Tensor &indices,
                            int64_t last, const char *kernel) {
  std::vector<int64_t> shape = input.shape;
  shape.back() = last;
  if (values.shape != shape || indices.shape != shape)
    return kernelError(llvm::Twine(kernel) + ": outputs must be " + shapeToString(shape) +
                       ", got " + shapeToString(values.shape) + " and " +
                       shapeToString(indices.shape));
  if (values.dtype != input.dtype)
    return kernelError(llvm::Twine(kernel) + ": values must have the input's dtype");
  if (!isIntLike(indices.dtype) || indices.dtype == DType::I1)
    return kernelError(llvm::Twine(kernel) + ": indices must be i64 or i32");
  return llvm::Error::success();
}

/// a before b: a ranks higher (larger, or NaN) when `descending`, lower
/// otherwise; NaN ranks above every number.
template <typename T> bool before(T a, T b, bool descending) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool an = std::isnan(a), bn = std::isnan(b);
    if (an || bn)
      return descending ? (an && !bn) : (!an && bn);
  }
  return descending ? a > b : a < b;
}

/// Each row's order (stable), its first `keep` positions written.
template <typename T>
void selectRows(const KernelCall &call, const Tensor &input, const Tensor &values,
                const Tensor &indices, Rows rows, int64_t keep, bool descending) {
  InputArray<T> in(input);
  OutputArray<T> out(values);
  parallelFor(call.ctx, rows.count, rows.length * 8 + 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> order(rows.length);
    for (int64_t r = begin; r < end; ++r) {
      const T *row = in.data() + r * rows.length;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return before(row[a], row[b], descending);
      });
      for (int64_t j = 0; j < keep; ++j) {
        out[r * keep + j] = row[order[j]];
        storeInt(indices.data, indices.dtype, r * keep + j, order[j]);
      }
    }
  });
  out.commit();
}

template <typename Fn> llvm::Error dispatchNumeric(DType type, Fn &&fn) {
  if (type == DType::F64)
    return fn(double{});
  if (isFloat(type))
    return fn(float{});
  if (isIntLike(type))
    return fn(int64_t{});
  return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(type));
}

/// The bounds of the `groups` groups from attr group_start on: offsets [G]
/// are non-decreasing running row counts of all groups, at most `rows`; the
/// result is groups + 1 row indices, group e being rows [b[e], b[e + 1]).
llvm::Expected<std::vector<int64_t>> groupBounds(const KernelCall &call, const Tensor &offsets,
                                                 int64_t groups, int64_t rows,
                                                 const char *kernel) {
  LOOM_ASSIGN_OR_RETURN(int64_t start, call.attrs.getInt("group_start", 0));
  const int64_t all = offsets.shape.size() == 1 ? offsets.shape[0] : -1;
  if (offsets.shape.size() != 1 || !isIntLike(offsets.dtype) || offsets.dtype == DType::I1 ||
      start < 0 || all < start + groups || (!call.attrs.has("group_start") && all != groups))
    return kernelError(llvm::Twine(kernel) + ": offsets must be i32 or i64 [G] with G = " +
                       llvm::Twine(groups) + " groups + group_start " + llvm::Twine(start) +
                       " or more, got " + dtypeName(offsets.dtype) + " " +
                       shapeToString(offsets.shape));
  std::vector<int64_t> bounds(all + 1, 0);
  for (int64_t e = 0; e < all; ++e) {
    bounds[e + 1] = loadInt(offsets.data, offsets.dtype, e);
    if (bounds[e + 1] < bounds[e] || bounds[e + 1] > rows)
      return kernelError(llvm::Twine(kernel) + ": offsets must be non-decreasing and at most " +
                         llvm::Twine(rows) + " (the rows); offset " + llvm::Twine(e) + " is " +
                         llvm::Twine(bounds[e + 1]));
  }
  return std::vector<int64_t>(bounds.begin() + start, bounds.begin() + start + groups + 1);
}

} // namespace

/// The attributes of an nn.router call, checked against its operands.
struct RouterPlan {
  int64_t k = 0, groups = 1, groupK = 1, groupTop = 2;
  bool sigmoid = false, normalize = false;
  double groupFill = 0, epsilon = 0, scale = 1;
};

llvm::Expected<RouterPlan> routerPlan(const KernelCall &call, int64_t experts) {
  RouterPlan p;
  LOOM_ASSIGN_OR_RETURN(p.k, call.attrs.getInt("k"));
  LOOM_ASSIGN_OR_RETURN(p.sigmoid, call.attrs.getBool("sigmoid", false));
  LOOM_ASSIGN_OR_RETURN(p.normalize, call.attrs.getBool("normalize", false));
  LOOM_ASSIGN_OR_RETURN(p.groups, call.attrs.getInt("groups", 1));
  LOOM_ASSIGN_OR_RETURN(p.groupK, call.attrs.getInt("group_k", 1));
  LOOM_ASSIGN_OR_RETURN(p.groupTop, call.attrs.getInt("group_top", 2));
  LOOM_ASSIGN_OR_RETURN(p.groupFill, call.attrs.getF64("group_fill", 0.0));
  LOOM_ASSIGN_OR_RETURN(p.epsilon, call.attrs.getF64("epsilon", 0.0));
  LOOM_ASSIGN_OR_RETURN(p.scale, call.attrs.getF64("scale", 1.0));
  if (p.k < 1 || p.k > experts)
    return kernelError("nn.router: k must be in [1, " + llvm::Twine(experts) + "], got " +
                       llvm::Twine(p.k));
  if (p.groups < 1 || experts % p.groups)
    return kernelError("nn.router: groups must divide the " + llvm::Twine(experts) +
                       " experts, got " + llvm::Twine(p.groups));
  if (p.groups > 1 && (p.groupK < 1 || p.groupK > p.groups || p.groupTop < 1 ||
                       p.groupTop > experts / p.groups))
    return kernelError("nn.router: group_k must be in [1, " + llvm::Twine(p.groups) +
                       "] and group_top in [1, " + llvm::Twine(experts / p.groups) + "], got " +
                       llvm::Twine(p.groupK) + " and " + llvm::Twine(p.groupTop));
  return p;
}

llvm::Error runRouter(const KernelCall &call) {
  const Tensor &logits = call.inputs[0];
  const Tensor &weights = call.outputs[0], &ids = call.outputs[1], &scores = call.outputs[2];
  const Tensor *bias = call.inputs.size() > 1 ? &call.inputs[1] : nullptr;
  LOOM_ASSIGN_OR_RETURN(Rows rows, rowsOf(logits, "nn.router"));
  const int64_t experts = rows.length;
  LOOM_ASSIGN_OR_RETURN(RouterPlan plan, routerPlan(call, experts));
  LOOM_RETURN_IF_ERROR(checkRowOutputs(logits, weights, ids, plan.k, "nn.router"));
  if (scores.shape != logits.shape || scores.dtype != logits.dtype)
    return kernelError("nn.router: scores must be the logits' " + shapeToString(logits.shape));
  if (bias && (bias->shape != std::vector<int64_t>{experts} || !isFloat(bias->dtype)))
    return kernelError("nn.router: bias must be float [" + llvm::Twine(experts) + "], got " +
                       dtypeName(bias->dtype) + " " + shapeToString(bias->shape));
  return dispatchFloat(logits.dtype, "nn.router's logits", [&](auto zero) {
    using T = decltype(zero);
    InputArray<T> in(logits);
    std::vector<double> steer(experts, 0.0);
    if (bias)
      for (int64_t e = 0; e < experts; ++e)
        steer[e] = loadAsDouble(bias->data, bias->dtype, e);
    const int64_t groupSize = experts / plan.groups;
    parallelFor(call.ctx, rows.count, experts * 32 + 1, [&](int64_t begin, int64_t end) {
      std::vector<double> s(experts), c(experts), groupScore(plan.groups);
      std::vector<int64_t> order(experts), groupOrder(plan.groups);
      for (int64_t r = begin; r < end; ++r) {
        const T *x = in.data() + r * experts;
        // The affinities, rounded to the scores' dtype as stored.
        if (plan.sigmoid) {
          for (int64_t e = 0; e < experts; ++e)
            s[e] = 1.0 / (1.0 + std::exp(-double(x[e])));
        } else {
          double top = -std::numeric_limits<double>::infinity(), sum = 0;
          for (int64_t e = 0; e < experts; ++e)
            top = std::max(top, double(x[e]));
          for (int64_t e = 0; e < experts; ++e)
            sum += std::exp(double(x[e]) - top);
          for (int64_t e = 0; e < experts; ++e)
            s[e] = std::exp(double(x[e]) - top) / sum;
        }
        for (int64_t e = 0; e < experts; ++e) {
          storeFromDouble(scores.data, scores.dtype, r * experts + e, s[e]);
          s[e] = loadAsDouble(scores.data, scores.dtype, r * experts + e);
          c[e] = s[e] + steer[e];
        }
        auto better = [&](const std::vector<double> &v) {
          return [&v](int64_t a, int64_t b) { return before(v[a], v[b], /*descending=*/true); };
        };
        if (plan.groups > 1) {
          std::vector<double> member(groupSize);
          for (int64_t g = 0; g < plan.groups; ++g) {
            std::copy_n(c.begin() + g * groupSize, groupSize, member.begin());
            std::partial_sort(member.begin(), member.begin() + plan.groupTop, member.end(),
                              [](double a, double b) { return before(a, b, true); });
            groupScore[g] = std::accumulate(member.begin(), member.begin() + plan.groupTop, 0.0);
          }
          std::iota(groupOrder.begin(), groupOrder.end(), 0);
          std::stable_sort(groupOrder.begin(), groupOrder.end(), better(groupScore));
          std::vector<bool> kept(plan.groups, false);
          for (int64_t j = 0; j < plan.groupK; ++j)
            kept[groupOrder[j]] = true;
          for (int64_t e = 0; e < experts; ++e)
            if (!kept[e / groupSize])
              c[e] = plan.groupFill;
        }
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), better(c));
        double total = 0;
        for (int64_t j = 0; j < plan.k; ++j)
          total += s[order[j]];
        const double divisor = plan.normalize ? total + plan.epsilon : 1.0;
        for (int64_t j = 0; j < plan.k; ++j) {
          storeFromDouble(weights.data, weights.dtype, r * plan.k + j,
                          s[order[j]] / divisor * plan.scale);
          storeInt(ids.data, ids.dtype, r * plan.k + j, order[j]);
        }
      }
    });
    return llvm::Error::success();
  });
}

llvm::Error runTopk(const KernelCall &call) {
  const Tensor &input = call.inputs[0], &values = call.outputs[0], &indices = call.outputs[1];
  LOOM_ASSIGN_OR_RETURN(Rows rows, rowsOf(input, "nn.topk"));
  LOOM_ASSIGN_OR_RETURN(int64_t k, call.attrs.getInt("k"));
  LOOM_ASSIGN_OR_RETURN(bool smallest, call.attrs.getBool("smallest", false));
  if (k < 1 || k > rows.length)
    return kernelError("nn.topk: k must be in [1, " + llvm::Twine(rows.length) + "], got " +
                       llvm::Twine(k));
  LOOM_RETURN_IF_ERROR(checkRowOutputs(input, values, indices, k, "nn.topk"));
  return dispatchFloat(input.dtype, "nn.topk's input", [&](auto zero) {
    using T = decltype(zero);
    selectRows<T>(call, input, values, indices, rows, k, !smallest);
    return llvm::Error::success();
  });
}

llvm::Error runSort(const KernelCall &call) {
  const Tensor &input = call.inputs[0], &values = call.outputs[0], &indices = call.outputs[1];
  LOOM_ASSIGN_OR_RETURN(Rows rows, rowsOf(input, "nn.sort"));
  LOOM_ASSIGN_OR_RETURN(bool descending, call.attrs.getBool("descending", false));
  LOOM_RETURN_IF_ERROR(checkRowOutputs(input, values, indices, rows.length, "nn.sort"));
  return dispatchNumeric(input.dtype, [&](auto zero) {
    using T = decltype(zero);
    selectRows<T>(call, input, values, indices, rows, rows.length, descending);
    return llvm::Error::success();
  });
}

llvm::Error runGroupedMatmul(const KernelCall &call) {
  const Tensor &input = call.inputs[0], &weight = call.inputs[1], &offsets = call.inputs[2];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(GroupedMatmulPlan plan,
                        checkGroupedMatmul(input, weight, out, call.attrs));
  const int64_t S = plan.rows, K = plan.k, E = plan.groups, N = plan.n;
  const bool transposed = plan.transposed;
  // weight[e] (k, n): k * N + n, or n * K + k transposed.
  const int64_t kStride = transposed ? 1 : N, nStride = transposed ? K : 1;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> bounds,
                        groupBounds(call, offsets, E, S, "nn.grouped_matmul"));
  return dispatchFloat(input.dtype, "nn.grouped_matmul's input", [&](auto zero) {
    using T = decltype(zero);
    InputArray<T> x(input), w(weight);
    OutputArray<T> y(out);
    parallelFor(call.ctx, S, K * N + 1, [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s) {
        // The group of row s: the first bound past it; rows of no group
        // here (before the first or past the last) are zero.
        int64_t e = int64_t(std::upper_bound(bounds.begin() + 1, bounds.end(), s) -
                            (bounds.begin() + 1));
        T *row = y.data() + s * N;
        if (s < bounds.front() || e >= E) {
          std::fill(row, row + N, T(0));
          continue;
        }
        const T *xs = x.data() + s * K, *we = w.data() + e * K * N;
        for (int64_t n = 0; n < N; ++n) {
          T acc = 0;
          for (int64_t k = 0; k < K; ++k)
            acc += xs[k] * we[k * kStride + n * nStride];
          row[n] = acc;
        }
      }
    });
    y.commit();
    return llvm::Error::success();
  });
}

llvm::Error runGroupedMatmulWeightGrad(const KernelCall &call) {
  const Tensor &input = call.inputs[0], &grad = call.inputs[1], &offsets = call.inputs[2];
  const Tensor &out = call.outputs[0];
  if (input.shape.size() != 2 || grad.shape.size() != 2 || out.shape.size() != 3 ||
      grad.shape[0] != input.shape[0] || input.dtype != grad.dtype ||
      !weightGradDTypeOk(input.dtype, out.dtype) || out.shape[1] != input.shape[1] ||
      out.shape[2] != grad.shape[1])
    return kernelError("nn.grouped_matmul_weight_grad: takes input [S, K], grad [S, N] and "
                       "gives [E, K, N], one float dtype (or f32 from bf16 or f16); got " +
                       shapeToString(input.shape) + ", " + shapeToString(grad.shape) + " -> " +
                       shapeToString(out.shape));
  const int64_t S = input.shape[0], K = input.shape[1], E = out.shape[0], N = out.shape[2];
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> bounds,
                        groupBounds(call, offsets, E, S, "nn.grouped_matmul_weight_grad"));
  return dispatchFloat(input.dtype, "nn.grouped_matmul_weight_grad's input", [&](auto zero) {
    using T = decltype(zero);
    InputArray<T> x(input), g(grad);
    OutputArray<T> w(out);
    parallelFor(call.ctx, E * K, S * N / std::max<int64_t>(E, 1) + 1,
                [&](int64_t begin, int64_t end) {
                  for (int64_t task = begin; task < end; ++task) {
                    const int64_t e = task / K, k = task % K;
                    T *row = w.data() + (e * K + k) * N;
                    std::fill(row, row + N, T(0));
                    for (int64_t s = bounds[e]; s < bounds[e + 1]; ++s) {
                      const T xv = x[s * K + k];
                      const T *gs = g.data() + s * N;
                      for (int64_t n = 0; n < N; ++n)
                        row[n] += xv * gs[n];
                    }
                  }
                });
    w.commit();
    return llvm::Error::success();
  });
}

} // namespace loom::cpu::detail
