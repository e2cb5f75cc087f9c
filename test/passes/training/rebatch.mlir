// RUN: loom-opt %s --loom-rebatch=batch=8 -split-input-file -verify-diagnostics | FileCheck %s
// RUN: loom-opt %s --loom-rebatch=batch=1 -split-input-file -verify-diagnostics | FileCheck %s --check-prefix=ONE

// A forward exported at batch 2 re-inferred at 8 (and at 1): inferring ops,
// same-type ops and broadcasting ops take new shapes; reshapes find the
// batch by the elements per batch index, whether it is merged with the
// sequence ([2*12, 32]) or split again; a slice of the whole batch takes the
// whole new one; a causal mask folded at batch 2 is made again at 8.
// CHECK-LABEL: func.func @main(%arg0: tensor<8x12xi64>) -> tensor<8x12x96xf32>
// CHECK: nn.embedding {{.*}} -> tensor<8x12x32xf32>
// CHECK: nn.reshape {{.*}} : tensor<8x12x32xf32> -> tensor<96x32xf32>
// CHECK: nn.matmul {{.*}} -> tensor<96x32xf32>
// CHECK: nn.reshape {{.*}} : tensor<96x32xf32> -> tensor<8x12x4x8xf32>
// CHECK: nn.transpose {{.*}} -> tensor<8x4x12x8xf32>
// CHECK: nn.constant dense<{{.*}}> : tensor<8x1x12x12xf32>
// CHECK: nn.add {{.*}} -> tensor<8x4x12x12xf32>
// CHECK: nn.softmax {{.*}} : tensor<8x4x12x12xf32>
// CHECK: nn.slice {{.*}} limits = [8, 4, 12, 12] {{.*}} -> tensor<8x4x12x12xf32>
// CHECK: nn.rms_norm {{.*}} -> tensor<8x12x32xf32>
// CHECK: return {{.*}} : tensor<8x12x96xf32>
// ONE-LABEL: func.func @main(%arg0: tensor<1x12xi64>) -> tensor<1x12x96xf32>
// ONE: nn.reshape {{.*}} : tensor<1x12x32xf32> -> tensor<12x32xf32>
// ONE: nn.reshape {{.*}} : tensor<12x32xf32> -> tensor<1x12x4x8xf32>
// ONE: nn.constant dense<{{.*}}> : tensor<1x1x12x12xf32>
// ONE: return {{.*}} : tensor<1x12x96xf32>
module {
  func.func @main(%ids: tensor<2x12xi64>) -> tensor<2x12x96xf32> {
    %table = nn.parameter "embed" : tensor<96x32xf32>
    %w = nn.parameter "w" : tensor<32x32xf32>
    %g = nn.parameter "norm" : tensor<32xf32>
    %h = nn.embedding %table, %ids : (tensor<96x32xf32>, tensor<2x12xi64>) -> tensor<2x12x32xf32>
    %flat = nn.reshape %h : tensor<2x12x32xf32> -> tensor<24x32xf32>
    %p = nn.matmul %flat, %w {transpose_rhs} : (tensor<24x32xf32>, tensor<32x32xf32>) -> tensor<24x32xf32>
    %heads = nn.reshape %p : tensor<24x32xf32> -> tensor<2x12x4x8xf32>
    %q = nn.transpose %heads permutation = [0, 2, 1, 3] : tensor<2x12x4x8xf32> -> tensor<2x4x12x8xf32>
    %s = nn.matmul %q, %q {transpose_rhs} : (tensor<2x4x12x8xf32>, tensor<2x4x12x8xf32>) -> tensor<2x4x12x12xf32>
    %mask = nn.constant dense<0.0> : tensor<2x1x12x12xf32>
    %m = nn.add %s, %mask : (tensor<2x4x12x12xf32>, tensor<2x1x12x12xf32>) -> tensor<2x4x12x12xf32>
    %a = nn.softmax %m dim = 3 : tensor<2x4x12x12xf32>
    %all = nn.slice %a starts = [0, 0, 0, 0] limits = [2, 4, 12, 12] strides = [1, 1, 1, 1] : tensor<2x4x12x12xf32> -> tensor<2x4x12x12xf32>
    %o = nn.matmul %all, %q : (tensor<2x4x12x12xf32>, tensor<2x4x12x8xf32>) -> tensor<2x4x12x8xf32>
    %back = nn.transpose %o permutation = [0, 2, 1, 3] : tensor<2x4x12x8xf32> -> tensor<2x12x4x8xf32>
    %merged = nn.reshape %back : tensor<2x12x4x8xf32> -> tensor<2x12x32xf32>
    %n = nn.rms_norm %merged, weight %g : (tensor<2x12x32xf32>, tensor<32xf32>) -> tensor<2x12x32xf32>
    %logits = nn.matmul %n, %table {transpose_rhs} : (tensor<2x12x32xf32>, tensor<96x32xf32>) -> tensor<2x12x96xf32>
    return %logits : tensor<2x12x96xf32>
  }
}

