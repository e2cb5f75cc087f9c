#!/usr/bin/env bash
# Loom's main job on the bundled example: compile a Llama-style decoder block
# (RMSNorm, grouped-query causal attention with RoPE, SwiGLU; random weights
# written into the program), run it on the CPU backend, and check the output
# against NumPy. Builds first if needed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x build/bin/loom-run ] || [ ! -x build/bin/loom-compile ]; then
  bash scripts/setup-deps.sh
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C build loom-compile loom-run loom-inspect
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 test/e2e/Inputs/nn_cases.py llama_block "$work"
echo "== compile: examples' Llama decoder block -> $work/block.loomx"
build/bin/loom-compile "$work/model.mlir" -o "$work/block.loomx"
build/bin/loom-inspect "$work/block.loomx" | sed -n '/memory plan/,/streams/p'
echo "== run on the CPU backend"
build/bin/loom-run "$work/block.loomx" --input "$work/in0.npy" --output "$work/out0.npy"
echo "== compare with NumPy (float64)"
/usr/bin/python3 test/e2e/Inputs/compare.py "$work/out0.npy" "$work/expected0.npy" --rtol 1e-5
