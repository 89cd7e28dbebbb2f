#!/usr/bin/env bash
# Sets up, builds and runs every test: the clang-format check, the UI's lint and unit tests
# (node), the programs' own build, the test suite under AddressSanitizer +
# UndefinedBehaviorSanitizer, the static agents for x86_64, aarch64, armv7 and s390x (the
# foreign ones run under qemu-user against a real collector), the Debian package (contents,
# lintian), browser tests of the UI in headless Chromium, the daemons under ThreadSanitizer,
# and short libFuzzer runs.
#   PERFWIRE_FUZZ_SECONDS   length of the protocol fuzz run; the parser gets half (default 60;
#                           0 skips both)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)
fuzz_seconds=${PERFWIRE_FUZZ_SECONDS:-60}

# Each step says how long the one before it took, and the whole run how long it took.
step_name="" step_start=$SECONDS
step() {
    if [[ -n $step_name ]]; then
        printf '== %s: %d s\n' "$step_name" $((SECONDS - step_start))
        timings+=("$(printf '%5d s  %s' $((SECONDS - step_start)) "$step_name")")
    fi
    step_name=$* step_start=$SECONDS
    printf '\n== %s\n' "$*"
}
timings=()

step "install what is missing (scripts/setup.sh --test)"
scripts/setup.sh --test

step "format check (clang-format $(clang-format --version | grep -o '[0-9]*\.[0-9.]*' | head -1))"
dirs=()
for d in src test bench; do [[ -d $d ]] && dirs+=("$d"); done
find "${dirs[@]}" -name '*.cpp' -o -name '*.hpp' | sort | xargs clang-format --dry-run --Werror

step "the UI's lint and format check, and its model, state and formatting (node --test)"
node test/ui/lint.mjs
node --test test/ui/unit/*.test.mjs

step "build (RelWithDebInfo, warnings are errors): the programs and the benchmarks"
# The programs as developers and the package build them; the suite is built once, under the
# sanitizers below, and every test runs there (each test once, in the strictest build that
# runs it).
cmake -S . -B build -G Ninja -DPERFWIRE_WERROR=ON -DPERFWIRE_TESTS=OFF >/dev/null
# (perfwire-agent-next: the later build the browser test updates an agent to.)
cmake --build build -j "$jobs" --target all perfwire-agent-next

step "build under AddressSanitizer + UndefinedBehaviorSanitizer: the programs and the test suite"
# The libraries and daemons as unity builds here and in the ThreadSanitizer stage (a few
# sources per compiler run); the first build is the one developers make, a compiler run per
# source, so a missing include is still found.
cmake -S . -B build-asan -G Ninja -DPERFWIRE_WERROR=ON -DPERFWIRE_SANITIZE=ON \
    -DPERFWIRE_UNITY=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
# What ctest runs; the benchmarks are built (and warned about) by the first build.
cmake --build build-asan -j "$jobs" --target test_programs
# The suite's driver and every program it starts run sanitized from here on.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    LSAN_OPTIONS=suppressions=$root/test/sanitizers/lsan.supp
suite=build-asan/test/perfwire_tests

step "the test suite under AddressSanitizer + UndefinedBehaviorSanitizer (ctest)"
# Both agents (the Python one unsanitized, against the sanitized collector), the odd perf
# builds, fewer random stops than the ThreadSanitizer stage makes.
PERFWIRE_SHUTDOWN_CYCLES=${PERFWIRE_SHUTDOWN_CYCLES:-10} \
    ctest --test-dir build-asan --output-on-failure -j "$jobs"

step "static agents for every architecture, the foreign ones tested under qemu-user"
scripts/build-agents.sh
PERFWIRE_AGENTS_DIR=dist PERFWIRE_NEXT_AGENT_AARCH64=build-cross/perfwire-agent-next-aarch64 \
    "$suite" "[cross]"

step "Debian package: cpack, its contents, lintian"
scripts/package.sh
bash test/package/package_test.sh build/perfwire_*.deb

step "browser tests: the UI in headless Chromium on a live profile, twenty tabs at once, the Fleet view on ClickHouse"
node test/ui/ui_test.mjs build
node test/ui/tabs_test.mjs build 20
node test/ui/fleet_test.mjs build

step "the daemons under ThreadSanitizer: stops at random moments, and ingestion end to end"
# Only the collector, the agent and the demo are built with ThreadSanitizer; the suite's
# sanitized driver runs them (PERFWIRE_TEST_COLLECTOR, PERFWIRE_TEST_AGENT).
cmake -S . -B build-tsan -G Ninja -DPERFWIRE_WERROR=ON -DPERFWIRE_TSAN=ON -DPERFWIRE_TESTS=OFF \
    -DPERFWIRE_UNITY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-tsan -j "$jobs" --target perfwire-collector perfwire-agent
TSAN_OPTIONS="halt_on_error=1 suppressions=$root/test/sanitizers/tsan.supp" PERFWIRE_SHUTDOWN_CYCLES=${PERFWIRE_SHUTDOWN_CYCLES:-25} \
    PERFWIRE_TEST_COLLECTOR="$root/build-tsan/src/collector/perfwire-collector" \
    PERFWIRE_TEST_AGENT="$root/build-tsan/src/agent/perfwire-agent" \
    "$suite" "[shutdown],[ingestion]"

if ((fuzz_seconds > 0)); then
    step "build the libFuzzer targets (clang)"
    CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DPERFWIRE_FUZZ=ON -DPERFWIRE_TESTS=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build build-fuzz -j "$jobs" --target protocol_fuzz script_fuzz
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p build-fuzz/artifacts
    # target, seed corpus, share of the time: the protocol (frames, zstd, JSON, ELF notes)
    # and the perf script parser (header shapes from fuzzed fields, raw text, renaming in place).
    for spec in "protocol_fuzz corpus 2" "script_fuzz script_corpus 1"; do
        read -r target corpus share <<<"$spec"
        seconds=$((fuzz_seconds * share / 2))
        step "fuzz ${target%_fuzz} for ${seconds}s (libFuzzer)"
        mkdir -p "$work/$target"
        cp "test/fuzz/$corpus"/* "$work/$target/"
        # A crash or an oracle failure exits non-zero and leaves the input in build-fuzz/artifacts.
        rc=0
        "$root/build-fuzz/test/fuzz/$target" -max_total_time="$seconds" \
            -rss_limit_mb=2048 -artifact_prefix="$root/build-fuzz/artifacts/" \
            -print_final_stats=1 "$work/$target" >"$work/$target.log" 2>&1 || rc=$?
        if ((rc != 0)); then
            tail -n 60 "$work/$target.log"
            echo "fuzz: $target failed (exit $rc); reproducer in build-fuzz/artifacts/" >&2
            exit "$rc"
        fi
        grep -E '^(Done|stat::(number_of_executed_units|new_units_added|peak_rss_mb))' \
            "$work/$target.log"
    done
fi

step "all tests passed"
printf '%s\n' "${timings[@]}"
printf '%5d s  in all\n' "$SECONDS"
