// RUN: loom-opt %s --loom-fuse-matmul-epilogue --split-input-file | FileCheck %s

// A bias add that alone reads the product becomes the GEMM's epilogue.
// CHECK-LABEL: rt.program @bias
// CHECK: %[[X:.*]] = rt.input "x"
// CHECK: %[[W:.*]] = rt.param "w"
// CHECK: %[[B:.*]] = rt.param "b"
// CHECK: %[[Y:.*]] = rt.alloc : memref<4x16xf32>
// CHECK-NEXT: rt.kernel "nn.matmul"(%[[X]], %[[W]], %[[B]]) -> (%[[Y]]) attrs {epilogue = "bias", transpose_rhs = 1 : i64}
// CHECK-NOT: nn.add
// CHECK: rt.output "y" %[[Y]]
rt.program @bias rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xf32>
  %w = rt.param "w" : memref<16x8xf32>
  %b = rt.param "b" : memref<16xf32>
  %t = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%x, %w) -> (%t) attrs {transpose_rhs = 1 : i64} : (memref<4x8xf32>, memref<16x8xf32>) -> memref<4x16xf32>
  %y = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%t, %b) -> (%y) : (memref<4x16xf32>, memref<16xf32>) -> memref<4x16xf32>
  rt.output "y" %y : memref<4x16xf32>
}

// -----

// A tanh-GELU reading the biased product through a reshape: the GEMM writes
// the activation, seen with the product's shape.
// CHECK-LABEL: rt.program @bias_gelu
// CHECK: %[[V:.*]] = rt.alloc : memref<2x2x16xf32>
// CHECK-NEXT: %[[VIEW:.*]] = rt.alias %[[V]] : memref<2x2x16xf32> -> memref<4x16xf32>
// CHECK-NEXT: rt.kernel "nn.matmul"(%{{.*}}, %{{.*}}, %{{.*}}) -> (%[[VIEW]]) attrs {epilogue = "bias_gelu"}
// CHECK-NOT: nn.gelu
// CHECK: rt.output "v" %[[V]]
rt.program @bias_gelu rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xf32>
  %w = rt.param "w" : memref<8x16xf32>
  %b = rt.param "b" : memref<16xf32>
  %t = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%x, %w) -> (%t) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %u = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%b, %t) -> (%u) : (memref<16xf32>, memref<4x16xf32>) -> memref<4x16xf32>
  %r = rt.alias %u : memref<4x16xf32> -> memref<2x2x16xf32>
  %v = rt.alloc : memref<2x2x16xf32>
  rt.kernel "nn.gelu" (%r) -> (%v) attrs {approximate = "tanh"} : (memref<2x2x16xf32>) -> memref<2x2x16xf32>
  rt.output "v" %v : memref<2x2x16xf32>
}

// -----

// The exact (erf) GELU is not cuBLASLt's; a GELU whose input is also kept
// (for its gradient) cannot be fused either: the bias still is.
// CHECK-LABEL: rt.program @erf_and_kept
// CHECK: rt.kernel "nn.matmul"{{.*}}epilogue = "bias"
// CHECK: rt.kernel "nn.gelu"{{.*}}approximate = "none"
// CHECK: rt.kernel "nn.matmul"{{.*}}epilogue = "bias"
// CHECK: rt.kernel "nn.gelu"{{.*}}approximate = "tanh"
rt.program @erf_and_kept rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xf32>
  %w = rt.param "w" : memref<8x16xf32>
  %b = rt.param "b" : memref<16xf32>
  %t = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%x, %w) -> (%t) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %u = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%t, %b) -> (%u) : (memref<4x16xf32>, memref<16xf32>) -> memref<4x16xf32>
  %v = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.gelu" (%u) -> (%v) attrs {approximate = "none"} : (memref<4x16xf32>) -> memref<4x16xf32>
  rt.output "v" %v : memref<4x16xf32>
  %t2 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%x, %w) -> (%t2) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %u2 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%t2, %b) -> (%u2) : (memref<4x16xf32>, memref<16xf32>) -> memref<4x16xf32>
  %v2 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.gelu" (%u2) -> (%v2) attrs {approximate = "tanh"} : (memref<4x16xf32>) -> memref<4x16xf32>
  rt.output "u2" %u2 : memref<4x16xf32>
  rt.output "v2" %v2 : memref<4x16xf32>
}

// -----

// A product read by anything besides the add stays unfused, and so does an
// add of something that is not a [N] bias.
// CHECK-LABEL: rt.program @not_fused
// CHECK-NOT: epilogue
rt.program @not_fused rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xf32>
  %w = rt.param "w" : memref<8x16xf32>
  %b = rt.param "b" : memref<16xf32>
  %m = rt.param "m" : memref<4x16xf32>
  %t = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%x, %w) -> (%t) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %u = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%t, %b) -> (%u) : (memref<4x16xf32>, memref<16xf32>) -> memref<4x16xf32>
  rt.output "t" %t : memref<4x16xf32>
  rt.output "u" %u : memref<4x16xf32>
  %t2 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%x, %w) -> (%t2) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %u2 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%t2, %m) -> (%u2) : (memref<4x16xf32>, memref<4x16xf32>) -> memref<4x16xf32>
  rt.output "u2" %u2 : memref<4x16xf32>
}
