// RUN: loom-opt %s --loom-attention-stats -split-input-file | FileCheck %s

// A forward and the gradient that differentiates it (same q, k, v, causal
// and scale): the forward also returns its row logsumexp, the gradient
// reads the forward's output and that, and each new op keeps the replaced
// op's discardable attributes.
// CHECK-LABEL: func.func @pair
// CHECK: %[[O:[^,]*]], %[[LSE:[^ ]*]] = nn.attention_with_stats %arg0, %arg1, %arg2 causal {loom.microbatch = 1 : i64, pipe.stage = 0 : i64} : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x4x6xf32>)
// CHECK: %[[Y:.*]] = nn.mul %[[O]], %[[O]]
// CHECK: %[[DQ:[^,]*]], %[[DK:[^,]*]], %[[DV:[^,]*]] = nn.attention_grad_with_stats %arg0, %arg1, %arg2, %[[O]], %[[LSE]], %[[Y]] causal {loom.backward = #loom.backward<input>, loom.microbatch = 1 : i64, pipe.stage = 0 : i64} : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x4x6x8xf32>, tensor<1x4x6xf32>, tensor<1x4x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>)
// CHECK: return %[[Y]], %[[DQ]], %[[DK]], %[[DV]]
// CHECK-NOT: nn.attention_grad %
func.func @pair(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xf32>, %v: tensor<1x2x6x8xf32>)
    -> (tensor<1x4x6x8xf32>, tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) {
  %o = nn.attention %q, %k, %v causal {loom.microbatch = 1 : i64, pipe.stage = 0 : i64} : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> tensor<1x4x6x8xf32>
  %y = nn.mul %o, %o : (tensor<1x4x6x8xf32>, tensor<1x4x6x8xf32>) -> tensor<1x4x6x8xf32>
  %dq, %dk, %dv = nn.attention_grad %q, %k, %v, %y causal {loom.backward = #loom.backward<input>, loom.microbatch = 1 : i64, pipe.stage = 0 : i64} : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x4x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>)
  return %y, %dq, %dk, %dv : tensor<1x4x6x8xf32>, tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>
}

// -----

// An attention that no gradient differentiates (inference, or a frozen
// branch) is left as it is: nothing reads statistics.
// CHECK-LABEL: func.func @forward_only
// CHECK: nn.attention %arg0, %arg1, %arg1 :
// CHECK-NOT: with_stats
func.func @forward_only(%q: tensor<1x2x5x8xf32>, %k: tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32> {
  %o = nn.attention %q, %k, %k : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  return %o : tensor<1x2x5x8xf32>
}

// -----

// A gradient of other operands, of another mask or of another scale
// differentiates another attention: neither op changes.
// CHECK-LABEL: func.func @mismatches
// CHECK-NOT: with_stats
// CHECK: nn.attention %arg0, %arg1, %arg1 causal :
// CHECK: nn.attention_grad %arg0, %arg1, %arg1, %arg2 :
// CHECK: nn.attention_grad %arg0, %arg1, %arg1, %arg2 causal scale = 5.000000e-01 :
// CHECK: nn.attention_grad %arg0, %arg2, %arg2, %arg2 causal :
// CHECK-NOT: with_stats
func.func @mismatches(%q: tensor<1x2x5x16xf32>, %k: tensor<1x2x5x16xf32>, %d: tensor<1x2x5x16xf32>) {
  %o = nn.attention %q, %k, %k causal : (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>) -> tensor<1x2x5x16xf32>
  %a:3 = nn.attention_grad %q, %k, %k, %d : (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>) -> (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>)
  %b:3 = nn.attention_grad %q, %k, %k, %d causal scale = 0.5 : (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>) -> (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>)
  %c:3 = nn.attention_grad %q, %d, %d, %d causal : (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>) -> (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>)
  return
}

// -----

// The scale is compared as applied: the default 1/sqrt(16) and an explicit
// 0.25 are the same attention.
// CHECK-LABEL: func.func @same_effective_scale
// CHECK: %[[O:[^,]*]], %[[LSE:[^ ]*]] = nn.attention_with_stats %arg0, %arg1, %arg1 :
// CHECK: nn.attention_grad_with_stats %arg0, %arg1, %arg1, %[[O]], %[[LSE]], %arg2 scale = 2.500000e-01 :
func.func @same_effective_scale(%q: tensor<1x2x5x16xf32>, %k: tensor<1x2x5x16xf32>, %d: tensor<1x2x5x16xf32>) -> tensor<1x2x5x16xf32> {
  %o = nn.attention %q, %k, %k : (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>) -> tensor<1x2x5x16xf32>
  %g:3 = nn.attention_grad %q, %k, %k, %d scale = 0.25 : (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>) -> (tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>, tensor<1x2x5x16xf32>)
  return %o : tensor<1x2x5x16xf32>
}

// -----

// A gradient before any matching forward has no statistics to read; the
// forward after it is left alone too.
// CHECK-LABEL: func.func @grad_first
// CHECK-NOT: with_stats
// CHECK: nn.attention_grad %arg0, %arg1, %arg1, %arg2 :
// CHECK: nn.attention %arg0, %arg1, %arg1 :
func.func @grad_first(%q: tensor<1x2x5x8xf32>, %k: tensor<1x2x5x8xf32>, %d: tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32> {
  %g:3 = nn.attention_grad %q, %k, %k, %d : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>)
  %o = nn.attention %q, %k, %k : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  return %o : tensor<1x2x5x8xf32>
}

// -----

// The same attention run twice (two microbatches of one input, not merged):
// each gradient reads the nearest forward before it, and the three
// gradients the rules build per forward (before CSE) all read that one.
// CHECK-LABEL: func.func @nearest
// CHECK: %[[O0:[^,]*]], %[[L0:[^ ]*]] = nn.attention_with_stats %arg0, %arg1, %arg1 {loom.microbatch = 0 : i64}
// CHECK: nn.attention_grad_with_stats %arg0, %arg1, %arg1, %[[O0]], %[[L0]], %arg2 {loom.microbatch = 0 : i64}
// CHECK: %[[O1:[^,]*]], %[[L1:[^ ]*]] = nn.attention_with_stats %arg0, %arg1, %arg1 {loom.microbatch = 1 : i64}
// CHECK: nn.attention_grad_with_stats %arg0, %arg1, %arg1, %[[O1]], %[[L1]], %arg2 {loom.microbatch = 1 : i64}
// CHECK: nn.attention_grad_with_stats %arg0, %arg1, %arg1, %[[O1]], %[[L1]], %arg2 {loom.microbatch = 1 : i64}
// CHECK-NOT: nn.attention
func.func @nearest(%q: tensor<1x2x5x8xf32>, %k: tensor<1x2x5x8xf32>, %d: tensor<1x2x5x8xf32>)
    -> (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) {
  %o0 = nn.attention %q, %k, %k {loom.microbatch = 0 : i64} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  %g0:3 = nn.attention_grad %q, %k, %k, %d {loom.microbatch = 0 : i64} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>)
  %o1 = nn.attention %q, %k, %k {loom.microbatch = 1 : i64} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  %g1:3 = nn.attention_grad %q, %k, %k, %d {loom.microbatch = 1 : i64} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>)
  %g2:3 = nn.attention_grad %q, %k, %k, %d {loom.microbatch = 1 : i64} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>)
  return %o0, %o1, %g0#0, %g1#1, %g2#2 : tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>
}

