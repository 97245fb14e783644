#!/usr/bin/env bash
# Builds the libFuzzer targets in a separate clang build directory and runs
# each one for SECONDS from the committed seed corpus (fuzz/corpus/<name>).
#
#   fuzz/run_fuzzers.sh SRC_DIR BUILD_DIR SECONDS [NAME...]
#   fuzz/run_fuzzers.sh SRC_DIR BUILD_DIR runs:N [NAME...]
#
# runs:N is the CI form (CTest fuzz.short): every committed input is replayed,
# then N mutations with a fixed seed, so a CI result does not depend on how
# fast the machine is or on luck. SECONDS (random seed) is for long runs.
#
# NAME: artifact_reader, onnx_importer, epcontext_reader (default: all three). New interesting
# inputs go to BUILD_DIR/corpus-<name> (the committed corpus is only read);
# a crash is written to BUILD_DIR/crash-<name>-* and fails the run.
# Exit 77 (CTest: skipped) only when clang++ is missing; scripts/setup.sh
# installs it.
set -euo pipefail
src=$(cd "$1" && pwd); build=$2; secs=$3; shift 3
names=("$@"); [ ${#names[@]} -gt 0 ] || names=(artifact_reader onnx_importer epcontext_reader)
cxx=${KILN_FUZZ_CXX:-clang++}
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "SKIPPED: $cxx not found (scripts/setup.sh installs clang); the fuzzers were not run"
  exit 77
fi
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="${cxx/clang++/clang}" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
    -DCMAKE_CXX_FLAGS="$san" -DCMAKE_C_FLAGS="$san" \
    -DKILN_BUILD_FUZZERS=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF >"$build.configure.log" 2>&1 \
    || { cat "$build.configure.log"; exit 1; }
fi
targets=()
for n in "${names[@]}"; do targets+=("fuzz_$n"); done
cmake --build "$build" --target "${targets[@]}" -j"${KILN_FUZZ_JOBS:-2}"

status=0
for n in "${names[@]}"; do
  corpus="$build/corpus-$n"
  if [[ $secs == runs:* ]]; then
    budget=(-runs="${secs#runs:}" -seed=1); what="${secs#runs:} runs, seed 1"
    corpus="$build/corpus-$n-ci"; rm -rf "$corpus"  # start from the committed corpus alone
  else
    budget=(-max_total_time="$secs"); what="$secs s"
  fi
  mkdir -p "$corpus"
  echo "== fuzz_$n: $what from fuzz/corpus/$n"
  # -rss_limit_mb / -malloc_limit_mb: a model that asks for huge tensors must
  # be refused before allocating, so a big allocation is a finding.
  if ! ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 "$build/fuzz/fuzz_$n" \
        "$corpus" "$src/fuzz/corpus/$n" "${budget[@]}" -max_len=65536 \
        -rss_limit_mb=2560 -malloc_limit_mb=2048 -timeout=20 -print_final_stats=1 \
        -artifact_prefix="$build/crash-$n-" 2>"$build/fuzz-$n.log"; then
    echo "fuzz_$n FAILED: see $build/fuzz-$n.log"
    grep -E -A3 "kiln error|ERROR|SUMMARY|Test unit written|Base64" "$build/fuzz-$n.log" | head -60; status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+.*DONE" "$build/fuzz-$n.log" || true
done
exit $status
