#!/usr/bin/env bash
# Builds Loom's libFuzzer harnesses (fuzz/, -DLOOM_FUZZ=ON, clang) in their
# own build directory and runs each: over the fixed regression inputs in
# fuzz/regressions/, then fuzzing from seeds taken from the test fixtures.
#
#   fuzz/run.sh                  every harness, 2000 runs each (quick check)
#   fuzz/run.sh --runs N         N runs each
#   fuzz/run.sh --long [SECONDS] each harness for SECONDS (default 3600)
#   fuzz/run.sh --no-mlir        only the readers that need no MLIR (a
#                                much smaller build)
#   fuzz/run.sh --small          fuzz_pt2 and fuzz_pt2_zip from the small
#                                programs in fuzz/seeds/pt2_small only (a
#                                separate corpus, NAME-small): thousands of
#                                inputs a second instead of tens
#   fuzz/run.sh NAME...          only these harnesses (fuzz_npy, ...)
#
# Environment: LOOM_FUZZ_BUILD (build directory, default build-fuzz),
# LOOM_FUZZ_JOBS (ninja -j), LOOM_FUZZ_SEED (libFuzzer's -seed for --runs,
# default 1, so a quick run is repeatable). The corpus each run grows is kept in
# $LOOM_FUZZ_BUILD/fuzz/corpus/NAME, crashes in .../artifacts/NAME/.
# Exits non-zero if any harness crashed, hung or reported a sanitizer error.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

runs=2000
seconds=""
mlir=1
small=0
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --long)
      seconds=3600; shift
      if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi ;;
    --no-mlir) mlir=0; shift ;;
    --small) small=1; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    fuzz_*) names+=("$1"); shift ;;
    *) echo "fuzz/run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

nomlir=(fuzz_npy fuzz_safetensors fuzz_checkpoint fuzz_loomx fuzz_megatron_idx
        fuzz_schedule_csv fuzz_flag_values)
