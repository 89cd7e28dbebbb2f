#!/usr/bin/env bash
# Runs the browser test N times in a row beside H busy loops (a loaded machine, where its
# races show), keeping a full Chromium NetLog and screenshots of each failed run.
#   test/ui/stress.sh [N=10] [H=2] [build dir=build]
# Each run's output: $out/run-K.log; a failed run keeps $out/netlog-K.json and $out/shots-K/.
set -uo pipefail
cd "$(dirname "$0")/../.."
n=${1:-10} hogs=${2:-2} build=${3:-build}
out=$(mktemp -d /tmp/perfwire-ui-stress-XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
for ((h = 0; h < hogs; h++)); do (while :; do :; done) & pids+=($!); done
failed=0
for ((k = 1; k <= n; k++)); do
    mkdir -p "$out/shots-$k"
    PERFWIRE_UI_NETLOG=$out/netlog-$k.json PERFWIRE_UI_SHOTS=$out/shots-$k \
        timeout 600 node test/ui/ui_test.mjs "$build" >"$out/run-$k.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then rm -rf "$out/netlog-$k.json" "$out/shots-$k"; else failed=$((failed + 1)); fi
    echo "run $k: $([ $rc = 0 ] && echo passed || echo "FAILED ($(grep -m1 '^FAIL' "$out/run-$k.log"))") $(date +%T)"
done
echo "$((n - failed))/$n passed beside $hogs busy loops; logs in $out"
[ $failed = 0 ]
