// RUN: loom-opt %s --loom-shard-annotate="tp=2" -split-input-file -verify-diagnostics | FileCheck %s

// An MLP: gate and up feed the down projection's input, so they are
// column-parallel (output features over tp); down is left to propagation
// (row-parallel). The weights are found by the dataflow, whatever their names.
// CHECK: module attributes {dist.mesh = #dist.mesh<["tp"=2]>}
// CHECK-LABEL: func.func @mlp
// CHECK: nn.parameter "a" {dist.sharding = [#dist.sharding<{{\[}}["tp"], []]>]}
// CHECK: nn.parameter "b" {dist.sharding = [#dist.sharding<{{\[}}["tp"], []]>]}
// CHECK: nn.parameter "c" : tensor<32x64xf32>
// CHECK: nn.matmul {{.*}}dist.sharding = [#dist.sharding<{{\[\[}}], [], ["tp"]]>]
func.func @mlp(%x: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %wg = nn.parameter "a" : tensor<64x32xf32>
  %wu = nn.parameter "b" : tensor<64x32xf32>
  %wd = nn.parameter "c" : tensor<32x64xf32>
  %g = nn.matmul %x, %wg {transpose_rhs} : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %s = nn.silu %g : tensor<2x8x64xf32>
  %u = nn.matmul %x, %wu {transpose_rhs} : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %h = nn.mul %s, %u : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %y = nn.matmul %h, %wd {transpose_rhs} : (tensor<2x8x64xf32>, tensor<32x64xf32>) -> tensor<2x8x32xf32>
  %r = nn.add %x, %y : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  return %r : tensor<2x8x32xf32>
}

// -----

