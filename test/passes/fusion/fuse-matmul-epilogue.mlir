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
// add of something that is neither a [N] bias nor of the product's shape.
// CHECK-LABEL: rt.program @not_fused
// CHECK-NOT: epilogue
rt.program @not_fused rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xf32>
  %w = rt.param "w" : memref<8x16xf32>
  %b = rt.param "b" : memref<16xf32>
  %m = rt.param "m" : memref<4x1xf32>
  %t = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%x, %w) -> (%t) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %u = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%t, %b) -> (%u) : (memref<4x16xf32>, memref<16xf32>) -> memref<4x16xf32>
  rt.output "t" %t : memref<4x16xf32>
  rt.output "u" %u : memref<4x16xf32>
  %t2 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%x, %w) -> (%t2) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %u2 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%t2, %m) -> (%u2) : (memref<4x16xf32>, memref<4x1xf32>) -> memref<4x16xf32>
  rt.output "u2" %u2 : memref<4x16xf32>
}

// -----

// A residual added to the product (same shape and type): the GEMM adds it
// (epilogue "add", cuBLASLt's beta = 1) and writes the sum.
// CHECK-LABEL: rt.program @residual
// CHECK: %[[R:.*]] = rt.input "r"
// CHECK: %[[Y:.*]] = rt.alloc : memref<4x16xbf16>
// CHECK-NEXT: rt.kernel "nn.matmul"(%{{.*}}, %{{.*}}, %[[R]]) -> (%[[Y]]) attrs {epilogue = "add", transpose_rhs = 1 : i64}
// CHECK-NOT: nn.add
// CHECK: rt.output "y" %[[Y]]
rt.program @residual rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xbf16>
  %r = rt.input "r" : memref<4x16xbf16>
  %w = rt.param "w" : memref<16x8xbf16>
  %t = rt.alloc : memref<4x16xbf16>
  rt.kernel "nn.matmul" (%x, %w) -> (%t) attrs {transpose_rhs = 1 : i64} : (memref<4x8xbf16>, memref<16x8xbf16>) -> memref<4x16xbf16>
  %y = rt.alloc : memref<4x16xbf16>
  rt.kernel "nn.add" (%r, %t) -> (%y) : (memref<4x16xbf16>, memref<4x16xbf16>) -> memref<4x16xbf16>
  rt.output "y" %y : memref<4x16xbf16>
}

// -----

// A sum of three GEMMs' results (an input gradient from the Q, K and V
// projections, or a weight gradient over microbatches): each GEMM continues
// the sum of the ones before, where the later operand is ready; no add is left.
// CHECK-LABEL: rt.program @sum_of_three
// CHECK: rt.kernel "nn.matmul"(%{{[0-9]+}}, %{{[0-9]+}}) -> (%[[P0:[0-9]+]])
// CHECK: rt.kernel "nn.matmul"(%{{[0-9]+}}, %{{[0-9]+}}, %[[P0]]) -> (%[[S1:[0-9]+]]) attrs {epilogue = "add"}
// CHECK: rt.kernel "nn.matmul"(%{{[0-9]+}}, %{{[0-9]+}}, %[[S1]]) -> (%[[S2:[0-9]+]]) attrs {epilogue = "add"}
// CHECK-NOT: nn.add
// CHECK: rt.output "dx" %[[S2]]
rt.program @sum_of_three rank = 0 streams = ["compute"] {
  %g0 = rt.input "g0" : memref<4x8xf32>
  %g1 = rt.input "g1" : memref<4x8xf32>
  %g2 = rt.input "g2" : memref<4x8xf32>
  %w = rt.param "w" : memref<8x16xf32>
  %p0 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%g0, %w) -> (%p0) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %p1 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%g1, %w) -> (%p1) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %s1 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%p0, %p1) -> (%s1) : (memref<4x16xf32>, memref<4x16xf32>) -> memref<4x16xf32>
  %p2 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%g2, %w) -> (%p2) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %s2 = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%s1, %p2) -> (%s2) : (memref<4x16xf32>, memref<4x16xf32>) -> memref<4x16xf32>
  rt.output "dx" %s2 : memref<4x16xf32>
}

// -----

// An add of another shape (a broadcast) is not an addend: nothing changes.
// CHECK-LABEL: rt.program @broadcast
// CHECK: rt.kernel "nn.add"
rt.program @broadcast rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xf32>
  %r = rt.input "r" : memref<1x16xf32>
  %w = rt.param "w" : memref<8x16xf32>
  %t = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.matmul" (%x, %w) -> (%t) : (memref<4x8xf32>, memref<8x16xf32>) -> memref<4x16xf32>
  %y = rt.alloc : memref<4x16xf32>
  rt.kernel "nn.add" (%t, %r) -> (%y) : (memref<4x16xf32>, memref<1x16xf32>) -> memref<4x16xf32>
  rt.output "y" %y : memref<4x16xf32>
}

// -----

// A norm's input gradient plus the residual's gradient: the norm gradient
// kernel adds it (has_addend), the add goes.
// CHECK-LABEL: rt.program @norm_grad_residual
// CHECK: %[[R:.*]] = rt.input "r"
// CHECK: %[[D:.*]] = rt.alloc : memref<4x16xbf16>
// CHECK-NEXT: rt.kernel "nn.rms_norm_grad"(%{{.*}}, %{{.*}}, %{{.*}}, %[[R]]) -> (%[[D]]) attrs {epsilon = 1.000000e-05 : f64, has_addend = 1 : i64, has_weight = 1 : i64}
// CHECK-NOT: nn.add
// CHECK: rt.output "dx" %[[D]]
rt.program @norm_grad_residual rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x16xbf16>
  %dy = rt.input "dy" : memref<4x16xbf16>
  %r = rt.input "r" : memref<4x16xbf16>
  %w = rt.param "w" : memref<16xbf16>
  %t = rt.alloc : memref<4x16xbf16>
  rt.kernel "nn.rms_norm_grad" (%x, %dy, %w) -> (%t) attrs {epsilon = 1.000000e-05 : f64, has_weight = 1 : i64} : (memref<4x16xbf16>, memref<4x16xbf16>, memref<16xbf16>) -> memref<4x16xbf16>
  %d = rt.alloc : memref<4x16xbf16>
  rt.kernel "nn.add" (%t, %r) -> (%d) : (memref<4x16xbf16>, memref<4x16xbf16>) -> memref<4x16xbf16>
  rt.output "dx" %d : memref<4x16xbf16>
}
