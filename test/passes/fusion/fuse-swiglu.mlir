// RUN: loom-opt %s --loom-fuse-swiglu --split-input-file | FileCheck %s

// A Llama MLP's SwiGLU as the training step lowers it: silu of the gate,
// the up projection (made after the silu), their product; in the backward
// dy * u, dy * s and silu's gradient. One nn.swiglu where the product ran,
// one nn.swiglu_grad where the first gradient product ran; dy * u is never
// written.
// CHECK-LABEL: rt.program @mlp
// CHECK: rt.kernel "nn.matmul"(%{{[0-9]+}}, %{{[0-9]+}}) -> (%[[G:[0-9]+]])
// CHECK: rt.kernel "nn.matmul"(%{{[0-9]+}}, %{{[0-9]+}}) -> (%[[U:[0-9]+]])
// CHECK: rt.kernel "nn.swiglu"(%[[G]], %[[U]]) -> (%[[S:[0-9]+]], %[[H:[0-9]+]])
// CHECK-NOT: "nn.silu"
// CHECK-NOT: "nn.mul"
// CHECK: rt.kernel "nn.swiglu_grad"(%[[G]], %[[U]], %[[S]], %[[DY:[0-9]+]]) -> (%[[DG:[0-9]+]], %[[DU:[0-9]+]])
// CHECK-NOT: "nn.mul"
// CHECK-NOT: "nn.silu_grad"
// CHECK: rt.kernel "nn.matmul"(%[[DU]], %{{[0-9]+}})
// CHECK: rt.output "dg" %[[DG]]
rt.program @mlp rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8x4xbf16>
  %wg = rt.param "wg" : memref<4x16xbf16>
  %wu = rt.param "wu" : memref<4x16xbf16>
  %dy = rt.input "dy" : memref<8x16xbf16>
  %g = rt.alloc : memref<8x16xbf16>
  rt.kernel "nn.matmul" (%x, %wg) -> (%g) : (memref<8x4xbf16>, memref<4x16xbf16>) -> memref<8x16xbf16>
  %s = rt.alloc : memref<8x16xbf16>
  rt.kernel "nn.silu" (%g) -> (%s) : (memref<8x16xbf16>) -> memref<8x16xbf16>
  %u = rt.alloc : memref<8x16xbf16>
  rt.kernel "nn.matmul" (%x, %wu) -> (%u) : (memref<8x4xbf16>, memref<4x16xbf16>) -> memref<8x16xbf16>
  %h = rt.alloc : memref<8x16xbf16>
  rt.kernel "nn.mul" (%s, %u) -> (%h) : (memref<8x16xbf16>, memref<8x16xbf16>) -> memref<8x16xbf16>
  %a = rt.alloc : memref<8x16xbf16>
  rt.kernel "nn.mul" (%dy, %u) -> (%a) : (memref<8x16xbf16>, memref<8x16xbf16>) -> memref<8x16xbf16>
  %du = rt.alloc : memref<8x16xbf16>
  rt.kernel "nn.mul" (%dy, %s) -> (%du) : (memref<8x16xbf16>, memref<8x16xbf16>) -> memref<8x16xbf16>
  %dx = rt.alloc : memref<8x4xbf16>
  rt.kernel "nn.matmul" (%du, %wu) -> (%dx) attrs {transpose_rhs = 1 : i64} : (memref<8x16xbf16>, memref<4x16xbf16>) -> memref<8x4xbf16>
  %dg = rt.alloc : memref<8x16xbf16>
  rt.kernel "nn.silu_grad" (%g, %a) -> (%dg) : (memref<8x16xbf16>, memref<8x16xbf16>) -> memref<8x16xbf16>
  rt.output "h" %h : memref<8x16xbf16>
  rt.output "dx" %dx : memref<8x4xbf16>
  rt.output "dg" %dg : memref<8x16xbf16>
}

// -----

// A product of silu that something reads before the product runs: the
// silu's result must exist there, so nothing fuses.
// CHECK-LABEL: rt.program @read_before
// CHECK: "nn.silu"
// CHECK: "nn.mul"
rt.program @read_before rank = 0 streams = ["compute"] {
  %g = rt.input "g" : memref<8xf32>
  %u = rt.input "u" : memref<8xf32>
  %s = rt.alloc : memref<8xf32>
  rt.kernel "nn.silu" (%g) -> (%s) : (memref<8xf32>) -> memref<8xf32>
  %n = rt.alloc : memref<8xf32>
  rt.kernel "nn.neg" (%s) -> (%n) : (memref<8xf32>) -> memref<8xf32>
  %h = rt.alloc : memref<8xf32>
  rt.kernel "nn.mul" (%s, %u) -> (%h) : (memref<8xf32>, memref<8xf32>) -> memref<8xf32>
  rt.output "n" %n : memref<8xf32>
  rt.output "h" %h : memref<8xf32>
}
