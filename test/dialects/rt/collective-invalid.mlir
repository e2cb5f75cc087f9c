// RUN: loom-opt %s -split-input-file -verify-diagnostics

// The verifier rules of rt.collective, rt.param/rt.input shardings and the
// module's mesh attributes (dialects/rt/RtDialect.cpp).

module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 4>} {
  rt.program @p rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<4x8xf32>
    %y = rt.alloc : memref<4x16xf32>
    // expected-error @+1 {{all_gather: input [4x8] and output [4x16] differ along dim 1: output must be 32 (the group has 4 ranks)}}
    rt.collective all_gather (%x) -> (%y) {axes = ["tp"], dim = 1} : (memref<4x8xf32>) -> memref<4x16xf32>
  }
}

// -----

module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 4>} {
  rt.program @p rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<4x8xf32>
    %y = rt.alloc : memref<4x8xf32>
    // expected-error @+1 {{axis 'pp' is not a mesh axis (the mesh has ["dp", "tp"])}}
    rt.collective all_reduce (%x) -> (%y) {axes = ["pp"], reduce = #rt.reduce<sum>} : (memref<4x8xf32>) -> memref<4x8xf32>
  }
}

// -----

module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 4>} {
  rt.program @p rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<6x8xf32>
    %y = rt.alloc : memref<3x8xf32>
    // expected-error @+1 {{reduce_scatter: input [6x8] and output [3x8] differ along dim 0: input must be 12 (the group has 4 ranks)}}
    rt.collective reduce_scatter (%x) -> (%y) {axes = ["tp"], dim = 0, reduce = #rt.reduce<sum>} : (memref<6x8xf32>) -> memref<3x8xf32>
  }
}

// -----

module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 4>} {
  rt.program @p rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<6x8xf32>
    %y = rt.alloc : memref<3x16xf32>
    // expected-error @+1 {{all_to_all: split_dim 0 (6) does not divide into 4 blocks}}
    rt.collective all_to_all (%x) -> (%y) {axes = ["tp"], split_dim = 0, concat_dim = 1} : (memref<6x8xf32>) -> memref<3x16xf32>
  }
}

// -----

