// RUN: loom-opt %s --loom-fp8-expand="gemm-alignment=16" -split-input-file -verify-diagnostics | FileCheck %s

// On a target whose FP8 GEMM reads rows of 16 bytes (CUDA: loom-compile
// sets gemm-alignment=16 for --target=cuda), a GEMM whose K or N is not a
// multiple of 16 stays in the compute type, with a remark naming its
// shape; the others go FP8.
// CHECK-LABEL: func.func @mixed
// CHECK: nn.scaled_matmul {{.*}} -> tensor<24x64xbf16>
// CHECK: nn.matmul {{.*}} -> tensor<64x32xbf16>
func.func @mixed(%x: tensor<24x32xbf16>, %w: tensor<64x32xbf16>, %dy: tensor<24x64xbf16>) -> (tensor<24x64xbf16>, tensor<64x32xbf16>) {
  %y = nn.matmul %x, %w {transpose_rhs, nn.fp8 = #nn.fp8<recipe = tensorwise, format = e4m3>} : (tensor<24x32xbf16>, tensor<64x32xbf16>) -> tensor<24x64xbf16>
  // expected-remark @+1 {{stays in 'bf16': the target's FP8 GEMM needs K and N to be multiples of 16, got M = 64, N = 32, K = 24}}
  %dw = nn.matmul %dy, %x {transpose_lhs, nn.fp8 = #nn.fp8<recipe = tensorwise, format = e4m3, gradient = 0>} : (tensor<24x64xbf16>, tensor<24x32xbf16>) -> tensor<64x32xbf16>
  return %y, %dw : tensor<24x64xbf16>, tensor<64x32xbf16>
}

// -----

// Blockwise's 1 x 128 tiles also need the rows in fours.
func.func @blockwise_rows(%x: tensor<30x256xbf16>, %w: tensor<64x256xbf16>) -> tensor<30x64xbf16> {
  // expected-remark @+1 {{stays in 'bf16': the target's FP8 GEMM needs K and N to be multiples of 16 and M of 4, got M = 30, N = 64, K = 256}}
  %y = nn.matmul %x, %w {transpose_rhs, nn.fp8 = #nn.fp8<recipe = blockwise, format = e4m3>} : (tensor<30x256xbf16>, tensor<64x256xbf16>) -> tensor<30x64xbf16>
  return %y : tensor<30x64xbf16>
}
