# Included by the top-level CMakeLists.txt when LOOM_FUZZ is ON, before any
# Loom library is defined: everything this build directory compiles gets
# libFuzzer's coverage instrumentation plus ASan and UBSan; the harnesses in
# fuzz/CMakeLists.txt add libFuzzer's main. LLVM/MLIR themselves come from
# Debian's (uninstrumented, gcc-built) packages and are linked as they are.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "LOOM_FUZZ needs clang (libFuzzer): configure with "
    "-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 (see docs/fuzzing.md)")
endif()
# UBSan's vptr check is left out: it checks dynamic types through RTTI,
# including of LLVM/MLIR objects this build does not instrument.
set(LOOM_FUZZ_SANITIZERS address,undefined)
add_compile_options(-fsanitize=fuzzer-no-link,${LOOM_FUZZ_SANITIZERS}
  -fno-sanitize=vptr -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1)
add_compile_options(-include ${CMAKE_CURRENT_LIST_DIR}/NoLlvmPoisoning.h)
add_link_options(-fsanitize=${LOOM_FUZZ_SANITIZERS} -fno-sanitize=vptr)

# Fuzzing wants speed per input and Loom's assertions, not -O3: in this build
# directory Release means -O1 without NDEBUG (LLVM's headers then assert too;
# the prebuilt LLVM libraries are unaffected: their ABI-breaking checks are
# fixed in llvm/Config/abi-breaking.h).
set(CMAKE_C_FLAGS_RELEASE "-O1")
set(CMAKE_CXX_FLAGS_RELEASE "-O1")
