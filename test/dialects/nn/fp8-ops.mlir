// RUN: loom-opt %s | FileCheck %s
// RUN: loom-opt %s | loom-opt | FileCheck %s

// FP8 quantization as typed IR: f8 element types, scales as operands whose
// shapes are the tilings (tensorwise, rowwise, 1x128, 128x128).
// CHECK-LABEL: func.func @recipes
func.func @recipes(%x: tensor<256x256xbf16>) -> (tensor<256x256xbf16>, tensor<256x256xf8E5M2>, tensor<256x256xf8E4M3FN>, tensor<256x256xf32>) {
  // CHECK: %[[A:.*]] = nn.amax %arg0 : (tensor<256x256xbf16>) -> tensor<f32>
  // CHECK: %[[S:.*]] = nn.fp8_scale %[[A]] format = "e4m3" margin = 1 : tensor<f32>
  // CHECK: %[[Q:.*]] = nn.quantize %arg0, %[[S]] : (tensor<256x256xbf16>, tensor<f32>) -> tensor<256x256xf8E4M3FN>
  // CHECK: nn.dequantize %[[Q]], %[[S]] : (tensor<256x256xf8E4M3FN>, tensor<f32>) -> tensor<256x256xbf16>
  %a = nn.amax %x : (tensor<256x256xbf16>) -> tensor<f32>
  %s = nn.fp8_scale %a format = "e4m3" margin = 1 : tensor<f32>
  %q = nn.quantize %x, %s : (tensor<256x256xbf16>, tensor<f32>) -> tensor<256x256xf8E4M3FN>
  %d = nn.dequantize %q, %s : (tensor<256x256xf8E4M3FN>, tensor<f32>) -> tensor<256x256xbf16>
  // Rowwise, in e5m2.
  // CHECK: nn.amax %arg0 : (tensor<256x256xbf16>) -> tensor<256x1xf32>
  // CHECK: nn.fp8_scale %{{.*}} format = "e5m2" : tensor<256x1xf32>
  %ra = nn.amax %x : (tensor<256x256xbf16>) -> tensor<256x1xf32>
  %rs = nn.fp8_scale %ra format = "e5m2" : tensor<256x1xf32>
  %rq = nn.quantize %x, %rs : (tensor<256x256xbf16>, tensor<256x1xf32>) -> tensor<256x256xf8E5M2>
  // 1x128 tiles and 128x128 blocks.
  // CHECK: nn.quantize %arg0, %{{.*}} : (tensor<256x256xbf16>, tensor<256x2xf32>) -> tensor<256x256xf8E4M3FN>
  // CHECK: nn.dequantize %{{.*}}, %{{.*}} : (tensor<256x256xf8E4M3FN>, tensor<2x2xf32>) -> tensor<256x256xf32>
  %ta = nn.amax %x : (tensor<256x256xbf16>) -> tensor<256x2xf32>
  %ts = nn.fp8_scale %ta format = "e4m3" : tensor<256x2xf32>
  %tq = nn.quantize %x, %ts : (tensor<256x256xbf16>, tensor<256x2xf32>) -> tensor<256x256xf8E4M3FN>
  %ba = nn.amax %x : (tensor<256x256xbf16>) -> tensor<2x2xf32>
  %bs = nn.fp8_scale %ba format = "e4m3" : tensor<2x2xf32>
  %bq = nn.quantize %x, %bs : (tensor<256x256xbf16>, tensor<2x2xf32>) -> tensor<256x256xf8E4M3FN>
  %bd = nn.dequantize %bq, %bs : (tensor<256x256xf8E4M3FN>, tensor<2x2xf32>) -> tensor<256x256xf32>
  return %d, %rq, %tq, %bd : tensor<256x256xbf16>, tensor<256x256xf8E5M2>, tensor<256x256xf8E4M3FN>, tensor<256x256xf32>
}

// The FP8 GEMM: e4m3 activations and weights (or one e5m2 side), per-tensor
// scales, a bf16 or f32 result.
// CHECK-LABEL: func.func @gemm
// CHECK: nn.scaled_matmul %arg0, %arg1, %arg2, %arg3 : (tensor<8x256xf8E4M3FN>, tensor<64x256xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<8x64xbf16>
// CHECK: nn.scaled_matmul %arg4, %arg1, %arg2, %arg3 : (tensor<8x256xf8E5M2>, tensor<64x256xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<8x64xf32>
func.func @gemm(%qx: tensor<8x256xf8E4M3FN>, %qw: tensor<64x256xf8E4M3FN>, %sx: tensor<f32>, %sw: tensor<f32>, %g: tensor<8x256xf8E5M2>) -> (tensor<8x64xbf16>, tensor<8x64xf32>) {
  %y = nn.scaled_matmul %qx, %qw, %sx, %sw : (tensor<8x256xf8E4M3FN>, tensor<64x256xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<8x64xbf16>
  %z = nn.scaled_matmul %g, %qw, %sx, %sw : (tensor<8x256xf8E5M2>, tensor<64x256xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<8x64xf32>
  return %y, %z : tensor<8x64xbf16>, tensor<8x64xf32>
}

// Tiled scales: rowwise, and blockwise (1 x 128 tiles of the activation,
// 128 x 128 blocks of the weight; K = 320 in tiles of 128, 128 and 64);
// the transposed copy of a tiled quantization with its own scales.
// CHECK-LABEL: func.func @tiled
// CHECK: nn.scaled_matmul {{.*}} : (tensor<8x320xf8E4M3FN>, tensor<64x320xf8E4M3FN>, tensor<8x1xf32>, tensor<64x1xf32>) -> tensor<8x64xbf16>
// CHECK: nn.scaled_matmul {{.*}} : (tensor<8x320xf8E4M3FN>, tensor<64x320xf8E4M3FN>, tensor<8x3xf32>, tensor<1x3xf32>) -> tensor<8x64xbf16>
// CHECK: nn.quantize %arg6, %arg7, %arg8 : (tensor<8x320xbf16>, tensor<8x3xf32>, tensor<320x1xf32>) -> (tensor<8x320xf8E4M3FN>, tensor<320x8xf8E4M3FN>)
func.func @tiled(%qx: tensor<8x320xf8E4M3FN>, %qw: tensor<64x320xf8E4M3FN>, %rx: tensor<8x1xf32>, %rw: tensor<64x1xf32>, %bx: tensor<8x3xf32>, %bw: tensor<1x3xf32>, %x: tensor<8x320xbf16>, %s: tensor<8x3xf32>, %st: tensor<320x1xf32>) -> (tensor<8x64xbf16>, tensor<8x64xbf16>, tensor<320x8xf8E4M3FN>) {
  %y = nn.scaled_matmul %qx, %qw, %rx, %rw : (tensor<8x320xf8E4M3FN>, tensor<64x320xf8E4M3FN>, tensor<8x1xf32>, tensor<64x1xf32>) -> tensor<8x64xbf16>
  %z = nn.scaled_matmul %qx, %qw, %bx, %bw : (tensor<8x320xf8E4M3FN>, tensor<64x320xf8E4M3FN>, tensor<8x3xf32>, tensor<1x3xf32>) -> tensor<8x64xbf16>
  %q, %qt = nn.quantize %x, %s, %st : (tensor<8x320xbf16>, tensor<8x3xf32>, tensor<320x1xf32>) -> (tensor<8x320xf8E4M3FN>, tensor<320x8xf8E4M3FN>)
  return %y, %z, %qt : tensor<8x64xbf16>, tensor<8x64xbf16>, tensor<320x8xf8E4M3FN>
}
