// RUN: loom-opt %s --loom-fp8-mark -split-input-file | FileCheck %s
// RUN: loom-opt %s --loom-fp8-mark='format=hybrid exclude=*.down.*' -split-input-file | FileCheck %s --check-prefix=EXCL
// RUN: not loom-opt %s --loom-fp8-mark='recipe=fancy' -split-input-file 2>&1 | FileCheck %s --check-prefix=BADRECIPE
// RUN: not loom-opt %s --loom-fp8-mark='format=e3m4' -split-input-file 2>&1 | FileCheck %s --check-prefix=BADFORMAT
// RUN: not loom-opt %s --loom-fp8-mark='recipe=tensorwise amax-history=16' -split-input-file 2>&1 | FileCheck %s --check-prefix=BADHISTORY

// BADRECIPE: unknown FP8 recipe 'fancy' (expected tensorwise, tensorwise-delayed, rowwise or blockwise)
// BADFORMAT: unknown FP8 format 'e3m4' (expected e4m3 or hybrid)
// BADHISTORY: fp8 amax history 16 needs recipe tensorwise_delayed

// The blocks' linear layers go FP8 (through the weights' casts); the
// head, whose result reaches the function's result through no other
// contraction, and a GEMM on an embedding's (tied) weight stay as they are.
// CHECK-LABEL: func.func @main
// CHECK: nn.matmul {{.*}}nn.fp8 = #nn.fp8<recipe = tensorwise, format = e4m3>{{.*}}tensor<64x32xbf16>
// CHECK: nn.matmul {{.*}}nn.fp8 = #nn.fp8<recipe = tensorwise, format = e4m3>{{.*}}tensor<32x64xbf16>
// CHECK: nn.matmul %{{[0-9]+}}, %{{[0-9]+}} {transpose_rhs} : (tensor<2x8x32xf32>, tensor<96x32xf32>)
// CHECK: nn.matmul %{{[0-9]+}}, %{{[0-9]+}} {transpose_rhs} : (tensor<2x8x32xf32>, tensor<100x32xf32>)
// CHECK: nn.matmul %{{[0-9]+}}, %{{[0-9]+}} : (tensor<2x8x100xf32>, tensor<100x32xf32>)
// CHECK-NOT: nn.fp8
// EXCL: nn.matmul {{.*}}nn.fp8 = #nn.fp8<recipe = tensorwise, format = hybrid>{{.*}}tensor<64x32xbf16>
// EXCL: nn.matmul %{{[^ ]*}}, %{{[^ ]*}} {transpose_rhs} : (tensor<2x8x64xbf16>, tensor<32x64xbf16>)
func.func @main(%x: tensor<2x8x32xf32>, %ids: tensor<2x8xi64>) -> (tensor<2x8x96xf32>, tensor<2x8x100xf32>) {
  %up = nn.parameter "layers.0.up.weight" : tensor<64x32xf32>
  %down = nn.parameter "layers.0.down.weight" : tensor<32x64xf32>
  %head = nn.parameter "head.weight" : tensor<96x32xf32>
  %wte = nn.parameter "wte.weight" : tensor<100x32xf32>
  %xb = nn.cast %x : tensor<2x8x32xf32> -> tensor<2x8x32xbf16>
  %upb = nn.cast %up : tensor<64x32xf32> -> tensor<64x32xbf16>
  %downb = nn.cast %down : tensor<32x64xf32> -> tensor<32x64xbf16>
  %h = nn.matmul %xb, %upb {transpose_rhs} : (tensor<2x8x32xbf16>, tensor<64x32xbf16>) -> tensor<2x8x64xbf16>
  %a = nn.silu %h : tensor<2x8x64xbf16>
  %y = nn.matmul %a, %downb {transpose_rhs} : (tensor<2x8x64xbf16>, tensor<32x64xbf16>) -> tensor<2x8x32xbf16>
  %r = nn.add %xb, %y : (tensor<2x8x32xbf16>, tensor<2x8x32xbf16>) -> tensor<2x8x32xbf16>
  %rf = nn.cast %r : tensor<2x8x32xbf16> -> tensor<2x8x32xf32>
  %logits = nn.matmul %rf, %head {transpose_rhs} : (tensor<2x8x32xf32>, tensor<96x32xf32>) -> tensor<2x8x96xf32>
  %e = nn.embedding %wte, %ids : (tensor<100x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
  %t = nn.matmul %e, %wte {transpose_rhs} : (tensor<2x8x32xf32>, tensor<100x32xf32>) -> tensor<2x8x100xf32>
  %s = nn.silu %t : tensor<2x8x100xf32>
  %u = nn.matmul %s, %wte : (tensor<2x8x100xf32>, tensor<100x32xf32>) -> tensor<2x8x32xf32>
  %v = nn.matmul %u, %wte {transpose_rhs} : (tensor<2x8x32xf32>, tensor<100x32xf32>) -> tensor<2x8x100xf32>
  return %logits, %v : tensor<2x8x96xf32>, tensor<2x8x100xf32>
}
