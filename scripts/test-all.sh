#!/usr/bin/env bash
# Installs Loom's dependencies, builds everything, and runs every test
# (lit + GoogleTest). This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build

log=build/check-loom.log
status=0
ninja -C build check-loom 2>&1 | tee "$log" || status=$?

# One closing line with the counts, whatever the runner printed above.
passed=$(sed -n 's/^ *Passed *: *\([0-9]*\).*/\1/p' "$log" | tail -1)
failed=$(sed -n 's/^ *Failed *: *\([0-9]*\).*/\1/p' "$log" | tail -1)
skipped=$(sed -n 's/^ *Skipped *: *\([0-9]*\).*/\1/p' "$log" | tail -1)
echo "check-loom: ${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped"

# Every reader's libFuzzer harness over its regression inputs and a short
# fixed count of fuzzing (docs/fuzzing.md has the long run).
fuzz=0
bash fuzz/run.sh --runs 1000 || fuzz=$?
echo "fuzz: $([ "$fuzz" -eq 0 ] && echo "every harness ran clean" || echo "FAILED (exit $fuzz)")"
[ "$fuzz" -eq 0 ] || status=1
if [ "$status" -ne 0 ] || [ "${failed:-0}" != "0" ] || [ "${passed:-0}" = "0" ]; then
  exit 1
fi
