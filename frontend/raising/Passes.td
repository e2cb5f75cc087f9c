#ifndef LOOM_FRONTEND_RAISING_PASSES_TD
#define LOOM_FRONTEND_RAISING_PASSES_TD

include "mlir/Pass/PassBase.td"

def FoldConstants : Pass<"loom-fold-constants", "mlir::ModuleOp"> {
  let summary = "evaluate nn ops whose operands are all constants";
  let description = [{
    Runs the CPU reference kernels at compile time on ops that depend on no
    input and no parameter (causal masks built from arange and compares,
    rotary tables, shape arithmetic) and replaces them by `nn.constant`.
    Results over 16M elements are left to run at run time.

    Before:
    ```mlir
    %0 = nn.iota dim = 0 : tensor<4xi64>
    %1 = nn.iota dim = 1 : tensor<4x4xi64>
    %2 = nn.compare le, %1, %0 : ... -> tensor<4x4xi1>
    ```
    After:
    ```mlir
    %2 = nn.constant dense<[[true, false, ...]]> : tensor<4x4xi1>
    ```
  }];
  let dependentDialects = ["loom::nn::NNDialect"];
}

#endif