// -----

// Each pipeline rank's function pairs its own forwards and gradients.
// CHECK-LABEL: func.func @rank0
// CHECK: nn.attention_with_stats
// CHECK: nn.attention_grad_with_stats
// CHECK-LABEL: func.func @rank1
// CHECK-NOT: with_stats
// CHECK: return
func.func @rank0(%q: tensor<1x2x5x8xf32>, %d: tensor<1x2x5x8xf32>) -> (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) {
  %o = nn.attention %q, %q, %q causal : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  %g:3 = nn.attention_grad %q, %q, %q, %d causal : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>)
  return %o, %g#0 : tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>
}
func.func @rank1(%q: tensor<1x2x5x8xf32>, %d: tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32> {
  %g:3 = nn.attention_grad %q, %q, %q, %d causal : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>)
  return %g#0 : tensor<1x2x5x8xf32>
}

// -----

// After SPMD partitioning each result carries its sharding: lse takes the
// output's batch, head and sequence dims; the gradient's three results keep
// theirs.
// CHECK-LABEL: func.func @sharded
// CHECK: nn.attention_with_stats {{.*}}dist.sharding = [#dist.sharding<{{\[\["dp"\], \["tp"\], \[\], \[\]\]}}>, #dist.sharding<{{\[\["dp"\], \["tp"\], \[\]\]}}>]
// CHECK: nn.attention_grad_with_stats {{.*}}dist.sharding = [#dist.sharding<{{(\[\["dp"\], \["tp"\], \[\], \[\]\]>, #dist.sharding<){2}\[\["dp"\], \["tp"\], \[\], \[\]\]}}>]
func.func @sharded(%q: tensor<1x2x5x8xf32>, %d: tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32> {
  %o = nn.attention %q, %q, %q causal {dist.sharding = [#dist.sharding<[["dp"], ["tp"], [], []]>]} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  %g:3 = nn.attention_grad %q, %q, %q, %d causal {dist.sharding = [#dist.sharding<[["dp"], ["tp"], [], []]>, #dist.sharding<[["dp"], ["tp"], [], []]>, #dist.sharding<[["dp"], ["tp"], [], []]>]} : (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>) -> (tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32>)
  return %g#0 : tensor<1x2x5x8xf32>
}