withmlir=(fuzz_mlir fuzz_pt2 fuzz_pt2_zip fuzz_onnx)
if [ ${#names[@]} -eq 0 ]; then
  names=("${nomlir[@]}")
  [ "$mlir" = 1 ] && names+=("${withmlir[@]}")
fi

build=${LOOM_FUZZ_BUILD:-build-fuzz}
cc=clang-19; cxx=clang++-19
command -v "$cxx" >/dev/null 2>&1 || { cc=clang; cxx=clang++; }
command -v "$cxx" >/dev/null 2>&1 || {
  echo "fuzz/run.sh: needs clang (Debian 12: apt-get install clang-19 libclang-rt-19-dev; scripts/setup-deps.sh installs them)" >&2
  exit 2
}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_FUZZ=ON \
    -DLOOM_WITH_CUDA=OFF -DLOOM_WITH_MPI=OFF \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
fi
ninja -C "$build" ${LOOM_FUZZ_JOBS:+-j$LOOM_FUZZ_JOBS} "${names[@]}"

# Seeds: the committed ones (fuzz/seeds/NAME) plus the test fixtures, copied
# under unique names (many fixtures share a file name).
fixtures=test/frontend/Inputs/fixtures
seed_files() {
  case "$1" in
    fuzz_npy) find test examples -name '*.npy' ;;
    fuzz_loomx) find test examples -name '*.loomx' ;;
    fuzz_schedule_csv) find test -name '*.csv' ;;
    fuzz_mlir) find test examples -name '*.mlir' ;;
    # The test fixtures only: examples/llama's 7 MB model would set
    # libFuzzer's input length and slow every execution twentyfold.
    fuzz_pt2_zip)
      if [ "$small" = 1 ]; then find fuzz/seeds/pt2_small -name '*.pt2'
      else find "$fixtures" -name '*.pt2'; fi ;;
    fuzz_onnx) find "$fixtures" -name '*.onnx' ;;
  esac
}
make_seeds() {
  local name=$1 dir=$2 short=${1#fuzz_}
  rm -rf "$dir"; mkdir -p "$dir"
  if [ -d "fuzz/seeds/$short" ]; then cp fuzz/seeds/"$short"/* "$dir"/; fi
  local i=0 f
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    cp "$f" "$dir/fixture-$i-$(basename "$f")"; i=$((i + 1))
  done < <(seed_files "$name" | sort)
  if [ "$name" = fuzz_safetensors ]; then
    # The fixtures' headers (real names, dtypes, metadata) over one element
    # per tensor: small inputs fuzz much faster than the 100 KB originals.
    python3 fuzz/safetensors-shrink.py "$dir" $(find test -name '*.safetensors' | sort)
  fi
  if [ "$name" = fuzz_pt2 ]; then
    if [ "$small" = 1 ]; then
      python3 fuzz/pt2-members.py "$dir" $(find fuzz/seeds/pt2_small -name '*.pt2' | sort)
    else
      python3 fuzz/pt2-members.py "$dir" $(find "$fixtures" -name '*.pt2' | sort)
    fi
  fi
  # Executables the normal build's loom-compile makes, when there is one.
  if [ "$name" = fuzz_loomx ] && [ -x build/bin/loom-compile ]; then
    local m=$fixtures/llama_tiny/model.pt2
    build/bin/loom-compile "$m" -o "$dir/gen-infer.loomx" >/dev/null 2>&1 || true
    build/bin/loom-compile "$m" --mode=train --batch 4 -o "$dir/gen-train.loomx" >/dev/null 2>&1 || true
    build/bin/loom-compile "$m" --mode=train --batch 4 --pp 2 --microbatches 4 \
      --schedule zb-h1 -o "$dir/gen-pp2.loomx" >/dev/null 2>&1 || true
  fi
}

# Reproducers of bugs still open (fixed by other work) are listed in
# fuzz/regressions/open.txt and not replayed; every other file under
# fuzz/regressions/NAME/ must now run clean.
open_list=fuzz/regressions/open.txt
failures=()
summary=()
for name in "${names[@]}"; do
  bin=$build/fuzz/$name
  out=$build/fuzz/runs; mkdir -p "$out"
  log=$out/$name.log
  artifacts=$build/fuzz/artifacts/$name/
  corpus=$build/fuzz/corpus/$name
  seeds=$build/fuzz/seeds/$name
  if [ "$small" = 1 ]; then corpus=$corpus-small; seeds=$seeds-small; fi
  mkdir -p "$artifacts" "$corpus"
  make_seeds "$name" "$seeds"
  opts=(-timeout=10 -rss_limit_mb=4096 -malloc_limit_mb=4096 -artifact_prefix="$artifacts"
        -print_final_stats=1)

  regressions=()
  for f in fuzz/regressions/"${name#fuzz_}"/*; do
    [ -f "$f" ] || continue
    if [ -f "$open_list" ] && grep -qxF "$f" "$open_list"; then continue; fi
    regressions+=("$f")
  done
  if [ ${#regressions[@]} -gt 0 ]; then
    if ! "$bin" "${opts[@]}" "${regressions[@]}" >"$out/$name.regressions.log" 2>&1; then
      failures+=("$name (regression inputs: $out/$name.regressions.log)")
    fi
  fi

  if [ -n "$seconds" ]; then
    limit=(-max_total_time="$seconds")
  else
    # A fixed seed: a quick run (CI's) fuzzes the same inputs every time.
    limit=(-runs="$runs" -seed="${LOOM_FUZZ_SEED:-1}")
  fi
  status=0
  "$bin" "${opts[@]}" "${limit[@]}" "$corpus" "$seeds" >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  if [ "$status" -ne 0 ]; then
    failures+=("$name (exit $status: $log; inputs in $artifacts)")
    summary+=("$(printf '%-20s %12s execs  FAILED' "$name" "${execs:-?}")")
  else
    summary+=("$(printf '%-20s %12s execs  %6ss  ok' "$name" "${execs:-?}" "${secs:-?}")")
  fi
done

printf '%s\n' "${summary[@]}"
if [ ${#failures[@]} -gt 0 ]; then
  printf 'fuzz: FAILED %s\n' "${failures[@]}" >&2
  exit 1
fi
echo "fuzz: ${#names[@]} harnesses ran clean"
