// RUN: loom-opt %s --loom-lower-to-rt -split-input-file -verify-diagnostics -allow-unregistered-dialect | FileCheck %s

// The example of Passes.td: inputs, one kernel into a fresh alloc, outputs
// with default names (input<i>, output<i>).
// CHECK-LABEL: rt.program @main rank = 0 streams = ["compute"] {
// CHECK-NEXT:    %[[X:.*]] = rt.input "input0" : memref<4x8xf32>
// CHECK-NEXT:    %[[Y:.*]] = rt.alloc {{.*}}: memref<4x8xf32>
// CHECK-NEXT:    rt.kernel "nn.relu"(%[[X]]) -> (%[[Y]]) : (memref<4x8xf32>) -> memref<4x8xf32>
// CHECK-NEXT:    rt.output "output0" %[[Y]] : memref<4x8xf32>
// CHECK-NEXT:  }
// CHECK-NOT:   func.func
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = nn.relu %x : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// loom.name argument and result attributes name inputs and outputs; unnamed
// ones keep their positional default.
// CHECK-LABEL: rt.program @main
// CHECK-DAG:   rt.input "input0" : memref<2xf32>
// CHECK-DAG:   rt.input "tokens" : memref<2xf32>
// CHECK-DAG:   rt.output "sum" %{{.*}} : memref<2xf32>
// CHECK-DAG:   rt.output "output1" %{{.*}} : memref<2xf32>
func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32> {loom.name = "tokens"})
    -> (tensor<2xf32> {loom.name = "sum"}, tensor<2xf32>) {
  %s = nn.add %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %d = nn.sub %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %s, %d : tensor<2xf32>, tensor<2xf32>
}

// -----

// Parameters keep their name, initializer, scale, frozen flag and value;
// they are persistent (rt.param), not inputs.
// CHECK-LABEL: rt.program @main
// CHECK:       %[[W:.*]] = rt.param "w" {init = "normal", init_scale = 2.000000e-02 : f64} : memref<8x8xf32>
// CHECK:       %[[Z:.*]] = rt.param "z" : memref<8xf32>
// CHECK:       %[[F:.*]] = rt.param "rope.inv_freq" frozen {init = "ones"} : memref<8xf32>
// CHECK:       %[[V:.*]] = rt.param "v" {value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>} : memref<2xf32>
// CHECK:       rt.kernel "nn.matmul"(%{{.*}}, %[[W]])
// CHECK:       rt.kernel "nn.add"(%{{.*}}, %[[F]])
// CHECK:       rt.kernel "nn.add"(%{{.*}}, %[[Z]])
// CHECK:       rt.kernel "nn.mul"(%[[V]], %[[V]])
func.func @main(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<2xf32>) {
  %w = nn.parameter "w" init(normal, 0.02) : tensor<8x8xf32>
  %z = nn.parameter "z" : tensor<8xf32>
  %f = nn.parameter "rope.inv_freq" frozen init(ones) : tensor<8xf32>
  %v = nn.parameter "v" value(dense<[1.0, 2.0]> : tensor<2xf32>) : tensor<2xf32>
  %m = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a = nn.add %m, %f : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %b = nn.add %a, %z : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %c = nn.mul %v, %v : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %b, %c : tensor<4x8xf32>, tensor<2xf32>
}

// -----

// Constants become frozen parameters named constant.<n> in program order,
// carrying their value.
// CHECK-LABEL: rt.program @main
// CHECK:       %[[C0:.*]] = rt.param "constant.0" frozen {value = dense<1.000000e+00> : tensor<4xf32>} : memref<4xf32>
// CHECK:       %[[C1:.*]] = rt.param "constant.1" frozen {value = dense<[1, 2, 3, 4]> : tensor<4xi64>} : memref<4xi64>
// CHECK:       rt.kernel "nn.add"(%{{.*}}, %[[C0]])
// CHECK:       rt.kernel "nn.cast"(%[[C1]])
func.func @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %c0 = nn.constant dense<1.0> : tensor<4xf32>
  %c1 = nn.constant dense<[1, 2, 3, 4]> : tensor<4xi64>
  %a = nn.add %x, %c0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %b = nn.cast %c1 : tensor<4xi64> -> tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}

// -----

