#!/usr/bin/env bash
# Builds the agent as fully static, stripped executables for the devices people profile, each
# with a .sha256 and a .version beside it (what the collector checks before it offers a build
# as an update):
#
#   dist/perfwire-agent-linux-x86_64     dist/perfwire-agent-linux-aarch64
#   dist/perfwire-agent-linux-armv7      dist/perfwire-agent-linux-s390x (big-endian)
#
#   scripts/build-agents.sh [ARCH...]    (default: all four)
#
# Installs what is missing: Debian's cross toolchains (crossbuild-essential-*) and
# qemu-user-static, which runs the foreign agents in the tests. The target's libraries are
# Debian's multiarch packages (libboost-json1.81-dev:arm64, libzstd-dev:arm64, …), downloaded
# with apt and unpacked into a sysroot under build-cross/ instead of installed: installing
# them needs every shared dependency (libc6, linux-libc-dev, …) at exactly the host's version,
# which a machine one security update apart from the mirror does not have.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)
if (($# > 0)); then archs=("$@"); else archs=(x86_64 aarch64 armv7 s390x); fi

scripts/setup.sh

# ARCH -> Debian architecture, GNU triplet, qemu name.
declare -A debarch=([aarch64]=arm64 [armv7]=armhf [s390x]=s390x)
declare -A triplet=([x86_64]=x86_64-linux-gnu [aarch64]=aarch64-linux-gnu
    [armv7]=arm-linux-gnueabihf [s390x]=s390x-linux-gnu)
for a in "${archs[@]}"; do
    [[ -n "${triplet[$a]:-}" ]] || { echo "build-agents: unknown architecture $a" >&2; exit 2; }
done

sudo=()
((EUID == 0)) || sudo=(sudo)
missing=()
foreign=()
for a in "${archs[@]}"; do
    [[ $a == x86_64 ]] && continue
    foreign+=("${debarch[$a]}")
    for p in "crossbuild-essential-${debarch[$a]}" qemu-user-static; do
        if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" != ii* ]]; then
            missing+=("$p")
        fi
    done
done
new_arch=0
for d in "${foreign[@]}"; do
    if ! dpkg --print-foreign-architectures | grep -qx "$d"; then
        "${sudo[@]}" dpkg --add-architecture "$d"
        new_arch=1
    fi
done
if ((${#missing[@]} > 0 || new_arch)); then
    echo "build-agents: installing ${missing[*]:-(package lists for ${foreign[*]})}"
    # A mirror in the middle of a sync can fail one list; the others are still usable.
    "${sudo[@]}" apt-get update -qq || echo "build-agents: some package lists failed to update" >&2
fi
if ((${#missing[@]} > 0)); then
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
        "${missing[@]}"
fi

# The target's Boost (static libraries and CMake package files) and zstd, unpacked.
target_packages=(libboost1.81-dev libboost-json1.81-dev libboost-json1.81.0
    libboost-container1.81-dev libboost-container1.81.0 libboost-system1.81-dev
    libboost-system1.81.0 libboost-program-options1.81-dev libboost-program-options1.81.0
    libboost-filesystem1.81-dev libboost-filesystem1.81.0 libboost-atomic1.81-dev
    libboost-atomic1.81.0 libzstd-dev libzstd1 libssl-dev libssl3)
make_sysroot() {
    local a=$1 d=${debarch[$1]} t=${triplet[$1]}
    local sysroot=$root/build-cross/sysroot-$a
    # (A sysroot made before OpenSSL was linked lacks libssl.a: made again.)
    [[ -f $sysroot/.complete && -f $sysroot/usr/lib/$t/libssl.a ]] && return
    rm -rf "$sysroot" "$root/build-cross/debs-$a"
    mkdir -p "$sysroot/usr/include" "$root/build-cross/debs-$a"
    (cd "$root/build-cross/debs-$a" && apt-get download -q "${target_packages[@]/%/:$d}" 2>&1 |
        grep -v '^W: Download is performed unsandboxed' || true)
    for deb in "$root/build-cross/debs-$a"/*.deb; do
        if [[ $(basename "$deb") == libboost1.81-dev_* ]]; then
            # Only its CMake files: the headers are the same on every architecture.
            dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$sysroot" "./usr/lib/$t/cmake"
        else
            dpkg-deb -x "$deb" "$sysroot"
        fi
    done
    ln -sfn /usr/include/boost "$sysroot/usr/include/boost"
    [[ -f $sysroot/usr/lib/$t/libboost_json.a && -f $sysroot/usr/lib/$t/libzstd.a &&
        -f $sysroot/usr/lib/$t/libssl.a ]] || {
        echo "build-agents: the $a libraries did not unpack (see build-cross/debs-$a)" >&2
        exit 1
    }
    rm -rf "$root/build-cross/debs-$a"
    touch "$sysroot/.complete"
}

mkdir -p dist
for a in "${archs[@]}"; do
    echo "== perfwire-agent for $a"
    dir=build-cross/$a
    # Built for size (-Os, unused sections dropped at link): OpenSSL's libcrypto is most of
    # an agent, and the budget is 8 MB. zstd and OpenSSL come prebuilt, at their own -O2.
    # A unity build (a few sources per compiler run, Asio and Boost.JSON parsed once a batch):
    # the x86_64 agent from scratch on two cores in 59 s instead of 87 s.
    args=(-DPERFWIRE_STATIC_AGENT=ON -DPERFWIRE_TESTS=OFF -DCMAKE_BUILD_TYPE=MinSizeRel
        -DPERFWIRE_UNITY=ON
        "-DCMAKE_CXX_FLAGS=-ffunction-sections -fdata-sections"
        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--gc-sections")
    if [[ $a != x86_64 ]]; then
        make_sysroot "$a"
        # OpenSSL's configuration headers are per architecture (usr/include/<triplet>/openssl),
        # a folder the cross compiler does not search in this sysroot: put them beside the rest.
        sysroot=$root/build-cross/sysroot-$a
        cp -n "$sysroot/usr/include/${triplet[$a]}/openssl/"*.h "$sysroot/usr/include/openssl/"
        args+=(-DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchain-$a.cmake"
            -DCMAKE_FIND_ROOT_PATH="$root/build-cross/sysroot-$a")
    fi
    cmake -S . -B "$dir" -G Ninja "${args[@]}" >/dev/null
    cmake --build "$dir" -j "$jobs" --target perfwire-agent
    out=dist/perfwire-agent-linux-$a
    strip_tool=strip
    [[ $a != x86_64 ]] && strip_tool=${triplet[$a]}-strip
    "$strip_tool" -o "$out" "$dir/src/agent/perfwire-agent"
    (cd dist && sha256sum "perfwire-agent-linux-$a" >"perfwire-agent-linux-$a.sha256")
    sed -n 's/^project(perfwire VERSION \([^ ]*\).*/\1/p' CMakeLists.txt >"$out.version"
    if [[ $a == aarch64 ]]; then
        # The emulated update test's later build (same code, version + ".1"), kept out of dist/.
        cmake --build "$dir" -j "$jobs" --target perfwire-agent-next
        "$strip_tool" -o "build-cross/perfwire-agent-next-$a" "$dir/src/agent/perfwire-agent-next"
    fi
    size=$(stat -c %s "$out")
    if ((size > 8 * 1024 * 1024)); then
        echo "build-agents: $out is $size bytes, over the 8 MB budget (OpenSSL included)" >&2
        exit 1
    fi
    echo "$out: $size bytes; $(file -b "$out")"
done

# The Python agent, offered as the update of Python agents (their update_arch is "python") and
# for download like the others.
cp src/agent/python/perfwire_agent.py dist/perfwire-agent-linux-python
(cd dist && sha256sum perfwire-agent-linux-python >perfwire-agent-linux-python.sha256)
sed -n 's/^VERSION = "\([^"]*\)".*/\1/p' src/agent/python/perfwire_agent.py \
    >dist/perfwire-agent-linux-python.version
