# Cross-builds perfwire for s390x Linux (scripts/build-agents.sh s390x).
set(PERFWIRE_CROSS_TRIPLET s390x-linux-gnu)
set(PERFWIRE_CROSS_PROCESSOR s390x)
set(PERFWIRE_CROSS_QEMU qemu-s390x-static)
include(${CMAKE_CURRENT_LIST_DIR}/cross.cmake)
