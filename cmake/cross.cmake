# What every cross build shares; a toolchain-<arch>.cmake sets PERFWIRE_CROSS_TRIPLET,
# PERFWIRE_CROSS_PROCESSOR and PERFWIRE_CROSS_QEMU, then includes this file. Debian's cross
# toolchain and the target's libraries (scripts/build-agents.sh fetches both); use as
#   cmake -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-<arch>.cmake -DCMAKE_FIND_ROOT_PATH=<sysroot>
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR ${PERFWIRE_CROSS_PROCESSOR})
set(CMAKE_C_COMPILER ${PERFWIRE_CROSS_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${PERFWIRE_CROSS_TRIPLET}-g++)
# Libraries and CMake package files from the sysroot given as CMAKE_FIND_ROOT_PATH (Debian's
# packages for the target, unpacked), in /usr/lib/<triplet>: never the build machine's.
set(CMAKE_LIBRARY_ARCHITECTURE ${PERFWIRE_CROSS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Programs built for the target run under qemu-user (package qemu-user-static).
set(CMAKE_CROSSCOMPILING_EMULATOR ${PERFWIRE_CROSS_QEMU})