module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 4>} {
  rt.program @p rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<8xf32>
    %y = rt.alloc : memref<8xf32>
    // expected-error @+1 {{broadcast: root 2 is not an index in a group of 2}}
    rt.collective broadcast (%x) -> (%y) {axes = ["dp"], root = 2} : (memref<8xf32>) -> memref<8xf32>
  }
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  %y = rt.alloc : memref<8xf32>
  // expected-error @+2 {{expected ::loom::rt::CollectiveKind to be one of: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send, recv, exchange}}
  // expected-error @+1 {{failed to parse Rt_CollectiveKindAttr}}
  rt.collective gossip (%x) -> (%y) {axes = ["dp"]} : (memref<8xf32>) -> memref<8xf32>
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  %y = rt.alloc : memref<8xf32>
  // expected-error @+1 {{'all_reduce' needs the attribute 'reduce'}}
  rt.collective all_reduce (%x) -> (%y) {axes = ["dp"]} : (memref<8xf32>) -> memref<8xf32>
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  %y = rt.alloc : memref<8xf32>
  // expected-error @+1 {{'all_gather' takes no attribute 'reduce'}}
  rt.collective all_gather (%x) -> (%y) {axes = ["dp"], dim = 0, reduce = #rt.reduce<sum>} : (memref<8xf32>) -> memref<8xf32>
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  %y = rt.alloc : memref<8xf32>
  // expected-error @+2 {{expected ::loom::rt::ReduceKind to be one of: sum, max, avg}}
  // expected-error @+1 {{failed to parse Rt_ReduceKindAttr}}
  rt.collective all_reduce (%x) -> (%y) {axes = ["dp"], reduce = #rt.reduce<min>} : (memref<8xf32>) -> memref<8xf32>
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf64>
  %y = rt.alloc : memref<8xf64>
  // expected-error @+1 {{all_reduce: element type f64 is not one collectives move (f32, bf16, f16, i64, i32, f8E4M3FN, f8E5M2)}}
  rt.collective all_reduce (%x) -> (%y) {axes = ["dp"], reduce = #rt.reduce<sum>} : (memref<8xf64>) -> memref<8xf64>
}

// -----

// FP8 values are gathered and moved, never summed (each tensor has its own
// scale).
rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf8E4M3FN>
  %y = rt.alloc : memref<8xf8E4M3FN>
  // expected-error @+1 {{all_reduce: element type f8E4M3FN is moved but not reduced (f32, bf16, f16, i64, i32)}}
  rt.collective all_reduce (%x) -> (%y) {axes = ["dp"], reduce = #rt.reduce<sum>} : (memref<8xf8E4M3FN>) -> memref<8xf8E4M3FN>
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  %y = rt.alloc : memref<8xbf16>
  // expected-error @+1 {{all_reduce: input is f32 but output is bf16}}
  rt.collective all_reduce (%x) -> (%y) {axes = ["dp"], reduce = #rt.reduce<sum>} : (memref<8xf32>) -> memref<8xbf16>
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  // expected-error @+1 {{send takes one input and no output}}
  rt.collective send (%x) -> (%x) {peer = 1} : (memref<8xf32>) -> memref<8xf32>
}

// -----

module attributes {rt.mesh_axes = ["pp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @p rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<8xf32>
    // expected-error @+1 {{peer 2 is outside the mesh of 2 ranks}}
    rt.collective send (%x) -> () {peer = 2} : (memref<8xf32>) -> ()
  }
}

// -----

// An exchange's peers are indices in the group over its axes (pp = 2 of a
// mesh of 4 ranks).
module attributes {rt.mesh_axes = ["pp", "tp"], rt.mesh_shape = array<i64: 2, 2>} {
  rt.program @p rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<8xf32>
    %y = rt.alloc : memref<8xf32>
    // expected-error @+1 {{exchange: receive 0: peer 2 is not an index in a group of 2}}
    rt.collective exchange (%x) -> (%y) {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64: 2>} : (memref<8xf32>) -> memref<8xf32>
  }
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  %y = rt.input "y" : memref<8xi64>
  // expected-error @+1 {{exchange: 2 send buffer(s) but 1 send peer(s)}}
  rt.collective exchange (%x, %y) -> () {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64>} : (memref<8xf32>, memref<8xi64>) -> ()
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  // expected-error @+1 {{exchange: 0 receive buffer(s) but 1 receive peer(s)}}
  rt.collective exchange (%x) -> () {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64: 1>} : (memref<8xf32>) -> ()
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  // expected-error @+1 {{exchange transfers nothing (no send and no receive)}}
  rt.collective exchange () -> () {axes = ["pp"], send_peers = array<i64>, recv_peers = array<i64>} : () -> ()
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf64>
  // expected-error @+1 {{exchange: send 0: element type f64 is not one collectives move}}
  rt.collective exchange (%x) -> () {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64>} : (memref<8xf64>) -> ()
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  // expected-error @+1 {{'exchange' needs the attribute 'axes'}}
  rt.collective exchange (%x) -> () {send_peers = array<i64: 1>, recv_peers = array<i64>} : (memref<8xf32>) -> ()
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  // expected-error @+1 {{'exchange' needs the attribute 'recv_peers'}}
  rt.collective exchange (%x) -> () {axes = ["pp"], send_peers = array<i64: 1>} : (memref<8xf32>) -> ()
}

// -----

// Only an exchange has peer lists.
rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  // expected-error @+1 {{'send' takes no attribute 'send_peers'}}
  rt.collective send (%x) -> () {peer = 1, send_peers = array<i64: 1>} : (memref<8xf32>) -> ()
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  %y = rt.alloc : memref<8xf32>
  // expected-error @+1 {{'all_reduce' takes no attribute 'recv_peers'}}
  rt.collective all_reduce (%x) -> (%y) {axes = ["dp"], reduce = #rt.reduce<sum>, recv_peers = array<i64: 0>} : (memref<8xf32>) -> memref<8xf32>
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  %y = rt.alloc : memref<8xf32>
  // expected-error @+1 {{runs on stream 'tp_comm', which the program does not list}}
  rt.collective all_reduce (%x) -> (%y) on "tp_comm" {axes = ["tp"], reduce = #rt.reduce<sum>} : (memref<8xf32>) -> memref<8xf32>
}

// -----

module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 4>} {
  rt.program @p rank = 0 streams = ["compute"] {
    // expected-error @+1 {{buffer 'memref<8x4xf32>' is not this rank's block of the global shape [8, 16], which is [8, 8]}}
    %w = rt.param "w" {global_shape = array<i64: 8, 16>, sharding = [[], ["dp"]]} : memref<8x4xf32>
  }
}

// -----

module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 4>} {
  rt.program @p rank = 0 streams = ["compute"] {
    // expected-error @+1 {{sharding: dimension 0 (6) does not divide into 4 blocks along ["tp"]}}
    %t = rt.input "t" {global_shape = array<i64: 6, 4>, sharding = [["tp"], []]} : memref<1x4xi64>
  }
}

// -----

module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 4>} {
  rt.program @p rank = 0 streams = ["compute"] {
    // expected-error @+1 {{sharding lists 1 dimensions for a global shape of 2}}
    %t = rt.input "t" {global_shape = array<i64: 6, 4>, sharding = [["tp"]]} : memref<6x4xi64>
  }
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  // expected-error @+1 {{is sharded but the module has no mesh (rt.mesh_axes, rt.mesh_shape)}}
  %t = rt.input "t" {global_shape = array<i64: 8, 4>, sharding = [["dp"], []]} : memref<4x4xi64>
}

