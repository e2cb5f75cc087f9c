#ifndef LOOM_FRONTEND_RAISING_PASSES_TD
#define LOOM_FRONTEND_RAISING_PASSES_TD

include "mlir/Pass/PassBase.td"

def FoldConstants : Pass<"loom-fold-constants", "mlir::ModuleOp"> {
  let summary = "evaluate nn ops whose operands are all constants";
  let description = [{
    Runs the CPU reference kernels at compile time on ops that depend on no
    input and no parameter (causal masks built from arange and compares,
    rotary tables, shape arithmetic) and replaces them by `nn.constant`.
    Results over 16M elements are left to run at run time.

    Before:
    ```mlir
    %0 = nn.iota dim = 0 : tensor<4xi64>
    %1 = nn.iota dim = 1 : tensor<4x4xi64>
    %2 = nn.compare le, %1, %0 : ... -> tensor<4x4xi1>
    ```
    After:
    ```mlir
    %2 = nn.constant dense<[[true, false, ...]]> : tensor<4x4xi1>
    ```
  }];
  let dependentDialects = ["loom::nn::NNDialect"];
}

def RaiseRmsNorm : Pass<"loom-raise-rms-norm", "mlir::ModuleOp"> {
  let summary = "x * rsqrt(mean(x^2) + eps) [* w] becomes nn.rms_norm";
  let description = [{
    Matches the decomposition exporters write for RMSNorm: the mean of
    `pow(x, 2)` or `x * x` over the last dim (keepdim), plus a splat epsilon,
    through `rsqrt` or `reciprocal(sqrt(...))`, times `x`; then folds a
    following multiplication by a `[D]` weight into the op.

    Before:
    ```mlir
    %sq = nn.pow %x, %two : ...
    %m = nn.reduce_mean %sq dims = [2] keepdim : ...
    %a = nn.add %m, %eps : ...
    %r = nn.rsqrt %a : ...
    %n = nn.mul %x, %r : ...
    %y = nn.mul %w, %n : ...
    ```
    After:
    ```mlir
    %y = nn.rms_norm %x, weight %w epsilon = 1.0e-05 : ...
    ```
  }];
}

def RaiseLayerNorm : Pass<"loom-raise-layer-norm", "mlir::ModuleOp"> {
  let summary = "(x - mean) / sqrt(var + eps) [* w] [+ b] becomes nn.layer_norm";
  let description = [{
    Matches `d = x - mean(x)`, `var = mean(d^2)` over the last dim, and
    `d / sqrt(var + eps)` or `d * rsqrt(var + eps)`; then folds a following
    `* w` and `+ b` (shaped `[D]`) into the op's weight and bias. Also folds
    weights and biases into an existing nn.layer_norm that has none.

    Before:
    ```mlir
    %mu = nn.reduce_mean %x dims = [1] keepdim : ...
    %d = nn.sub %x, %mu : ...
    %sq = nn.mul %d, %d : ...
    %var = nn.reduce_mean %sq dims = [1] keepdim : ...
    %a = nn.add %var, %eps : ...
    %s = nn.sqrt %a : ...
    %n = nn.div %d, %s : ...
    ```
    After:
    ```mlir
    %n = nn.layer_norm %x epsilon = 1.0e-05 : ...
    ```
  }];
}

def RaiseGelu : Pass<"loom-raise-gelu", "mlir::ModuleOp"> {
  let summary = "the erf and tanh forms of GELU become nn.gelu";
  let description = [{
    Matches `0.5 * x * (1 + erf(x / sqrt(2)))` (nn.gelu) and
    `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`
    (nn.gelu approximate = tanh), in any order of the factors.

    Before:
    ```mlir
    %c = nn.pow %x, %three : ...
    %d = nn.mul %c, %k0 : ...        // 0.044715
    %e = nn.add %x, %d : ...
    %f = nn.mul %e, %k1 : ...        // sqrt(2/pi)
    %t = nn.tanh %f : ...
    %u = nn.add %t, %one : ...
    %h = nn.mul %x, %half : ...
    %y = nn.mul %h, %u : ...
    ```
    After:
    ```mlir
    %y = nn.gelu %x approximate = tanh : ...
    ```
  }];
}

