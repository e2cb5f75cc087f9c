// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Every verifier rule of the dist dialect (dialects/dist/DistDialect.cpp).

// A collective's axes must be in the module's mesh.
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @unknown_axis(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'dist.all_reduce' op mesh axis 'tp' is not in the module's mesh}}
    %y = dist.all_reduce %x {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// An axis named twice.
func.func @axis_twice(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{names mesh axis 'tp' twice}}
  %y = dist.all_reduce %x {axes = ["tp", "tp"], reduce = #dist.reduce<sum>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// No axes at all.
func.func @no_axes(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{needs at least one mesh axis}}
  %y = dist.all_reduce %x {axes = [], reduce = #dist.reduce<sum>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// An unknown reduction.
func.func @bad_reduce(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{expected ::loom::dist::ReduceKind to be one of: sum, mean, max, min}}
  // expected-error @+1 {{failed to parse Dist_ReduceKindAttr}}
  %y = dist.all_reduce %x {axes = ["tp"], reduce = #dist.reduce<prod>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// all_gather multiplies dim by the group size (tp = 4).
module attributes {dist.mesh = #dist.mesh<["tp"=4]>} {
  func.func @gather_size(%x: tensor<4x8xf32>) -> tensor<4x16xf32> {
    // expected-error @+1 {{result dim 1 must be 32 (input 8 and the group size), got 16}}
    %y = dist.all_gather %x {axes = ["tp"], dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x16xf32>
    return %y : tensor<4x16xf32>
  }
}

// -----

// all_gather's dim must exist.
func.func @gather_dim(%x: tensor<4x8xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{dim 2 is out of range for rank 2}}
  %y = dist.all_gather %x {axes = ["tp"], dim = 2 : i64} : tensor<4x8xf32> -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// reduce_scatter needs a divisible dim.
module attributes {dist.mesh = #dist.mesh<["tp"=4]>} {
  func.func @scatter_divisible(%x: tensor<6x8xf32>) -> tensor<1x8xf32> {
    // expected-error @+1 {{dim 0 of size 6 is not divisible by the group size 4}}
    %y = dist.reduce_scatter %x {axes = ["tp"], dim = 0 : i64, reduce = #dist.reduce<sum>} : tensor<6x8xf32> -> tensor<1x8xf32>
    return %y : tensor<1x8xf32>
  }
}

// -----

// Other dims of reduce_scatter stay.
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @scatter_other_dim(%x: tensor<8x8xf32>) -> tensor<4x4xf32> {
    // expected-error @+1 {{result dim 1 must equal the input's (8), got 4}}
    %y = dist.reduce_scatter %x {axes = ["tp"], dim = 0 : i64, reduce = #dist.reduce<sum>} : tensor<8x8xf32> -> tensor<4x4xf32>
    return %y : tensor<4x4xf32>
  }
}

// -----

// all_to_all: split_dim shrinks, concat_dim grows.
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @all_to_all_shape(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    // expected-error @+1 {{result must be 'tensor<8x4xf32>' (group size 2), got 'tensor<4x8xf32>'}}
    %y = dist.all_to_all %x {axes = ["tp"], split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}

// -----

// broadcast's root is a rank of the group.
module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>} {
  func.func @broadcast_root(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{root 2 is not a rank of the group (size 2)}}
    %y = dist.broadcast %x {axes = ["dp"], root = 2 : i64} : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// send's peer is a rank of the mesh.
module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>} {
  func.func @send_peer(%x: tensor<4xf32>) {
    // expected-error @+1 {{peer 4 is not a rank of the mesh (4 ranks)}}
    dist.send %x {peer = 4 : i64} : tensor<4xf32>
    return
  }
}

// -----

// recv's peer is non-negative.
func.func @recv_peer() -> tensor<4xf32> {
  // expected-error @+1 {{peer -1 must be a non-negative rank}}
  %x = dist.recv {peer = -1 : i64} : tensor<4xf32>
  return %x : tensor<4xf32>
}

// -----

// An exchange names a send peer per input.
func.func @exchange_send_peers(%x: tensor<4xf32>, %y: tensor<4xf32>) {
  // expected-error @+1 {{'dist.exchange' op has 2 inputs but 1 send_peers}}
  dist.exchange(%x, %y : tensor<4xf32>, tensor<4xf32>) {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64>}
  return
}

// -----

// ... and a receive peer per result.
func.func @exchange_recv_peers(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dist.exchange' op has 1 results but 2 recv_peers}}
  %y = dist.exchange(%x : tensor<4xf32>) {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64: 1, 0>} -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Peers are indices in the group over `axes` (pp = 2 here), not ranks of
// the mesh (4).
module attributes {dist.mesh = #dist.mesh<["pp"=2, "tp"=2]>} {
  func.func @exchange_peer_outside_group(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'dist.exchange' op peer 2 is not an index in the group (size 2)}}
    %y = dist.exchange(%x : tensor<4xf32>) {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64: 2>} -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// Without a mesh only a negative peer is known to be wrong.
func.func @exchange_negative_peer(%x: tensor<4xf32>) {
  // expected-error @+1 {{'dist.exchange' op peer -1 is not an index in the group}}
  dist.exchange(%x : tensor<4xf32>) {axes = ["pp"], send_peers = array<i64: -1>, recv_peers = array<i64>}
  return
}

// -----

// An exchange moves something.
func.func @exchange_empty() {
  // expected-error @+1 {{'dist.exchange' op transfers nothing}}
  dist.exchange {axes = ["pp"], send_peers = array<i64>, recv_peers = array<i64>}
  return
}

// -----

// An exchange's axes are in the module's mesh, like every collective's.
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @exchange_unknown_axis(%x: tensor<4xf32>) {
    // expected-error @+1 {{'dist.exchange' op mesh axis 'pp' is not in the module's mesh}}
    dist.exchange(%x : tensor<4xf32>) {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64>}
    return
  }
}

// -----

// Mesh axis names are unique.
// expected-error @+1 {{mesh axis 'tp' appears twice}}
module attributes {dist.mesh = #dist.mesh<["tp"=2, "tp"=2]>} {}

// -----

// Mesh axis sizes are positive.
// expected-error @+1 {{mesh axis 'dp' has size 0; sizes must be positive}}
module attributes {dist.mesh = #dist.mesh<["dp"=0]>} {}

// -----

// A sharding uses each axis once.
// expected-error @+1 {{mesh axis 'tp' is used twice in one sharding}}
func.func @sharding_twice(%x: tensor<4x4xf32> {dist.sharding = #dist.sharding<[["tp"], ["tp"]]>}) {
  return
}

// -----

// A bucket has one result per input.
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @bucket_counts(%x: tensor<8xf32>, %y: tensor<4xf32>) -> tensor<8xf32> {
    // expected-error @+1 {{has 2 inputs but 1 results}}
    %r = "dist.all_reduce"(%x, %y) {axes = ["dp"], reduce = #dist.reduce<sum>} : (tensor<8xf32>, tensor<4xf32>) -> tensor<8xf32>
    return %r : tensor<8xf32>
  }
}

// -----

// Result i of a bucketed all_reduce has input i's type.
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @bucket_types(%x: tensor<8xf32>, %y: tensor<4xf32>) -> tensor<8xf32> {
    // expected-error @+1 {{result 1 must have input 1's type ('tensor<4xf32>')}}
    %r:2 = "dist.all_reduce"(%x, %y) {axes = ["dp"], reduce = #dist.reduce<sum>} : (tensor<8xf32>, tensor<4xf32>) -> (tensor<8xf32>, tensor<4xbf16>)
    return %r#0 : tensor<8xf32>
  }
}

// -----

// Every entry of a reduce_scatter bucket divides along dim.
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @bucket_scatter(%x: tensor<8xf32>, %y: tensor<3x4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{dim 0 of size 3 is not divisible by the group size 2}}
    %r:2 = dist.reduce_scatter %x, %y {axes = ["dp"], dim = 0 : i64, reduce = #dist.reduce<sum>} : tensor<8xf32>, tensor<3x4xf32> -> tensor<4xf32>, tensor<1x4xf32>
    return %r#0 : tensor<4xf32>
  }
}

// -----

// A collective with nothing to reduce is refused.
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @bucket_empty() {
    // expected-error @+1 {{needs at least one input}}
    "dist.all_reduce"() {axes = ["dp"], reduce = #dist.reduce<sum>} : () -> ()
    return
  }
}

// -----

// The dist dialect's discardable attributes (DistDialect::verifyOperationAttribute).

// expected-error @+1 {{'dist.mesh' must be a #dist.mesh, got ["dp"]}}
module attributes {dist.mesh = ["dp"]} {
}

// -----

func.func @mesh_on_function() attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  // expected-error @-1 {{'dist.mesh' belongs on the module}}
  return
}

// -----

func.func @sharding_count(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dist.sharding' has 2 shardings for 1 results}}
  %0 = nn.neg %x {dist.sharding = [#dist.sharding<[[]]>, #dist.sharding<[[]]>]} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @sharding_not_array(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dist.sharding' must be an array of #dist.sharding (or unit: undecided), one per result}}
  %0 = nn.neg %x {dist.sharding = #dist.sharding<[[]]>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{argument 0: 'dist.sharding' must be a #dist.sharding}}
func.func @arg_sharding_array(%x: tensor<4xf32> {dist.sharding = [#dist.sharding<[[]]>]}) {
  return
}

// -----

// expected-error @+1 {{'dist.global_type' must be a ranked tensor type, got f32}}
func.func @global_type_scalar(%x: tensor<4xf32> {dist.global_type = f32}) {
  return
}

// -----

func.func @rank_offsets(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{has a malformed 'dist.rank_offsets'}}
  %0 = nn.neg %x {dist.rank_offsets = [{attr = "start"}]} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{'dist.zero1' must be a unit attribute, got true}}
module attributes {dist.zero1 = true} {
}

// -----

// expected-error @+1 {{has an unknown dist attribute 'dist.shardings'}}
module attributes {dist.shardings = []} {
}

// -----

// gather_rows: a row of x for each index, ranges one [first, end) a member.
module attributes {dist.mesh = #dist.mesh<["ep"=2]>} {
  func.func @gather_rows_result(%x: tensor<4x8xf32>, %rows: tensor<6xi64>, %ranges: tensor<2x2xi64>) -> tensor<4x8xf32> {
    // expected-error @+1 {{result must be 'tensor<6x8xf32>', got 'tensor<4x8xf32>'}}
    %y = dist.gather_rows %x, %rows, %ranges {axes = ["ep"]} : (tensor<4x8xf32>, tensor<6xi64>, tensor<2x2xi64>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}

// -----

module attributes {dist.mesh = #dist.mesh<["ep"=2]>} {
  func.func @gather_rows_ranges(%x: tensor<4x8xf32>, %rows: tensor<6xi64>, %ranges: tensor<4x2xi64>) -> tensor<6x8xf32> {
    // expected-error @+1 {{ranges must be [group size x 2] (each member's first and end row), got 'tensor<4x2xi64>'}}
    %y = dist.gather_rows %x, %rows, %ranges {axes = ["ep"]} : (tensor<4x8xf32>, tensor<6xi64>, tensor<4x2xi64>) -> tensor<6x8xf32>
    return %y : tensor<6x8xf32>
  }
}

// -----

module attributes {dist.mesh = #dist.mesh<["ep"=2]>} {
  func.func @gather_rows_index_type(%x: tensor<4x8xf32>, %rows: tensor<6xf32>, %ranges: tensor<2x2xi64>) -> tensor<6x8xf32> {
    // expected-error @+1 {{rows and ranges must be i32 or i64, got 'tensor<6xf32>'}}
    %y = dist.gather_rows %x, %rows, %ranges {axes = ["ep"]} : (tensor<4x8xf32>, tensor<6xf32>, tensor<2x2xi64>) -> tensor<6x8xf32>
    return %y : tensor<6x8xf32>
  }
}

// -----

// scatter_rows: a row of y for each index; the result keeps y's row shape.
module attributes {dist.mesh = #dist.mesh<["ep"=2]>} {
  func.func @scatter_rows_result(%y: tensor<6x8xf32>, %rows: tensor<6xi64>, %ranges: tensor<2x2xi64>) -> tensor<3x4xf32> {
    // expected-error @+1 {{result must be rows of y's ('tensor<6x8xf32>'), got 'tensor<3x4xf32>'}}
    %t = dist.scatter_rows %y, %rows, %ranges {axes = ["ep"]} : (tensor<6x8xf32>, tensor<6xi64>, tensor<2x2xi64>) -> tensor<3x4xf32>
    return %t : tensor<3x4xf32>
  }
}