// -----

// A slice of some of the batch's sequences cannot follow a new batch.
module {
  func.func @main(%x: tensor<2x4xf32>) -> tensor<1x4xf32> {
    // expected-error @below {{'nn.slice': takes some of the batch's sequences (a slice of dim 0), which a new batch cannot follow}}
    %first = nn.slice %x starts = [0, 0] limits = [1, 4] strides = [1, 1] : tensor<2x4xf32> -> tensor<1x4xf32>
    return %first : tensor<1x4xf32>
  }
}

// -----

// A constant that differs between sequences is baked (the error names the
// importer's node where the op has one: test/frontend/rebatch.test).
module {
  func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    // expected-error @below {{'nn.constant': the batch (2) is baked into this value (8 elements, dim 0), which differs between sequences or is not a constant}}
    %c = nn.constant dense<[[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]> : tensor<2x4xf32>
    %y = nn.add %x, %c : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    return %y : tensor<2x4xf32>
  }
}

// -----

// A reshape that mixes the batch with the sequence in another grouping.
module {
  func.func @main(%x: tensor<2x6xf32>) -> tensor<3x4xf32> {
    // expected-error @below {{mixes the batch dim with others (tensor<2x6xf32> -> tensor<3x4xf32>)}}
    %y = nn.reshape %x : tensor<2x6xf32> -> tensor<3x4xf32>
    return %y : tensor<3x4xf32>
  }
}

// -----

// A constant folded with the batch merged into another dim (BLOOM's ALiBi
// bias, [B * heads, 1, S], added to scores [B * heads, S, S]) is made again
// at the new batch when every sequence's rows are the same: its per-head
// rows repeat, batch outer.
// CHECK-LABEL: func.func @main(%arg0: tensor<8x3xi64>)
// CHECK: nn.constant dense<{{\[\[\[}}1.000000e+00, 2.000000e+00, 3.000000e+00]], {{\[\[}}4.000000e+00, 5.000000e+00, 6.000000e+00]], {{\[\[}}1.000000e+00, 2.000000e+00, 3.000000e+00]]{{.*}}> : tensor<16x1x3xf32>
// CHECK: nn.add {{.*}} -> tensor<16x3x3xf32>
// ONE-LABEL: func.func @main(%arg0: tensor<1x3xi64>)
// ONE: nn.constant dense<{{\[\[\[}}1.000000e+00, 2.000000e+00, 3.000000e+00]], {{\[\[}}4.000000e+00, 5.000000e+00, 6.000000e+00]]]> : tensor<2x1x3xf32>
// ONE: nn.add {{.*}} -> tensor<2x3x3xf32>
module {
  func.func @main(%ids: tensor<2x3xi64>) -> tensor<2x2x3x3xf32> {
    %table = nn.parameter "embed" : tensor<16x3xf32>
    %e = nn.embedding %table, %ids : (tensor<16x3xf32>, tensor<2x3xi64>) -> tensor<2x3x3xf32>
    %q = nn.reshape %e : tensor<2x3x3xf32> -> tensor<2x1x3x3xf32>
    %qb = nn.broadcast %q : tensor<2x1x3x3xf32> -> tensor<2x2x3x3xf32>
    %s = nn.reshape %qb : tensor<2x2x3x3xf32> -> tensor<4x3x3xf32>
    %alibi = nn.constant dense<[[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0]], [[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0]]]> : tensor<4x1x3xf32>
    %biased = nn.add %s, %alibi : (tensor<4x3x3xf32>, tensor<4x1x3xf32>) -> tensor<4x3x3xf32>
    %out = nn.reshape %biased : tensor<4x3x3xf32> -> tensor<2x2x3x3xf32>
    return %out : tensor<2x2x3x3xf32>
  }
}

// -----

