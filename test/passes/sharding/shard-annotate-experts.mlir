// RUN: loom-opt %s --loom-shard-annotate="dp=2" -split-input-file | FileCheck %s --check-prefix=DP
// RUN: not loom-opt %s --loom-shard-annotate="ep=2 dp=2" -split-input-file 2>/dev/null | FileCheck %s --check-prefix=EPDP
// RUN: loom-opt %s --loom-shard-annotate="dp=8" -split-input-file 2>&1 | FileCheck %s --check-prefix=DP8
// RUN: not loom-opt %s --loom-shard-annotate="ep=2" -split-input-file 2>&1 | FileCheck %s --check-prefix=EP

// The experts' weights (the weight of a forward grouped GEMM) are split by
// experts over ep, then over dp where the experts divide: every data rank
// sees every token's routed rows, so replicated experts would each be
// computed on every rank. Where they do not divide (4 experts over 8 data
// ranks) they stay whole.
// DP-LABEL: func.func @moe
// DP: nn.parameter "experts" {dist.sharding = [#dist.sharding<{{\[\["dp"\]}}, [], []]>]}
// EPDP-LABEL: func.func @moe
// EPDP: nn.parameter "experts" {dist.sharding = [#dist.sharding<{{\[\["ep", "dp"\]}}, [], []]>]}
// DP8: remark: --dp 8: the 4 experts of 'experts' do not divide over 8 ranks, so they stay whole over --dp's ranks, each of which computes every expert's rows for the same tokens (8 times the experts' work); --ep or a --dp that divides the experts splits them
// DP8-LABEL: func.func @moe
// DP8: nn.parameter "experts" : tensor<4x4x6xf32>
func.func @moe(%x: tensor<8x4xf32>, %offs: tensor<4xi32>) -> tensor<8x6xf32> {
  %w = nn.parameter "experts" : tensor<4x4x6xf32>
  %y = nn.grouped_matmul %x, %w, %offs : (tensor<8x4xf32>, tensor<4x4x6xf32>, tensor<4xi32>) -> tensor<8x6xf32>
  return %y : tensor<8x6xf32>
}

// -----

// A weight reshaped before the grouped GEMM cannot be split by experts:
// without --ep it stays whole; --ep is a one-line error.
// DP-LABEL: func.func @reshaped
// DP: nn.parameter "flat" : tensor<16x6xf32>
// EP: error: --ep 2: the experts' weight 'flat' 'tensor<16x6xf32>' is reshaped before the grouped GEMM; cannot split it by experts
func.func @reshaped(%x: tensor<8x4xf32>, %offs: tensor<4xi32>) -> tensor<8x6xf32> {
  %flat = nn.parameter "flat" : tensor<16x6xf32>
  %w = nn.reshape %flat : tensor<16x6xf32> -> tensor<4x4x6xf32>
  %y = nn.grouped_matmul %x, %w, %offs : (tensor<8x4xf32>, tensor<4x4x6xf32>, tensor<4xi32>) -> tensor<8x6xf32>
  return %y : tensor<8x6xf32>
}
