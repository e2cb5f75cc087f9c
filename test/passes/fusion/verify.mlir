// RUN: loom-opt %s --split-input-file --verify-diagnostics

func.func @arity(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{has 1 inputs but its block takes 2 arguments}}
  %0 = nn.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
    nn.yield %a : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @yield_types(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{yields 0 values whose types differ from its results}}
  %0 = nn.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    nn.yield
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @not_fusible(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = nn.fused(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    // expected-error @+1 {{is not fusible (FusibleOpInterface) but is inside nn.fused}}
    %m = nn.matmul %a, %a : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    nn.yield %m : tensor<4x4xf32>
  }
  return %0 : tensor<4x4xf32>
}

// -----

func.func @isolated(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-note @+1 {{required by region isolation constraints}}
  %0 = nn.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{using value defined outside the region}}
    %n = nn.neg %x : tensor<4xf32>
    nn.yield %n : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}
