// RUN: loom-opt %s -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file | loom-opt -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file --mlir-print-op-generic | loom-opt -split-input-file | FileCheck %s

// Round trip of every rt op through the custom printer, a re-parse of the
// printed form, and the generic form.

// The smallest program: one stream, no ops, no optional attributes.
// CHECK-LABEL: rt.program @empty rank = 0 streams = ["compute"] {
// CHECK-NEXT: }
rt.program @empty rank = 0 streams = ["compute"] {
}

// -----

// A planned program: rank, several streams, arena sizes, unplanned bytes and
// the event count print in the attribute dictionary.
// CHECK-LABEL: rt.program @planned rank = 3 streams = ["compute", "host_copy", "tp_comm"]
// CHECK-SAME: attributes {arena_sizes = array<i64: 512, 1024>, num_events = 2 : i64, scratch_unplanned_bytes = 2048 : i64}
rt.program @planned rank = 3 streams = ["compute", "host_copy", "tp_comm"] attributes {arena_sizes = array<i64: 512, 1024>, scratch_unplanned_bytes = 2048, num_events = 2} {
}

// -----

// Scratch buffers: allocs with and without an offset or a name, inputs with
// and without an offset, of several element types and ranks.
// CHECK-LABEL: rt.program @buffers
rt.program @buffers rank = 0 streams = ["compute"] {
  // CHECK: %{{.*}} = rt.alloc : memref<4x8xf32>
  %0 = rt.alloc : memref<4x8xf32>
  // CHECK: %{{.*}} = rt.alloc offset = 256 : memref<16xbf16>
  %1 = rt.alloc offset = 256 : memref<16xbf16>
  // CHECK: %{{.*}} = rt.alloc offset = 0 {name = "tmp"} : memref<i64>
  %2 = rt.alloc offset = 0 {name = "tmp"} : memref<i64>
  // CHECK: %{{.*}} = rt.alloc {name = "mask"} : memref<2x2xi1>
  %3 = rt.alloc {name = "mask"} : memref<2x2xi1>
  // CHECK: %{{.*}} = rt.input "x" : memref<2x3xf32>
  %4 = rt.input "x" : memref<2x3xf32>
  // CHECK: %{{.*}} = rt.input "ids" offset = 512 : memref<8xi32>
  %5 = rt.input "ids" offset = 512 : memref<8xi32>
}

// -----

// Parameters: default initializer (not printed), every initializer with a
// scale, frozen, an offset, and a value (a constant).
// CHECK-LABEL: rt.program @params
rt.program @params rank = 0 streams = ["compute"] {
  // CHECK: %{{.*}} = rt.param "w" : memref<4x4xf32>
  %0 = rt.param "w" : memref<4x4xf32>
  // CHECK: %{{.*}} = rt.param "w1" {init = "ones"} : memref<4xf32>
  %1 = rt.param "w1" {init = "ones"} : memref<4xf32>
  // CHECK: %{{.*}} = rt.param "w2" {init = "normal", init_scale = 2.000000e-02 : f64} : memref<4xf32>
  %2 = rt.param "w2" {init = "normal", init_scale = 0.02 : f64} : memref<4xf32>
  // CHECK: %{{.*}} = rt.param "w3" {init = "uniform", init_scale = 1.000000e-01 : f64} : memref<4xbf16>
  %3 = rt.param "w3" {init = "uniform", init_scale = 0.1 : f64} : memref<4xbf16>
  // CHECK: %{{.*}} = rt.param "rope.inv_freq" frozen : memref<8xf32>
  %4 = rt.param "rope.inv_freq" frozen : memref<8xf32>
  // CHECK: %{{.*}} = rt.param "w4" offset = 1024 : memref<4xf32>
  %5 = rt.param "w4" offset = 1024 : memref<4xf32>
  // CHECK: %{{.*}} = rt.param "constant.0" offset = 0 frozen {value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>} : memref<2xf32>
  %6 = rt.param "constant.0" offset = 0 frozen {value = dense<[1.0, 2.0]> : tensor<2xf32>} : memref<2xf32>
  // CHECK: %{{.*}} = rt.param "c" frozen {value = dense<3> : tensor<2x2xi64>} : memref<2x2xi64>
  %7 = rt.param "c" frozen {value = dense<3> : tensor<2x2xi64>} : memref<2x2xi64>
}

// -----

// An alias shows a buffer's bytes with another shape, also of an alias and
// of a parameter; an output marks a buffer, or an alias, for the caller.
// CHECK-LABEL: rt.program @alias_output
rt.program @alias_output rank = 0 streams = ["compute"] {
  // CHECK: %[[X:.*]] = rt.input "x" : memref<4x8xf32>
  %x = rt.input "x" : memref<4x8xf32>
  // CHECK: %[[A:.*]] = rt.alias %[[X]] : memref<4x8xf32> -> memref<32xf32>
  %a = rt.alias %x : memref<4x8xf32> -> memref<32xf32>
  // CHECK: %[[B:.*]] = rt.alias %[[A]] : memref<32xf32> -> memref<2x16xf32>
  %b = rt.alias %a : memref<32xf32> -> memref<2x16xf32>
  // CHECK: %[[P:.*]] = rt.param "p" : memref<2x2xf32>
  %p = rt.param "p" : memref<2x2xf32>
  // CHECK: rt.alias %[[P]] : memref<2x2xf32> -> memref<4xf32>
  %c = rt.alias %p : memref<2x2xf32> -> memref<4xf32>
  // CHECK: rt.output "y" %[[X]] : memref<4x8xf32>
  rt.output "y" %x : memref<4x8xf32>
  // CHECK: rt.output "z" %[[B]] : memref<2x16xf32>
  rt.output "z" %b : memref<2x16xf32>
}

