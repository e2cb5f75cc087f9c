#ifndef LOOM_PASSES_FUSION_RTBUFFERS_H
#define LOOM_PASSES_FUSION_RTBUFFERS_H

// Buffer queries the rt-level fusions share (--loom-fuse-sum-squares,
// --loom-fuse-norm-weight-grad): before --loom-plan-memory every scratch
// buffer is its own rt.alloc, viewed through rt.alias ops, so who writes and
// who reads a buffer is a walk over its uses.

#include "dialects/rt/RtDialect.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

namespace loom::fusion {

/// A buffer through its aliases: the rt.alloc (or other definition) it views.
mlir::Value rootOf(mlir::Value buffer);
/// `buffer` and its aliases are read or written by `allowed` ops only.
bool usedOnlyBy(mlir::Value buffer, llvm::ArrayRef<mlir::Operation *> allowed);
/// The kernel writing `buffer` (or a view of it), if one does.
rt::KernelOp writerOf(mlir::Value buffer);
/// Every op that takes `buffer` or a view of it (the views' rt.alias ops
/// left out), each with the view it takes.
llvm::SmallVector<std::pair<mlir::Operation *, mlir::Value>> usersThroughViews(mlir::Value buffer);
/// Erases the allocs and aliases among `values` (and the buffers those
/// aliases view) that nothing uses any more; clears `values`.
void eraseDeadBuffers(llvm::SmallVector<mlir::Value> &values);

} // namespace loom::fusion

#endif
