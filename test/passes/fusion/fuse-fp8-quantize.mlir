// RUN: loom-opt %s --loom-fuse-fp8-quantize --split-input-file | FileCheck %s

// Blockwise activations: 1 x 128 tiles of x ([256, 2] of [256, 192]) and of
// its copy (x's 128 x 1 column tiles [2, 192], transposed to the copy's
// [192, 2]): one nn.quantize_tiles writing q, qT and both scales where the
// quantization ran; the amaxes' buffers are gone.
// CHECK-LABEL: rt.program @activations
// CHECK-NOT: "nn.amax"
// CHECK-NOT: "nn.fp8_scale"
// CHECK-NOT: "nn.transpose"
// CHECK: rt.kernel "nn.quantize_tiles"(%[[X:[0-9]+]]) -> (%[[Q:[0-9]+]], %[[QT:[0-9]+]], %[[S:[0-9]+]], %[[ST:[0-9]+]]) attrs {format = "e4m3", margin = 0 : i64} on "compute" : (memref<256x192xbf16>) -> (memref<256x192xf8E4M3FN>, memref<192x256xf8E4M3FN>, memref<256x2xf32>, memref<192x2xf32>)
// CHECK-NEXT: rt.output "q" %[[Q]]
rt.program @activations rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<256x192xbf16>
  %a = rt.alloc : memref<256x2xf32>
  rt.kernel "nn.amax" (%x) -> (%a) on "compute" : (memref<256x192xbf16>) -> memref<256x2xf32>
  %s = rt.alloc : memref<256x2xf32>
  rt.kernel "nn.fp8_scale" (%a) -> (%s) attrs {format = "e4m3", margin = 0 : i64} on "compute" : (memref<256x2xf32>) -> memref<256x2xf32>
  %at = rt.alloc : memref<2x192xf32>
  rt.kernel "nn.amax" (%x) -> (%at) on "compute" : (memref<256x192xbf16>) -> memref<2x192xf32>
  %sx = rt.alloc : memref<2x192xf32>
  rt.kernel "nn.fp8_scale" (%at) -> (%sx) attrs {format = "e4m3", margin = 0 : i64} on "compute" : (memref<2x192xf32>) -> memref<2x192xf32>
  %st = rt.alloc : memref<192x2xf32>
  rt.kernel "nn.transpose" (%sx) -> (%st) attrs {permutation = array<i64: 1, 0>} on "compute" : (memref<2x192xf32>) -> memref<192x2xf32>
  %q = rt.alloc : memref<256x192xf8E4M3FN>
  %qt = rt.alloc : memref<192x256xf8E4M3FN>
  rt.kernel "nn.quantize" (%x, %s, %st) -> (%q, %qt) attrs {has_transposed_scale = 1 : i64} on "compute" : (memref<256x192xbf16>, memref<256x2xf32>, memref<192x2xf32>) -> (memref<256x192xf8E4M3FN>, memref<192x256xf8E4M3FN>)
  rt.output "q" %q : memref<256x192xf8E4M3FN>
  rt.output "qt" %qt : memref<192x256xf8E4M3FN>
  rt.output "s" %s : memref<256x2xf32>
  rt.output "st" %st : memref<192x2xf32>
}

// -----

