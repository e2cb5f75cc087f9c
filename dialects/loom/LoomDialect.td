#ifndef LOOM_LOOM_DIALECT_TD
#define LOOM_LOOM_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Loom_Dialect : Dialect {
  let name = "loom";
  let cppNamespace = "::loom";
  let summary = "the discardable attributes every phase of Loom shares";
  let description = [{
    No ops: the `loom.*` attributes that the importers, the training step and
    the pipeline passes put on ops and function signatures of other dialects.
    MLIR verifies a discardable attribute through the dialect its prefix
    names, so this dialect owns and verifies them:

    | attribute          | on                        | value                        |
    |--------------------|---------------------------|------------------------------|
    | `loom.name`        | function argument, result | non-empty string             |
    | `loom.updates`     | function result           | non-empty string (an input)  |
    | `loom.microbatch`  | op                        | non-negative integer         |
    | `loom.row_groups`  | step argument, rt.input   | positive integer: the tokens' rows come as that many microbatches, each split over the data ranks |
    | `loom.backward`    | op                        | `#loom.backward<weight>` or `<input>` |
    | `loom.stream`      | op                        | non-empty string             |
    | `loom.host_copy`   | `rt.copy`                 | unit                         |

    ```mlir
    %g = nn.matmul %dy, %x {loom.backward = #loom.backward<weight>, loom.microbatch = 0 : i64} : ...
    ```
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
}

def Loom_BackwardKind : I32EnumAttr<"BackwardKind",
    "which gradient a backward op computes", [
  // The gradient of a trainable parameter (PyTorch pipelining's W).
  I32EnumAttrCase<"Weight", 0, "weight">,
  // The gradient of an activation, passed on to earlier ops (I).
  I32EnumAttrCase<"Input", 1, "input">]> {
  let cppNamespace = "::loom";
  let genSpecializedAttr = 0;
}

// Printed as #loom.backward<weight>.
def Loom_BackwardKindAttr : EnumAttr<Loom_Dialect, Loom_BackwardKind, "backward"> {
  let assemblyFormat = "`<` $value `>`";
}

#endif // LOOM_LOOM_DIALECT_TD
