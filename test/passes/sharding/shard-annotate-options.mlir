// RUN: not loom-opt %s --loom-shard-annotate="sp=true" 2>&1 | FileCheck %s --check-prefix=SP
// RUN: not loom-opt %s --loom-shard-annotate="zero1=true" 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not loom-opt %s --loom-shard-annotate="tp=0" 2>&1 | FileCheck %s --check-prefix=ZERO-TP

// Options that make no sense alone are one-line errors.
// SP: error: --sp splits the sequence over the tensor-parallel ranks: it needs --tp > 1
// ZERO: error: --zero1 splits optimizer state over the data-parallel ranks: it needs --dp > 1 or --ep > 1
// ZERO-TP: error: --tp, --dp and --ep must be at least 1, got tp=0 dp=1 ep=1
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
