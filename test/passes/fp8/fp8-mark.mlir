// RUN: loom-opt %s --loom-fp8-mark -split-input-file | FileCheck %s
// RUN: loom-opt %s --loom-fp8-mark='format=hybrid exclude=*.down.*' -split-input-file | FileCheck %s --check-prefix=EXCL
// RUN: loom-opt %s --loom-fp8-mark -split-input-file 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
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

// -----

// A mixture-of-experts router stays in the compute type (its logits reach
// a top-k through no other contraction, here through a softmax); the
// expert-shaped linear layer beside it goes FP8, and the pass says once
// that the experts' grouped GEMMs stay as they are.
// CHECK-LABEL: func.func @router
// CHECK: nn.matmul %arg0, %{{[0-9]+}} {transpose_rhs} : (tensor<16x32xbf16>, tensor<8x32xbf16>) -> tensor<16x8xbf16>
// CHECK: nn.matmul {{.*}}nn.fp8 = #nn.fp8<recipe = tensorwise, format = e4m3>{{.*}}tensor<64x32xbf16>
// REMARK: remark: --fp8: the experts' 1 grouped GEMM(s) stay in 'bf16' (no FP8 grouped GEMM yet)
func.func @router(%x: tensor<16x32xbf16>, %offsets: tensor<8xi32>) -> (tensor<16x2xbf16>, tensor<16x2xi64>, tensor<16x32xbf16>, tensor<16x16xbf16>) {
  %gate = nn.parameter "layers.0.mlp.gate.weight" : tensor<8x32xf32>
  %shared = nn.parameter "layers.0.mlp.shared.weight" : tensor<64x32xf32>
  %head = nn.parameter "head.weight" : tensor<32x64xf32>
  %experts = nn.parameter "layers.0.mlp.experts.down" : tensor<8x32x16xf32>
  %gateb = nn.cast %gate : tensor<8x32xf32> -> tensor<8x32xbf16>
  %sharedb = nn.cast %shared : tensor<64x32xf32> -> tensor<64x32xbf16>
  %headb = nn.cast %head : tensor<32x64xf32> -> tensor<32x64xbf16>
  %expertsb = nn.cast %experts : tensor<8x32x16xf32> -> tensor<8x32x16xbf16>
  %logits = nn.matmul %x, %gateb {transpose_rhs} : (tensor<16x32xbf16>, tensor<8x32xbf16>) -> tensor<16x8xbf16>
  %p = nn.softmax %logits dim = 1 : tensor<16x8xbf16>
  %w, %i = nn.topk %p k = 2 : (tensor<16x8xbf16>) -> (tensor<16x2xbf16>, tensor<16x2xi64>)
  %s = nn.matmul %x, %sharedb {transpose_rhs} : (tensor<16x32xbf16>, tensor<64x32xbf16>) -> tensor<16x64xbf16>
  %a = nn.silu %s : tensor<16x64xbf16>
  %y = nn.matmul %a, %headb {transpose_rhs} : (tensor<16x64xbf16>, tensor<32x64xbf16>) -> tensor<16x32xbf16>
  %g = nn.grouped_matmul %x, %expertsb, %offsets : (tensor<16x32xbf16>, tensor<8x32x16xbf16>, tensor<8xi32>) -> tensor<16x16xbf16>
  return %w, %i, %y, %g : tensor<16x2xbf16>, tensor<16x2xi64>, tensor<16x32xbf16>, tensor<16x16xbf16>
}

// -----

// The same with the router raised to nn.router: its logits' GEMM stays.
// CHECK-LABEL: func.func @raised_router
// CHECK: nn.matmul %arg0, %{{[0-9]+}} {transpose_rhs} : (tensor<16x32xbf16>, tensor<8x32xbf16>) -> tensor<16x8xbf16>
// CHECK-NOT: nn.fp8
// CHECK: nn.router
func.func @raised_router(%x: tensor<16x32xbf16>) -> (tensor<16x2xbf16>, tensor<16x2xi64>) {
  %gate = nn.parameter "layers.0.mlp.gate.weight" : tensor<8x32xf32>
  %gateb = nn.cast %gate : tensor<8x32xf32> -> tensor<8x32xbf16>
  %logits = nn.matmul %x, %gateb {transpose_rhs} : (tensor<16x32xbf16>, tensor<8x32xbf16>) -> tensor<16x8xbf16>
  %w, %i, %p = nn.router %logits k = 2 {normalize} : (tensor<16x8xbf16>) -> (tensor<16x2xbf16>, tensor<16x2xi64>, tensor<16x8xbf16>)
  return %w, %i : tensor<16x2xbf16>, tensor<16x2xi64>
}
