// RUN: loom-opt %s --loom-fuse-linear-cross-entropy=chunk=48 --split-input-file | FileCheck %s
// RUN: loom-opt %s --loom-fuse-linear-cross-entropy --split-input-file | FileCheck %s --check-prefix=AUTO
// RUN: loom-opt %s --loom-fuse-linear-cross-entropy=chunk=48 --loom-lower-to-rt=entry=head | FileCheck %s --check-prefix=RT

// The LM head of a bf16 training step after --loom-widen-results: f32
// logits, the loss, its bf16 gradient, and the two GEMMs reading that. The
// five ops become one nn.linear_cross_entropy over the [B*S, H] rows; dx
// comes back through a reshape, dw and the loss replace theirs.
// CHECK-LABEL: func.func @head
// CHECK-NOT: nn.cross_entropy
// CHECK: %[[X:.*]] = nn.reshape %arg0 : tensor<2x64x32xbf16> -> tensor<128x32xbf16>
// CHECK: %[[LOSS:.*]], %[[DX:.*]], %[[DW:.*]] = nn.linear_cross_entropy %[[X]], %arg1, %arg2, %arg3 chunk = 48 {loom.microbatch = 0 : i64} : (tensor<128x32xbf16>, tensor<256x32xbf16>, tensor<128xi64>, tensor<f32>) -> (tensor<f32>, tensor<128x32xbf16>, tensor<256x32xf32>)
// CHECK-NOT: nn.matmul
// CHECK-NOT: nn.cross_entropy
// CHECK: %[[DX3:.*]] = nn.reshape %[[DX]] : tensor<128x32xbf16> -> tensor<2x64x32xbf16>
// CHECK: return %[[LOSS]], %[[DX3]], %[[DW]]
// The automatic chunk: all 128 rows (fewer than 2048).
// AUTO-LABEL: func.func @head
// AUTO: nn.linear_cross_entropy {{.*}} chunk = 128
// Lowered, the kernel gets its scratch: a 48-row chunk's f32 logits (48 *
// 256 = 12288 words), its bf16 gradient (6144), 128 row losses (128) and
// the count (64).
// RT-LABEL: rt.program @head
// RT: rt.kernel "nn.linear_cross_entropy"({{.*}}) -> ({{.*}}) attrs {chunk = 48 : i64, ignore_index = -100 : i64, reduction = "mean"} {{.*}} -> (memref<f32>, memref<128x32xbf16>, memref<256x32xf32>, memref<18624xf32>)
func.func @head(%x: tensor<2x64x32xbf16>, %w: tensor<256x32xbf16>, %labels: tensor<128xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<2x64x32xbf16>, tensor<256x32xf32>) {
  %logits = nn.matmul %x, %w {loom.microbatch = 0 : i64, transpose_rhs} : (tensor<2x64x32xbf16>, tensor<256x32xbf16>) -> tensor<2x64x256xf32>
  %flat = nn.reshape %logits : tensor<2x64x256xf32> -> tensor<128x256xf32>
  %loss = nn.cross_entropy %flat, %labels {loom.microbatch = 0 : i64} : (tensor<128x256xf32>, tensor<128xi64>) -> tensor<f32>
  %g = nn.cross_entropy_grad %flat, %labels, %seed : (tensor<128x256xf32>, tensor<128xi64>, tensor<f32>) -> tensor<128x256xbf16>
  %g3 = nn.reshape %g : tensor<128x256xbf16> -> tensor<2x64x256xbf16>
  %dx = nn.matmul %g3, %w : (tensor<2x64x256xbf16>, tensor<256x32xbf16>) -> tensor<2x64x32xbf16>
  %x2 = nn.reshape %x : tensor<2x64x32xbf16> -> tensor<128x32xbf16>
  %dw = nn.matmul %g, %x2 {transpose_lhs} : (tensor<128x256xbf16>, tensor<128x32xbf16>) -> tensor<256x32xf32>
  return %loss, %dx, %dw : tensor<f32>, tensor<2x64x32xbf16>, tensor<256x32xf32>
}

// -----

