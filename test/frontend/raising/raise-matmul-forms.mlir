// RUN: loom-opt %s --loom-raise-matmul-forms | FileCheck %s

// core ATen's linear: aten.t + aten.mm.
// CHECK-LABEL: func.func @linear
// CHECK-NOT: nn.transpose
// CHECK: nn.matmul %arg0, %arg1 {transpose_rhs} : (tensor<24x32xf32>, tensor<16x32xf32>) -> tensor<24x16xf32>
func.func @linear(%x: tensor<24x32xf32>, %w: tensor<16x32xf32>) -> tensor<24x16xf32> {
  %wt = nn.transpose %w permutation = [1, 0] : tensor<16x32xf32> -> tensor<32x16xf32>
  %y = nn.matmul %x, %wt : (tensor<24x32xf32>, tensor<32x16xf32>) -> tensor<24x16xf32>
  return %y : tensor<24x16xf32>
}

// A transposed weight that something else reads too stays for that reader.
// CHECK-LABEL: func.func @shared_transpose
// CHECK: %[[T:.*]] = nn.transpose %arg1
// CHECK: nn.matmul %arg0, %arg1 {transpose_rhs}
// CHECK: nn.neg %[[T]]
func.func @shared_transpose(%x: tensor<24x32xf32>, %w: tensor<16x32xf32>) -> (tensor<24x16xf32>, tensor<32x16xf32>) {
  %wt = nn.transpose %w permutation = [1, 0] : tensor<16x32xf32> -> tensor<32x16xf32>
  %y = nn.matmul %x, %wt : (tensor<24x32xf32>, tensor<32x16xf32>) -> tensor<24x16xf32>
  %n = nn.neg %wt : tensor<32x16xf32>
  return %y, %n : tensor<24x16xf32>, tensor<32x16xf32>
}

// aten.bmm over [B*H, M, K] x [B*H, K, N], viewed back as [B, H, M, N]:
// one matmul over [B, H].
// CHECK-LABEL: func.func @bmm
// CHECK-NEXT: %[[K:.*]] = nn.reshape %arg1 : tensor<2x2x2x8x12xf32> -> tensor<2x4x8x12xf32>
// CHECK-NEXT: %[[S:.*]] = nn.matmul %arg0, %[[K]] : (tensor<2x4x12x8xf32>, tensor<2x4x8x12xf32>) -> tensor<2x4x12x12xf32>
// CHECK-NEXT: return %[[S]]
func.func @bmm(%q: tensor<2x4x12x8xf32>, %k: tensor<2x2x2x8x12xf32>) -> tensor<2x4x12x12xf32> {
  %a = nn.reshape %q : tensor<2x4x12x8xf32> -> tensor<8x12x8xf32>
  %b = nn.reshape %k : tensor<2x2x2x8x12xf32> -> tensor<8x8x12xf32>
  %s = nn.matmul %a, %b : (tensor<8x12x8xf32>, tensor<8x8x12xf32>) -> tensor<8x12x12xf32>
  %r = nn.reshape %s : tensor<8x12x12xf32> -> tensor<2x4x12x12xf32>
  return %r : tensor<2x4x12x12xf32>
}

// A 3-D product whose result is read as it is stays.
// CHECK-LABEL: func.func @bmm_kept
// CHECK: nn.matmul {{.*}} -> tensor<8x12x12xf32>
func.func @bmm_kept(%q: tensor<2x4x12x8xf32>, %k: tensor<2x4x8x12xf32>) -> tensor<8x12x12xf32> {
  %a = nn.reshape %q : tensor<2x4x12x8xf32> -> tensor<8x12x8xf32>
  %b = nn.reshape %k : tensor<2x4x8x12xf32> -> tensor<8x8x12xf32>
  %s = nn.matmul %a, %b : (tensor<8x12x8xf32>, tensor<8x8x12xf32>) -> tensor<8x12x12xf32>
  return %s : tensor<8x12x12xf32>
}