// A weight's 128 x 128 blocks: the copy's scales are x's transposed.
// CHECK-LABEL: rt.program @weight
// CHECK-NOT: "nn.amax"
// CHECK: rt.kernel "nn.quantize_tiles"({{.*}}) attrs {format = "e4m3", margin = 0 : i64} : (memref<256x384xbf16>) -> (memref<256x384xf8E4M3FN>, memref<384x256xf8E4M3FN>, memref<2x3xf32>, memref<3x2xf32>)
// CHECK-NOT: "nn.transpose"
rt.program @weight rank = 0 streams = ["compute"] {
  %w = rt.param "w" : memref<256x384xbf16>
  %a = rt.alloc : memref<2x3xf32>
  rt.kernel "nn.amax" (%w) -> (%a) : (memref<256x384xbf16>) -> memref<2x3xf32>
  %s = rt.alloc : memref<2x3xf32>
  rt.kernel "nn.fp8_scale" (%a) -> (%s) attrs {format = "e4m3", margin = 0 : i64} : (memref<2x3xf32>) -> memref<2x3xf32>
  %st = rt.alloc : memref<3x2xf32>
  rt.kernel "nn.transpose" (%s) -> (%st) attrs {permutation = array<i64: 1, 0>} : (memref<2x3xf32>) -> memref<3x2xf32>
  %q = rt.alloc : memref<256x384xf8E4M3FN>
  %qt = rt.alloc : memref<384x256xf8E4M3FN>
  rt.kernel "nn.quantize" (%w, %s, %st) -> (%q, %qt) attrs {has_transposed_scale = 1 : i64} : (memref<256x384xbf16>, memref<2x3xf32>, memref<3x2xf32>) -> (memref<256x384xf8E4M3FN>, memref<384x256xf8E4M3FN>)
  rt.output "q" %q : memref<256x384xf8E4M3FN>
  rt.output "qt" %qt : memref<384x256xf8E4M3FN>
  rt.output "s" %s : memref<2x3xf32>
}

// -----

// Not fused: an amax read by something else (delayed scaling's history);
// a scale read between its kernel and the quantization; tiles of a whole
// 512-element row (rowwise at a model's width: wider than a 128 block).
// CHECK-LABEL: rt.program @kept
// CHECK-NOT: nn.quantize_tiles
// CHECK-COUNT-3: "nn.quantize"
rt.program @kept rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<128x128xbf16>
  %a = rt.alloc : memref<1x1xf32>
  rt.kernel "nn.amax" (%x) -> (%a) : (memref<128x128xbf16>) -> memref<1x1xf32>
  %s = rt.alloc : memref<1x1xf32>
  rt.kernel "nn.fp8_scale" (%a) -> (%s) attrs {format = "e4m3", margin = 0 : i64} : (memref<1x1xf32>) -> memref<1x1xf32>
  %st = rt.alloc : memref<1x1xf32>
  rt.kernel "nn.transpose" (%s) -> (%st) attrs {permutation = array<i64: 1, 0>} : (memref<1x1xf32>) -> memref<1x1xf32>
  %q = rt.alloc : memref<128x128xf8E4M3FN>
  %qt = rt.alloc : memref<128x128xf8E4M3FN>
  rt.kernel "nn.quantize" (%x, %s, %st) -> (%q, %qt) attrs {has_transposed_scale = 1 : i64} : (memref<128x128xbf16>, memref<1x1xf32>, memref<1x1xf32>) -> (memref<128x128xf8E4M3FN>, memref<128x128xf8E4M3FN>)
  rt.output "amax" %a : memref<1x1xf32>

  %b = rt.alloc : memref<1x1xf32>
  rt.kernel "nn.amax" (%x) -> (%b) : (memref<128x128xbf16>) -> memref<1x1xf32>
  %s2 = rt.alloc : memref<1x1xf32>
  rt.kernel "nn.fp8_scale" (%b) -> (%s2) attrs {format = "e4m3", margin = 0 : i64} : (memref<1x1xf32>) -> memref<1x1xf32>
  %r = rt.alloc : memref<1x1xf32>
  rt.kernel "nn.neg" (%s2) -> (%r) : (memref<1x1xf32>) -> memref<1x1xf32>
  %st2 = rt.alloc : memref<1x1xf32>
  rt.kernel "nn.transpose" (%s2) -> (%st2) attrs {permutation = array<i64: 1, 0>} : (memref<1x1xf32>) -> memref<1x1xf32>
  %q2 = rt.alloc : memref<128x128xf8E4M3FN>
  %qt2 = rt.alloc : memref<128x128xf8E4M3FN>
  rt.kernel "nn.quantize" (%x, %s2, %st2) -> (%q2, %qt2) attrs {has_transposed_scale = 1 : i64} : (memref<128x128xbf16>, memref<1x1xf32>, memref<1x1xf32>) -> (memref<128x128xf8E4M3FN>, memref<128x128xf8E4M3FN>)
  rt.output "r" %r : memref<1x1xf32>
  rt.output "q2" %q2 : memref<128x128xf8E4M3FN>

  %y = rt.input "y" : memref<64x512xbf16>
  %c = rt.alloc : memref<64x1xf32>
  rt.kernel "nn.amax" (%y) -> (%c) : (memref<64x512xbf16>) -> memref<64x1xf32>
  %s3 = rt.alloc : memref<64x1xf32>
  rt.kernel "nn.fp8_scale" (%c) -> (%s3) attrs {format = "e4m3", margin = 0 : i64} : (memref<64x1xf32>) -> memref<64x1xf32>
  %ct = rt.alloc : memref<1x512xf32>
  rt.kernel "nn.amax" (%y) -> (%ct) : (memref<64x512xbf16>) -> memref<1x512xf32>
  %s4 = rt.alloc : memref<1x512xf32>
  rt.kernel "nn.fp8_scale" (%ct) -> (%s4) attrs {format = "e4m3", margin = 0 : i64} : (memref<1x512xf32>) -> memref<1x512xf32>
  %s4t = rt.alias %s4 : memref<1x512xf32> -> memref<512x1xf32>
  %q3 = rt.alloc : memref<64x512xf8E4M3FN>
  %qt3 = rt.alloc : memref<512x64xf8E4M3FN>
  rt.kernel "nn.quantize" (%y, %s3, %s4t) -> (%q3, %qt3) attrs {has_transposed_scale = 1 : i64} : (memref<64x512xbf16>, memref<64x1xf32>, memref<512x1xf32>) -> (memref<64x512xf8E4M3FN>, memref<512x64xf8E4M3FN>)
  rt.output "q3" %q3 : memref<64x512xf8E4M3FN>
}

