// The architecture this agent was compiled for, named as the files in dist/ are
// (perfwire-agent-linux-<arch>). From the compiler, not uname: under qemu-user uname names the
// host, and in a 32-bit userland on a 64-bit kernel it names the kernel's.
#pragma once

#include <string_view>

namespace agent {

inline constexpr std::string_view build_arch =
#if defined(__x86_64__)
    "x86_64";
#elif defined(__aarch64__)
    "aarch64";
#elif defined(__arm__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7
    "armv7";
#elif defined(__arm__)
    "arm";
#elif defined(__s390x__)
    "s390x";
#elif defined(__riscv) && __riscv_xlen == 64
    "riscv64";
#elif defined(__i386__)
    "i686";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    "ppc64le";
#elif defined(__mips__)
    "mips";
#else
    "unknown";
#endif

} // namespace agent