def RaiseGroupedGemm : Pass<"loom-raise-grouped-gemm", "mlir::ModuleOp"> {
  let summary = "a batched GEMM of weights picked per row from a stack becomes nn.grouped_matmul";
  let description = [{
    transformers' `batched_mm` experts backend (and the ONNX exports, which
    need it) gathers each routed row's expert weights, `[R, N, K]` from the
    stack `[E, N, K]`, and multiplies row by row. That reads R weight
    matrices instead of E, and it hides the experts from expert parallelism.
    The same product is one GEMM per expert over the rows sorted by expert:

    Before:
    ```mlir
    %p = nn.gather %w, %ids axis = 0 : (tensor<4x48x32xf32>, tensor<96xi64>) -> tensor<96x48x32xf32>
    %y = nn.matmul %p, %x : (tensor<96x48x32xf32>, tensor<96x32x1xf32>) -> tensor<96x48x1xf32>
    ```
    After: the rows sorted stably by `%ids` (`nn.sort`, `nn.gather`), the
    groups' running ends counted from `%ids`, `nn.grouped_matmul` with the
    stack transposed to `[E, K, N]`, and the result gathered back by the
    inverse permutation. The picked weights are never built.
  }];
}

def RaiseRouter : Pass<"loom-raise-router", "mlir::ModuleOp"> {
  let summary = "a mixture-of-experts router's scores, top-k and weights become nn.router";
  let description = [{
    A top-k over a router's affinities (a softmax of the logits, or a
    sigmoid), optionally with a per-expert bias added and DeepSeek-V3's
    group mask applied, and the chosen experts' affinities (the top-k's
    values, or a gather of the unbiased affinities by the ids), optionally
    normalized to sum 1 (with an epsilon added to the sum) and scaled by a
    constant, become one `nn.router`. The group mask is accepted only when
    running its ops on chosen groups masks exactly the experts of the
    groups not chosen. Top-k choices of any other form (a softmax taken
    after the top-k, as GPT-OSS and Granite-MoE do) stay `nn.topk`.

    Before (Mixtral):
    ```mlir
    %p = nn.softmax %logits dim = 1 : tensor<48x8xf32>
    %v, %ids = nn.topk %p k = 2 : (tensor<48x8xf32>) -> (tensor<48x2xf32>, tensor<48x2xi64>)
    %sum = nn.reduce_sum %v dims = [1] keepdim : tensor<48x2xf32> -> tensor<48x1xf32>
    %w = nn.div %v, %sum : (tensor<48x2xf32>, tensor<48x1xf32>) -> tensor<48x2xf32>
    ```
    After:
    ```mlir
    %w, %ids, %p = nn.router %logits k = 2 {normalize} : (tensor<48x8xf32>) -> (tensor<48x2xf32>, tensor<48x2xi64>, tensor<48x8xf32>)
    ```
  }];
}