// Attention: Q, K and V reach nn.attention through reshapes, transposes and
// rotary embeddings (whose whole dim is the head dim, not the features), so
// they are column-parallel; the output projection reads the attention and
// is not (its output reaches the next matmul only through a norm over its
// features), nor is the last matmul, which feeds only the result.
// CHECK-LABEL: func.func @attention
// CHECK: nn.parameter "q" {dist.sharding = [#dist.sharding<{{\[}}["tp"], []]>]}
// CHECK: nn.parameter "k" {dist.sharding = [#dist.sharding<{{\[}}["tp"], []]>]}
// CHECK: nn.parameter "o" : tensor<32x32xf32>
// CHECK: nn.parameter "n" : tensor<32x32xf32>
func.func @attention(%x: tensor<1x8x32xf32>, %cos: tensor<8x8xf32>, %sin: tensor<8x8xf32>) -> tensor<1x8x32xf32> {
  %wq = nn.parameter "q" : tensor<32x32xf32>
  %wk = nn.parameter "k" : tensor<32x32xf32>
  %wo = nn.parameter "o" : tensor<32x32xf32>
  %wn = nn.parameter "n" : tensor<32x32xf32>
  %q = nn.matmul %x, %wq {transpose_rhs} : (tensor<1x8x32xf32>, tensor<32x32xf32>) -> tensor<1x8x32xf32>
  %q4 = nn.reshape %q : tensor<1x8x32xf32> -> tensor<1x8x4x8xf32>
  %qt = nn.transpose %q4 permutation = [0, 2, 1, 3] : tensor<1x8x4x8xf32> -> tensor<1x4x8x8xf32>
  %qr = nn.rope %qt, %cos, %sin : (tensor<1x4x8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8x8xf32>
  %k = nn.matmul %x, %wk {transpose_rhs} : (tensor<1x8x32xf32>, tensor<32x32xf32>) -> tensor<1x8x32xf32>
  %k4 = nn.reshape %k : tensor<1x8x32xf32> -> tensor<1x8x4x8xf32>
  %kt = nn.transpose %k4 permutation = [0, 2, 1, 3] : tensor<1x8x4x8xf32> -> tensor<1x4x8x8xf32>
  %a = nn.attention %qr, %kt, %kt causal : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %at = nn.transpose %a permutation = [0, 2, 1, 3] : tensor<1x4x8x8xf32> -> tensor<1x8x4x8xf32>
  %a3 = nn.reshape %at : tensor<1x8x4x8xf32> -> tensor<1x8x32xf32>
  %o = nn.matmul %a3, %wo {transpose_rhs} : (tensor<1x8x32xf32>, tensor<32x32xf32>) -> tensor<1x8x32xf32>
  %r = nn.add %x, %o : (tensor<1x8x32xf32>, tensor<1x8x32xf32>) -> tensor<1x8x32xf32>
  %y = nn.rms_norm %r : (tensor<1x8x32xf32>) -> tensor<1x8x32xf32>
  %n = nn.matmul %y, %wn {transpose_rhs} : (tensor<1x8x32xf32>, tensor<32x32xf32>) -> tensor<1x8x32xf32>
  return %n : tensor<1x8x32xf32>
}

// -----

// A mesh already in the module: the user's annotations stay as they are.
// CHECK: module attributes {dist.mesh = #dist.mesh<["x"=4]>}
// CHECK-LABEL: func.func @user_annotated
// CHECK: nn.parameter "w" {dist.sharding = [#dist.sharding<{{\[\[}}], ["x"]]>]}
module attributes {dist.mesh = #dist.mesh<["x"=4]>} {
  func.func @user_annotated(%x: tensor<8x16xf32>) -> tensor<8x8xf32> {
    %w = nn.parameter "w" {dist.sharding = [#dist.sharding<[[], ["x"]]>]} : tensor<8x16xf32>
    %y = nn.matmul %x, %w {transpose_rhs} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}

// -----

// Output features that do not divide by tp are an error naming the weight.
func.func @indivisible(%x: tensor<2x32xf32>) -> tensor<2x32xf32> {
  %w1 = nn.parameter "up" : tensor<33x32xf32>
  %w2 = nn.parameter "down" : tensor<32x33xf32>
  // expected-error @+1 {{cannot split weight 'up' 'tensor<33x32xf32>': its 33 output features are not divisible by tp=2}}
  %h = nn.matmul %x, %w1 {transpose_rhs} : (tensor<2x32xf32>, tensor<33x32xf32>) -> tensor<2x33xf32>
  %y = nn.matmul %h, %w2 {transpose_rhs} : (tensor<2x33xf32>, tensor<32x33xf32>) -> tensor<2x32xf32>
  return %y : tensor<2x32xf32>
}

// -----

// Fewer output features than ranks (a gate of one output): the weight stays
// whole, a remark names it, and the others are split as before.
// CHECK-LABEL: func.func @one_output
// CHECK: nn.parameter "gate" : tensor<1x32xf32>
// CHECK: nn.parameter "up" {dist.sharding = [#dist.sharding<{{\[}}["tp"], []]>]}
func.func @one_output(%x: tensor<2x32xf32>) -> tensor<2x32xf32> {
  %g = nn.parameter "gate" : tensor<1x32xf32>
  %w1 = nn.parameter "up" : tensor<64x32xf32>
  %w2 = nn.parameter "down" : tensor<32x64xf32>
  %w3 = nn.parameter "proj" : tensor<32x1xf32>
  // expected-remark @+1 {{--tp 2: weight 'gate' 'tensor<1x32xf32>' stays whole: its 1 output feature(s) are fewer than the ranks}}
  %s = nn.matmul %x, %g {transpose_rhs} : (tensor<2x32xf32>, tensor<1x32xf32>) -> tensor<2x1xf32>
  %t = nn.matmul %s, %w3 {transpose_rhs} : (tensor<2x1xf32>, tensor<32x1xf32>) -> tensor<2x32xf32>
  %h = nn.matmul %t, %w1 {transpose_rhs} : (tensor<2x32xf32>, tensor<64x32xf32>) -> tensor<2x64xf32>
  %y = nn.matmul %h, %w2 {transpose_rhs} : (tensor<2x64xf32>, tensor<32x64xf32>) -> tensor<2x32xf32>
  return %y : tensor<2x32xf32>
}

// -----

// The LM head: its logits feed the loss, so its vocabulary is split.
// CHECK-LABEL: func.func @lm_head
// CHECK: nn.parameter "head" {dist.sharding = [#dist.sharding<{{\[}}["tp"], []]>]}
func.func @lm_head(%x: tensor<8x32xf32>, %labels: tensor<8xi64>) -> tensor<f32> {
  %w = nn.parameter "head" : tensor<96x32xf32>
  %l = nn.matmul %x, %w {transpose_rhs} : (tensor<8x32xf32>, tensor<96x32xf32>) -> tensor<8x96xf32>
  %c = nn.cross_entropy %l, %labels : (tensor<8x96xf32>, tensor<8xi64>) -> tensor<f32>
  return %c : tensor<f32>
}
