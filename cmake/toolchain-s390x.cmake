# Cross-builds perfwire for s390x Linux with Debian's cross toolchain and multiarch libraries
# (scripts/build-agents.sh fetches both): cmake -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-s390x.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR s390x)
set(CMAKE_C_COMPILER s390x-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER s390x-linux-gnu-g++)
# Libraries and CMake package files from the sysroot given as CMAKE_FIND_ROOT_PATH
# (scripts/build-agents.sh unpacks Debian's packages for the target there), in
# /usr/lib/s390x-linux-gnu, never the build machine's.
set(CMAKE_LIBRARY_ARCHITECTURE s390x-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Programs built for s390x run under qemu-user (package qemu-user-static).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-s390x-static)
