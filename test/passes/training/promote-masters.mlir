// RUN: loom-opt %s --loom-promote-masters | FileCheck %s

// A bf16 model's trainable parameters become f32 masters read through a
// cast back to their type (an f16 one too); the embedded value widens
// exactly. Frozen and f32 parameters are left alone.
// CHECK-LABEL: func.func @main
// CHECK: %[[W:.*]] = nn.parameter "w" value(dense<[1.000000e+00, -3.000000e+00]> : tensor<2xf32>) : tensor<2xf32>
// CHECK-NEXT: %[[C:.*]] = nn.cast %[[W]] : tensor<2xf32> -> tensor<2xbf16>
// CHECK: nn.parameter "rope" frozen {{.*}}: tensor<2xbf16>
// CHECK: %[[H:.*]] = nn.parameter "h" : tensor<2xf32>
// CHECK-NEXT: nn.cast %[[H]] : tensor<2xf32> -> tensor<2xf16>
// CHECK-NEXT: nn.parameter "n" : tensor<2xf32>
// CHECK-NOT: nn.cast
// CHECK: nn.mul %[[C]], %{{.*}}
// CHECK-NOT: nn.cast
func.func @main(%x: tensor<2xbf16>) -> tensor<2xbf16> {
  %w = nn.parameter "w" value(dense<[1.0, -3.0]> : tensor<2xbf16>) : tensor<2xbf16>
  %r = nn.parameter "rope" frozen value(dense<[2.0, 4.0]> : tensor<2xbf16>) : tensor<2xbf16>
  %h = nn.parameter "h" : tensor<2xf16>
  %n = nn.parameter "n" : tensor<2xf32>
  %a = nn.mul %w, %x : (tensor<2xbf16>, tensor<2xbf16>) -> tensor<2xbf16>
  %b = nn.mul %a, %r : (tensor<2xbf16>, tensor<2xbf16>) -> tensor<2xbf16>
  return %b : tensor<2xbf16>
}