// -----

// Tensorwise: one amax of all of x, its scale, x and its copy quantized
// under it: one nn.quantize_tensor writing q, qT and the scale where the
// quantization ran; the amax's buffer is gone.
// CHECK-LABEL: rt.program @tensorwise
// CHECK-NOT: "nn.amax"
// CHECK-NOT: "nn.fp8_scale"
// CHECK: %[[S:[0-9]+]] = rt.alloc : memref<f32>
// CHECK: rt.kernel "nn.quantize_tensor"(%{{[0-9]+}}) -> (%[[Q:[0-9]+]], %[[QT:[0-9]+]], %[[S]]) attrs {format = "e5m2", margin = 1 : i64} on "compute" : (memref<64x96xbf16>) -> (memref<64x96xf8E5M2>, memref<96x64xf8E5M2>, memref<f32>)
// CHECK-NEXT: rt.output "q" %[[Q]]
rt.program @tensorwise rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<64x96xbf16>
  %a = rt.alloc : memref<f32>
  rt.kernel "nn.amax" (%x) -> (%a) on "compute" : (memref<64x96xbf16>) -> memref<f32>
  %s = rt.alloc : memref<f32>
  rt.kernel "nn.fp8_scale" (%a) -> (%s) attrs {format = "e5m2", margin = 1 : i64} on "compute" : (memref<f32>) -> memref<f32>
  %q = rt.alloc : memref<64x96xf8E5M2>
  %qt = rt.alloc : memref<96x64xf8E5M2>
  rt.kernel "nn.quantize" (%x, %s) -> (%q, %qt) attrs {has_transposed_scale = 0 : i64} on "compute" : (memref<64x96xbf16>, memref<f32>) -> (memref<64x96xf8E5M2>, memref<96x64xf8E5M2>)
  rt.output "q" %q : memref<64x96xf8E5M2>
  rt.output "qt" %qt : memref<96x64xf8E5M2>
  rt.output "s" %s : memref<f32>
}

// -----

