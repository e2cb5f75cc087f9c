// RUN: loom-opt %s --loom-sharding-propagation -split-input-file -verify-diagnostics | FileCheck %s

// A column-parallel weight splits the matmul's output features, and the
// split follows through elementwise ops; the next matmul contracts the
// split features, so its weight is split alike and its result is a partial
// sum over tp (row parallel).
// CHECK-LABEL: func.func @column_then_row
// CHECK: nn.parameter "w2" {dist.sharding = [#dist.sharding<{{\[\[}}], ["tp"]]>]}
// CHECK: nn.matmul {{.*}}dist.sharding = [#dist.sharding<{{\[\[}}], ["tp"]]>]
// CHECK: nn.relu {{.*}}dist.sharding = [#dist.sharding<{{\[\[}}], ["tp"]]>]
// CHECK: nn.matmul {{.*}}dist.sharding = [#dist.sharding<{{\[\[}}], []], partial = ["tp"]>]
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @column_then_row(%x: tensor<8x32xf32>) -> tensor<8x32xf32> {
    %w1 = nn.parameter "w1" {dist.sharding = [#dist.sharding<[["tp"], []]>]} : tensor<64x32xf32>
    %w2 = nn.parameter "w2" : tensor<32x64xf32>
    %h = nn.matmul %x, %w1 {transpose_rhs} : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
    %r = nn.relu %h : tensor<8x64xf32>
    %y = nn.matmul %r, %w2 {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xf32>) -> tensor<8x32xf32>
    return %y : tensor<8x32xf32>
  }
}

// -----

// Heads split inside a reshape: [B, S, H*D] split on its last dim is split
// on H (the major factor) after the reshape to [B, S, H, D], and on the head
// dim after the transpose; attention keeps heads split.
// CHECK-LABEL: func.func @heads
// CHECK: nn.reshape {{.*}}dist.sharding = [#dist.sharding<{{\[\[}}], [], ["tp"], []]>]
// CHECK: nn.transpose {{.*}}dist.sharding = [#dist.sharding<{{\[\[}}], ["tp"], [], []]>]
// CHECK: nn.attention {{.*}}dist.sharding = [#dist.sharding<{{\[\[}}], ["tp"], [], []]>]
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @heads(%x: tensor<1x8x32xf32> {dist.sharding = #dist.sharding<[[], [], ["tp"]]>}) -> tensor<1x4x8x8xf32> {
    %r = nn.reshape %x : tensor<1x8x32xf32> -> tensor<1x8x4x8xf32>
    %t = nn.transpose %r permutation = [0, 2, 1, 3] : tensor<1x8x4x8xf32> -> tensor<1x4x8x8xf32>
    %a = nn.attention %t, %t, %t causal : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
    return %a : tensor<1x4x8x8xf32>
  }
}

// -----

// A softmax axis stays whole: a split there does not pass the softmax, and
// values nothing constrains are replicated.
// CHECK-LABEL: func.func @whole_axis
// CHECK: nn.softmax {{.*}}dist.sharding = [#dist.sharding<{{\[\[}}"dp"], []]>]
// CHECK: nn.exp {{.*}}dist.sharding = [#dist.sharding<{{\[\[}}], []]>]
module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>} {
  func.func @whole_axis(%x: tensor<4x8xf32> {dist.sharding = #dist.sharding<[["dp"], ["tp"]]>}, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
    %s = nn.softmax %x dim = 1 : tensor<4x8xf32>
    %e = nn.exp %y : tensor<4x8xf32>
    return %s, %e : tensor<4x8xf32>, tensor<4x8xf32>
  }
}

// -----

// A split batch through a mean cross-entropy: the loss is a partial sum
// over dp (the partitioner scales it by 1/dp).
// CHECK-LABEL: func.func @loss
// CHECK: nn.cross_entropy {{.*}}dist.sharding = [#dist.sharding<[], partial = ["dp"]>]
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @loss(%l: tensor<8x16xf32> {dist.sharding = #dist.sharding<[["dp"], []]>}, %t: tensor<8xi64>) -> tensor<f32> {
    %c = nn.cross_entropy %l, %t : (tensor<8x16xf32>, tensor<8xi64>) -> tensor<f32>
    return %c : tensor<f32>
  }
}

// -----

// ZeRO-1: an optimizer update, its state and the gradient it reads are
// split over dp along the first dim that divides, beyond their tp split.
// CHECK-LABEL: func.func @zero1
// CHECK: nn.parameter "w.exp_avg" frozen {dist.sharding = [#dist.sharding<{{\[\[}}"tp", "dp"], []]>]}
// CHECK: nn.adamw {{.*}}dist.sharding = [#dist.sharding<{{\[\[}}"tp", "dp"], []]>, #dist.sharding<{{\[\[}}"tp", "dp"], []]>, #dist.sharding<{{\[\[}}"tp", "dp"], []]>]
module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>, dist.zero1} {
  func.func @zero1(%g: tensor<8x4xf32>, %lr: tensor<f32>, %step: tensor<f32>) {
    %w = nn.parameter "w" {dist.sharding = [#dist.sharding<[["tp"], []]>]} : tensor<8x4xf32>
    %m = nn.parameter "w.exp_avg" frozen : tensor<8x4xf32>
    %v = nn.parameter "w.exp_avg_sq" frozen : tensor<8x4xf32>
    %p2, %m2, %v2 = nn.adamw %w, %g, %m, %v, %lr, %step beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-08 weight_decay = 0.1 : tensor<8x4xf32>
    nn.assign %w, %p2 : tensor<8x4xf32>
    nn.assign %m, %m2 : tensor<8x4xf32>
    nn.assign %v, %v2 : tensor<8x4xf32>
    return
  }
}

// -----

// Heads that do not divide by tp: an error naming the numbers.
module attributes {dist.mesh = #dist.mesh<["tp"=4]>} {
  func.func @indivisible_heads(%x: tensor<1x8x16xf32> {dist.sharding = #dist.sharding<[[], [], ["tp"]]>}) -> tensor<1x8x2x8xf32> {
    // expected-error @+1 {{cannot split dim 2 of 'tensor<1x8x16xf32>' (an argument) over 4 ranks: the dim is made of a factor of size 2, which is not divisible by 4}}
    %r = nn.reshape %x : tensor<1x8x16xf32> -> tensor<1x8x2x8xf32>
    return %r : tensor<1x8x2x8xf32>
  }
}
