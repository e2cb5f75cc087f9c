// RUN: loom-opt %s --loom-sharding-propagation --loom-spmd-partition -split-input-file -verify-diagnostics | FileCheck %s

// Megatron's MLP: column-parallel then row-parallel; each rank holds half of
// each weight and the row-parallel output is all-reduced before the
// non-linear op reads it.
// CHECK-LABEL: func.func @mlp
// CHECK: nn.parameter "w1" {dist.global_type = tensor<64x32xf32>, {{.*}}} : tensor<32x32xf32>
// CHECK: nn.parameter "w2" {dist.global_type = tensor<32x64xf32>, {{.*}}} : tensor<32x32xf32>
// CHECK: nn.matmul {{.*}} : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
// CHECK: nn.relu {{.*}} : tensor<8x32xf32>
// CHECK: %[[P:.*]] = nn.matmul {{.*}}partial = ["tp"]{{.*}} -> tensor<8x32xf32>
// CHECK: %[[S:.*]] = dist.all_reduce %[[P]] {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<8x32xf32>
// CHECK: nn.tanh %[[S]]
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @mlp(%x: tensor<8x32xf32>) -> tensor<8x32xf32> {
    %w1 = nn.parameter "w1" {dist.sharding = [#dist.sharding<[["tp"], []]>]} : tensor<64x32xf32>
    %w2 = nn.parameter "w2" : tensor<32x64xf32>
    %h = nn.matmul %x, %w1 {transpose_rhs} : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
    %r = nn.relu %h : tensor<8x64xf32>
    %y = nn.matmul %r, %w2 {transpose_rhs} : (tensor<8x64xf32>, tensor<32x64xf32>) -> tensor<8x32xf32>
    %z = nn.tanh %y : tensor<8x32xf32>
    return %z : tensor<8x32xf32>
  }
}

// -----

// Partial sums pass through additions: two row-parallel outputs are added
// first and settled by one all-reduce.
// CHECK-LABEL: func.func @partial_add
// CHECK: nn.add {{.*}}partial = ["tp"]
// CHECK-NEXT: dist.all_reduce
// CHECK-NOT: dist.all_reduce
// CHECK: return
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @partial_add(%a: tensor<8x16xf32> {dist.sharding = #dist.sharding<[[], ["tp"]]>},
                         %b: tensor<8x16xf32> {dist.sharding = #dist.sharding<[[], ["tp"]]>}) -> tensor<8x4xf32> {
    %w = nn.parameter "w" {dist.sharding = [#dist.sharding<[[], ["tp"]]>]} : tensor<4x16xf32>
    %p = nn.matmul %a, %w {transpose_rhs} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
    %q = nn.matmul %b, %w {transpose_rhs} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
    %s = nn.add %p, %q : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %t = nn.exp %s : tensor<8x4xf32>
    return %t : tensor<8x4xf32>
  }
}

// -----

// Sequence parallelism: where the row-parallel output is wanted split along
// the sequence, the partial sum is reduce-scattered instead of all-reduced,
// and gathered back for the next column-parallel matmul.
// CHECK-LABEL: func.func @sequence
// CHECK: %[[P:.*]] = nn.matmul {{.*}} -> tensor<2x8x32xf32>
// CHECK: %[[R:.*]] = dist.reduce_scatter %[[P]] {axes = ["tp"], dim = 1 : i64, reduce = #dist.reduce<sum>} : tensor<2x8x32xf32> -> tensor<2x4x32xf32>
// CHECK: nn.rms_norm %[[R]]{{.*}} -> tensor<2x4x32xf32>
// CHECK: dist.all_gather {{.*}} {axes = ["tp"], dim = 1 : i64} : tensor<2x4x32xf32> -> tensor<2x8x32xf32>
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @sequence(%h: tensor<2x8x64xf32> {dist.sharding = #dist.sharding<[[], [], ["tp"]]>}) -> tensor<2x8x64xf32> {
    %w2 = nn.parameter "down" {dist.sharding = [#dist.sharding<[[], ["tp"]]>]} : tensor<32x64xf32>
    %w1 = nn.parameter "up" {dist.sharding = [#dist.sharding<[["tp"], []]>]} : tensor<64x32xf32>
    %y = nn.matmul %h, %w2 {transpose_rhs} : (tensor<2x8x64xf32>, tensor<32x64xf32>) -> tensor<2x8x32xf32>
    %n = nn.rms_norm %y {dist.sharding = [#dist.sharding<[[], ["tp"], []]>]} : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    %u = nn.matmul %n, %w1 {transpose_rhs, dist.sharding = [#dist.sharding<[[], [], ["tp"]]>]} : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
    return %u : tensor<2x8x64xf32>
  }
}

// -----

// Data parallelism: a mean over a split batch is each rank's mean over its
// rows scaled by 1/dp, a partial sum settled where it is returned; its
// gradient is scaled the same way. The reduction is issued right after its
// operand is computed (so, on its own stream, it overlaps what follows).
// CHECK-LABEL: func.func @mean_loss
// CHECK-SAME: %[[L:.*]]: tensor<4x16xf32> {dist.global_type = tensor<8x16xf32>
// CHECK: %[[C:.*]] = nn.cross_entropy %[[L]], {{.*}} : (tensor<4x16xf32>, tensor<4xi64>) -> tensor<f32>
// CHECK: %[[H:.*]] = nn.constant dense<5.000000e-01> : tensor<f32>
// CHECK: %[[M:.*]] = nn.mul %[[C]], %[[H]]
// CHECK-NEXT: dist.all_reduce %[[M]] {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<f32>
// CHECK: %[[G:.*]] = nn.cross_entropy_grad
// CHECK: nn.mul %[[G]], %{{.*}} {{.*}} -> tensor<4x16xf32>
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @mean_loss(%l: tensor<8x16xf32> {dist.sharding = #dist.sharding<[["dp"], []]>},
                       %t: tensor<8xi64> {dist.sharding = #dist.sharding<[["dp"]]>}) -> (tensor<f32>, tensor<8x16xf32>) {
    %c = nn.cross_entropy %l, %t : (tensor<8x16xf32>, tensor<8xi64>) -> tensor<f32>
    %one = nn.constant dense<1.0> : tensor<f32>
    %g = nn.cross_entropy_grad %l, %t, %one : (tensor<8x16xf32>, tensor<8xi64>, tensor<f32>) -> tensor<8x16xf32>
    return %c, %g : tensor<f32>, tensor<8x16xf32>
  }
}

// -----

// ZeRO-1: the gradient (a partial sum over dp) is reduce-scattered into the
// optimizer's split, the state is held split, and the forward reads the
// parameter all-gathered.
// CHECK-LABEL: func.func @zero1
// CHECK: %[[W:.*]] = nn.parameter "w" {{.*}} : tensor<4x4xf32>
// CHECK: %[[FULL:.*]] = dist.all_gather %[[W]] {axes = ["dp"], dim = 0 : i64} : tensor<4x4xf32> -> tensor<8x4xf32>
// CHECK: nn.matmul %{{.*}}, %[[FULL]]
// CHECK: %[[DW:.*]] = nn.matmul {{.*}}partial = ["dp"]{{.*}} -> tensor<8x4xf32>
// CHECK: %[[RS:.*]] = dist.reduce_scatter %[[DW]] {axes = ["dp"], dim = 0 : i64, reduce = #dist.reduce<sum>} : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK: nn.adamw %[[W]], %[[RS]], {{.*}} : tensor<4x4xf32>
module attributes {dist.mesh = #dist.mesh<["dp"=2]>, dist.zero1} {
  func.func @zero1(%x: tensor<4x4xf32> {dist.sharding = #dist.sharding<[["dp"], []]>},
                   %dy: tensor<4x8xf32> {dist.sharding = #dist.sharding<[["dp"], []]>},
                   %lr: tensor<f32>, %step: tensor<f32>) -> tensor<4x8xf32> {
    %w = nn.parameter "w" : tensor<8x4xf32>
    %m = nn.parameter "w.exp_avg" frozen : tensor<8x4xf32>
    %v = nn.parameter "w.exp_avg_sq" frozen : tensor<8x4xf32>
    %y = nn.matmul %x, %w {transpose_rhs} : (tensor<4x4xf32>, tensor<8x4xf32>) -> tensor<4x8xf32>
    %dw = nn.matmul %dy, %x {transpose_lhs} : (tensor<4x8xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
    %p2, %m2, %v2 = nn.adamw %w, %dw, %m, %v, %lr, %step beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-08 weight_decay = 0.1 : tensor<8x4xf32>
    nn.assign %w, %p2 : tensor<8x4xf32>
    nn.assign %m, %m2 : tensor<8x4xf32>
    nn.assign %v, %v2 : tensor<8x4xf32>
    return %y : tensor<4x8xf32>
  }
}

// -----

// A split that does not divide is an error naming the tensor and the numbers.
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  // expected-error @+1 {{cannot split argument #0 'tensor<3x4xf32>' as [[tp], []]: dim 0 of size 3 is not divisible by 2 (mesh axes tp)}}
  func.func @indivisible(%x: tensor<3x4xf32> {dist.sharding = #dist.sharding<[["tp"], []]>}) -> tensor<3x4xf32> {
    return %x : tensor<3x4xf32>
  }
}

// -----

// Moving a split from one dim to another over the same axis is one
// all-to-all.
// CHECK-LABEL: func.func @move_split
// CHECK: dist.all_to_all %{{.*}} {axes = ["tp"], concat_dim = 1 : i64, split_dim = 0 : i64} : tensor<8x4xf32> -> tensor<4x8xf32>
// CHECK-NEXT: nn.softmax
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @move_split(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<[[], ["tp"]]>}) -> tensor<8x8xf32> {
    %s = nn.softmax %x dim = 1 {dist.sharding = [#dist.sharding<[["tp"], []]>]} : tensor<8x8xf32>
    return %s : tensor<8x8xf32>
  }
}

// -----

// Two splits moving onto one dim (dp outer, tp inner): two all-to-alls,
// dp's first, so the blocks nest in the target's order.
// CHECK-LABEL: func.func @two_moves
// CHECK: %[[A:.*]] = dist.all_to_all %{{.*}} {axes = ["dp"], concat_dim = 2 : i64, split_dim = 0 : i64} : tensor<4x4x2xf32> -> tensor<2x4x4xf32>
// CHECK: dist.all_to_all %[[A]] {axes = ["tp"], concat_dim = 1 : i64, split_dim = 0 : i64} : tensor<2x4x4xf32> -> tensor<1x8x4xf32>
module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>} {
  func.func @two_moves(%x: tensor<4x8x4xf32> {dist.sharding = #dist.sharding<[[], ["tp"], ["dp"]]>}) -> tensor<4x8x4xf32> {
    %s = nn.softmax %x dim = 1 {dist.sharding = [#dist.sharding<[["dp", "tp"], [], []]>]} : tensor<4x8x4xf32>
    return %s : tensor<4x8x4xf32>
  }
}