def RaiseMatmulForms : Pass<"loom-raise-matmul-forms", "mlir::ModuleOp"> {
  let summary = "a decomposed export's matrix products in the form raising reads";
  let description = [{
    torch.export's core ATen IR (`ExportedProgram.run_decompositions()`)
    spells a linear layer `aten.t` + `aten.mm` (or `addmm`) and a batched
    matmul `aten.bmm` over its batch dims flattened into one. A 2-D
    transpose read by a matmul becomes the matmul's transpose flag, and a
    3-D matmul of operands that a reshape flattened, whose result is
    reshaped back, becomes one matmul over the unflattened batch dims, so
    linear layers, attention (`--loom-raise-attention`) and tensor
    parallelism see what an unflattened export gives them.

    Before:
    ```mlir
    %wt = nn.transpose %w permutation = [1, 0] : tensor<16x32xf32> -> tensor<32x16xf32>
    %y = nn.matmul %x, %wt : (tensor<24x32xf32>, tensor<32x16xf32>) -> tensor<24x16xf32>
    %a = nn.reshape %q : tensor<2x4x12x8xf32> -> tensor<8x12x8xf32>
    %b = nn.reshape %kt : tensor<2x4x8x12xf32> -> tensor<8x8x12xf32>
    %s = nn.matmul %a, %b : (tensor<8x12x8xf32>, tensor<8x8x12xf32>) -> tensor<8x12x12xf32>
    %r = nn.reshape %s : tensor<8x12x12xf32> -> tensor<2x4x12x12xf32>
    ```
    After:
    ```mlir
    %y = nn.matmul %x, %w {transpose_rhs} : (tensor<24x32xf32>, tensor<16x32xf32>) -> tensor<24x16xf32>
    %r = nn.matmul %q, %kt : (tensor<2x4x12x8xf32>, tensor<2x4x8x12xf32>) -> tensor<2x4x12x12xf32>
    ```
  }];
}

def RaiseSilu : Pass<"loom-raise-silu", "mlir::ModuleOp"> {
  let summary = "x * sigmoid(x) becomes nn.silu";
  let description = [{
    SwiGLU then reads `nn.mul (nn.silu %gate), %up`, which fusion and the
    kernels recognize.

    Before:
    ```mlir
    %s = nn.sigmoid %x : tensor<4x8xf32>
    %y = nn.mul %x, %s : ...
    ```
    After:
    ```mlir
    %y = nn.silu %x : tensor<4x8xf32>
    ```
  }];
}

def RaiseRope : Pass<"loom-raise-rope", "mlir::ModuleOp"> {
  let summary = "x * cos + rotate_half(x) * sin becomes nn.rope";
  let description = [{
    Matches Llama's rotary embedding: `rotate_half(x)` is the concatenation
    of `-x[..., D/2:]` and `x[..., :D/2]`; `cos` and `sin` broadcast as
    `[S, D]` tables (leading unit dims, or identical batch rows of a constant,
    are dropped).

    Before:
    ```mlir
    %a = nn.mul %x, %cos : ...
    %lo = nn.slice %x ... limits = [.., 4] ...
    %hi = nn.slice %x starts = [.., 4] ...
    %n = nn.neg %hi : ...
    %r = nn.concat %n, %lo dim = 3 : ...
    %b = nn.mul %r, %sin : ...
    %y = nn.add %a, %b : ...
    ```
    After:
    ```mlir
    %y = nn.rope %x, %cos2d, %sin2d : ...
    ```
  }];
}

def RaiseAttention : Pass<"loom-raise-attention", "mlir::ModuleOp"> {
  let summary = "softmax(q k^T * scale + mask) v becomes nn.attention";
  let description = [{
    Matches scaled-dot-product attention as exporters decompose it: scale
    factors on q, on k^T or on the scores (multiplied or divided); k^T as a
    transpose of the last two dims, directly or through a 3-D reshape;
    grouped-query heads repeated by reshape + broadcast (read as grouped KV
    heads, no repeat); an additive mask or a `where` with a boolean mask,
    both constant and equal to the causal pattern (or absent); and the NaN
    guard `where(isnan(p), 0, p)` after the softmax.

    Before:
    ```mlir
    %kt = nn.transpose %k permutation = [0, 1, 3, 2] : ...
    %s = nn.matmul %q, %kt : ...
    %ss = nn.mul %s, %scale : ...
    %m = nn.add %ss, %causal_mask : ...
    %p = nn.softmax %m dim = 3 : ...
    %o = nn.matmul %p, %v : ...
    ```
    After:
    ```mlir
    %o = nn.attention %q, %k, %v causal scale = 0.125 : ...
    ```
  }];
}

#endif