// Logits that something else reads (returned here) must exist: nothing
// fuses.
// CHECK-LABEL: func.func @logits_returned
// CHECK-NOT: nn.linear_cross_entropy
// CHECK: nn.cross_entropy_grad
func.func @logits_returned(%x: tensor<128x32xbf16>, %w: tensor<256x32xbf16>, %labels: tensor<128xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<128x32xbf16>, tensor<256x32xf32>, tensor<128x256xf32>) {
  %logits = nn.matmul %x, %w {transpose_rhs} : (tensor<128x32xbf16>, tensor<256x32xbf16>) -> tensor<128x256xf32>
  %loss = nn.cross_entropy %logits, %labels : (tensor<128x256xf32>, tensor<128xi64>) -> tensor<f32>
  %g = nn.cross_entropy_grad %logits, %labels, %seed : (tensor<128x256xf32>, tensor<128xi64>, tensor<f32>) -> tensor<128x256xbf16>
  %dx = nn.matmul %g, %w : (tensor<128x256xbf16>, tensor<256x32xbf16>) -> tensor<128x32xbf16>
  %dw = nn.matmul %g, %x {transpose_lhs} : (tensor<128x256xbf16>, tensor<128x32xbf16>) -> tensor<256x32xf32>
  return %loss, %dx, %dw, %logits : tensor<f32>, tensor<128x32xbf16>, tensor<256x32xf32>, tensor<128x256xf32>
}

// -----

// A gradient that a third op reads (its norm, say) must exist too.
// CHECK-LABEL: func.func @gradient_read_elsewhere
// CHECK-NOT: nn.linear_cross_entropy
func.func @gradient_read_elsewhere(%x: tensor<128x32xbf16>, %w: tensor<256x32xbf16>, %labels: tensor<128xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<128x32xbf16>, tensor<256x32xf32>, tensor<128x256xbf16>) {
  %logits = nn.matmul %x, %w {transpose_rhs} : (tensor<128x32xbf16>, tensor<256x32xbf16>) -> tensor<128x256xf32>
  %loss = nn.cross_entropy %logits, %labels : (tensor<128x256xf32>, tensor<128xi64>) -> tensor<f32>
  %g = nn.cross_entropy_grad %logits, %labels, %seed : (tensor<128x256xf32>, tensor<128xi64>, tensor<f32>) -> tensor<128x256xbf16>
  %dx = nn.matmul %g, %w : (tensor<128x256xbf16>, tensor<256x32xbf16>) -> tensor<128x32xbf16>
  %dw = nn.matmul %g, %x {transpose_lhs} : (tensor<128x256xbf16>, tensor<128x32xbf16>) -> tensor<256x32xf32>
  %sq = nn.mul %g, %g : (tensor<128x256xbf16>, tensor<128x256xbf16>) -> tensor<128x256xbf16>
  return %loss, %dx, %dw, %sq : tensor<f32>, tensor<128x32xbf16>, tensor<256x32xf32>, tensor<128x256xbf16>
}

// -----

// A loss of another reduction than its gradient's is not one loss.
// CHECK-LABEL: func.func @reductions_differ
// CHECK-NOT: nn.linear_cross_entropy
func.func @reductions_differ(%x: tensor<128x32xbf16>, %w: tensor<256x32xbf16>, %labels: tensor<128xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<128x32xbf16>, tensor<256x32xf32>) {
  %logits = nn.matmul %x, %w {transpose_rhs} : (tensor<128x32xbf16>, tensor<256x32xbf16>) -> tensor<128x256xf32>
  %loss = nn.cross_entropy %logits, %labels reduction = sum : (tensor<128x256xf32>, tensor<128xi64>) -> tensor<f32>
  %g = nn.cross_entropy_grad %logits, %labels, %seed : (tensor<128x256xf32>, tensor<128xi64>, tensor<f32>) -> tensor<128x256xbf16>
  %dx = nn.matmul %g, %w : (tensor<128x256xbf16>, tensor<256x32xbf16>) -> tensor<128x32xbf16>
  %dw = nn.matmul %g, %x {transpose_lhs} : (tensor<128x256xbf16>, tensor<128x32xbf16>) -> tensor<256x32xf32>
  return %loss, %dx, %dw : tensor<f32>, tensor<128x32xbf16>, tensor<256x32xf32>
}
