// RUN: loom-opt %s --loom-unfuse=keep-generatable --loom-lower-to-rt -split-input-file -verify-diagnostics | FileCheck %s

// A group the CUDA code generator takes becomes one rt.kernel "nn.fused"
// call: its inputs, one fresh buffer per yielded value, the body as text.
// The product, not yielded, gets no buffer at all.
// CHECK-LABEL: rt.program @main
// CHECK:      %[[X:.*]] = rt.input "x" : memref<3x37xbf16>
// CHECK-NEXT: %[[G:.*]] = rt.input "g" : memref<3x37xbf16>
// CHECK-NEXT: %[[U:.*]] = rt.input "u" : memref<3x37xbf16>
// CHECK-NEXT: %[[D:.*]] = rt.alloc {{.*}}: memref<3x37xbf16>
// CHECK-NEXT: rt.kernel "nn.fused"(%[[G]], %[[U]], %[[X]]) -> (%[[D]]) attrs {body = "(bf16[3,37], bf16[3,37], bf16[3,37]) { %0 = nn.mul(%i0, %i1) : bf16[3,37]; %1 = nn.silu_grad(%i2, %0) : bf16[3,37]; yield %1 }"} : (memref<3x37xbf16>, memref<3x37xbf16>, memref<3x37xbf16>) -> memref<3x37xbf16>
// CHECK-NEXT: rt.output "dx" %[[D]]
// CHECK-NOT:  rt.alloc
func.func @main(%x: tensor<3x37xbf16> {loom.name = "x"}, %g: tensor<3x37xbf16> {loom.name = "g"},
                %u: tensor<3x37xbf16> {loom.name = "u"}) -> (tensor<3x37xbf16> {loom.name = "dx"}) {
  %r = nn.fused (%g, %u, %x) : (tensor<3x37xbf16>, tensor<3x37xbf16>, tensor<3x37xbf16>) -> tensor<3x37xbf16> {
  ^bb0(%a: tensor<3x37xbf16>, %b: tensor<3x37xbf16>, %c: tensor<3x37xbf16>):
    %m = nn.mul %a, %b : (tensor<3x37xbf16>, tensor<3x37xbf16>) -> tensor<3x37xbf16>
    %d = nn.silu_grad %c, %m : tensor<3x37xbf16>
    nn.yield %d : tensor<3x37xbf16>
  }
  return %r : tensor<3x37xbf16>
}

// -----

// The members' kernel attributes are in the body, defaults explicit (gelu's
// approximation), and a group may yield several values.
// CHECK-LABEL: rt.program @main
// CHECK: rt.kernel "nn.fused"(%{{.*}}, %{{.*}}) -> (%{{.*}}, %{{.*}}) attrs {body = "(f32[4,8], f32[8]) { %0 = nn.add(%i0, %i1) : f32[4,8]; %1 = nn.gelu(%0) {approximate = none} : f32[4,8]; %2 = nn.cast(%1) : bf16[4,8]; yield %2, %0 }"}
func.func @main(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
  %r:2 = nn.fused (%x, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
  ^bb0(%p: tensor<4x8xf32>, %q: tensor<8xf32>):
    %s = nn.add %p, %q : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %g = nn.gelu %s : tensor<4x8xf32>
    %c = nn.cast %g : tensor<4x8xf32> -> tensor<4x8xbf16>
    nn.yield %c, %s : tensor<4x8xbf16>, tensor<4x8xf32>
  }
  return %r#0, %r#1 : tensor<4x8xbf16>, tensor<4x8xf32>
}

// -----

// A group with a row reduction is inlined first: its ops are kernels of
// their own.
// CHECK-LABEL: rt.program @main
// CHECK-NOT: nn.fused
// CHECK: rt.kernel "nn.mul"
// CHECK: rt.kernel "nn.reduce_sum"
func.func @main(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %r = nn.fused (%x) : (tensor<4x8xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %sq = nn.mul %a, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %s = nn.reduce_sum %sq dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
    nn.yield %s : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
