#!/usr/bin/env bash
# The shipped systemd units are valid as systemd reads them (systemd-analyze verify, pointed at
# the built binaries), start the way their comments say, and do not restart in a loop on a
# configuration error. Usage: units_test.sh UNITS_DIR COLLECTOR_BIN AGENT_BIN
set -euo pipefail
units=$1 collector=$2 agent=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }

for u in perfwire-collector perfwire-agent; do
    sed -e "s#/usr/local/bin/perfwire-collector#$collector#" -e "s#/usr/local/bin/perfwire-agent#$agent#" \
        "$units/$u.service" > "$work/$u.service"
done
out=$(cd "$work" && systemd-analyze verify --man=no ./perfwire-collector.service ./perfwire-agent.service 2>&1) || true
check "systemd-analyze finds nothing wrong with either unit${out:+: $out}" '[[ -z $out ]]'

# The verifier is not blind: a broken copy is reported.
sed -e 's#^ExecStart=.*#ExecStart=relative/path --x#' "$work/perfwire-agent.service" > "$work/broken.service"
broken=$(cd "$work" && systemd-analyze verify --man=no ./broken.service 2>&1) || true
check "a broken unit is reported (${broken%%$'\n'*})" '[[ -n $broken ]]'

c="$work/perfwire-collector.service" a="$work/perfwire-agent.service"
check "the collector keeps its sessions in its state directory" \
    'grep -q "^StateDirectory=perfwire$" "$c" && grep -q -- "--sessions-dir /var/lib/perfwire" "$c"'
check "the collector needs no config file to start" '! grep -q -- "--config" "$c" && grep -q "^EnvironmentFile=-" "$c"'
check "without /etc/default/perfwire-agent the agent is skipped, not restarted" \
    'grep -q "^ConditionPathExists=/etc/default/perfwire-agent$" "$a"'
for f in "$c" "$a"; do
    check "$(basename "$f"): exit 1 and 2 (configuration) end the restarts" 'grep -q "^RestartPreventExitStatus=1 2$" "$f"'
done
# What those exit codes mean, from the programs themselves.
set +e
"$agent" --server >/dev/null 2>&1; usage=$?
"$agent" --output /dev/null --pid 1 --perf /nonexistent >/dev/null 2>&1; noperf=$?
"$collector" --sessions-dir /proc/forbidden --http-port 0 --agent-port 0 >/dev/null 2>&1; nodir=$?
set -e
check "a bad option exits 2 ($usage), no perf exits 1 ($noperf), an unusable sessions folder exits 1 ($nodir)" \
    '[[ $usage == 2 && $noperf == 1 && $nodir == 1 ]]'
exit $fail
