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
trap cleanup EXIT INT TERM

sessions=${PERFWIRE_SESSIONS_DIR:-$HOME/.local/share/perfwire/sessions}
# --sysroot /: the agent runs on this machine, so the demo's binary and sources are here.
"$bin/collector/perfwire-collector" --sessions-dir "$sessions" --sysroot / &
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

# The collector keeps the UI's access token beside the sessions; the link signs a browser in.
echo "perfwire: profiling perfwire-demo (pid $demo); open http://127.0.0.1:8080/?token=$(cat "$sessions/.http-token")"
wait -n "${pids[@]}"
