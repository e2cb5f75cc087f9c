// RUN: loom-opt %s --loom-lower-to-rt=entry=forward | FileCheck %s
// RUN: loom-opt %s --loom-lower-to-rt=entry=missing -verify-diagnostics -split-input-file

// The `entry` option picks the function to lower; the program takes its
// name, and the other functions (here one named main) are dropped.
// CHECK:       module {
// CHECK-NEXT:    rt.program @forward rank = 0 streams = ["compute"] {
// CHECK-NEXT:      %[[X:.*]] = rt.input "input0" : memref<4xf32>
// CHECK-NEXT:      %[[Y:.*]] = rt.alloc {{.*}}: memref<4xf32>
// CHECK-NEXT:      rt.kernel "nn.exp"(%[[X]]) -> (%[[Y]])
// CHECK-NEXT:      rt.output "output0" %[[Y]]
// CHECK-NEXT:    }
// CHECK-NEXT:  }
// expected-error @below {{no function named 'missing' to lower}}
module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = nn.neg %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = nn.exp %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
