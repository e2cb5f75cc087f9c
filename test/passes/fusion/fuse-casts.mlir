// RUN: loom-opt %s --loom-fuse-casts --split-input-file | FileCheck %s

// The master weights' casts at the start of a step: one call, at the last
// cast's place; a cast of other types, or one after other work, starts a
// new run; a single cast stays as it is.
// CHECK-LABEL: rt.program @weights
// CHECK-NOT: "nn.cast"(
// CHECK: rt.kernel "nn.cast_multi"(%[[W0:[0-9]+]], %[[W1:[0-9]+]], %[[W2:[0-9]+]]) -> (%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) on "compute"
// CHECK-NEXT: %{{[0-9]+}} = rt.alloc : memref<4xf32>
// CHECK-NEXT: rt.kernel "nn.cast"(%{{[0-9]+}})
// CHECK-NEXT: rt.alloc
// CHECK-NEXT: rt.kernel "nn.relu"
// CHECK: rt.kernel "nn.cast"(%[[W0]])
// CHECK-NOT: nn.cast_multi
rt.program @weights rank = 0 streams = ["compute"] {
  %w0 = rt.param "w0" : memref<64x32xf32>
  %w1 = rt.param "w1" : memref<32xf32>
  %w2 = rt.param "w2" : memref<3x5xf32>
  %h = rt.input "h" : memref<4xbf16>
  %b0 = rt.alloc : memref<64x32xbf16>
  rt.kernel "nn.cast" (%w0) -> (%b0) on "compute" : (memref<64x32xf32>) -> memref<64x32xbf16>
  %b1 = rt.alloc : memref<32xbf16>
  rt.kernel "nn.cast" (%w1) -> (%b1) on "compute" : (memref<32xf32>) -> memref<32xbf16>
  %b2 = rt.alloc : memref<3x5xbf16>
  rt.kernel "nn.cast" (%w2) -> (%b2) on "compute" : (memref<3x5xf32>) -> memref<3x5xbf16>
  %hf = rt.alloc : memref<4xf32>
  rt.kernel "nn.cast" (%h) -> (%hf) on "compute" : (memref<4xbf16>) -> memref<4xf32>
  %r = rt.alloc : memref<4xf32>
  rt.kernel "nn.relu" (%hf) -> (%r) on "compute" : (memref<4xf32>) -> memref<4xf32>
  %c0 = rt.alloc : memref<64x32xbf16>
  rt.kernel "nn.cast" (%w0) -> (%c0) on "compute" : (memref<64x32xf32>) -> memref<64x32xbf16>
  rt.output "b0" %b0 : memref<64x32xbf16>
  rt.output "b1" %b1 : memref<32xbf16>
  rt.output "b2" %b2 : memref<3x5xbf16>
  rt.output "r" %r : memref<4xf32>
  rt.output "c0" %c0 : memref<64x32xbf16>
}

// -----

// A cast reading an earlier cast's result is not moved before it.
// CHECK-LABEL: rt.program @chained
// CHECK: rt.kernel "nn.cast"(
// CHECK-NEXT: rt.alloc
// CHECK-NEXT: rt.kernel "nn.cast"(
rt.program @chained rank = 0 streams = ["compute"] {
  %w = rt.param "w" : memref<8xf32>
  %a = rt.alloc : memref<8xbf16>
  rt.kernel "nn.cast" (%w) -> (%a) : (memref<8xf32>) -> memref<8xbf16>
  %b = rt.alloc : memref<8xf32>
  rt.kernel "nn.cast" (%a) -> (%b) : (memref<8xbf16>) -> memref<8xf32>
  rt.output "b" %b : memref<8xf32>
}