// Tensorwise, not fused: an amax read by something else (delayed
// scaling's history); a scale read before the quantization; a quantization
// without the copy (nothing to fuse it into).
// CHECK-LABEL: rt.program @tensorwise_kept
// CHECK-NOT: nn.quantize_tensor
// CHECK-COUNT-3: "nn.quantize"
rt.program @tensorwise_kept rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<64x96xbf16>
  %a = rt.alloc : memref<f32>
  rt.kernel "nn.amax" (%x) -> (%a) : (memref<64x96xbf16>) -> memref<f32>
  %s = rt.alloc : memref<f32>
  rt.kernel "nn.fp8_scale" (%a) -> (%s) attrs {format = "e4m3", margin = 0 : i64} : (memref<f32>) -> memref<f32>
  %q = rt.alloc : memref<64x96xf8E4M3FN>
  %qt = rt.alloc : memref<96x64xf8E4M3FN>
  rt.kernel "nn.quantize" (%x, %s) -> (%q, %qt) attrs {has_transposed_scale = 0 : i64} : (memref<64x96xbf16>, memref<f32>) -> (memref<64x96xf8E4M3FN>, memref<96x64xf8E4M3FN>)
  rt.output "amax" %a : memref<f32>

  %b = rt.alloc : memref<f32>
  rt.kernel "nn.amax" (%x) -> (%b) : (memref<64x96xbf16>) -> memref<f32>
  %s2 = rt.alloc : memref<f32>
  rt.kernel "nn.fp8_scale" (%b) -> (%s2) attrs {format = "e4m3", margin = 0 : i64} : (memref<f32>) -> memref<f32>
  %c = rt.alloc : memref<f32>
  rt.kernel "nn.neg" (%s2) -> (%c) : (memref<f32>) -> memref<f32>
  %q2 = rt.alloc : memref<64x96xf8E4M3FN>
  %qt2 = rt.alloc : memref<96x64xf8E4M3FN>
  rt.kernel "nn.quantize" (%x, %s2) -> (%q2, %qt2) attrs {has_transposed_scale = 0 : i64} : (memref<64x96xbf16>, memref<f32>) -> (memref<64x96xf8E4M3FN>, memref<96x64xf8E4M3FN>)
  rt.output "c" %c : memref<f32>

  %d = rt.alloc : memref<f32>
  rt.kernel "nn.amax" (%x) -> (%d) : (memref<64x96xbf16>) -> memref<f32>
  %s3 = rt.alloc : memref<f32>
  rt.kernel "nn.fp8_scale" (%d) -> (%s3) attrs {format = "e4m3", margin = 0 : i64} : (memref<f32>) -> memref<f32>
  %q3 = rt.alloc : memref<64x96xf8E4M3FN>
  rt.kernel "nn.quantize" (%x, %s3) -> (%q3) : (memref<64x96xbf16>, memref<f32>) -> memref<64x96xf8E4M3FN>
  rt.output "q" %q : memref<64x96xf8E4M3FN>
  rt.output "q2" %q2 : memref<64x96xf8E4M3FN>
  rt.output "q3" %q3 : memref<64x96xf8E4M3FN>
}

// -----

