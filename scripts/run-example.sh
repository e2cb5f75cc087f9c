#!/usr/bin/env bash
# Loom's main job on the bundled example: compile the small Llama in
# examples/llama (exported from Hugging Face transformers with torch.export)
# into a training step and train it on the bundled sample text, showing the
# loss fall. Builds Loom first if needed.
#
#   STEPS=100 BATCH=8 ./scripts/run-example.sh
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-100}
batch=${BATCH:-8}

if [ ! -x build/bin/loom-run ] || [ ! -x build/bin/loom-compile ] || [ ! -x build/bin/loom-tokenize ]; then
  bash scripts/setup-deps.sh
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C build loom-compile loom-run loom-inspect loom-tokenize
fi

# --backend=auto: the GPU when one is present and this build has the CUDA
# backend, else the CPU.
backend=${BACKEND:-auto}

work=build/example
mkdir -p "$work"
echo "== tokenize examples/data/sample.txt (byte-level tokens)"
build/bin/loom-tokenize examples/data/sample.txt -o "$work/sample.u16"
echo "== compile examples/llama/model.pt2 into a training step (batch $batch x 64 tokens, AdamW)"
build/bin/loom-compile examples/llama/model.pt2 --mode=train --batch "$batch" -o "$work/train.loomx"
build/bin/loom-inspect "$work/train.loomx" | sed -n '/memory plan/,/streams/p'
echo "== train $steps steps (backend: $backend)"
build/bin/loom-run "$work/train.loomx" --backend="$backend" --steps "$steps" \
  --data "$work/sample.u16" --lr 3e-3 --lr-schedule cosine --warmup-steps 5 \
  --metrics "$work/metrics.jsonl" --checkpoint-dir "$work/checkpoints" --checkpoint-every 50 \
  --log-every 5
/usr/bin/python3 test/e2e/Inputs/check_metrics.py "$work/metrics.jsonl" --steps "$steps" --falls
