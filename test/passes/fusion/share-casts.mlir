// RUN: loom-opt %s --loom-share-casts | FileCheck %s

// Two microbatches each cast the master weight to bf16: the second reads
// the first's cast. A cast to another type stays.
// CHECK-LABEL: func.func @two_microbatches
// CHECK: %[[B:.*]] = nn.cast %arg0 {loom.microbatch = 0 : i64} : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK-NEXT: nn.matmul %arg1, %[[B]]
// CHECK-NEXT: nn.matmul %arg2, %[[B]]
// CHECK-NEXT: nn.cast %arg0 {loom.microbatch = 1 : i64} : tensor<8x4xf32> -> tensor<8x4xf16>
// CHECK-NOT: nn.cast
func.func @two_microbatches(%w: tensor<8x4xf32>, %x0: tensor<2x8xbf16>, %x1: tensor<2x8xbf16>) -> (tensor<2x4xbf16>, tensor<2x4xbf16>, tensor<8x4xf16>) {
  %b0 = nn.cast %w {loom.microbatch = 0 : i64} : tensor<8x4xf32> -> tensor<8x4xbf16>
  %y0 = nn.matmul %x0, %b0 : (tensor<2x8xbf16>, tensor<8x4xbf16>) -> tensor<2x4xbf16>
  %b1 = nn.cast %w {loom.microbatch = 1 : i64} : tensor<8x4xf32> -> tensor<8x4xbf16>
  %y1 = nn.matmul %x1, %b1 : (tensor<2x8xbf16>, tensor<8x4xbf16>) -> tensor<2x4xbf16>
  %h = nn.cast %w {loom.microbatch = 1 : i64} : tensor<8x4xf32> -> tensor<8x4xf16>
  return %y0, %y1, %h : tensor<2x4xbf16>, tensor<2x4xbf16>, tensor<8x4xf16>
}