// -----

// Kernels: without attributes or stream, with attributes of every kind
// (integer, float, string, i64 array, f64 array), on a stream, with no
// inputs, with several outputs, with variadic inputs.
// CHECK-LABEL: rt.program @kernels
rt.program @kernels rank = 0 streams = ["compute", "aux"] {
  %x = rt.input "x" : memref<4x8xf32>
  %w = rt.param "w" : memref<16x8xf32>
  %y = rt.alloc : memref<4x8xf32>
  %z = rt.alloc : memref<4x16xf32>
  %i = rt.alloc : memref<16xi64>
  %s0 = rt.alloc : memref<4x4xf32>
  %s1 = rt.alloc : memref<4x4xf32>
  %c = rt.alloc : memref<8x8xf32>
  // CHECK: rt.kernel "nn.relu"(%{{.*}}) -> (%{{.*}}) : (memref<4x8xf32>) -> memref<4x8xf32>
  rt.kernel "nn.relu" (%x) -> (%y) : (memref<4x8xf32>) -> memref<4x8xf32>
  // CHECK: rt.kernel "nn.matmul"(%{{.*}}, %{{.*}}) -> (%{{.*}}) attrs {transpose_lhs = 0 : i64, transpose_rhs = 1 : i64} on "aux" : (memref<4x8xf32>, memref<16x8xf32>) -> memref<4x16xf32>
  rt.kernel "nn.matmul" (%x, %w) -> (%z) attrs {transpose_lhs = 0 : i64, transpose_rhs = 1 : i64} on "aux" : (memref<4x8xf32>, memref<16x8xf32>) -> memref<4x16xf32>
  // CHECK: rt.kernel "nn.gelu"(%{{.*}}) -> (%{{.*}}) attrs {approximate = "tanh"} on "compute" : (memref<4x8xf32>) -> memref<4x8xf32>
  rt.kernel "nn.gelu" (%x) -> (%y) attrs {approximate = "tanh"} on "compute" : (memref<4x8xf32>) -> memref<4x8xf32>
  // CHECK: rt.kernel "nn.iota"() -> (%{{.*}}) attrs {dim = 0 : i64, start = 1.000000e+00 : f64, step = 2.500000e-01 : f64} : () -> memref<16xi64>
  rt.kernel "nn.iota"() -> (%i) attrs {dim = 0 : i64, start = 1.0 : f64, step = 0.25 : f64} : () -> memref<16xi64>
  // CHECK: rt.kernel "nn.transpose"(%{{.*}}) -> (%{{.*}}) attrs {permutation = array<i64: 1, 0>} : (memref<4x8xf32>) -> memref<4x8xf32>
  rt.kernel "nn.transpose" (%x) -> (%y) attrs {permutation = array<i64: 1, 0>} : (memref<4x8xf32>) -> memref<4x8xf32>
  // CHECK: rt.kernel "nn.adamw_multi"({{.*}}) attrs {beta1 = {{.*}}, weight_decays = array<f64: 5.000000e-01>}
  rt.kernel "nn.adamw_multi" (%s0, %s1, %s0, %s1, %s0, %s1) -> (%s0, %s1, %s0) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decays = array<f64: 0.5>} : (memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>) -> (memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>)
  // CHECK: rt.kernel "nn.split"(%{{.*}}) -> (%{{.*}}, %{{.*}}) attrs {dim = 1 : i64} : (memref<4x8xf32>) -> (memref<4x4xf32>, memref<4x4xf32>)
  rt.kernel "nn.split" (%x) -> (%s0, %s1) attrs {dim = 1 : i64} : (memref<4x8xf32>) -> (memref<4x4xf32>, memref<4x4xf32>)
  // CHECK: rt.kernel "nn.concat"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) -> (%{{.*}}) attrs {dim = 1 : i64} : (memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>) -> memref<8x8xf32>
  rt.kernel "nn.concat" (%s0, %s1, %s0, %s1) -> (%c) attrs {dim = 1 : i64} : (memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>, memref<4x4xf32>) -> memref<8x8xf32>
}

// -----

// Copies, with and without a stream and with a discardable attribute, between
// buffers of one size but different shapes; events recorded and waited on.
// CHECK-LABEL: rt.program @copies_events
rt.program @copies_events rank = 0 streams = ["compute", "host_copy"] attributes {num_events = 1} {
  // CHECK: %[[X:.*]] = rt.input "x" : memref<4x8xf32>
  %x = rt.input "x" : memref<4x8xf32>
  // CHECK: %[[Y:.*]] = rt.alloc : memref<32xf32>
  %y = rt.alloc : memref<32xf32>
  // CHECK: rt.copy %[[X]] -> %[[Y]] : memref<4x8xf32> -> memref<32xf32>
  rt.copy %x -> %y : memref<4x8xf32> -> memref<32xf32>
  // CHECK: rt.record_event 0 on "compute"
  rt.record_event 0 on "compute"
  // CHECK: rt.wait_event 0 on "host_copy"
  rt.wait_event 0 on "host_copy"
  // CHECK: rt.copy %[[Y]] -> %[[X]] on "host_copy" {loom.host_copy} : memref<32xf32> -> memref<4x8xf32>
  rt.copy %y -> %x on "host_copy" {loom.host_copy} : memref<32xf32> -> memref<4x8xf32>
}

// -----

// Several programs in one module, e.g. one per rank.
// CHECK-LABEL: rt.program @rank0 rank = 0
// CHECK-LABEL: rt.program @rank1 rank = 1
rt.program @rank0 rank = 0 streams = ["compute"] {
}
rt.program @rank1 rank = 1 streams = ["compute"] {
}
