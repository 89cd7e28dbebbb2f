# Cross-builds perfwire for aarch64 Linux (scripts/build-agents.sh aarch64).
set(PERFWIRE_CROSS_TRIPLET aarch64-linux-gnu)
set(PERFWIRE_CROSS_PROCESSOR aarch64)
set(PERFWIRE_CROSS_QEMU qemu-aarch64-static)
include(${CMAKE_CURRENT_LIST_DIR}/cross.cmake)
