#!/usr/bin/env bash
# Sets up, builds, and runs the main job: the collector (UI on http://127.0.0.1:8080) and a
# local agent profiling the bundled demo workload. Ctrl-C stops everything.
#   PERFWIRE_SESSIONS_DIR   where sessions are kept (default ~/.local/share/perfwire/sessions)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake -S . -B build -G Ninja >/dev/null
# Only the three programs: the test suite is the test command's to build.
cmake --build build -j "$(nproc)" --target perfwire-collector perfwire-agent perfwire-demo

bin=build/src
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
log=$(mktemp)
trap 'cleanup; rm -f "$log"' EXIT INT TERM

sessions=${PERFWIRE_SESSIONS_DIR:-$HOME/.local/share/perfwire/sessions}
# --sysroot /: the agent runs on this machine, so the demo's binary and sources are here.
"$bin/collector/perfwire-collector" --sessions-dir "$sessions" --sysroot / 2> >(tee "$log" >&2) &
pids+=($!)
sleep 1
kill -0 "${pids[0]}" 2>/dev/null || { echo "run: the collector did not start" >&2; exit 1; }

"$bin/demo/perfwire-demo" &
pids+=($!)
demo=$!

# Agents enroll with the token the collector keeps beside the sessions (its agent port is
# open to the network, so it asks).
PERFWIRE_ENROLL_TOKEN=$(cat "$sessions/.agent-token") \
    "$bin/agent/perfwire-agent" --server 127.0.0.1:9999 --pid "$demo" --duration 2 &
pids+=($!)

# The collector's sign-in link signs one browser in (each use prints the next); the token it
# keeps beside the sessions is for scripts, or to paste into the UI.
link=$(grep -o 'http://[^ ]*?code=[^ ]*' "$log" | tail -1 || true)
echo "perfwire: profiling perfwire-demo (pid $demo); open ${link:-http://127.0.0.1:8080/ and paste the token in $sessions/.http-token}"
wait -n "${pids[@]}"
