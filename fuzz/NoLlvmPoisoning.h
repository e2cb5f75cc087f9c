// Force-included into every file of the fuzz build (fuzz/FuzzFlags.cmake) and
// of a -DLOOM_SANITIZE=ON build (CMakeLists.txt).
//
// LLVM's headers poison and unpoison the memory of their allocators
// (BumpPtrAllocator, Recycler, ...) for ASan when the including file is built
// with ASan. Debian's LLVM/MLIR libraries are not, so the same allocator is
// poisoned by inlined code in Loom's files and never unpoisoned by the
// library's own code: ASan then reports use-after-poison in correct code.
// Turn the annotations off here, as they are in the libraries; ASan still
// checks every heap allocation's bounds and lifetime.
#ifndef LOOM_FUZZ_NOLLVMPOISONING_H
#define LOOM_FUZZ_NOLLVMPOISONING_H
#if defined(__has_include)
#if __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#endif
#define __asan_poison_memory_region(p, size) ((void)(p), (void)(size))
#define __asan_unpoison_memory_region(p, size) ((void)(p), (void)(size))
#endif
