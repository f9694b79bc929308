# CMake toolchain for cross-compiling onnx-pools to aarch64 Linux with Debian's g++-aarch64-linux-gnu
# (used by scripts/aarch64_check.sh: cmake -DCMAKE_TOOLCHAIN_FILE=..., or the CMAKE_TOOLCHAIN_FILE environment
# variable for `pip wheel .`).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
