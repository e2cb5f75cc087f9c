// RUN: loom-opt %s --loom-unfuse=keep-generatable --split-input-file | FileCheck %s
// RUN: loom-opt %s --loom-unfuse --split-input-file | FileCheck %s --check-prefix=ALL

// Elementwise members with scalar formulas over bf16: the CUDA code
// generator takes the group, so it stays for --loom-lower-to-rt.
// CHECK-LABEL: func.func @swiglu
// CHECK: %[[G:.*]]:2 = nn.fused(%arg0, %arg1)
// CHECK: nn.silu
// CHECK: nn.mul
// CHECK: return %[[G]]#0, %[[G]]#1
// ALL-LABEL: func.func @swiglu
// ALL-NOT: nn.fused
// ALL: %[[S:.*]] = nn.silu %arg0
// ALL-NEXT: %[[M:.*]] = nn.mul %[[S]], %arg1
// ALL-NEXT: return %[[S]], %[[M]]
func.func @swiglu(%x: tensor<2x12x64xbf16>, %g: tensor<2x12x64xbf16>) -> (tensor<2x12x64xbf16>, tensor<2x12x64xbf16>) {
  %r:2 = nn.fused (%x, %g) : (tensor<2x12x64xbf16>, tensor<2x12x64xbf16>) -> (tensor<2x12x64xbf16>, tensor<2x12x64xbf16>) {
  ^bb0(%a: tensor<2x12x64xbf16>, %b: tensor<2x12x64xbf16>):
    %s = nn.silu %a : tensor<2x12x64xbf16>
    %m = nn.mul %s, %b : (tensor<2x12x64xbf16>, tensor<2x12x64xbf16>) -> tensor<2x12x64xbf16>
    nn.yield %s, %m : tensor<2x12x64xbf16>, tensor<2x12x64xbf16>
  }
  return %r#0, %r#1 : tensor<2x12x64xbf16>, tensor<2x12x64xbf16>
}

// -----

// Broadcasts, casts and gelu's tanh form (a formula keyed by its attribute)
// are taken too.
// CHECK-LABEL: func.func @broadcast_cast_gelu
// CHECK: nn.fused
// CHECK: nn.broadcast
// CHECK: nn.gelu
// CHECK: nn.cast
func.func @broadcast_cast_gelu(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xbf16> {
  %r = nn.fused (%x, %w) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xbf16> {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<8xf32>):
    %bc = nn.broadcast %b : tensor<8xf32> -> tensor<4x8xf32>
    %s = nn.add %a, %bc : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %g = nn.gelu %s approximate = tanh : tensor<4x8xf32>
    %c = nn.cast %g : tensor<4x8xf32> -> tensor<4x8xbf16>
    nn.yield %c : tensor<4x8xbf16>
  }
  return %r : tensor<4x8xbf16>
}

// -----

// A row reduction has no scalar formula: the group is inlined, and the CPU
// and CUDA backends run its ops one by one.
// CHECK-LABEL: func.func @square_sum
// CHECK-NOT: nn.fused
// CHECK: %[[SQ:.*]] = nn.mul %arg0, %arg0
// CHECK-NEXT: %[[S:.*]] = nn.reduce_sum %[[SQ]] dims = [1]
// CHECK-NEXT: return %[[S]]
func.func @square_sum(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %r = nn.fused (%x) : (tensor<4x8xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %sq = nn.mul %a, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %s = nn.reduce_sum %sq dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
    nn.yield %s : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// Integer values: generated kernels compute in f32 over f32, bf16 and f16
// only, so the group is inlined.
// CHECK-LABEL: func.func @integers
// CHECK-NOT: nn.fused
// CHECK: nn.add
// CHECK-NEXT: nn.mul
func.func @integers(%x: tensor<16xi64>, %y: tensor<16xi64>) -> tensor<16xi64> {
  %r = nn.fused (%x, %y) : (tensor<16xi64>, tensor<16xi64>) -> tensor<16xi64> {
  ^bb0(%a: tensor<16xi64>, %b: tensor<16xi64>):
    %s = nn.add %a, %b : (tensor<16xi64>, tensor<16xi64>) -> tensor<16xi64>
    %m = nn.mul %s, %b : (tensor<16xi64>, tensor<16xi64>) -> tensor<16xi64>
    nn.yield %m : tensor<16xi64>
  }
  return %r : tensor<16xi64>
}

// -----

// Comparisons and selections (an i1 mask between them) are taken too.
// CHECK-LABEL: func.func @mask
// CHECK: nn.fused
// CHECK: nn.compare
// CHECK-NEXT: nn.where
func.func @mask(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = nn.fused (%x, %y) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>):
    %m = nn.compare lt, %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
    %w = nn.where %m, %a, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    nn.yield %w : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}
