# Cross-builds perfwire for aarch64 Linux with Debian's cross toolchain and multiarch libraries
# (scripts/build-agents.sh fetches both): cmake -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Libraries and CMake package files from the sysroot given as CMAKE_FIND_ROOT_PATH
# (scripts/build-agents.sh unpacks Debian's packages for the target there), in
# /usr/lib/aarch64-linux-gnu, never the build machine's.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Programs built for aarch64 run under qemu-user (package qemu-user-static).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static)