// A constant concatenated beside the batch's values along another dim (the
// zeros a static export's pooling window starts from) is made again at the
// new batch; sequences joined along the batch dim itself are not.
// CHECK-LABEL: func.func @main(%arg0: tensor<8x3xi64>) -> tensor<8x5x3xf32>
// CHECK: nn.constant dense<0.000000e+00> : tensor<8x2x3xf32>
// CHECK: nn.concat {{.*}} : (tensor<8x2x3xf32>, tensor<8x3x3xf32>) -> tensor<8x5x3xf32>
// ONE-LABEL: func.func @main(%arg0: tensor<1x3xi64>) -> tensor<1x5x3xf32>
// ONE: nn.constant dense<0.000000e+00> : tensor<1x2x3xf32>
// ONE: nn.concat {{.*}} : (tensor<1x2x3xf32>, tensor<1x3x3xf32>) -> tensor<1x5x3xf32>
module {
  func.func @main(%ids: tensor<2x3xi64>) -> tensor<2x5x3xf32> {
    %table = nn.parameter "embed" : tensor<16x3xf32>
    %e = nn.embedding %table, %ids : (tensor<16x3xf32>, tensor<2x3xi64>) -> tensor<2x3x3xf32>
    %zeros = nn.constant dense<0.0> : tensor<2x2x3xf32>
    %out = nn.concat %zeros, %e dim = 1 : (tensor<2x2x3xf32>, tensor<2x3x3xf32>) -> tensor<2x5x3xf32>
    return %out : tensor<2x5x3xf32>
  }
}

// -----

// A constant of the export's batch multiplied in a batched matmul (the
// zeros a chunked delta rule starts its state from) is made again at the
// new batch; a matmul's last two dims are never the batch.
// CHECK-LABEL: func.func @main(%arg0: tensor<8x3xi64>) -> tensor<8x3x3xf32>
// CHECK: nn.constant dense<0.000000e+00> : tensor<8x3x3xf32>
// CHECK: nn.matmul {{.*}} : (tensor<8x3x3xf32>, tensor<8x3x3xf32>) -> tensor<8x3x3xf32>
// ONE-LABEL: func.func @main(%arg0: tensor<1x3xi64>) -> tensor<1x3x3xf32>
// ONE: nn.constant dense<0.000000e+00> : tensor<1x3x3xf32>
// ONE: nn.matmul {{.*}} : (tensor<1x3x3xf32>, tensor<1x3x3xf32>) -> tensor<1x3x3xf32>
module {
  func.func @main(%ids: tensor<2x3xi64>) -> tensor<2x3x3xf32> {
    %table = nn.parameter "embed" : tensor<16x3xf32>
    %e = nn.embedding %table, %ids : (tensor<16x3xf32>, tensor<2x3xi64>) -> tensor<2x3x3xf32>
    %state = nn.constant dense<0.0> : tensor<2x3x3xf32>
    %y = nn.matmul %e, %state : (tensor<2x3x3xf32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
    %out = nn.sub %e, %y : (tensor<2x3x3xf32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
    return %out : tensor<2x3x3xf32>
  }
}

// -----

// A padding mask indexed per sequence, mask[arange(B)[:, None], kv], as a
// static-batch export with an attention_mask input writes it: the mask's
// rows flattened and gathered at b * S + kv. The positions count along the
// batch (a constant arange(2), broadcast, times S), and are counted on over
// the new batch.
// CHECK-LABEL: func.func @main(%arg0: tensor<8x4xi64>, %arg1: tensor<8x4xi1>) -> tensor<8x1x4xi1>
// CHECK: nn.constant dense<{{\[\[\[}}0]], {{\[\[}}1]], {{\[\[}}2]], {{\[\[}}3]], {{\[\[}}4]], {{\[\[}}5]], {{\[\[}}6]], {{\[\[}}7]]]> : tensor<8x1x1xi64>
// CHECK: nn.gather {{.*}} : (tensor<32xi1>, tensor<8x1x4xi64>) -> tensor<8x1x4xi1>
// ONE-LABEL: func.func @main(%arg0: tensor<1x4xi64>, %arg1: tensor<1x4xi1>) -> tensor<1x1x4xi1>
// ONE: nn.gather {{.*}} : (tensor<4xi1>, tensor<1x1x4xi64>) -> tensor<1x1x4xi1>
func.func @main(%ids: tensor<2x4xi64>, %mask: tensor<2x4xi1>) -> tensor<2x1x4xi1> {
  %b = nn.constant dense<[[[0]], [[1]]]> : tensor<2x1x1xi64>
  %bb = nn.broadcast %b : tensor<2x1x1xi64> -> tensor<2x1x4xi64>
  %s = nn.constant dense<4> : tensor<i64>
  %rows = nn.mul %bb, %s : (tensor<2x1x4xi64>, tensor<i64>) -> tensor<2x1x4xi64>
  %kv = nn.iota dim = 2 : tensor<1x1x4xi64>
  %pos = nn.add %rows, %kv : (tensor<2x1x4xi64>, tensor<1x1x4xi64>) -> tensor<2x1x4xi64>
  %flat = nn.reshape %mask : tensor<2x4xi1> -> tensor<8xi1>
  %g = nn.gather %flat, %pos axis = 0 : (tensor<8xi1>, tensor<2x1x4xi64>) -> tensor<2x1x4xi1>
  return %g : tensor<2x1x4xi1>
}