// A reshape moves no bytes: it becomes an rt.alias (chained for chained
// reshapes), and kernels read the alias.
// CHECK-LABEL: rt.program @main
// CHECK:       %[[X:.*]] = rt.input "input0" : memref<4x8xf32>
// CHECK-NEXT:  %[[R:.*]] = rt.alias %[[X]] : memref<4x8xf32> -> memref<32xf32>
// CHECK-NEXT:  %[[R2:.*]] = rt.alias %[[R]] : memref<32xf32> -> memref<2x16xf32>
// CHECK-NEXT:  %[[Y:.*]] = rt.alloc {{.*}}: memref<2x16xf32>
// CHECK-NEXT:  rt.kernel "nn.exp"(%[[R2]]) -> (%[[Y]])
// CHECK-NOT:   rt.kernel "nn.reshape"
func.func @main(%x: tensor<4x8xf32>) -> tensor<2x16xf32> {
  %r = nn.reshape %x : tensor<4x8xf32> -> tensor<32xf32>
  %r2 = nn.reshape %r : tensor<32xf32> -> tensor<2x16xf32>
  %y = nn.exp %r2 : tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

// matmul's unit attributes become transpose_lhs/transpose_rhs as 0/1, always
// both present.
// CHECK-LABEL: rt.program @main
// CHECK:       rt.kernel "nn.matmul"({{.*}}) attrs {transpose_lhs = 0 : i64, transpose_rhs = 0 : i64}
// CHECK:       rt.kernel "nn.matmul"({{.*}}) attrs {transpose_lhs = 0 : i64, transpose_rhs = 1 : i64}
// CHECK:       rt.kernel "nn.matmul"({{.*}}) attrs {transpose_lhs = 1 : i64, transpose_rhs = 0 : i64}
// CHECK-NOT:   transpose_lhs
// CHECK-NOT:   transpose_rhs
func.func @main(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %0 = nn.matmul %a, %b : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = nn.matmul %a, %b {transpose_rhs} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = nn.matmul %a, %b {transpose_lhs} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0, %1, %2 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// gelu's approximation is a string, "none" when defaulted.
// CHECK-LABEL: rt.program @main
// CHECK:       rt.kernel "nn.gelu"({{.*}}) attrs {approximate = "none"}
// CHECK:       rt.kernel "nn.gelu"({{.*}}) attrs {approximate = "tanh"}
func.func @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = nn.gelu %x : tensor<4xf32>
  %1 = nn.gelu %x approximate = tanh : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// layer_norm and rms_norm: has_weight/has_bias say which optional inputs
// are present; epsilon is explicit (the op's default, or as given).
// CHECK-LABEL: rt.program @main
// CHECK:       rt.kernel "nn.layer_norm"(%{{[^,]*}}) -> ({{.*}}) attrs {epsilon = 1.000000e-05 : f64, has_bias = 0 : i64, has_weight = 0 : i64}
// CHECK:       rt.kernel "nn.layer_norm"(%{{[^,]*}}, %{{[^,]*}}) -> ({{.*}}) attrs {epsilon = 1.000000e-05 : f64, has_bias = 1 : i64, has_weight = 0 : i64}
// CHECK:       rt.kernel "nn.layer_norm"(%{{[^,]*}}, %{{[^,]*}}) -> ({{.*}}) attrs {epsilon = 1.000000e-05 : f64, has_bias = 0 : i64, has_weight = 1 : i64}
// CHECK:       rt.kernel "nn.layer_norm"(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) -> ({{.*}}) attrs {epsilon = 1.000000e-03 : f64, has_bias = 1 : i64, has_weight = 1 : i64}
// CHECK:       rt.kernel "nn.rms_norm"(%{{[^,]*}}) -> ({{.*}}) attrs {epsilon = 9.9999999999999995E-7 : f64, has_weight = 0 : i64}
// CHECK:       rt.kernel "nn.rms_norm"(%{{[^,]*}}, %{{[^,]*}}) -> ({{.*}}) attrs {epsilon = 1.000000e-05 : f64, has_weight = 1 : i64}
func.func @main(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>)
    -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %0 = nn.layer_norm %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = nn.layer_norm %x, bias %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %2 = nn.layer_norm %x, weight %w : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %3 = nn.layer_norm %x, weight %w, bias %b epsilon = 1.0e-03 : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %4 = nn.rms_norm %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  %5 = nn.rms_norm %x, weight %w epsilon = 1.0e-05 : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// attention: scale defaults to 1/sqrt(head dim) (D = 16: 0.25), causal is
// 0/1; an explicit scale is kept.
// CHECK-LABEL: rt.program @main
// CHECK:       rt.kernel "nn.attention"({{.*}}) attrs {causal = 0 : i64, scale = 2.500000e-01 : f64, seq_major = 0 : i64}
// CHECK:       rt.kernel "nn.attention"({{.*}}) attrs {causal = 1 : i64, scale = 5.000000e-01 : f64, seq_major = 0 : i64}
func.func @main(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x16xf32>) -> (tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) {
  %0 = nn.attention %q, %k, %k : (tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  %1 = nn.attention %q, %k, %k causal scale = 0.5 : (tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x4x16xf32>
  return %0, %1 : tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>
}

// -----

// cross_entropy: reduction as a string and ignore_index, defaults explicit.
// CHECK-LABEL: rt.program @main
// CHECK:       rt.kernel "nn.cross_entropy"({{.*}}) attrs {ignore_index = -100 : i64, reduction = "mean"} : (memref<4x10xf32>, memref<4xi64>) -> memref<f32>
// CHECK:       rt.kernel "nn.cross_entropy"({{.*}}) attrs {ignore_index = 3 : i64, reduction = "none"} : (memref<4x10xf32>, memref<4xi64>) -> memref<4xf32>
// CHECK:       rt.kernel "nn.cross_entropy"({{.*}}) attrs {ignore_index = -100 : i64, reduction = "sum"}
func.func @main(%logits: tensor<4x10xf32>, %labels: tensor<4xi64>) -> (tensor<f32>, tensor<4xf32>, tensor<f32>) {
  %0 = nn.cross_entropy %logits, %labels : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  %1 = nn.cross_entropy %logits, %labels reduction = none {ignore_index = 3} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<4xf32>
  %2 = nn.cross_entropy %logits, %labels reduction = sum : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  return %0, %1, %2 : tensor<f32>, tensor<4xf32>, tensor<f32>
}

// -----

// Reductions: dims as an i64 array, keepdim as 0/1.
// CHECK-LABEL: rt.program @main
// CHECK:       rt.kernel "nn.reduce_sum"({{.*}}) attrs {dims = array<i64: 1>, keepdim = 0 : i64} : (memref<4x8xf32>) -> memref<4xf32>
// CHECK:       rt.kernel "nn.reduce_max"({{.*}}) attrs {dims = array<i64: 1>, keepdim = 1 : i64} : (memref<4x8xf32>) -> memref<4x1xf32>
// CHECK:       rt.kernel "nn.reduce_mean"({{.*}}) attrs {dims = array<i64: 0, 1>, keepdim = 0 : i64} : (memref<4x8xf32>) -> memref<f32>
func.func @main(%x: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x1xf32>, tensor<f32>) {
  %0 = nn.reduce_sum %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %1 = nn.reduce_max %x dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %2 = nn.reduce_mean %x dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  return %0, %1, %2 : tensor<4xf32>, tensor<4x1xf32>, tensor<f32>
}

// -----

// iota: start and step explicit as f64 (defaults 0 and 1), dim kept; a
// kernel without inputs.
// CHECK-LABEL: rt.program @main
// CHECK:       rt.kernel "nn.iota"() -> (%{{.*}}) attrs {dim = 0 : i64, start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : () -> memref<16xi64>
// CHECK:       rt.kernel "nn.iota"() -> (%{{.*}}) attrs {dim = 1 : i64, start = 2.000000e+00 : f64, step = 5.000000e-01 : f64} : () -> memref<2x16xf32>
func.func @main() -> (tensor<16xi64>, tensor<2x16xf32>) {
  %0 = nn.iota dim = 0 : tensor<16xi64>
  %1 = nn.iota dim = 1 {start = 2.0, step = 0.5} : tensor<2x16xf32>
  return %0, %1 : tensor<16xi64>, tensor<2x16xf32>
}

// -----

// compare's predicate is a string, one per enum case.
// CHECK-LABEL: rt.program @main
// CHECK:       attrs {predicate = "eq"} : (memref<4xf32>, memref<4xf32>) -> memref<4xi1>
// CHECK:       attrs {predicate = "ne"}
// CHECK:       attrs {predicate = "lt"}
// CHECK:       attrs {predicate = "le"}
// CHECK:       attrs {predicate = "gt"}
// CHECK:       attrs {predicate = "ge"}
func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>) {
  %0 = nn.compare eq, %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %1 = nn.compare ne, %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %2 = nn.compare lt, %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %3 = nn.compare le, %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %4 = nn.compare gt, %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %5 = nn.compare ge, %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0, %1, %2, %3, %4, %5 : tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>
}

// -----

// Other attributes pass through: integer (softmax dim, dropout seed), float
// (dropout p), i64 arrays (transpose permutation, slice starts/strides).
// CHECK-LABEL: rt.program @main
// CHECK:       rt.kernel "nn.softmax"({{.*}}) attrs {dim = 1 : i64}
// CHECK:       rt.kernel "nn.dropout"({{.*}}) attrs {p = 1.000000e-01 : f64, seed = 7 : i64}
// CHECK:       rt.kernel "nn.transpose"({{.*}}) attrs {permutation = array<i64: 1, 0>}
func.func @main(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>) {
  %0 = nn.softmax %x dim = 1 : tensor<4x8xf32>
  %1 = nn.dropout %x p = 0.1 seed = 7 : tensor<4x8xf32>
  %2 = nn.transpose %x permutation = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0, %1, %2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>
}

// -----

// Returning an input directly: the output is a copy into a fresh alloc (an
// output is a scratch buffer of its own, not the caller's input).
// CHECK-LABEL: rt.program @main
// CHECK:       %[[X:.*]] = rt.input "input0" : memref<4xf32>
// CHECK-NEXT:  %[[C:.*]] = rt.alloc {{.*}}: memref<4xf32>
// CHECK-NEXT:  rt.copy %[[X]] -> %[[C]] : memref<4xf32> -> memref<4xf32>
// CHECK-NEXT:  rt.output "output0" %[[C]] : memref<4xf32>
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// Returning a reshape of an input: still the input's bytes, so a copy of
// the alias.
// CHECK-LABEL: rt.program @main
// CHECK:       %[[X:.*]] = rt.input "input0" : memref<2x2xf32>
// CHECK-NEXT:  %[[A:.*]] = rt.alias %[[X]] : memref<2x2xf32> -> memref<4xf32>
// CHECK-NEXT:  %[[C:.*]] = rt.alloc {{.*}}: memref<4xf32>
// CHECK-NEXT:  rt.copy %[[A]] -> %[[C]] : memref<4xf32> -> memref<4xf32>
// CHECK-NEXT:  rt.output "output0" %[[C]] : memref<4xf32>
func.func @main(%x: tensor<2x2xf32>) -> tensor<4xf32> {
  %r = nn.reshape %x : tensor<2x2xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Returning a parameter or a constant: a copy out of the persistent arena.
// CHECK-LABEL: rt.program @main
// CHECK:       %[[W:.*]] = rt.param "w" : memref<4xf32>
// CHECK-NEXT:  %[[K:.*]] = rt.param "constant.0" frozen
// CHECK-NEXT:  %[[C:.*]] = rt.alloc {{.*}}: memref<4xf32>
// CHECK-NEXT:  rt.copy %[[W]] -> %[[C]]
// CHECK-NEXT:  rt.output "weight" %[[C]] : memref<4xf32>
// CHECK-NEXT:  %[[D:.*]] = rt.alloc {{.*}}: memref<2xf32>
// CHECK-NEXT:  rt.copy %[[K]] -> %[[D]]
// CHECK-NEXT:  rt.output "output1" %[[D]] : memref<2xf32>
func.func @main() -> (tensor<4xf32> {loom.name = "weight"}, tensor<2xf32>) {
  %w = nn.parameter "w" : tensor<4xf32>
  %k = nn.constant dense<2.0> : tensor<2xf32>
  return %w, %k : tensor<4xf32>, tensor<2xf32>
}

// -----

// Returning one computed value twice: the first output is the kernel's
// buffer, the second a copy of it.
// CHECK-LABEL: rt.program @main
// CHECK:       %[[Y:.*]] = rt.alloc {{.*}}: memref<4xf32>
// CHECK-NEXT:  rt.kernel "nn.neg"(%{{.*}}) -> (%[[Y]])
// CHECK-NEXT:  rt.output "output0" %[[Y]] : memref<4xf32>
// CHECK-NEXT:  %[[C:.*]] = rt.alloc {{.*}}: memref<4xf32>
// CHECK-NEXT:  rt.copy %[[Y]] -> %[[C]]
// CHECK-NEXT:  rt.output "output1" %[[C]] : memref<4xf32>
func.func @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %y = nn.neg %x : tensor<4xf32>
  return %y, %y : tensor<4xf32>, tensor<4xf32>
}

// -----

// A computed value and a reshape of it share bytes: the reshape is
// returned as the alias, the value itself as a copy.
// CHECK-LABEL: rt.program @main
// CHECK:       %[[Y:.*]] = rt.alloc {{.*}}: memref<2x2xf32>
// CHECK-NEXT:  rt.kernel "nn.neg"(%{{.*}}) -> (%[[Y]])
// CHECK-NEXT:  %[[A:.*]] = rt.alias %[[Y]] : memref<2x2xf32> -> memref<4xf32>
// CHECK-NEXT:  rt.output "output0" %[[A]] : memref<4xf32>
// CHECK-NEXT:  %[[C:.*]] = rt.alloc {{.*}}: memref<2x2xf32>
// CHECK-NEXT:  rt.copy %[[Y]] -> %[[C]]
// CHECK-NEXT:  rt.output "output1" %[[C]] : memref<2x2xf32>
func.func @main(%x: tensor<2x2xf32>) -> (tensor<4xf32>, tensor<2x2xf32>) {
  %y = nn.neg %x : tensor<2x2xf32>
  %r = nn.reshape %y : tensor<2x2xf32> -> tensor<4xf32>
  return %r, %y : tensor<4xf32>, tensor<2x2xf32>
}

// -----

// Ops with several results get one alloc per result.
// CHECK-LABEL: rt.program @main
// CHECK:       %[[A:.*]] = rt.alloc {{.*}}: memref<4x2xf32>
// CHECK-NEXT:  %[[B:.*]] = rt.alloc {{.*}}: memref<4x6xf32>
// CHECK-NEXT:  rt.kernel "nn.split"(%{{.*}}) -> (%[[A]], %[[B]]) attrs {dim = 1 : i64}
func.func @main(%x: tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x6xf32>) {
  %a, %b = nn.split %x dim = 1 : tensor<4x8xf32> -> tensor<4x2xf32>, tensor<4x6xf32>
  return %a, %b : tensor<4x2xf32>, tensor<4x6xf32>
}

// -----

// Only the entry function is lowered; the others are dropped.
// CHECK-LABEL: rt.program @main
// CHECK-NOT:   func.func
// CHECK-NOT:   helper
func.func @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nn.exp %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nn.neg %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// A non-nn op cannot be lowered.
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'arith.addf' op cannot be lowered to rt: only nn ops are}}
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// A function call is not an nn op either.
func.func private @f(tensor<4xf32>) -> tensor<4xf32>
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'func.call' op cannot be lowered to rt: only nn ops are}}
  %y = func.call @f(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Without a function named like the entry there is nothing to lower.
// expected-error @+1 {{no function named 'main' to lower}}
module {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// A declaration has no body to lower.
// expected-error @+1 {{the entry function must have a single block}}
func.func private @main(tensor<4xf32>) -> tensor<4xf32>

// -----

// Arguments and results must be statically shaped tensors: a scalar...
// expected-error @+1 {{entry function argument #1 has type 'i32'; only statically shaped tensors can become buffers}}
func.func @main(%x: tensor<4xf32>, %n: i32) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// ... or a dynamically shaped tensor cannot become a buffer.
// expected-error @+1 {{entry function result #0 has type 'tensor<?xf32>'; only statically shaped tensors can become buffers}}
func.func @main(%x: tensor<4xf32>) -> tensor<?xf32> {
  %y = "test.dynamic"(%x) : (tensor<4xf32>) -> tensor<?xf32>
  return %y : tensor<?xf32>
}

// -----

// An unregistered op has no dialect: it is reported, not a crash.
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'test.foo' op cannot be lowered to rt: only nn ops are}}
  %y = "test.foo"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
