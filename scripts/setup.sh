#!/usr/bin/env bash
# Installs from Debian bookworm what perfwire needs and this machine lacks. Safe to re-run:
# when everything is present it touches nothing and needs no network.
#   scripts/setup.sh          build and run
#   scripts/setup.sh --test   also what the test run needs (format check, sanitizers, fuzzer,
#                             the Python agent's interpreter and zstandard module, Go's pprof
#                             to read our exports, help2man and lintian for the Debian package,
#                             xmllint for the JUnit reports, and the browser test: Debian's
#                             chromium, playwright-core from npm)
set -euo pipefail

packages=(
    cmake ninja-build g++ pkg-config
    libboost1.81-dev libboost-json1.81-dev libboost-program-options1.81-dev
    libboost-filesystem1.81-dev libzstd-dev zlib1g-dev libssl-dev libdebuginfod-dev catch2
    linux-perf binutils
)
if [[ "${1:-}" == "--test" ]]; then
    packages+=(clang-format clang libclang-rt-14-dev zstd chromium python3 python3-zstandard systemd
        golang-go lintian help2man debuginfod clickhouse-server libxml2-utils)
    # The machine's own Node.js is used when there is one; otherwise Debian's.
    if ! command -v npm >/dev/null; then
        packages+=(nodejs npm)
    fi
fi

install_ui_test_modules() {
    # playwright-core only drives Debian's chromium: it never downloads a browser.
    if [[ "${1:-}" == "--test" && ! -d test/ui/node_modules/playwright-core ]]; then
        echo "setup: npm ci in test/ui"
        PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix test/ui --no-audit --no-fund --loglevel=error
    fi
}
cd "$(dirname "$0")/.."

missing=()
for p in "${packages[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" != ii* ]]; then
        missing+=("$p")
    fi
done
if ((${#missing[@]} == 0)); then
    install_ui_test_modules "${1:-}"
    exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=()
if ((EUID != 0)); then
    sudo=(sudo)
fi
# A mirror caught mid-sync fails some index files; the lists at hand usually still serve.
"${sudo[@]}" apt-get update -qq || echo "setup: apt-get update reported errors; trying the package lists at hand"
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
install_ui_test_modules "${1:-}"