// The FP8 scale epilogue: the one kernel writing all of x (here SwiGLU's
// product, output 1) gives x's scale (fp8_scale_of), and the quantization
// is nn.quantize of x under it; the second quantized output of the same
// writer joins it (a gradient pair). The scale buffers are made before the
// writer.
// CHECK-LABEL: rt.program @epilogue
// CHECK: %[[S1:[0-9]+]] = rt.alloc : memref<f32>
// CHECK: %[[S0:[0-9]+]] = rt.alloc : memref<f32>
// CHECK: rt.kernel "nn.swiglu"(%{{.*}}) -> (%[[A:[0-9]+]], %[[B:[0-9]+]], %[[S1]], %[[S0]]) attrs {fp8_format = "e4m3", fp8_scale_of = array<i64: 1, 0>}
// CHECK: rt.kernel "nn.quantize"(%{{[0-9]+}}, %[[S1]]) -> ({{.*}}) attrs {has_transposed_scale = 0 : i64}
// CHECK: rt.kernel "nn.quantize"(%{{[0-9]+}}, %[[S0]]) -> ({{.*}}) attrs {has_transposed_scale = 0 : i64}
// CHECK-NOT: nn.quantize_tensor
rt.program @epilogue rank = 0 streams = ["compute"] {
  %g = rt.input "g" : memref<64x96xbf16>
  %u = rt.input "u" : memref<64x96xbf16>
  %a = rt.alloc : memref<64x96xbf16>
  %b = rt.alloc : memref<64x96xbf16>
  rt.kernel "nn.swiglu" (%g, %u) -> (%a, %b) on "compute" : (memref<64x96xbf16>, memref<64x96xbf16>) -> (memref<64x96xbf16>, memref<64x96xbf16>)
  %m1 = rt.alloc : memref<f32>
  rt.kernel "nn.amax" (%b) -> (%m1) on "compute" : (memref<64x96xbf16>) -> memref<f32>
  %s1 = rt.alloc : memref<f32>
  rt.kernel "nn.fp8_scale" (%m1) -> (%s1) attrs {format = "e4m3", margin = 0 : i64} on "compute" : (memref<f32>) -> memref<f32>
  %q1 = rt.alloc : memref<64x96xf8E4M3FN>
  %t1 = rt.alloc : memref<96x64xf8E4M3FN>
  rt.kernel "nn.quantize" (%b, %s1) -> (%q1, %t1) attrs {has_transposed_scale = 0 : i64} on "compute" : (memref<64x96xbf16>, memref<f32>) -> (memref<64x96xf8E4M3FN>, memref<96x64xf8E4M3FN>)
  %m0 = rt.alloc : memref<f32>
  rt.kernel "nn.amax" (%a) -> (%m0) on "compute" : (memref<64x96xbf16>) -> memref<f32>
  %s0 = rt.alloc : memref<f32>
  rt.kernel "nn.fp8_scale" (%m0) -> (%s0) attrs {format = "e4m3", margin = 0 : i64} on "compute" : (memref<f32>) -> memref<f32>
  %q0 = rt.alloc : memref<64x96xf8E4M3FN>
  %t0 = rt.alloc : memref<96x64xf8E4M3FN>
  rt.kernel "nn.quantize" (%a, %s0) -> (%q0, %t0) attrs {has_transposed_scale = 0 : i64} on "compute" : (memref<64x96xbf16>, memref<f32>) -> (memref<64x96xf8E4M3FN>, memref<96x64xf8E4M3FN>)
  rt.output "q1" %q1 : memref<64x96xf8E4M3FN>
  rt.output "t1" %t1 : memref<96x64xf8E4M3FN>
  rt.output "q0" %q0 : memref<64x96xf8E4M3FN>
  rt.output "t0" %t0 : memref<96x64xf8E4M3FN>
}

// -----

// x written again between its writer and the quantization, or by two
// kernels: nn.quantize_tensor stays, and no kernel takes an epilogue.
// CHECK-LABEL: rt.program @no_epilogue
// CHECK-NOT: fp8_scale_of
// CHECK: rt.kernel "nn.quantize_tensor"
// CHECK-NOT: fp8_scale_of
rt.program @no_epilogue rank = 0 streams = ["compute"] {
  %g = rt.input "g" : memref<64x96xbf16>
  %x = rt.alloc : memref<64x96xbf16>
  rt.kernel "nn.silu" (%g) -> (%x) on "compute" : (memref<64x96xbf16>) -> memref<64x96xbf16>
  rt.kernel "nn.neg" (%g) -> (%x) on "compute" : (memref<64x96xbf16>) -> memref<64x96xbf16>
  %m = rt.alloc : memref<f32>
  rt.kernel "nn.amax" (%x) -> (%m) on "compute" : (memref<64x96xbf16>) -> memref<f32>
  %s = rt.alloc : memref<f32>
  rt.kernel "nn.fp8_scale" (%m) -> (%s) attrs {format = "e4m3", margin = 0 : i64} on "compute" : (memref<f32>) -> memref<f32>
  %q = rt.alloc : memref<64x96xf8E4M3FN>
  %t = rt.alloc : memref<96x64xf8E4M3FN>
  rt.kernel "nn.quantize" (%x, %s) -> (%q, %t) attrs {has_transposed_scale = 0 : i64} on "compute" : (memref<64x96xbf16>, memref<f32>) -> (memref<64x96xf8E4M3FN>, memref<96x64xf8E4M3FN>)
  rt.output "q" %q : memref<64x96xf8E4M3FN>
  rt.output "t" %t : memref<96x64xf8E4M3FN>
}