// -----

rt.program @p rank = 0 streams = ["compute"] {
  // expected-error @+1 {{has a sharding but no global_shape}}
  %w = rt.param "w" {sharding = [[], []]} : memref<4x4xf32>
}

// -----

// A sharded parameter's value is the global tensor.
module attributes {rt.mesh_axes = ["tp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @p rank = 0 streams = ["compute"] {
    // expected-error @+1 {{value of type 'tensor<4xf32>' does not match the buffer 'memref<4xf32>'}}
    %w = rt.param "w" {value = dense<1.0> : tensor<4xf32>, global_shape = array<i64: 8>, sharding = [["tp"]]} : memref<4xf32>
  }
}

// -----

// expected-error @+1 {{rt.mesh_axes names 2 axes but rt.mesh_shape has 1 sizes}}
module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2>} {
}

// -----

// expected-error @+1 {{rt.mesh_axes and rt.mesh_shape go together}}
module attributes {rt.mesh_axes = ["dp"]} {
}

// -----

// expected-error @+1 {{mesh axis 'tp' has size 0; sizes must be positive}}
module attributes {rt.mesh_axes = ["tp"], rt.mesh_shape = array<i64: 0>} {
}

// -----

// The pipeline schedule a pipelined module carries into its executable is
// CSV text.
// expected-error @+1 {{rt.schedule_csv must be a string}}
module attributes {rt.mesh_axes = ["pp"], rt.mesh_shape = array<i64: 2>, rt.schedule_csv = 2 : i64} {
}

// -----

// expected-error @+1 {{'rt.schedule_csv' belongs on the module}}
func.func @f() attributes {rt.schedule_csv = "0F0"} {
  return
}

// -----

// Only all_reduce and reduce_scatter take a bucket of several tensors.
module attributes {rt.mesh_axes = ["dp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @p rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<4xf32>
    %y = rt.alloc : memref<8xf32>
    %z = rt.alloc : memref<8xf32>
    // expected-error @+1 {{takes at most one input and one output (only all_reduce and reduce_scatter take a bucket of several)}}
    rt.collective all_gather (%x, %x) -> (%y, %z) {axes = ["dp"], dim = 0} : (memref<4xf32>, memref<4xf32>) -> (memref<8xf32>, memref<8xf32>)
  }
}

// -----

// A bucket has one output per input.
module attributes {rt.mesh_axes = ["dp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @p rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<4xf32>
    %y = rt.alloc : memref<4xf32>
    // expected-error @+1 {{a bucket needs one output per input, has 2 inputs and 1 outputs}}
    rt.collective all_reduce (%x, %x) -> (%y) {axes = ["dp"], reduce = #rt.reduce<sum>} : (memref<4xf32>, memref<4xf32>) -> memref<4xf32>
  }
}

// -----

// Each entry of a bucket is checked like a collective of its own.
module attributes {rt.mesh_axes = ["dp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @p rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<4xf32>
    %y = rt.alloc : memref<4xf32>
    %z = rt.alloc : memref<2xf32>
    // expected-error @+1 {{bucket entry 1: all_reduce: input [4] and output [2] must have the same shape}}
    rt.collective all_reduce (%x, %x) -> (%y, %z) {axes = ["dp"], reduce = #rt.reduce<sum>} : (memref<4xf32>, memref<4xf32>) -> (memref<4xf32>, memref<2xf32>)
  }
}
