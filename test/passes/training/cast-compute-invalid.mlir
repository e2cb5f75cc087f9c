// RUN: loom-opt %s --loom-cast-compute=type=f8 -verify-diagnostics

// expected-error @below {{--loom-cast-compute type must be bf16 or f16, got 'f8'}}
module {
  func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}
