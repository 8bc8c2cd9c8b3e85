# Finds every dependency once, with a message that names the package and how to install it.
# libtorch comes from the PyPI torch wheel in the project's virtual environment (scripts/setup.sh
# passes CMAKE_PREFIX_PATH=torch.utils.cmake_prefix_path and MFSDP_PYTHON).

set(MFSDP_PYTHON "" CACHE FILEPATH "Python of the virtual environment holding the torch wheel")

macro(mfsdp_require pkg debian)
  find_package(${pkg} ${ARGN} QUIET)
  if(NOT ${pkg}_FOUND)
    message(FATAL_ERROR "MatrixFSDP needs ${pkg}: install it with 'apt-get install -y ${debian}' "
                        "(or run scripts/setup.sh, which installs everything)")
  endif()
endmacro()

# The wheel's CMake config probes for GPUs with a CUDA test program unless told the target
# architectures; we compile no CUDA kernels of our own, so name Hopper (the CUDA runners).
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR "MatrixFSDP needs libtorch from the torch 2.11.0 wheel: run scripts/setup.sh, "
                      "or pass -DCMAKE_PREFIX_PATH=$(python -c 'import torch.utils; "
                      "print(torch.utils.cmake_prefix_path)')")
endif()
message(STATUS "MatrixFSDP: torch ${Torch_VERSION} from ${Torch_DIR}")

# Gloo's own headers are not shipped in the wheel, but c10d's ProcessGroupGloo.hpp includes them.
# Debian's libgloo-dev supplies declarations (only declarations are used: the Gloo that runs is the
# one linked statically into libtorch_cpu.so).
find_path(MFSDP_GLOO_INCLUDE gloo/rendezvous/store.h)
if(NOT MFSDP_GLOO_INCLUDE)
  message(FATAL_ERROR "MatrixFSDP needs Gloo's headers: install them with 'apt-get install -y libgloo-dev'")
endif()

# NCCL header of the version torch was built with (the nvidia-nccl wheel torch depends on).
set(MFSDP_NCCL_INCLUDE "")
if(MFSDP_PYTHON)
  execute_process(
    COMMAND ${MFSDP_PYTHON} -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'include'))"
    OUTPUT_VARIABLE MFSDP_NCCL_INCLUDE OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()

mfsdp_require(GTest "libgtest-dev libgmock-dev")
mfsdp_require(benchmark libbenchmark-dev)
mfsdp_require(nlohmann_json nlohmann-json3-dev)
mfsdp_require(CLI11 libcli11-dev)
find_package(rapidcheck CONFIG QUIET)  # Debian's config has no version file
if(NOT rapidcheck_FOUND)
  message(FATAL_ERROR "MatrixFSDP needs RapidCheck: install it with 'apt-get install -y librapidcheck-dev'")
endif()
find_package(Threads REQUIRED)
include(GoogleTest)

# One place for project-wide warnings.
add_library(mfsdp_warnings INTERFACE)
target_compile_options(mfsdp_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)
