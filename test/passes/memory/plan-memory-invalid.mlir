// RUN: loom-opt %s --loom-plan-memory=alignment=48 -verify-diagnostics
// RUN: not loom-opt %s --loom-plan-memory=alignment=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not loom-opt %s --loom-plan-memory=alignment=-8 2>&1 | FileCheck %s --check-prefix=NEG

// The alignment must be a power of two.
// ZERO: alignment must be a power of two, got 0
// NEG: alignment must be a power of two, got -8
// expected-error @below {{alignment must be a power of two, got 48}}
module {
  rt.program @main rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<16xf32>
    rt.output "x" %x : memref<16xf32>
  }
}