// A linear layer on a [B, S, K] input as core ATen spells it when the
// input is not contiguous: the transposed weight expanded over B and bmm.
// It becomes the 2-D product with transpose_rhs, viewed back.
// CHECK-LABEL: func.func @expanded_weight
// CHECK-NEXT: %[[X:.*]] = nn.reshape %arg0 : tensor<2x12x32xf32> -> tensor<24x32xf32>
// CHECK-NEXT: %[[Y:.*]] = nn.matmul %[[X]], %arg1 {transpose_rhs} : (tensor<24x32xf32>, tensor<16x32xf32>) -> tensor<24x16xf32>
// CHECK-NEXT: %[[R:.*]] = nn.reshape %[[Y]] : tensor<24x16xf32> -> tensor<2x12x16xf32>
// CHECK-NEXT: return %[[R]]
func.func @expanded_weight(%x: tensor<2x12x32xf32>, %w: tensor<16x32xf32>) -> tensor<2x12x16xf32> {
  %wt = nn.transpose %w permutation = [1, 0] : tensor<16x32xf32> -> tensor<32x16xf32>
  %wb = nn.broadcast %wt : tensor<32x16xf32> -> tensor<2x32x16xf32>
  %y = nn.matmul %x, %wb : (tensor<2x12x32xf32>, tensor<2x32x16xf32>) -> tensor<2x12x16xf32>
  return %y : tensor<2x12x16xf32>
}

// A broadcast that repeats the weight along other dims than the input's
// batch dims stays.
// CHECK-LABEL: func.func @expanded_weight_other_batch
// CHECK: nn.broadcast
// CHECK: nn.matmul {{.*}} -> tensor<2x3x12x16xf32>
func.func @expanded_weight_other_batch(%x: tensor<1x3x12x32xf32>, %w: tensor<32x16xf32>) -> tensor<2x3x12x16xf32> {
  %wb = nn.broadcast %w : tensor<32x16xf32> -> tensor<2x3x32x16xf32>
  %y = nn.matmul %x, %wb : (tensor<1x3x12x32xf32>, tensor<2x3x32x16xf32>) -> tensor<2x3x12x16xf32>
  return %y : tensor<2x3x12x16xf32>
}

// Mamba-2's chunked scan in eager code: (C[:, :, :, None] * B[:, :, None])
// summed over the state dim is a matmul per (batch, head), not a broadcast
// product of L x S x N elements.
// CHECK-LABEL: func.func @contraction
// CHECK-NOT: nn.mul
// CHECK: nn.transpose {{.*}} permutation = [0, 3, 1, 4, 2] : tensor<2x8x1x3x4xf32> -> tensor<2x3x8x4x1xf32>
// CHECK: nn.reshape {{.*}} -> tensor<6x8x4xf32>
// CHECK: nn.transpose {{.*}} permutation = [0, 3, 4, 2, 1] : tensor<2x1x5x3x4xf32> -> tensor<2x3x4x5x1xf32>
// CHECK: nn.reshape {{.*}} -> tensor<6x4x5xf32>
// CHECK: nn.matmul {{.*}} : (tensor<6x8x4xf32>, tensor<6x4x5xf32>) -> tensor<6x8x5xf32>
// CHECK: nn.reshape {{.*}} -> tensor<2x3x8x5xf32>
// CHECK: nn.transpose {{.*}} permutation = [0, 2, 3, 1] : tensor<2x3x8x5xf32> -> tensor<2x8x5x3xf32>
// CHECK-NOT: nn.reduce_sum
func.func @contraction(%c: tensor<2x8x3x4xf32>, %b: tensor<2x5x3x4xf32>) -> tensor<2x8x5x3xf32> {
  %cl = nn.reshape %c : tensor<2x8x3x4xf32> -> tensor<2x8x1x3x4xf32>
  %bs = nn.reshape %b : tensor<2x5x3x4xf32> -> tensor<2x1x5x3x4xf32>
  %p = nn.mul %cl, %bs : (tensor<2x8x1x3x4xf32>, tensor<2x1x5x3x4xf32>) -> tensor<2x8x5x3x4xf32>
  %s = nn.reduce_sum %p dims = [4] : tensor<2x8x5x3x4xf32> -> tensor<2x8x5x3xf32>
  return %s : tensor<2x8x5x3xf32>
}

// A product only one side broadcasts (a mixture of experts' weighted sum
// over its k choices) stays a product and a sum.
// CHECK-LABEL: func.func @weighted_sum
// CHECK: nn.mul
// CHECK: nn.reduce_sum
func.func @weighted_sum(%w: tensor<6x2x1xf32>, %y: tensor<6x2x16xf32>) -> tensor<6x16xf32> {
  %p = nn.mul %w, %y : (tensor<6x2x1xf32>, tensor<6x2x16xf32>) -> tensor<6x2x16xf32>
  %s = nn.reduce_sum %p dims = [1] : tensor<6x2x16xf32> -> tensor<6x16xf32>
  return %s : tensor<6x16xf32>
}
