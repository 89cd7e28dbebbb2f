# Cross-builds perfwire for armv7 Linux with Debian's cross toolchain and multiarch libraries
# (scripts/build-agents.sh fetches both): cmake -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-armv7.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(CMAKE_C_COMPILER arm-linux-gnueabihf-gcc)
set(CMAKE_CXX_COMPILER arm-linux-gnueabihf-g++)
# Libraries and CMake package files from the sysroot given as CMAKE_FIND_ROOT_PATH
# (scripts/build-agents.sh unpacks Debian's packages for the target there), in
# /usr/lib/arm-linux-gnueabihf, never the build machine's.
set(CMAKE_LIBRARY_ARCHITECTURE arm-linux-gnueabihf)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Programs built for armv7 run under qemu-user (package qemu-user-static).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-arm-static)
