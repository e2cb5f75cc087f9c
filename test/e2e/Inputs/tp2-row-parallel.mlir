// A hand-written two-rank SPMD program (tensor parallelism over "tp"): a
// row-parallel matmul whose partial products are summed by an all_reduce,
// gathered by an all_gather and reduce-scattered. x [4, 8] is split along
// its columns, w [8, 3] along its rows; each rank multiplies its blocks.
module attributes {rt.mesh_axes = ["tp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @main rank = 0 streams = ["compute"] {
    %x = rt.input "x" {global_shape = array<i64: 4, 8>, sharding = [[], ["tp"]]} : memref<4x4xf32>
    %w = rt.param "w" frozen {global_shape = array<i64: 8, 3>, sharding = [["tp"], []], value = dense<[[-2.0, -1.0, 0.0], [1.0, 2.0, -2.0], [-1.0, 0.0, 1.0], [2.0, -2.0, -1.0], [0.0, 1.0, 2.0], [-2.0, -1.0, 0.0], [1.0, 2.0, -2.0], [-1.0, 0.0, 1.0]]> : tensor<8x3xf32>} : memref<4x3xf32>
    %partial = rt.alloc : memref<4x3xf32>
    rt.kernel "nn.matmul" (%x, %w) -> (%partial) : (memref<4x4xf32>, memref<4x3xf32>) -> memref<4x3xf32>
    %y = rt.alloc : memref<4x3xf32>
    rt.collective all_reduce (%partial) -> (%y) {axes = ["tp"], reduce = #rt.reduce<sum>} : (memref<4x3xf32>) -> memref<4x3xf32>
    %gathered = rt.alloc : memref<8x3xf32>
    rt.collective all_gather (%y) -> (%gathered) {axes = ["tp"], dim = 0} : (memref<4x3xf32>) -> memref<8x3xf32>
    %scattered = rt.alloc : memref<2x3xf32>
    rt.collective reduce_scatter (%partial) -> (%scattered) {axes = ["tp"], dim = 0, reduce = #rt.reduce<sum>} : (memref<4x3xf32>) -> memref<2x3xf32>
    rt.output "y" %y : memref<4x3xf32>
    rt.output "gathered" %gathered : memref<8x3xf32>
    rt.output "scattered" %scattered : memref<2x3xf32>
  }
}
