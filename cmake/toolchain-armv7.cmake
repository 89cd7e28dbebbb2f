# Cross-builds perfwire for armv7 Linux (scripts/build-agents.sh armv7).
set(PERFWIRE_CROSS_TRIPLET arm-linux-gnueabihf)
set(PERFWIRE_CROSS_PROCESSOR armv7l)
set(PERFWIRE_CROSS_QEMU qemu-arm-static)
include(${CMAKE_CURRENT_LIST_DIR}/cross.cmake)
