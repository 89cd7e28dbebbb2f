#!/usr/bin/env bash
# Builds the Debian package build/perfwire_VERSION_ARCH.deb with CPack: the collector, the
# agent, the demo, man pages, systemd units, a default configuration, the Python agent and
# the static agents in dist/ (scripts/build-agents.sh; those present are packaged).
#   scripts/package.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
command -v help2man >/dev/null || { echo "package: help2man is missing (scripts/setup.sh --test)" >&2; exit 1; }
cmake -S . -B "$dir" -G Ninja -DPERFWIRE_PACKAGE=ON >/dev/null
cmake --build "$dir" -j "$(nproc)"
rm -f "$dir"/perfwire_*.deb
(cd "$dir" && cpack -G DEB >/dev/null)
ls "$dir"/perfwire_*.deb
