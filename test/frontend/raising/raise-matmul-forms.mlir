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
