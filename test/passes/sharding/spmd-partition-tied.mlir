// RUN: loom-opt %s --loom-spmd-partition -verify-diagnostics

// A parameter tied across pipeline ranks (pipe.holders) whose copies would
// be split differently: their gradients could not be summed over pp.
module attributes {dist.mesh = #dist.mesh<["pp"=2, "tp"=2]>} {
  func.func @main_pp0() -> tensor<8x4xf32> attributes {pipe.rank = 0 : i64} {
    %w = nn.parameter "tied" {dist.sharding = [#dist.sharding<[["tp"], []]>], pipe.holders = array<i64: 0, 1>} : tensor<8x4xf32>
    return %w : tensor<8x4xf32>
  }
  func.func @main_pp1() -> tensor<8x4xf32> attributes {pipe.rank = 1 : i64} {
    // expected-error @+1 {{'tied' is tied across pipeline ranks but split as [[], [tp]] here and as [[tp], []] on another rank; its copies must be split alike}}
    %w = nn.parameter "tied" {dist.sharding = [#dist.sharding<[[], ["tp"]]>], pipe.holders = array<i64: 0, 1>} : tensor<8x4xf32>
    return %w : tensor<8x4xf32>
  }
}
