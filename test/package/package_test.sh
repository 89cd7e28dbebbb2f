#!/usr/bin/env bash
# Checks the Debian package scripts/package.sh built: what it holds (dpkg-deb -c), its control
# data (dpkg-deb -I), lintian with no error or warning, and that what it installs works: the
# programs run, the units point at them and verify, the static agents match their checksums.
#   test/package/package_test.sh build/perfwire_VERSION_ARCH.deb
set -euo pipefail
deb=$1
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in usr/bin/perfwire-collector usr/bin/perfwire-agent usr/bin/perfwire-demo usr/bin/perfwire \
    lib/systemd/system/perfwire-collector.service lib/systemd/system/perfwire-agent.service \
    etc/default/perfwire-collector usr/share/doc/perfwire/copyright \
    usr/share/doc/perfwire/changelog.gz usr/share/doc/perfwire/examples/perfwire-agent.default.example \
    usr/share/man/man1/perfwire-collector.1.gz usr/share/man/man1/perfwire-agent.1.gz \
    usr/share/man/man1/perfwire-demo.1.gz usr/share/man/man1/perfwire.1.gz \
    usr/share/perfwire/perfwire_agent.py; do
    grep -qx "./$f" <<<"$contents" && ok "holds /$f" || bad "no /$f in the package"
done
for arch in x86_64 aarch64 armv7 s390x; do
    f=usr/lib/perfwire/agents/perfwire-agent-linux-$arch
    grep -qx "./$f" <<<"$contents" && grep -qx "./$f.sha256" <<<"$contents" &&
        ok "holds the $arch agent and its checksum" || bad "no $arch agent (run scripts/build-agents.sh first)"
done
# The agent's configuration is the user's to write: shipping it would start the unit.
grep -q "etc/default/perfwire-agent$" <<<"$contents" && bad "ships /etc/default/perfwire-agent" || ok "leaves /etc/default/perfwire-agent to the user"

info=$(dpkg-deb -I "$deb")
grep -q "^ Depends:.*linux-perf" <<<"$info" && grep -q "^ Depends:.*binutils" <<<"$info" &&
    ok "depends on linux-perf and binutils" || bad "Depends lacks linux-perf or binutils"
[[ "$(dpkg-deb -I "$deb" conffiles)" == "/etc/default/perfwire-collector" ]] &&
    ok "/etc/default/perfwire-collector is a conffile" || bad "conffiles: $(dpkg-deb -I "$deb" conffiles)"

if tags=$(lintian --fail-on error,warning "$deb" 2>&1); then
    ok "lintian: no error, no warning"
else
    bad "lintian: $(grep -v 'root privileges' <<<"$tags")"
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
for p in perfwire-collector perfwire-agent perfwire; do
    [[ "$("$root/usr/bin/$p" --version)" == "$p "* ]] && ok "$p runs from the package" || bad "$p --version"
done
grep -q "^ExecStart=/usr/bin/perfwire-collector " "$root/lib/systemd/system/perfwire-collector.service" &&
    grep -q "^ExecStart=/usr/bin/perfwire-agent " "$root/lib/systemd/system/perfwire-agent.service" &&
    ok "the units start the packaged programs" || bad "the units' ExecStart"
# systemd-analyze checks the units against the programs where the package puts them.
sed -i "s|/usr/bin/|$root/usr/bin/|" "$root"/lib/systemd/system/*.service
if out=$(systemd-analyze verify "$root"/lib/systemd/system/*.service 2>&1); then
    ok "systemd-analyze verify accepts both units"
else
    bad "systemd-analyze verify: $out"
fi
(cd "$root/usr/lib/perfwire/agents" && for s in *.sha256; do
    [[ "$(sha256sum <"${s%.sha256}" | cut -d' ' -f1)" == "$(cut -d' ' -f1 "$s")" ]] || exit 1
done) && ok "every packaged agent matches its checksum" || bad "an agent does not match its checksum"
exit $fail
