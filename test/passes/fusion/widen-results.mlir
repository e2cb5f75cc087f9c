// RUN: loom-opt %s --loom-widen-results --split-input-file | FileCheck %s

// A bf16 weight gradient cast to f32: the GEMM writes f32 itself.
// CHECK-LABEL: func.func @wgrad
// CHECK: %[[G:.*]] = nn.matmul %arg0, %arg1 {transpose_lhs} : (tensor<64x192xbf16>, tensor<64x512xbf16>) -> tensor<192x512xf32>
// CHECK-NOT: nn.cast
// CHECK: return %[[G]]
func.func @wgrad(%x: tensor<64x192xbf16>, %dy: tensor<64x512xbf16>) -> tensor<192x512xf32> {
  %g = nn.matmul %x, %dy {transpose_lhs} : (tensor<64x192xbf16>, tensor<64x512xbf16>) -> tensor<192x512xbf16>
  %f = nn.cast %g : tensor<192x512xbf16> -> tensor<192x512xf32>
  return %f : tensor<192x512xf32>
}

// -----

// The experts' weight gradient, cast to f32 for their f32 master weights:
// the grouped GEMM writes its f32 accumulators itself.
// CHECK-LABEL: func.func @grouped_wgrad
// CHECK: %[[G:.*]] = nn.grouped_matmul_weight_grad %arg0, %arg1, %arg2 : (tensor<96x32xbf16>, tensor<96x48xbf16>, tensor<4xi32>) -> tensor<4x32x48xf32>
// CHECK-NOT: nn.cast
// CHECK: return %[[G]]
func.func @grouped_wgrad(%x: tensor<96x32xbf16>, %dy: tensor<96x48xbf16>, %o: tensor<4xi32>) -> tensor<4x32x48xf32> {
  %g = nn.grouped_matmul_weight_grad %x, %dy, %o : (tensor<96x32xbf16>, tensor<96x48xbf16>, tensor<4xi32>) -> tensor<4x32x48xbf16>
  %f = nn.cast %g : tensor<4x32x48xbf16> -> tensor<4x32x48xf32>
  return %f : tensor<4x32x48xf32>
}

// -----

// The bf16 product is read elsewhere too: it stays, and so does the cast.
// CHECK-LABEL: func.func @two_uses
// CHECK: nn.matmul {{.*}} -> tensor<4x16xbf16>
// CHECK: nn.cast
func.func @two_uses(%x: tensor<4x8xbf16>, %w: tensor<16x8xbf16>) -> (tensor<4x16xf32>, tensor<4x16xbf16>) {
  %y = nn.matmul %x, %w {transpose_rhs} : (tensor<4x8xbf16>, tensor<16x8xbf16>) -> tensor<4x16xbf16>
  %f = nn.cast %y : tensor<4x16xbf16> -> tensor<4x16xf32>
  return %f, %y : tensor<4x16xf32>, tensor<4x16xbf16>
}

// -----

// Narrowing casts, casts between same-width types and casts of ops that
// cannot widen their result are left alone.
// CHECK-LABEL: func.func @not_widening
// CHECK: nn.matmul {{.*}} -> tensor<4x16xf32>
// CHECK: nn.cast {{.*}} -> tensor<4x16xbf16>
// CHECK: nn.matmul {{.*}} -> tensor<4x16xbf16>
// CHECK: nn.cast {{.*}} -> tensor<4x16xf16>
// CHECK: nn.add
// CHECK: nn.cast {{.*}} -> tensor<4x8xf32>
func.func @not_widening(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %xb: tensor<4x8xbf16>, %wb: tensor<16x8xbf16>)
    -> (tensor<4x16xbf16>, tensor<4x16xf16>, tensor<4x8xf32>) {
  %y = nn.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %n = nn.cast %y : tensor<4x16xf32> -> tensor<4x16xbf16>
  %yb = nn.matmul %xb, %wb {transpose_rhs} : (tensor<4x8xbf16>, tensor<16x8xbf16>) -> tensor<4x16xbf16>
  %h = nn.cast %yb : tensor<4x16xbf16> -> tensor<4x16xf16>
  %s = nn.add %xb, %xb : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %sf = nn.cast %s : tensor<4x8xbf16> -> tensor<4x8xf32>
  return %n, %h, %sf : tensor<4x16xbf16>, tensor<4x16xf16>, tensor<4x8xf32>
}

// -----

// A narrowing cast of the loss gradient (through its reshape) is folded:
// cross_entropy_grad rounds once to bf16, and the f32 gradient is never
// written.
// CHECK-LABEL: func.func @loss_gradient
// CHECK: %[[G:.*]] = nn.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} : (tensor<8x16xf32>, tensor<8xi64>, tensor<f32>) -> tensor<8x16xbf16>
// CHECK-NEXT: %[[R:.*]] = nn.reshape %[[G]] : tensor<8x16xbf16> -> tensor<2x4x16xbf16>
// CHECK-NOT: nn.cast
// CHECK: return %[[R]]
func.func @loss_gradient(%logits: tensor<8x16xf32>, %labels: tensor<8xi64>, %seed: tensor<f32>) -> tensor<2x4x16xbf16> {
  %g = nn.cross_entropy_grad %logits, %labels, %seed : (tensor<8x16xf32>, tensor<8xi64>, tensor<f32>) -> tensor<8x16xf32>
  %r = nn.reshape %g : tensor<8x16xf32> -> tensor<2x4x16xf32>
  %c = nn.cast %r : tensor<2x4x16xf32> -> tensor<2x4x16xbf16>
  return %c : tensor<2x4x16xbf16>
}

// -----

// Not folded: a widening cast of the loss gradient (it computes in f32 and
// cannot write more than it has), and a narrowing cast of a GEMM.
// CHECK-LABEL: func.func @kept
// CHECK: nn.cast
// CHECK: nn.cast
func.func @kept(%logits: tensor<8x16xbf16>, %labels: tensor<8xi64>, %seed: tensor<f32>, %a: tensor<4x8xf32>, %b: tensor<8x4xf32>) -> (tensor<8x16xf32>, tensor<4x4xbf16>) {
  %g = nn.cross_entropy_grad %logits, %labels, %seed : (tensor<8x16xbf16>, tensor<8xi64>, tensor<f32>) -> tensor<8x16xbf16>
  %c = nn.cast %g : tensor<8x16xbf16> -> tensor<8x16xf32>
  %m = nn.matmul %a, %b : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %n = nn.cast %m : tensor<4x4xf32> -> tensor<4x4xbf16>
  return %c, %n : tensor<8x16xf32>, tensor<4x4xbf16>
}
